//! `tollgate-rls`: Envoy's global rate limit service on tollgate. See the README.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;
use tollgate_redis::{cluster_nodes, Connection};
use tollgate_rls::config::Config;
use tollgate_rls::metrics::{Metrics, StoreState};
use tollgate_rls::redis_store::{parse_failure, ModuleUse, RedisStore, DENY_CACHE_ENTRIES};
use tollgate_rls::service::{Service, Settings};
use tollgate_rls::store::Charging;
use tollgate_rls::store::{parse_size, Memory, Store, SystemClock};
use tollgate_rls::{log, run_with_tls, Reload};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// Envoy's global rate limit service (envoy.service.ratelimit.v3) on tollgate.
///
/// Settings come from flags or from the environment variables envoyproxy/ratelimit reads
/// (RUNTIME_ROOT, GRPC_PORT, SHADOW_MODE, ...).
#[derive(Parser, Debug)]
#[command(name = "tollgate-rls", version)]
struct Args {
    /// The directory of configuration files (*.yaml). Default:
    /// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
    #[arg(long)]
    config_dir: Option<PathBuf>,
    /// envoyproxy/ratelimit's runtime root.
    #[arg(
        long,
        env = "RUNTIME_ROOT",
        default_value = "/srv/runtime_data/current"
    )]
    runtime_root: PathBuf,
    /// envoyproxy/ratelimit's runtime subdirectory.
    #[arg(long, env = "RUNTIME_SUBDIRECTORY", default_value = "")]
    runtime_subdirectory: String,
    /// envoyproxy/ratelimit's runtime application directory.
    #[arg(long, env = "RUNTIME_APPDIRECTORY", default_value = "config")]
    runtime_appdirectory: String,
    /// Load and validate the configuration, print what was loaded, and exit (1 on error).
    #[arg(long)]
    check_config: bool,
    /// gRPC host.
    #[arg(long, env = "GRPC_HOST", default_value = "0.0.0.0")]
    grpc_host: String,
    /// gRPC port (0: any free port).
    #[arg(long, env = "GRPC_PORT", default_value_t = 8081)]
    grpc_port: u16,
    /// HTTP host (/json, /healthcheck, /metrics).
    #[arg(long, env = "HOST", default_value = "0.0.0.0")]
    http_host: String,
    /// HTTP port (0: any free port).
    #[arg(long, env = "PORT", default_value_t = 8080)]
    http_port: u16,
    /// TLS on the gRPC listener (with --grpc-tls-cert and --grpc-tls-key).
    #[arg(long, env = "GRPC_SERVER_USE_TLS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    grpc_tls: bool,
    /// The gRPC listener's certificate chain (PEM).
    #[arg(long, env = "GRPC_SERVER_TLS_CERT")]
    grpc_tls_cert: Option<PathBuf>,
    /// The gRPC listener's private key (PEM).
    #[arg(long, env = "GRPC_SERVER_TLS_KEY")]
    grpc_tls_key: Option<PathBuf>,
    /// A CA (PEM): when set, gRPC clients must present a certificate it signed (mutual TLS).
    #[arg(long, env = "GRPC_CLIENT_TLS_CACERT")]
    grpc_tls_client_ca: Option<PathBuf>,
    /// Global shadow mode: count and report, never deny.
    #[arg(long, env = "SHADOW_MODE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    shadow_mode: bool,
    /// envoyproxy/ratelimit's charging: every descriptor with room is charged even when
    /// another one of the request is over its limit (off: all or nothing).
    #[arg(long, env = "TOLLGATE_CHARGE_EVERY_DESCRIPTOR", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    charge_every_descriptor: bool,
    /// The memory store's bound: keys' bytes plus a fixed overhead each (see the README's
    /// sizing section), in bytes or with KiB, MiB or GiB. Past it, the keys closest to
    /// fresh are evicted (they restart fresh). Also bounds the Redis store's `local`
    /// fallback.
    #[arg(long, env = "TOLLGATE_MEMORY_MAX_BYTES", default_value = "64MiB", value_parser = parse_size)]
    memory_max_bytes: usize,
    /// Redis for the fleet store (`redis://host:port/`); without it, counters are kept in
    /// this process's memory. For a cluster, some of its nodes, comma-separated.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    /// `single` (one Redis server) or `cluster` (a Redis Cluster; envoyproxy/ratelimit's
    /// REDIS_TYPE, any case).
    #[arg(long, env = "REDIS_TYPE", default_value = "single")]
    redis_type: String,
    /// What requests get when Redis does not answer in time: open (admit), closed (deny)
    /// or local (this process's memory decides).
    #[arg(long, env = "TOLLGATE_REDIS_FAILURE", default_value = "closed")]
    redis_failure: String,
    /// Whether to decide inside Redis with tollgate's Redis module (one round trip a
    /// request) instead of the portable scripts (two): auto (the module when Redis has it,
    /// asked once at start), on (starting fails without it) or off.
    #[arg(long, env = "TOLLGATE_REDIS_MODULE", default_value = "auto")]
    redis_module: String,
    /// Health (`/healthcheck` 500, gRPC health NOT_SERVING) while Redis is marked down, as
    /// envoyproxy/ratelimit reports it. Off by default: every request is still answered
    /// with --redis-failure's behaviour, which is what Envoy should keep calling.
    #[arg(long, env = "TOLLGATE_UNHEALTHY_WHEN_STORE_DOWN", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    unhealthy_when_store_down: bool,
    /// How long one Redis round trip may take, in milliseconds.
    #[arg(long, env = "TOLLGATE_REDIS_TIMEOUT_MS", default_value_t = 200)]
    redis_timeout_ms: u64,
    /// The Redis store's deny cache: at most this many denied requests remembered until
    /// their retry time, answered without a round trip (0: off).
    #[arg(long, env = "TOLLGATE_DENY_CACHE_ENTRIES", default_value_t = DENY_CACHE_ENTRIES)]
    deny_cache_entries: usize,
    /// The prefix of every Redis key.
    #[arg(long, env = "CACHE_KEY_PREFIX", default_value = "tollgate:")]
    redis_prefix: String,
    /// On SIGTERM or Ctrl-C: how long calls in flight may take to finish, in milliseconds.
    #[arg(long, env = "TOLLGATE_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    shutdown_grace_ms: u64,
    /// How often the configuration directory is checked for changes, in milliseconds (0:
    /// never reload).
    #[arg(long, env = "TOLLGATE_RELOAD_INTERVAL_MS", default_value_t = 1000)]
    reload_interval_ms: u64,
}

/// The gRPC listener's TLS settings, read from their files; an error names the flag.
fn grpc_tls(a: &Args) -> Result<Option<ServerTlsConfig>, String> {
    if !a.grpc_tls {
        return Ok(None);
    }
    let read = |flag: &str, path: &Option<PathBuf>| -> Result<Vec<u8>, String> {
        let path = path
            .as_ref()
            .ok_or_else(|| format!("{flag}: required with --grpc-tls"))?;
        std::fs::read(path).map_err(|e| format!("{flag}: cannot read {}: {e}", path.display()))
    };
    let cert = read("--grpc-tls-cert", &a.grpc_tls_cert)?;
    let key = read("--grpc-tls-key", &a.grpc_tls_key)?;
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if a.grpc_tls_client_ca.is_some() {
        let ca = read("--grpc-tls-client-ca", &a.grpc_tls_client_ca)?;
        tls = tls.client_ca_root(Certificate::from_pem(ca));
    }
    Ok(Some(tls))
}

/// Why the process exits non-zero once its configuration is loaded.
enum Failure {
    /// It never served: the runtime, a listener, a flag or the store (the cause, with what
    /// failed).
    Start(String),
    /// Serving failed.
    Serve(std::io::Error),
}

fn config_dir(a: &Args) -> PathBuf {
    a.config_dir.clone().unwrap_or_else(|| {
        a.runtime_root
            .join(&a.runtime_subdirectory)
            .join(&a.runtime_appdirectory)
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// What the server serves on, whatever its store: the bound listeners, the reload of the
/// configuration directory, the shutdown grace and the gRPC TLS.
struct Listeners {
    grpc: TcpListener,
    http: TcpListener,
    reload: Option<Reload>,
    grace: Duration,
    tls: Option<ServerTlsConfig>,
}

/// Serves `service` (its metrics already shaped for its store) until shutdown: the first
/// load counted, the reload counter's error series left out when nothing reloads, and
/// `serving` said once everything is ready.
async fn serve<S: Store>(
    mut service: Service<S>,
    on: Listeners,
    serving: impl FnOnce(),
) -> Result<(), Failure> {
    if on.reload.is_none() {
        service.metrics = service.metrics.without_reloads();
    }
    service.metrics.config_load(true);
    serving();
    run_with_tls(
        Arc::new(service),
        on.grpc,
        on.http,
        on.reload,
        shutdown_signal(),
        on.grace,
        on.tls,
    )
    .await
    .map_err(Failure::Serve)
}

/// The steps: the flags (parsed by clap), the configuration (loaded, or only checked), then
/// on the runtime [`start`]: the listeners, the store, serving until shutdown.
fn main() -> ExitCode {
    let args = Args::parse();
    let dir = config_dir(&args);
    // The files as they are before the load: a change from here on is reloaded.
    let reload = (args.reload_interval_ms > 0 && !args.check_config)
        .then(|| Reload::before_load(dir.clone(), Duration::from_millis(args.reload_interval_ms)));
    let config = match Config::load_dir(&dir) {
        Ok(c) => c,
        Err(e) => {
            log("error", &format!("configuration not loaded: {e}"));
            return ExitCode::FAILURE;
        }
    };
    if args.check_config {
        println!("configuration OK: {}", config.summary(&dir));
        return ExitCode::SUCCESS;
    }
    let ran = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Start(format!("runtime: {e}")))
        .and_then(|runtime| runtime.block_on(start(&args, config, &dir, reload)));
    exit_code(ran)
}

/// Binds the listeners, sets up the store the flags name (memory, or Redis) and serves
/// `config` until shutdown.
async fn start(
    args: &Args,
    config: Config,
    dir: &Path,
    reload: Option<Reload>,
) -> Result<(), Failure> {
    let tls = grpc_tls(args).map_err(Failure::Start)?;
    let listeners = Listeners::bind(args, reload, tls).await?;
    // Said once the listeners are bound and the store answers: a start that fails logs
    // only its failure.
    let listening = listeners.listening()?;
    let serving = || {
        log(
            "info",
            &format!("serving; configuration from {}", dir.display()),
        );
        println!("{listening}");
    };
    let settings = settings(args);
    match &args.redis_url {
        None => {
            let store = Memory::with_bound(SystemClock, args.memory_max_bytes);
            let mut service = Service::new(config, store, settings);
            service.metrics = Metrics::memory();
            serve(service, listeners, serving).await
        }
        Some(url) => {
            let (store, metrics) = redis_store(args, url).await?;
            let mut service = Service::new(config, store, settings);
            service.metrics = metrics;
            serve(service, listeners, serving).await
        }
    }
}

/// The process's exit status for how the run ended, logged.
fn exit_code(ran: Result<(), Failure>) -> ExitCode {
    match ran {
        Ok(()) => {
            log("info", "stopped");
            ExitCode::SUCCESS
        }
        Err(Failure::Start(cause)) => {
            log("error", &format!("not started: {cause}"));
            ExitCode::FAILURE
        }
        Err(Failure::Serve(e)) => {
            log("error", &format!("server failed: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// How a request's descriptors are charged, from the flags.
fn settings(args: &Args) -> Settings {
    Settings {
        charging: if args.charge_every_descriptor {
            Charging::Each
        } else {
            Charging::AllOrNothing
        },
        global_shadow: args.shadow_mode,
    }
}

impl Listeners {
    /// Binds the gRPC and HTTP listeners the flags name.
    async fn bind(
        args: &Args,
        reload: Option<Reload>,
        tls: Option<ServerTlsConfig>,
    ) -> Result<Self, Failure> {
        async fn bind(what: &str, host: &str, port: u16) -> Result<TcpListener, Failure> {
            let at = format!("{host}:{port}");
            TcpListener::bind(at.as_str())
                .await
                .map_err(|e| Failure::Start(format!("{what} listener on {at}: {e}")))
        }
        Ok(Listeners {
            grpc: bind("gRPC", &args.grpc_host, args.grpc_port).await?,
            http: bind("HTTP", &args.http_host, args.http_port).await?,
            reload,
            grace: Duration::from_millis(args.shutdown_grace_ms),
            tls,
        })
    }

    /// The one line on stdout with the bound addresses (ports may have been 0).
    fn listening(&self) -> Result<String, Failure> {
        let local = |l: &TcpListener| {
            l.local_addr()
                .map_err(|e| Failure::Start(format!("listener address: {e}")))
        };
        Ok(format!(
            "listening grpc={} http={}",
            local(&self.grpc)?,
            local(&self.http)?
        ))
    }
}

/// Connects the Redis store the flags describe, with the metrics shaped for it.
async fn redis_store(args: &Args, url: &str) -> Result<(RedisStore, Metrics), Failure> {
    let failure = parse_failure(&args.redis_failure).ok_or_else(|| {
        Failure::Start(format!(
            "--redis-failure: '{}' is not open, closed or local",
            args.redis_failure
        ))
    })?;
    let module = ModuleUse::parse(&args.redis_module).ok_or_else(|| {
        Failure::Start(format!(
            "--redis-module: '{}' is not auto, on or off",
            args.redis_module
        ))
    })?;
    let state = StoreState::new(failure, args.unhealthy_when_store_down);
    let timeout = Duration::from_millis(args.redis_timeout_ms.max(1));
    let prefix = &args.redis_prefix;
    let unreachable = |e| Failure::Start(format!("redis at {url}: {e}"));
    let conn = match args.redis_type.to_ascii_lowercase().as_str() {
        "single" => Connection::single(url, timeout).await,
        "cluster" => Connection::cluster(&cluster_nodes(url), timeout).await,
        other => {
            return Err(Failure::Start(format!(
                "--redis-type: '{other}' is not single or cluster"
            )))
        }
    }
    .map_err(unreachable)?;
    let store = RedisStore::new(conn, prefix, timeout, failure)
        .use_module(module)
        .await
        .map_err(unreachable)?
        .deny_cache(args.deny_cache_entries)
        .local_memory(args.memory_max_bytes)
        .on_transition({
            let state = state.clone();
            move |t| state.observe(t)
        });
    let how = if store.uses_module() {
        "tollgate's module (TOLLGATE.REQUEST, one round trip)"
    } else {
        "the scripts (read, then compare-and-set)"
    };
    log("info", &format!("redis store: deciding with {how}"));
    let metrics = Metrics::shared_store(failure, args.deny_cache_entries > 0).with_store(state);
    Ok((store, metrics))
}

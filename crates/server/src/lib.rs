//! # tollgate-rls
//!
//! Envoy's global rate limit service (`envoy.service.ratelimit.v3.RateLimitService`) on
//! tollgate's core: envoyproxy/ratelimit's YAML configuration read unchanged, every
//! tollgate algorithm by a `policy:` string, and a request's descriptors decided all or
//! nothing (an over-limit descriptor charges no other).
//!
//! * [`config`]: the YAML format and its validation; [`matching`]: which rule a descriptor
//!   matches.
//! * [`store`]: where the counters live, a request's limits decided together.
//! * [`bounds`]: the core's request bounds on Envoy's requests, and the transport limits
//!   sized from them.
//! * [`service`]: `ShouldRateLimit`; [`http`]: `/json`, `/healthcheck`, `/metrics`.
//! * [`run`]: the gRPC and HTTP listeners, configuration reload and graceful shutdown.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bounds;
pub mod config;
pub mod http;
pub mod matching;
pub mod metrics;
pub mod redis_store;
pub mod service;
pub mod store;

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{config_files, Config};
use crate::service::{RequestError, Service};
use crate::store::Store;

/// The Envoy rate limit service's descriptors, served by gRPC reflection: an encoded
/// `FileDescriptorSet` of `envoy/service/ratelimit/v3/rls.proto` and every file it imports,
/// each file's bytes as envoy-types ships them (envoy-types exports no descriptor set; its
/// `types.bin` holds all of Envoy's 514 files, 3.3 MB). `tests/reflection.rs` checks them
/// against envoy-types' and rewrites them when `TOLLGATE_BLESS=1`.
pub const RLS_DESCRIPTORS: &[u8] = include_bytes!("rls_descriptors.bin");

/// Writes one structured log line (JSON) to standard error.
pub fn log(level: &str, message: &str) {
    eprintln!(
        "{}",
        serde_json::json!({"level": level, "msg": message, "ts": store::Clock::now(&store::SystemClock) / 1_000_000})
    );
}

/// The gRPC face of a [`Service`].
pub struct Grpc<S>(pub Arc<Service<S>>);

#[tonic::async_trait]
impl<S: Store> RateLimitService for Grpc<S> {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        match self.0.should_rate_limit(request.get_ref()).await {
            Ok(r) => Ok(tonic::Response::new(r)),
            Err(RequestError::Invalid(m)) => Err(tonic::Status::invalid_argument(m)),
            Err(e) => Err(tonic::Status::unavailable(e.to_string())),
        }
    }
}

/// A fingerprint of a configuration directory's files (names and contents): a reload is
/// tried when it changes.
fn fingerprint(dir: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match config_files(dir) {
        Ok(files) => {
            for f in files {
                f.hash(&mut h);
                std::fs::read(&f).ok().hash(&mut h);
            }
        }
        Err(e) => e.reason.hash(&mut h),
    }
    h.finish()
}

/// A configuration directory to watch for changes ([`watch_config`]).
#[derive(Clone, Debug)]
pub struct Reload {
    /// The directory.
    pub dir: PathBuf,
    /// How often its files are compared with the last ones loaded.
    pub every: Duration,
    /// Their fingerprint when the running configuration was read.
    seen: u64,
}

impl Reload {
    /// A watch of `dir` every `every`, from the files as they are now: take it *before*
    /// loading the configuration that will run. A change made after it is then reloaded
    /// even if it comes before the watcher's first look (the server binds its ports and
    /// connects to its store in between); a change made between this and the load costs
    /// one reload of the files already running, never a missed one.
    pub fn before_load(dir: PathBuf, every: Duration) -> Reload {
        let seen = fingerprint(&dir);
        Reload { dir, every, seen }
    }
}

/// Watches `reload.dir` every `reload.every` and swaps the service's configuration when its
/// files change: the whole directory is loaded, and only a configuration that loads
/// entirely replaces the running one (a bad file is logged and counted, and the running
/// configuration stays).
pub async fn watch_config<S: Store>(
    service: Arc<Service<S>>,
    reload: Reload,
    mut stop: watch::Receiver<bool>,
) {
    let Reload {
        dir,
        every,
        seen: mut last,
    } = reload;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let now = fingerprint(&dir);
        if now == last {
            continue;
        }
        last = now;
        match Config::load_dir(&dir) {
            Ok(config) => {
                let domains = config.domains.len();
                service.set_config(config);
                service.metrics.config_load(true);
                log(
                    "info",
                    &format!("configuration reloaded: {domains} domain(s)"),
                );
            }
            Err(e) => {
                service.metrics.config_load(false);
                log(
                    "error",
                    &format!("configuration not reloaded, the running one stays: {e}"),
                );
            }
        }
    }
}

/// Serves gRPC (`ShouldRateLimit`, `grpc.health.v1.Health`, reflection) on `grpc` and HTTP on
/// `http` until `shutdown` completes; then reports not serving, stops accepting, and lets
/// the calls in flight finish, for at most `grace` (a client that keeps its connection
/// open after the server's HTTP/2 GOAWAY does not hold the process). With `reload`,
/// watches that directory (see [`watch_config`]) at the given interval.
pub async fn run<S: Store>(
    service: Arc<Service<S>>,
    grpc: TcpListener,
    http: TcpListener,
    reload: Option<Reload>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    run_with_tls(service, grpc, http, reload, shutdown, grace, None).await
}

/// [`run`], with TLS on the gRPC listener when `tls` is given (its certificate and key, and
/// optionally the CA that client certificates must be signed by). The HTTP side stays
/// plain, as envoyproxy/ratelimit's.
pub async fn run_with_tls<S: Store>(
    service: Arc<Service<S>>,
    grpc: TcpListener,
    http: TcpListener,
    reload: Option<Reload>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
    tls: Option<tonic::transport::ServerTlsConfig>,
) -> std::io::Result<()> {
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| std::io::Error::other(format!("gRPC TLS: {e}")))?;
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let healthy = Arc::new(AtomicBool::new(true));
    let (reporter, health_service) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<Grpc<S>>>()
        .await;
    if let Some(reload) = reload {
        tokio::spawn(watch_config(service.clone(), reload, stop_rx.clone()));
    }
    tokio::spawn(report_health(
        service.clone(),
        reporter,
        healthy.clone(),
        shutdown,
        stop_tx,
    ));
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(RLS_DESCRIPTORS)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let bad =
        |e: tonic_reflection::server::Error| std::io::Error::other(format!("gRPC reflection: {e}"));
    let grpc_server = builder
        .add_service(health_service)
        .add_service(reflection().build_v1().map_err(bad)?)
        .add_service(reflection().build_v1alpha().map_err(bad)?)
        .add_service(
            RateLimitServiceServer::from_arc(Arc::new(Grpc(service.clone())))
                .max_decoding_message_size(bounds::GRPC_MAX_MESSAGE),
        )
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(grpc),
            stopped(stop_rx.clone()),
        );
    let app = http::router(http::HttpState { service, healthy });
    let http_server = axum::serve(http, app).with_graceful_shutdown(stopped(stop_rx.clone()));
    let servers = async {
        let (g, h) = tokio::join!(grpc_server, async { http_server.await });
        g.map_err(std::io::Error::other)?;
        h
    };
    let drained = async {
        stopped(stop_rx).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        r = servers => r,
        _ = drained => {
            log("warn", "connections still open after the shutdown grace: closing them");
            Ok(())
        }
    }
}

/// The one task that sets gRPC health, so a store that comes back during the shutdown
/// cannot report serving after it: health follows the store only when asked
/// (`--unhealthy-when-store-down`); at shutdown everything reports not serving, then the
/// servers are told to stop.
async fn report_health<S: Store>(
    service: Arc<Service<S>>,
    reporter: tonic_health::server::HealthReporter,
    healthy: Arc<AtomicBool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop_tx: watch::Sender<bool>,
) {
    let mut store = service
        .metrics
        .store()
        .filter(|s| s.unhealthy_when_down())
        .map(|s| s.watch());
    tokio::pin!(shutdown);
    loop {
        let changed = async {
            match store.as_mut() {
                Some(rx) => match rx.changed().await {
                    Ok(()) => *rx.borrow_and_update(),
                    Err(_) => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => break,
            up = changed => {
                let status = if up {
                    tonic_health::ServingStatus::Serving
                } else {
                    tonic_health::ServingStatus::NotServing
                };
                reporter.set_service_status("", status).await;
                reporter
                    .set_service_status(
                        <RateLimitServiceServer<Grpc<S>> as tonic::server::NamedService>::NAME,
                        status,
                    )
                    .await;
            }
        }
    }
    healthy.store(false, Ordering::Relaxed);
    reporter
        .set_not_serving::<RateLimitServiceServer<Grpc<S>>>()
        .await;
    reporter
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    let _ = stop_tx.send(true);
}

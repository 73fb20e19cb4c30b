//! The Redis fleet store: every server process of a fleet shares one set of counters in
//! Redis. An adapter over `tollgate-redis`'s requests of limits on separate keys
//! ([`tollgate_redis::RedisRequests`]): the module (`TOLLGATE.REQUEST`, one round trip) or
//! the scripts (read, decide, compare-and-set commit, conflicts retried with jitter), its
//! timeouts, failure rule, mark-down until the next probe, declared fallback and deny cache.
//! Processes of either way share one fleet (the same keys and bytes).
//!
//! Keys are `<prefix>{<domain>}<counter key>`: one hash tag per domain, so that every key of
//! a request lives on one node of a Redis Cluster ([`RedisStore::connect_cluster`]).

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::RedisError;
use tollgate::store::fallback::Behaviour;
use tollgate::store::request::Counted;
use tollgate::Nanos;
use tollgate_redis::{Fallback, Options, RedisRequests};

use crate::store::{Charging, Clock, Memory, Outcome, Source, Store, StoreError, SystemClock};

/// What a request gets when Redis cannot decide in time: the model's declared behaviour
/// ([`Behaviour`]): `open` admits every limit without counting; `closed` denies every limit
/// until the next probe of Redis; `local` decides in this process's memory with the same
/// limits (each process then has its own budget until Redis is back).
pub type Failure = Behaviour;

/// `--redis-url` of a cluster: comma-separated nodes, each a URL or `host:port`.
pub fn cluster_nodes(url: &str) -> Vec<String> {
    url.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            if n.contains("://") {
                n.to_string()
            } else {
                format!("redis://{n}/")
            }
        })
        .collect()
}

/// The declared behaviour named `name` (`open`, `closed` or `local`, the model's names).
pub fn parse_failure(name: &str) -> Option<Failure> {
    Behaviour::ALL.into_iter().find(|b| b.as_str() == name)
}

/// Whether the store decides with tollgate's Redis module or with the portable scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ModuleUse {
    /// The module when Redis has it (asked with `COMMAND INFO`), else the scripts.
    #[default]
    Auto,
    /// The module; starting fails when Redis does not have it.
    On,
    /// The scripts, even when Redis has the module.
    Off,
}

impl ModuleUse {
    /// The setting named `name` (`auto`, `on` or `off`, any case; `true`/`false` too).
    pub fn parse(name: &str) -> Option<ModuleUse> {
        match name.to_ascii_lowercase().as_str() {
            "auto" => Some(ModuleUse::Auto),
            "on" | "true" => Some(ModuleUse::On),
            "off" | "false" => Some(ModuleUse::Off),
            _ => None,
        }
    }
}

/// The most denials the deny cache holds by default (tollgate-redis's).
pub const DENY_CACHE_ENTRIES: usize = tollgate_redis::DENY_CACHE_ENTRIES;

/// A connection to one server or a Redis Cluster.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// tollgate-redis's requests on either connection.
enum Requests {
    Single(RedisRequests<ConnectionManager>),
    Cluster(RedisRequests<ClusterConnection>),
}

/// The Redis store.
pub struct RedisStore {
    conn: Conn,
    options: Options,
    requests: Requests,
    prefix: String,
    failure: Failure,
    local: Memory<SystemClock>,
    module: bool,
}

impl RedisStore {
    /// Connects to `url` (fails when Redis cannot be reached now). `timeout` bounds each
    /// round trip; `failure` is what requests get when one does not come back in time.
    pub async fn connect(
        url: &str,
        prefix: &str,
        timeout: Duration,
        failure: Failure,
    ) -> Result<RedisStore, RedisError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let client = redis::Client::open(url)?;
        let conn = connecting(timeout, client.get_connection_manager_with_config(config)).await?;
        Ok(RedisStore::over(
            Conn::Single(conn),
            prefix,
            timeout,
            failure,
        ))
    }

    /// Connects to the Redis Cluster that the nodes `urls` (any of its primaries, as
    /// `redis://host:port/`) belong to; otherwise as [`RedisStore::connect`].
    pub async fn connect_cluster(
        urls: &[String],
        prefix: &str,
        timeout: Duration,
        failure: Failure,
    ) -> Result<RedisStore, RedisError> {
        let client = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(1)
            .build()?;
        let conn = connecting(timeout, client.get_async_connection()).await?;
        Ok(RedisStore::over(
            Conn::Cluster(conn),
            prefix,
            timeout,
            failure,
        ))
    }

    fn over(conn: Conn, prefix: &str, timeout: Duration, failure: Failure) -> RedisStore {
        let fallback = match failure {
            Behaviour::Open => Fallback::Open,
            Behaviour::Closed => Fallback::Closed,
            // Decided by this store's own memory (see `decide`); the bound is its own.
            Behaviour::Local => Fallback::Local {
                max_keys: std::num::NonZeroUsize::MIN,
            },
        };
        // Conflicts retried for up to four round trips' time.
        let options = Options::new("server", fallback)
            .timeout(timeout)
            .retry_for(timeout * 4);
        RedisStore {
            requests: requests(&conn, &options),
            conn,
            options,
            prefix: prefix.to_string(),
            failure,
            local: Memory::new(),
            module: false,
        }
    }

    /// Chooses how requests are decided: [`ModuleUse::Auto`] asks Redis now whether
    /// tollgate's module is loaded (no answer: the scripts until it answers);
    /// [`ModuleUse::On`] refuses a Redis without it. On a Redis Cluster, the node asked
    /// stands for all of them (load the module on every node).
    pub async fn use_module(mut self, choice: ModuleUse) -> Result<RedisStore, RedisError> {
        self.options = self.options.clone().use_module(choice != ModuleUse::Off);
        self.requests = requests(&self.conn, &self.options);
        self.module = match &self.requests {
            Requests::Single(r) => r.uses_module().await,
            Requests::Cluster(r) => r.uses_module().await,
        } == Some(true);
        if choice == ModuleUse::On && !self.module {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "tollgate's Redis module is not loaded (no TOLLGATE.REQUEST command)",
                "load it (redis-server --loadmodule libtollgate_redis_module.so) or set the module use to auto or off".to_string(),
            )));
        }
        Ok(self)
    }

    /// Where decisions were made so far, and the round trips sent (tollgate-redis's
    /// counts).
    pub fn stats(&self) -> tollgate_redis::Stats {
        match &self.requests {
            Requests::Single(r) => r.stats(),
            Requests::Cluster(r) => r.stats(),
        }
    }

    /// Bounds the memory of the `local` fallback to `max_bytes` (see [`Memory::with_bound`];
    /// [`crate::store::DEFAULT_MAX_BYTES`] until this is called).
    pub fn local_memory(mut self, max_bytes: usize) -> RedisStore {
        self.local = Memory::with_bound(SystemClock, max_bytes);
        self
    }

    /// Whether Redis said it has tollgate's module (and the store uses it).
    pub fn uses_module(&self) -> bool {
        self.module
    }

    /// Calls `f` on each transition of the link to Redis: once when a failed call marks it
    /// down (with why), once when a call answers again (see
    /// [`tollgate_redis::Options::on_transition`]; the binary's [`crate::metrics::StoreState`]).
    pub fn on_transition(
        mut self,
        f: impl Fn(tollgate_redis::Transition) + Send + Sync + 'static,
    ) -> RedisStore {
        self.options = self.options.clone().on_transition(f);
        self.requests = requests(&self.conn, &self.options);
        self
    }

    /// Sets the deny cache: at most `entries` denials remembered, each until its retry
    /// time (0: off; by default [`DENY_CACHE_ENTRIES`]). Only all-or-nothing requests that
    /// an enforced limit denied are remembered, by every key, policy, cost and shadow flag.
    pub fn deny_cache(mut self, entries: usize) -> RedisStore {
        self.options = self.options.clone().deny_cache_entries(entries);
        self.requests = requests(&self.conn, &self.options);
        self
    }
}

fn requests(conn: &Conn, options: &Options) -> Requests {
    // `new` refuses only zero durations, which `over` never sets.
    let refused = "positive timeout and probe interval";
    match conn {
        Conn::Single(c) => {
            Requests::Single(RedisRequests::new(c.clone(), options.clone()).expect(refused))
        }
        Conn::Cluster(c) => {
            Requests::Cluster(RedisRequests::new(c.clone(), options.clone()).expect(refused))
        }
    }
}

async fn connecting<T>(
    timeout: Duration,
    connect: impl std::future::Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisError> {
    match tokio::time::timeout(timeout.max(Duration::from_secs(2)), connect).await {
        Ok(r) => r,
        Err(_) => Err(RedisError::from((
            redis::ErrorKind::Io,
            "connect timed out",
        ))),
    }
}

impl Store for RedisStore {
    async fn decide(
        &self,
        domain: &str,
        items: Vec<(String, Counted)>,
        charging: Charging,
        blocked: bool,
    ) -> Result<(Outcome, Source), StoreError> {
        let base = format!("{}{{{domain}}}", self.prefix);
        let limits: Vec<(&str, Counted)> =
            items.iter().map(|(key, c)| (key.as_str(), *c)).collect();
        let local = || {
            self.local
                .decide_now(&items, charging, blocked)
                .map(|o| o.each)
        };
        let answer = match &self.requests {
            Requests::Single(r) => r.request(&base, &limits, charging, blocked, local).await,
            Requests::Cluster(r) => r.request(&base, &limits, charging, blocked, local).await,
        }
        .map_err(|e| match e {
            tollgate_redis::Error::Decide(e) => StoreError::Decide(e),
            other => StoreError::Redis(other.to_string()),
        })?;
        let source = match answer.source {
            tollgate_redis::Source::Redis => Source::Store,
            tollgate_redis::Source::DenyCache => Source::DenyCache,
            tollgate_redis::Source::Fallback(why) => Source::Fallback(self.failure, why),
        };
        let outcome = Outcome {
            each: answer.each,
            writes: Vec::new(), // written in Redis
        };
        Ok((outcome, source))
    }

    fn now(&self) -> Nanos {
        SystemClock.now()
    }
}

//! The Redis fleet store: every server process of a fleet shares one set of counters in
//! Redis. An adapter of tollgate-redis's requests of limits on separate keys
//! ([`RedisRequests`], which documents its two ways, the module and the scripts, and its
//! failure rule, probe, fallback and deny cache) to the server's [`Store`].
//!
//! Keys are `<prefix>{<domain>}<counter key>`: one hash tag per domain, so that every key of
//! a request lives on one node of a Redis Cluster ([`Connection::cluster`]).

use std::time::Duration;

use redis::RedisError;
use tollgate::store::fallback::Behaviour;
use tollgate::store::request::Counted;
use tollgate::Nanos;
use tollgate_redis::{Connection, Fallback, Options, RedisRequests};

use crate::store::{Charging, Clock, Memory, Outcome, Source, Store, StoreError, SystemClock};

/// What a request gets when Redis cannot decide in time: the model's declared behaviour;
/// `local` decides in this process's memory with the same limits.
pub type Failure = Behaviour;

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

/// The Redis store.
pub struct RedisStore {
    conn: Connection,
    options: Options,
    requests: RedisRequests<Connection>,
    prefix: String,
    failure: Failure,
    local: Memory<SystemClock>,
    module: bool,
}

impl RedisStore {
    /// Connects to the server at `url` ([`Connection::single`]: fails when Redis cannot be
    /// reached now); otherwise as [`RedisStore::new`].
    pub async fn connect(
        url: &str,
        prefix: &str,
        timeout: Duration,
        failure: Failure,
    ) -> Result<RedisStore, RedisError> {
        let conn = Connection::single(url, timeout).await?;
        Ok(RedisStore::new(conn, prefix, timeout, failure))
    }

    /// The store on `conn` (one server or a Redis Cluster). `timeout` bounds each round
    /// trip; `failure` is what requests get when one does not come back in time.
    pub fn new(conn: Connection, prefix: &str, timeout: Duration, failure: Failure) -> RedisStore {
        let fallback = match failure {
            Behaviour::Open => Fallback::Open,
            Behaviour::Closed => Fallback::Closed,
            // Decided by this store's own memory (see `decide`); the bound is its own.
            Behaviour::Local => Fallback::Local {
                max_keys: std::num::NonZeroUsize::MIN,
            },
        };
        // A zero timeout would be refused by `RedisRequests::new`: the shortest is 1 ms.
        let timeout = timeout.max(Duration::from_millis(1));
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
    pub async fn use_module(self, choice: ModuleUse) -> Result<RedisStore, RedisError> {
        let mut store = self.with(|o| o.use_module(choice != ModuleUse::Off));
        store.module = store.requests.uses_module().await == Some(true);
        if choice == ModuleUse::On && !store.module {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "tollgate's Redis module is not loaded (no TOLLGATE.REQUEST command)",
                "load it (redis-server --loadmodule libtollgate_redis_module.so) or set the module use to auto or off".to_string(),
            )));
        }
        Ok(store)
    }

    /// Where decisions were made so far, and the round trips and probes sent.
    pub fn stats(&self) -> tollgate_redis::Stats {
        self.requests.stats()
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

    /// Calls `f` on each transition of the link to Redis ([`Options::on_transition`]; the
    /// binary's [`crate::metrics::StoreState`]).
    pub fn on_transition(
        self,
        f: impl Fn(tollgate_redis::Transition) + Send + Sync + 'static,
    ) -> RedisStore {
        self.with(|o| o.on_transition(f))
    }

    /// Sets the deny cache ([`Options::deny_cache_entries`]: at most `entries` denials, 0:
    /// off; by default [`DENY_CACHE_ENTRIES`]).
    pub fn deny_cache(self, entries: usize) -> RedisStore {
        self.with(|o| o.deny_cache_entries(entries))
    }

    /// The store with its options changed by `change` (the requests built anew).
    fn with(mut self, change: impl FnOnce(Options) -> Options) -> RedisStore {
        self.options = change(self.options);
        self.requests = requests(&self.conn, &self.options);
        self
    }
}

fn requests(conn: &Connection, options: &Options) -> RedisRequests<Connection> {
    // `new` refuses only zero durations, which `RedisStore::new` never sets.
    RedisRequests::new(conn.clone(), options.clone()).expect("positive timeout and probe interval")
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
        let answer = self
            .requests
            .request(&base, &limits, charging, blocked, local)
            .await
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

//! The Redis fleet store: every server process of a fleet shares one set of counters in
//! Redis, with the protocol of `tollgate-redis`: versioned state bytes, Redis's clock, every
//! key of a request written together or not at all. Two ways to decide, the same decisions
//! on the same keys and bytes (processes of either kind share one fleet):
//!
//! * **The module** (one round trip): when Redis has tollgate's module loaded
//!   (`crates/redis-module`), one `TOLLGATE.REQUEST` command decides a request inside Redis,
//!   atomically, by the core's rule for a request of limits on separate keys
//!   ([`tollgate::store::request`], the rule [`crate::engine::decide`] runs here). Chosen
//!   with [`RedisStore::use_module`] ([`ModuleUse`]: `auto` detects it once at start).
//! * **The scripts** (two round trips): the portable path, on any Redis.
//!   [`tollgate_redis::READ_SCRIPT`] reads a request's keys with Redis's `TIME`, this
//!   process decides by [`crate::engine::decide`], and [`tollgate_redis::COMMIT_SCRIPT`]
//!   commits only if no key changed since the read; on a conflict the script answers with
//!   the new values and the decision is made again (bounded by `retry_for`).
//!
//! A denial writes nothing. Keys are `<prefix>{<domain>}<counter key>`: one hash tag per
//! domain, so that every key of a request lives on one node of a Redis Cluster
//! ([`RedisStore::connect_cluster`]).
//!
//! A request that an enforced limit denied is remembered by the deny cache (the core's
//! [`DenyCache`], see [`RedisStore::deny_cache`]) and answered from memory until it could
//! pass, without a round trip.
//!
//! The stored values, their times to live, the commit's arguments, the read's answer and
//! which failed calls fall back are the fleet protocol's, written once in the core
//! ([`tollgate::store::fleet`]) and shared with `tollgate-redis`, its module and the npm
//! entry. When Redis does not answer within `timeout`, or cannot serve (down, refused,
//! `LOADING`, `BUSY`, ...), the request gets the declared [`Failure`] behaviour and its
//! [`Source`] says so, with the reason (the core's [`Why`]); nothing waits longer. Any other error reply, or a stored value that
//! is not a state, is the caller's error (never read as fresh).

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, Script, ScriptInvocation};
use std::fmt::Write as _;
use std::sync::Mutex;

use tollgate::stack::StackDecision;
use tollgate::store::fallback::Behaviour;
use tollgate::store::fallback::Why;
use tollgate::store::fleet::{self, Call, CallError, Commit, Handling, Ttl};
use tollgate::store::{DenyCache, Limits};
use tollgate::{Nanos, State, NANOS_PER_SEC};
use tollgate_redis::{COMMIT_SCRIPT, READ_SCRIPT};

use crate::engine::{self, Charging, Item, Outcome};
use crate::store::{Clock, Memory, Source, Store, StoreError, SystemClock};

/// What a request gets when Redis cannot decide in time: the model's declared behaviour
/// ([`Behaviour`]): `open` admits every limit without counting; `closed` denies every
/// limit; `local` decides in this process's memory with the same limits (each process then
/// has its own budget until Redis is back; counts are not copied back).
pub type Failure = Behaviour;

/// The declared behaviour named `name` (`open`, `closed` or `local`, the model's names).
pub fn parse_failure(name: &str) -> Option<Failure> {
    Behaviour::ALL.into_iter().find(|b| b.as_str() == name)
}

/// Whether the Redis store decides with tollgate's Redis module (`TOLLGATE.REQUEST`, one
/// round trip a request) or with the portable scripts (two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ModuleUse {
    /// The module when Redis has it (asked once, at start, with `COMMAND INFO`), else the
    /// scripts.
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

/// The module's command that decides a request (its limits on separate keys).
const MODULE_COMMAND: &str = "TOLLGATE.REQUEST";

/// The most denials the deny cache holds by default (as `tollgate-redis`'s).
pub const DENY_CACHE_ENTRIES: usize = 100_000;

/// A connection to Redis: one server, or a Redis Cluster (every key of a request shares
/// its domain's hash tag, so a request's scripts run on one node).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn invoke(&self, inv: &ScriptInvocation<'_>) -> Result<Vec<Vec<u8>>, RedisError> {
        match self {
            Conn::Single(c) => inv.invoke_async(&mut c.clone()).await,
            Conn::Cluster(c) => inv.invoke_async(&mut c.clone()).await,
        }
    }

    async fn query(&self, cmd: &redis::Cmd) -> Result<redis::Value, RedisError> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(c) => cmd.query_async(&mut c.clone()).await,
        }
    }
}

/// The Redis store.
pub struct RedisStore {
    conn: Conn,
    prefix: String,
    timeout: Duration,
    retry_for: Duration,
    failure: Failure,
    local: Memory<SystemClock>,
    read: Script,
    commit: Script,
    /// Denials remembered until their retry time (`None`: off), on the clock of
    /// nanoseconds since `epoch`.
    denials: Option<Mutex<DenyCache<String>>>,
    epoch: Instant,
    /// Turns: this process's requests for the same keys go to Redis one after another.
    turns: Vec<tokio::sync::Mutex<()>>,
    /// Whether requests are decided by the module (see [`RedisStore::use_module`]).
    module: bool,
}

/// How many locks the keys are spread over for [`RedisStore`]'s turns.
const TURNS: usize = 64;

impl RedisStore {
    /// Connects to `url` (fails when Redis cannot be reached now). `timeout` bounds each
    /// round trip; `failure` is what requests get when one does not come back in time.
    pub async fn connect(
        url: &str,
        prefix: &str,
        timeout: Duration,
        failure: Failure,
    ) -> Result<RedisStore, RedisError> {
        let client = redis::Client::open(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let conn = tokio::time::timeout(
            timeout.max(Duration::from_secs(2)),
            client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| connect_timed_out())??;
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
        let conn = tokio::time::timeout(
            timeout.max(Duration::from_secs(2)),
            client.get_async_connection(),
        )
        .await
        .map_err(|_| connect_timed_out())??;
        Ok(RedisStore::over(
            Conn::Cluster(conn),
            prefix,
            timeout,
            failure,
        ))
    }

    fn over(conn: Conn, prefix: &str, timeout: Duration, failure: Failure) -> RedisStore {
        RedisStore {
            conn,
            prefix: prefix.to_string(),
            timeout,
            retry_for: timeout * 4,
            failure,
            local: Memory::new(),
            read: Script::new(READ_SCRIPT),
            commit: Script::new(COMMIT_SCRIPT),
            denials: Some(Mutex::new(DenyCache::new(DENY_CACHE_ENTRIES))),
            epoch: Instant::now(),
            turns: (0..TURNS).map(|_| tokio::sync::Mutex::new(())).collect(),
            module: false,
        }
    }

    /// Chooses how requests are decided (the scripts until this is called): with
    /// [`ModuleUse::Auto`], asks Redis once (`COMMAND INFO tollgate.request`, within
    /// `timeout`, at least 2 s) whether tollgate's module is loaded and uses it if so (no
    /// answer: the scripts); with
    /// [`ModuleUse::On`], a Redis without it is an error. On a Redis Cluster, the node asked
    /// stands for all of them (load the module on every node).
    pub async fn use_module(mut self, choice: ModuleUse) -> Result<RedisStore, RedisError> {
        self.module = match choice {
            ModuleUse::Off => false,
            // A Redis that will not say (a renamed COMMAND, an ACL, no answer in time) is
            // taken as one without the module: the scripts work on any Redis.
            ModuleUse::Auto => self.has_module().await.unwrap_or(false),
            ModuleUse::On if self.has_module().await? => true,
            ModuleUse::On => {
                return Err(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "tollgate's Redis module is not loaded (no TOLLGATE.REQUEST command)",
                    "load it (redis-server --loadmodule libtollgate_redis_module.so) or set the module use to auto or off".to_string(),
                )))
            }
        };
        Ok(self)
    }

    /// Bounds the memory of the `local` fallback to `max_bytes` (see [`Memory::with_bound`];
    /// [`crate::store::DEFAULT_MAX_BYTES`] until this is called).
    pub fn local_memory(mut self, max_bytes: usize) -> RedisStore {
        self.local = Memory::with_bound(SystemClock, max_bytes);
        self
    }

    /// Whether requests are decided by tollgate's Redis module (one round trip) rather than
    /// the scripts (two).
    pub fn uses_module(&self) -> bool {
        self.module
    }

    /// Whether Redis knows the module's command.
    async fn has_module(&self) -> Result<bool, RedisError> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg(MODULE_COMMAND.to_ascii_lowercase());
        match tokio::time::timeout(
            self.timeout.max(Duration::from_secs(2)),
            self.conn.query(&cmd),
        )
        .await
        .map_err(|_| connect_timed_out())??
        {
            redis::Value::Array(v) => Ok(matches!(v.first(), Some(redis::Value::Array(_)))),
            _ => Ok(false),
        }
    }

    /// Sets the deny cache: at most `entries` denials remembered, each until its retry
    /// time, so that a request known to be denied is denied again without a round trip
    /// (0: off). On by default, with [`DENY_CACHE_ENTRIES`].
    ///
    /// Only all-or-nothing requests that an enforced limit denied are remembered, by every
    /// key, policy, cost and shadow flag of the request: such a request charged nothing,
    /// and it cannot be admitted before every denying limit's retry time (more traffic only
    /// pushes that later), so the remembered answer is the one Redis would give, except for
    /// the `limit_remaining` of its limits that had room, which other processes may have
    /// spent since. A counter deleted in Redis behind the service's back is seen at the
    /// retry time.
    pub fn deny_cache(mut self, entries: usize) -> RedisStore {
        self.denials = (entries > 0).then(|| Mutex::new(DenyCache::new(entries)));
        self
    }

    /// One script call, bounded by `timeout`; a failure sorted by the fleet protocol's rule
    /// ([`tollgate_redis::handling`]: the fallback decides, or the caller gets the error).
    async fn eval(
        &self,
        call: Call,
        script: &Script,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, Failed> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        for a in args {
            inv.arg(a.as_slice());
        }
        match tokio::time::timeout(self.timeout, self.conn.invoke(&inv)).await {
            Ok(Ok(v)) => Ok(v),
            // redis-rs' `Script` already sent the body once on NOSCRIPT.
            Ok(Err(e)) => match tollgate_redis::handling(call, &e) {
                Handling::FallBack(why) => Err(Failed::Unavailable(why)),
                Handling::SendBody | Handling::Fatal => {
                    Err(Failed::Error(StoreError::Redis(e.to_string())))
                }
            },
            Err(_) => match fleet::handle(call, CallError::Timeout) {
                Handling::FallBack(why) => Err(Failed::Unavailable(why)),
                Handling::SendBody | Handling::Fatal => Err(Failed::Unavailable(Why::Timeout)),
            },
        }
    }

    /// Decides on Redis: read with Redis's `TIME`, decide, commit all or nothing if no key
    /// changed since (a conflict answers the new values: decide again, for `retry_for`).
    /// Also returns when the call whose values were decided on was sent.
    async fn on_redis(
        &self,
        items: &[Item],
        keys: &[String],
        charging: Charging,
        blocked: bool,
    ) -> Result<(Outcome, Instant), Failed> {
        let mut sent = Instant::now();
        let mut reply = self.eval(Call::Read, &self.read, keys, &[]).await?;
        let mut at = 0;
        let deadline = Instant::now() + self.retry_for;
        loop {
            let (now, values) = fleet::read_view(&reply[at.min(reply.len())..], keys.len())
                .ok_or_else(unexpected_reply)?;
            let (versions, loaded) = decode(keys, values)?;
            let outcome = engine::decide(items, &loaded, now, charging, blocked)
                .map_err(|e| Failed::Error(StoreError::Decide(e)))?;
            if outcome.writes.is_empty() {
                return Ok((outcome, sent));
            }
            let writes = outcome
                .writes
                .iter()
                .map(|(i, w)| {
                    (
                        *i,
                        fleet::key_write(w.clone(), Some(TTL), || fastrand::u64(..)),
                    )
                })
                .collect();
            let args = fleet::commit_args(Commit::Cas, &versions, writes);
            sent = Instant::now();
            reply = self.eval(Call::Write, &self.commit, keys, &args).await?;
            match reply.first().map(Vec::as_slice) {
                Some(b"ok") => return Ok((outcome, sent)),
                Some(b"conflict") if Instant::now() < deadline => at = 1,
                // Contended past its time: nothing was written (the commit said so).
                Some(b"conflict") => return Err(Failed::Unavailable(Why::Timeout)),
                _ => return Err(unexpected_reply()),
            }
        }
    }

    /// Decides in Redis with the module: one `TOLLGATE.REQUEST` over the request's keys,
    /// decided and written atomically inside Redis by the same rule ([`crate::engine`]).
    /// Also returns when the command was sent. The reply's durations are whole ms rounded
    /// up.
    async fn in_module(
        &self,
        base: &str,
        items: &[Item],
        charging: Charging,
        blocked: bool,
    ) -> Result<(Outcome, Instant), Failed> {
        let mut cmd = redis::cmd(MODULE_COMMAND);
        cmd.arg(base).arg(items.len());
        for i in items {
            cmd.arg(&i.key)
                .arg(i.policy.to_string())
                .arg(i.cost)
                .arg(if i.shadow { "1" } else { "0" });
        }
        if charging == Charging::Each {
            cmd.arg("EACH");
        }
        if blocked {
            cmd.arg("BLOCKED");
        }
        let sent = Instant::now();
        let reply = match tokio::time::timeout(self.timeout, self.conn.query(&cmd)).await {
            Ok(Ok(v)) => v,
            // The command may have run: never sent again, the declared behaviour decides.
            Ok(Err(e)) => {
                return Err(match tollgate_redis::handling(Call::Write, &e) {
                    Handling::FallBack(why) => Failed::Unavailable(why),
                    Handling::SendBody | Handling::Fatal => {
                        Failed::Error(StoreError::Redis(e.to_string()))
                    }
                })
            }
            Err(_) => {
                return Err(match fleet::handle(Call::Write, CallError::Timeout) {
                    Handling::FallBack(why) => Failed::Unavailable(why),
                    Handling::SendBody | Handling::Fatal => Failed::Unavailable(Why::Timeout),
                })
            }
        };
        let decided = tollgate_redis::module_decision(&reply)
            .filter(|d| d.each.len() == items.len())
            .ok_or_else(unexpected_reply)?;
        let outcome = Outcome {
            each: decided.each,
            writes: Vec::new(), // written in Redis
        };
        Ok((outcome, sent))
    }

    /// Waits for this request's turn on its keys (their locks, in order, so two requests
    /// never wait for each other), for at most `timeout`: without turns, concurrent requests
    /// for one hot key all read the same version, and all but one commit conflict and start
    /// over. Only a shortcut: the compare-and-set commit keeps decisions exact without it
    /// (and across processes), so a request that waited `timeout` goes on without its turn
    /// rather than queue behind a Redis that does not answer.
    async fn turn(&self, keys: &[String]) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        use std::hash::{BuildHasher, Hasher};
        let hasher =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        let mut which: Vec<usize> = keys
            .iter()
            .map(|k| {
                let mut h = hasher.build_hasher();
                h.write(k.as_bytes());
                (h.finish() as usize) % TURNS
            })
            .collect();
        which.sort_unstable();
        which.dedup();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut held = Vec::with_capacity(which.len());
        for i in which {
            match tokio::time::timeout_at(deadline, self.turns[i].lock()).await {
                Ok(guard) => held.push(guard),
                Err(_) => return Vec::new(),
            }
        }
        held
    }

    fn fail(
        &self,
        items: &[Item],
        charging: Charging,
        blocked: bool,
        why: Why,
    ) -> Result<(Outcome, Source), StoreError> {
        let source = Source::Fallback(self.failure, why);
        if self.failure == Failure::Local {
            return self
                .local
                .decide_now(items, charging, blocked)
                .map(|o| (o, source))
                .map_err(StoreError::Decide);
        }
        let policies: Vec<_> = items.iter().map(|i| i.policy).collect();
        let each = match Limits::stack(&policies) {
            Ok(limits) if self.failure == Failure::Open => fleet::fail_open(&limits).each,
            Ok(limits) => fleet::fail_closed(&limits, NANOS_PER_SEC).each,
            Err(_) => Vec::new(), // no counted limit
        };
        let outcome = Outcome {
            each,
            writes: Vec::new(),
        };
        Ok((outcome, source))
    }
}

fn connect_timed_out() -> RedisError {
    RedisError::from((redis::ErrorKind::Io, "connect timed out"))
}

/// Why a call to Redis gave no decision.
enum Failed {
    /// Redis cannot serve now (down, refused, slow, or it said so), for this reason: the
    /// declared [`Failure`] behaviour decides.
    Unavailable(Why),
    /// An answer the protocol does not allow, or a refusal of the core: the caller's error.
    Error(StoreError),
}

fn unexpected_reply() -> Failed {
    Failed::Error(StoreError::Redis("unexpected reply".into()))
}

/// The keys' times to live: until fresh plus a second (the `tollgate-redis` default grace);
/// no concurrency limit is stored here (the config refuses it), so the lease never applies.
const TTL: Ttl = Ttl {
    grace_ms: 1000,
    lease_ms: 60_000,
};

/// Each key's version (empty when absent) and state.
type Decoded = (Vec<Vec<u8>>, Vec<Option<State>>);

/// Each value's version (empty for an absent key) and state, by the fleet's codec
/// ([`fleet::decode_value`]); a value that is not a state is an error naming its key,
/// never read as fresh.
fn decode(keys: &[String], values: &[Vec<u8>]) -> Result<Decoded, Failed> {
    let mut versions = Vec::with_capacity(values.len());
    let mut states = Vec::with_capacity(values.len());
    for (key, value) in keys.iter().zip(values) {
        match fleet::decode_value(value) {
            Ok(Some(stored)) => {
                versions.push(stored.version.to_vec());
                states.push(Some(stored.state));
            }
            Ok(None) => {
                versions.push(Vec::new());
                states.push(None);
            }
            Err(e) => {
                return Err(Failed::Error(StoreError::Redis(format!(
                    "the value of {key} is not a state: {e}"
                ))))
            }
        }
    }
    Ok((versions, states))
}

/// The deny cache's key of a request: every item's key, policy, cost and shadow flag.
fn deny_key(items: &[Item]) -> String {
    let mut key = String::new();
    for i in items {
        let _ = write!(
            key,
            "{}\x1f{}\x1f{}\x1f{}\x1e",
            i.key, i.policy, i.cost, i.shadow
        );
    }
    key
}

/// Remembers a request that an enforced limit denied, decided on values read at `at`,
/// until the latest retry time of its denying limits (it cannot pass before). `rounded_up`:
/// the durations are whole ms rounded up (the module's), so the lower bound is remembered
/// ([`fleet::lower_bound`]), never past the true retry time.
fn remember(
    denials: &Mutex<DenyCache<String>>,
    key: String,
    items: &[Item],
    outcome: &Outcome,
    at: Nanos,
    rounded_up: bool,
) {
    let denying = || {
        items
            .iter()
            .zip(&outcome.each)
            .filter(|(i, d)| !i.shadow && !d.allowed)
    };
    let Some(retry) = denying().map(|(_, d)| d.retry_after).max() else {
        return; // admitted: nothing to remember
    };
    let retry = if rounded_up {
        fleet::lower_bound(retry)
    } else {
        retry
    };
    let decision = denying()
        .map(|(_, d)| *d)
        .max_by_key(|d| d.retry_after)
        .unwrap_or_default();
    let decided = StackDecision {
        decision,
        each: outcome.each.clone(),
    };
    lock(denials).remember(key, 1, at, &decided, retry);
}

fn lock(m: &Mutex<DenyCache<String>>) -> std::sync::MutexGuard<'_, DenyCache<String>> {
    // Each call is one get or insert: a poisoned cache is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The deny cache's clock: nanoseconds from `epoch` to `t`.
fn since(epoch: Instant, t: Instant) -> Nanos {
    u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

impl Store for RedisStore {
    async fn decide(
        &self,
        domain: &str,
        items: Vec<Item>,
        charging: Charging,
        blocked: bool,
    ) -> Result<(Outcome, Source), StoreError> {
        // Only an all-or-nothing request is remembered (in the other mode a denied request
        // still charges the limits with room), and not one with a blocking limit (denied
        // without a store decision).
        let cached = match &self.denials {
            Some(d) if charging == Charging::AllOrNothing && !blocked => {
                Some((d, deny_key(&items)))
            }
            _ => None,
        };
        let remembered = || {
            let (denials, key) = cached.as_ref()?;
            let d = lock(denials).get(key, 1, since(self.epoch, Instant::now()))?;
            let outcome = Outcome {
                each: d.each,
                writes: Vec::new(),
            };
            Some((outcome, Source::DenyCache))
        };
        if let Some(answer) = remembered() {
            return Ok(answer);
        }
        let decided = if self.module {
            // Decided inside Redis: no conflicts, so no turns.
            let base = format!("{}{{{domain}}}", self.prefix);
            self.in_module(&base, &items, charging, blocked).await
        } else {
            let keys: Vec<String> = items
                .iter()
                .map(|i| format!("{}{{{domain}}}{}", self.prefix, i.key))
                .collect();
            let _turn = self.turn(&keys).await;
            // The request before this one in line may have been this very denial.
            if let Some(answer) = remembered() {
                return Ok(answer);
            }
            self.on_redis(&items, &keys, charging, blocked).await
        };
        match decided {
            Ok((outcome, sent)) => {
                if let Some((denials, key)) = cached {
                    let at = since(self.epoch, sent);
                    remember(denials, key, &items, &outcome, at, self.module);
                }
                Ok((outcome, Source::Store))
            }
            Err(Failed::Unavailable(why)) => self.fail(&items, charging, blocked, why),
            Err(Failed::Error(e)) => Err(e),
        }
    }

    fn now(&self) -> Nanos {
        SystemClock.now()
    }
}

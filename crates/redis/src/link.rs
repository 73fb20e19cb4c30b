//! The link to Redis that both ways of asking share (one key's limits,
//! [`RedisLimiter`](crate::RedisLimiter), and a request of limits on separate keys,
//! [`RedisRequests`](crate::RedisRequests)): the calls with their timeout, how a failed call
//! is sorted (the core's rule), the mark-down until the next probe, whether the server has
//! tollgate's module, the scripts' replies, and the counts of where decisions were made.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, Script};
use tollgate::store::fleet::{self, Call, CallError, Handling, ValueError};
use tollgate::{Nanos, State};

use crate::{Error, Observer, Stats, Transition, Why, COMMIT_SCRIPT, READ_SCRIPT, SETTLE_SCRIPT};

/// How a Redis error is handled.
pub(crate) enum Failure {
    /// Redis is unavailable: the fallback decides.
    Unavailable(Why),
    /// Any other error: reported to the caller.
    Fatal(RedisError),
}

/// Told of each failed call (the `metrics` facade's failure count).
pub(crate) type OnFailure = Arc<dyn Fn(Why) + Send + Sync>;

/// The fleet protocol's rule for a failed call ([`fleet::handle`]), for redis-rs' errors:
/// whether the fallback decides, the script's body is to be sent, or the caller gets the
/// error.
pub fn handling(call: Call, e: &RedisError) -> Handling {
    let error = if e.is_timeout() {
        CallError::Timeout
    } else if let Some(code) = e.code() {
        CallError::Reply(code)
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.kind() == ErrorKind::ClusterConnectionNotFound
    {
        CallError::Connection
    } else {
        return Handling::Fatal;
    };
    fleet::handle(call, error)
}

pub(crate) fn classify(call: Call, e: RedisError) -> Failure {
    match handling(call, &e) {
        Handling::FallBack(why) => Failure::Unavailable(why),
        Handling::SendBody | Handling::Fatal => Failure::Fatal(e),
    }
}

/// A call that did not answer within the timeout: the core's rule for it.
fn timed_out(call: Call) -> Failure {
    match fleet::handle(call, CallError::Timeout) {
        Handling::FallBack(why) => Failure::Unavailable(why),
        Handling::SendBody | Handling::Fatal => Failure::Unavailable(Why::Timeout),
    }
}

/// What one read (or a conflicting commit) returned: the node's clock and each slot's value.
pub(crate) struct View {
    pub(crate) now: Nanos,
    pub(crate) values: Vec<Vec<u8>>,
}

/// What a commit answered.
pub(crate) enum Committed {
    Written,
    Conflict(View),
}

/// What the settle script answered.
pub(crate) enum SettleCommitted {
    /// Written, or a conflict, as a commit.
    Committed(Committed),
    /// The reservation was settled before: its record (nothing written).
    Before(Vec<u8>),
}

/// Counts of where decisions were made.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) redis: AtomicU64,
    pub(crate) deny_cache: AtomicU64,
    pub(crate) fallback: AtomicU64,
    pub(crate) indeterminate: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) probes: AtomicU64,
}

const UNKNOWN: u8 = 0;
const WITH_MODULE: u8 = 1;
const WITHOUT_MODULE: u8 = 2;

/// The connection and what is known about the server behind it.
pub(crate) struct Link<C> {
    pub(crate) conn: C,
    /// The longest one round trip may take.
    pub(crate) timeout: Duration,
    read: Script,
    commit: Script,
    settle: Script,
    /// Whether Redis is marked down (shared with the probe, a task of its own).
    health: Arc<Health>,
    /// Whether the server has the module: [`UNKNOWN`], [`WITH_MODULE`] or [`WITHOUT_MODULE`].
    module: AtomicU8,
    /// The module command whose presence says the module is loaded.
    module_command: &'static str,
    pub(crate) counters: Arc<Counters>,
}

/// The mark-down: whether the fallback decides, until when, and who is told.
struct Health {
    /// After a failure, how long the fallback decides before Redis is probed again.
    probe_every: Duration,
    /// Until when the fallback decides; `None` while Redis is up. Its lock also orders the
    /// transitions reported to `on_transition`.
    down_until: Mutex<Option<Instant>>,
    /// Whether `down_until` is set (read without its lock on every call).
    marked: AtomicBool,
    /// How many times Redis was marked down.
    downs: AtomicU64,
    /// Told of each transition (down with why, up).
    on_transition: Option<Observer>,
    /// Told of each failed call, a failed probe included.
    on_failure: Option<OnFailure>,
}

impl<C> Link<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(
        conn: C,
        timeout: Duration,
        probe_every: Duration,
        module_command: &'static str,
        on_transition: Option<Observer>,
        on_failure: Option<OnFailure>,
    ) -> Self {
        Link {
            conn,
            timeout,
            read: Script::new(READ_SCRIPT),
            commit: Script::new(COMMIT_SCRIPT),
            settle: Script::new(SETTLE_SCRIPT),
            health: Arc::new(Health {
                probe_every,
                down_until: Mutex::new(None),
                marked: AtomicBool::new(false),
                downs: AtomicU64::new(0),
                on_transition,
                on_failure,
            }),
            module: AtomicU8::new(UNKNOWN),
            module_command,
            counters: Arc::default(),
        }
    }

    /// Where decisions were made so far.
    pub(crate) fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            redis: c.redis.load(Relaxed),
            deny_cache: c.deny_cache.load(Relaxed),
            fallback: c.fallback.load(Relaxed),
            indeterminate: c.indeterminate.load(Relaxed),
            conflicts: c.conflicts.load(Relaxed),
            round_trips: c.round_trips.load(Relaxed),
            probes: c.probes.load(Relaxed),
        }
    }

    /// Whether Redis is marked down: the fallback decides, nothing is sent. Past the probe
    /// time, the first caller starts the probe, a `PING` on a task of its own, and every
    /// caller keeps to the fallback until it answers (then [`Health::up`] lifts the mark)
    /// or fails (marked down again): no request waits for a probe, nor for its own timeout
    /// while Redis is down.
    pub(crate) fn is_down(&self) -> bool {
        if !self.health.marked.load(Relaxed) {
            return false;
        }
        let mut down = self.health.lock();
        match *down {
            None => false,
            Some(t) => {
                let now = Instant::now();
                if now >= t {
                    // The probe answers or fails within the timeout.
                    *down = Some(now + self.timeout);
                    self.probe();
                }
                true
            }
        }
    }

    /// Starts the probe: a `PING`, sent a second time when the first comes back as a
    /// refused or dropped connection. A connection manager answers the first call after an
    /// outage with the failure of its last reconnect, and only then reconnects: a probe of
    /// one call would find a Redis that is back still down, for one more interval.
    fn probe(&self) {
        let conn = self.conn.clone();
        let (health, counters, timeout) =
            (self.health.clone(), self.counters.clone(), self.timeout);
        counters.probes.fetch_add(1, Relaxed);
        tokio::spawn(async move {
            let ping = || {
                let mut conn = conn.clone();
                counters.round_trips.fetch_add(1, Relaxed);
                async move { redis::cmd("PING").query_async::<()>(&mut conn).await }
            };
            let probe = async {
                match ping().await {
                    Err(e) if e.is_connection_refusal() || e.is_connection_dropped() => {
                        ping().await
                    }
                    answered => answered,
                }
            };
            let failure = match tokio::time::timeout(timeout, probe).await {
                Ok(Ok(())) => return health.up(),
                Ok(Err(e)) => classify(Call::Read, e),
                Err(_) => timed_out(Call::Read),
            };
            match failure {
                Failure::Unavailable(why) => health.mark_down(why),
                // Redis answered: the next request will meet and report what is wrong.
                Failure::Fatal(_) => health.up(),
            }
        });
    }

    /// A call answered: Redis is up (reported once, by the call that lifts the mark).
    fn up(&self) {
        self.health.up();
    }

    /// Redis failed a call for `why`: the fallback decides until the next probe. Reported
    /// once, by the call that sets the mark (a failed probe, or calls that were already in
    /// flight, only move the probe time); every failure is counted.
    pub(crate) fn mark_down(&self, why: Why) {
        self.health.mark_down(why);
    }

    /// How many times Redis was marked down so far: a caller that waited compares it with
    /// what it saw before, to learn whether Redis failed meanwhile.
    pub(crate) fn downs(&self) -> u64 {
        self.health.downs.load(Relaxed)
    }

    /// The probe interval in nanoseconds (a fail-closed denial's retry time).
    pub(crate) fn probe_nanos(&self) -> Nanos {
        u64::try_from(self.health.probe_every.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether the server has tollgate's module (asked once with `COMMAND INFO`); `None`
    /// when it did not answer (asked again next time).
    pub(crate) async fn has_module(&self) -> Option<bool> {
        match self.module.load(Relaxed) {
            WITH_MODULE => return Some(true),
            WITHOUT_MODULE => return Some(false),
            _ => {}
        }
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg(self.module_command);
        let mut conn = self.conn.clone();
        let reply = tokio::time::timeout(self.timeout, cmd.query_async(&mut conn)).await;
        let Ok(Ok(redis::Value::Array(v))) = reply else {
            return None;
        };
        let found = matches!(v.first(), Some(redis::Value::Array(_)));
        let known = if found { WITH_MODULE } else { WITHOUT_MODULE };
        self.module.store(known, Relaxed);
        Some(found)
    }

    /// Sends one command or pipeline (`query`) that may write, within the timeout; a
    /// failure sorted by the core's rule. Counted as one round trip.
    pub(crate) async fn send<T>(
        &self,
        query: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Failure> {
        self.counters.round_trips.fetch_add(1, Relaxed);
        match tokio::time::timeout(self.timeout, query).await {
            Ok(Ok(v)) => {
                self.up();
                Ok(v)
            }
            Ok(Err(e)) => Err(classify(Call::Write, e)),
            Err(_) => Err(timed_out(Call::Write)),
        }
    }

    /// Runs `script` (whose body is `source`) over `keys` and `args`: `EVALSHA` (the
    /// server's script cache), and on `NOSCRIPT`, which means it did not run, `EVAL` with
    /// its body, which needs no cache (and fills it again): a `SCRIPT FLUSH` or a restart
    /// between a reload and the call cannot fail a request.
    async fn eval(
        &self,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> redis::RedisResult<Vec<Vec<u8>>> {
        let mut conn = self.conn.clone();
        self.counters.round_trips.fetch_add(1, Relaxed);
        let mut by_hash = redis::cmd("EVALSHA");
        by_hash
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        match by_hash.query_async(&mut conn).await {
            Err(e) if handling(Call::Read, &e) == Handling::SendBody => {
                self.counters.round_trips.fetch_add(1, Relaxed);
                let mut by_body = redis::cmd("EVAL");
                by_body.arg(source).arg(keys.len()).arg(keys).arg(args);
                by_body.query_async(&mut conn).await
            }
            other => other,
        }
    }

    /// The read script over `keys`: Redis's clock and their values.
    pub(crate) async fn read(&self, keys: &[String]) -> Result<View, Failure> {
        let call = self.eval(&self.read, READ_SCRIPT, keys, &[]);
        let reply = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(r)) => {
                self.up();
                r
            }
            Ok(Err(e)) => return Err(classify(Call::Read, e)),
            Err(_) => return Err(timed_out(Call::Read)),
        };
        view(&reply, 0, keys.len()).ok_or_else(|| Failure::Fatal(unexpected_reply()))
    }

    /// The commit script over `keys` with `args` ([`fleet::commit_args`]).
    pub(crate) async fn commit(
        &self,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> Result<Committed, Failure> {
        match self
            .commit_with(&self.commit, COMMIT_SCRIPT, keys, args)
            .await?
        {
            SettleCommitted::Committed(c) => Ok(c),
            SettleCommitted::Before(_) => Err(Failure::Fatal(unexpected_reply())),
        }
    }

    /// The settle script over `keys` (the slots, then the settle record) with `args`
    /// ([`fleet::commit_args`], then the record and its time to live).
    pub(crate) async fn commit_settle(
        &self,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> Result<SettleCommitted, Failure> {
        self.commit_with(&self.settle, SETTLE_SCRIPT, keys, args)
            .await
    }

    async fn commit_with(
        &self,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> Result<SettleCommitted, Failure> {
        let call = self.eval(script, source, keys, args);
        let reply = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(classify(Call::Write, e)),
            Err(_) => return Err(timed_out(Call::Write)),
        };
        match reply.first().map(Vec::as_slice) {
            Some(b"ok") => Ok(SettleCommitted::Committed(Committed::Written)),
            Some(b"settled") => match reply.get(1) {
                Some(record) => Ok(SettleCommitted::Before(record.clone())),
                None => Err(Failure::Fatal(unexpected_reply())),
            },
            Some(b"conflict") => view(&reply, 1, keys.len())
                .map(|v| SettleCommitted::Committed(Committed::Conflict(v)))
                .ok_or_else(|| Failure::Fatal(unexpected_reply())),
            _ => Err(Failure::Fatal(unexpected_reply())),
        }
    }
}

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // Each holder sets or takes one value: a poisoned lock is still consistent.
        self.down_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lifts the mark (reported once, by the call that lifts it).
    fn up(&self) {
        if self.marked.load(Relaxed) {
            let mut down = self.lock();
            self.marked.store(false, Relaxed);
            if down.take().is_some() {
                self.tell(Transition::Up);
            }
        }
    }

    /// Marks Redis down until the next probe (see [`Link::mark_down`]).
    fn mark_down(&self, why: Why) {
        if let Some(f) = &self.on_failure {
            f(why);
        }
        let mut down = self.lock();
        let was = down.replace(Instant::now() + self.probe_every);
        self.marked.store(true, Relaxed);
        self.downs.fetch_add(1, Relaxed);
        if was.is_none() {
            self.tell(Transition::Down(why));
        }
    }

    /// Reports a transition (called with `down_until` locked, so reports keep its order).
    fn tell(&self, t: Transition) {
        if let Some(Observer(f)) = &self.on_transition {
            f(t);
        }
    }
}

/// The pause before the `retries`-th retry of a conflicting commit: random, up to a
/// millisecond per retry so far (at most ten), so that clients that collided do not
/// collide again in step.
pub(crate) async fn conflict_pause(retries: u32) {
    let pause = fastrand::u64(0..=u64::from(retries.min(10)) * 1_000);
    tokio::time::sleep(Duration::from_micros(pause)).await;
}

pub(crate) fn unexpected_reply() -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, "unexpected script reply"))
}

/// The time and values of a script's answer from `at` on (the core's [`fleet::read_view`]).
fn view(reply: &[Vec<u8>], at: usize, n: usize) -> Option<View> {
    let (now, values) = fleet::read_view(reply.get(at..)?, n)?;
    Some(View {
        now,
        values: values.to_vec(),
    })
}

/// Each value's version (empty for an absent key) and state.
pub(crate) type Decoded = (Vec<Vec<u8>>, Vec<Option<State>>);

/// Splits each value into its version and its state (the fleet's codec,
/// [`fleet::decode_value`]); a value that is not a state is an error naming its key, never
/// read as fresh.
pub(crate) fn decode(keys: &[String], values: &[Vec<u8>]) -> Result<Decoded, Error> {
    let mut versions = Vec::with_capacity(values.len());
    let mut states = Vec::with_capacity(values.len());
    for (key, v) in keys.iter().zip(values) {
        let stored = fleet::decode_value(v).map_err(|e| match e {
            ValueError::Short(_) => Error::CorruptVersion { key: key.clone() },
            ValueError::State(reason) => Error::Corrupt {
                key: key.clone(),
                reason,
            },
        })?;
        match stored {
            Some(s) => {
                versions.push(s.version.to_vec());
                states.push(Some(s.state));
            }
            None => {
                versions.push(Vec::new());
                states.push(None);
            }
        }
    }
    Ok((versions, states))
}

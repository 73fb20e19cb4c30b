//! The Redis fleet store: every server process of a fleet shares one set of counters in
//! Redis, with the protocol of `tollgate-redis` (its two scripts, [`tollgate_redis::READ_SCRIPT`]
//! and [`tollgate_redis::COMMIT_SCRIPT`]: versioned state bytes, Redis's clock, a
//! compare-and-set commit of every key of a request together).
//!
//! One request's keys are read with Redis's `TIME`, decided by [`crate::engine::decide`],
//! and committed only if no key changed since the read; on a conflict the script answers
//! with the new values and the decision is made again (bounded by `retry_for`). A denial
//! writes nothing. Keys are `<prefix>{<domain>}<counter key>`: one hash tag per domain, so
//! that every key of a request lives on one node of a Redis Cluster.
//!
//! The stored values, their times to live, the commit's arguments, the read's answer and
//! which failed calls fall back are the fleet protocol's, written once in the core
//! ([`tollgate::store::fleet`]) and shared with `tollgate-redis`, its module and the npm
//! entry. When Redis does not answer within `timeout`, or cannot serve (down, refused,
//! `LOADING`, `BUSY`, ...), the request gets the declared [`Failure`] behaviour and its
//! [`Source`] says so; nothing waits longer. Any other error reply, or a stored value that
//! is not a state, is the caller's error (never read as fresh).

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::Script;
use tollgate::store::fleet::{self, Call, Commit, Handling, Ttl};
use tollgate::store::Limits;
use tollgate::{Nanos, State, NANOS_PER_SEC};
use tollgate_redis::{COMMIT_SCRIPT, READ_SCRIPT};

use crate::engine::{self, Charging, Item, Outcome};
use crate::store::{Clock, Memory, Source, Store, StoreError, SystemClock};

/// What a request gets when Redis cannot decide in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Every limit admits (fail open); nothing is counted.
    Open,
    /// Every limit denies (fail closed).
    Closed,
    /// This process's memory decides with the same limits (each process then has its own
    /// budget until Redis is back; counts are not copied back).
    Local,
}

impl Failure {
    /// From its name: `open`, `closed` or `local`.
    pub fn parse(name: &str) -> Option<Failure> {
        match name {
            "open" => Some(Failure::Open),
            "closed" => Some(Failure::Closed),
            "local" => Some(Failure::Local),
            _ => None,
        }
    }
}

/// The Redis store.
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: String,
    timeout: Duration,
    retry_for: Duration,
    failure: Failure,
    local: Memory<SystemClock>,
    read: Script,
    commit: Script,
}

impl RedisStore {
    /// Connects to `url` (fails when Redis cannot be reached now). `timeout` bounds each
    /// round trip; `failure` is what requests get when one does not come back in time.
    pub async fn connect(
        url: &str,
        prefix: &str,
        timeout: Duration,
        failure: Failure,
    ) -> Result<RedisStore, redis::RedisError> {
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
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connect timed out")))??;
        Ok(RedisStore {
            conn,
            prefix: prefix.to_string(),
            timeout,
            retry_for: timeout * 4,
            failure,
            local: Memory::new(),
            read: Script::new(READ_SCRIPT),
            commit: Script::new(COMMIT_SCRIPT),
        })
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
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, inv.invoke_async::<Vec<Vec<u8>>>(&mut conn)).await
        {
            Ok(Ok(v)) => Ok(v),
            // redis-rs' `Script` already sent the body once on NOSCRIPT.
            Ok(Err(e)) => match tollgate_redis::handling(call, &e) {
                Handling::FallBack(_) => Err(Failed::Unavailable),
                Handling::SendBody | Handling::Fatal => {
                    Err(Failed::Error(StoreError::Redis(e.to_string())))
                }
            },
            Err(_) => Err(Failed::Unavailable),
        }
    }

    /// Decides on Redis: read with Redis's `TIME`, decide, commit all or nothing if no key
    /// changed since (a conflict answers the new values: decide again, for `retry_for`).
    async fn on_redis(
        &self,
        items: &[Item],
        keys: &[String],
        charging: Charging,
        blocked: bool,
    ) -> Result<Outcome, Failed> {
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
                return Ok(outcome);
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
            reply = self.eval(Call::Write, &self.commit, keys, &args).await?;
            match reply.first().map(Vec::as_slice) {
                Some(b"ok") => return Ok(outcome),
                Some(b"conflict") if Instant::now() < deadline => at = 1,
                Some(b"conflict") => return Err(Failed::Unavailable),
                _ => return Err(unexpected_reply()),
            }
        }
    }

    fn fail(
        &self,
        items: &[Item],
        charging: Charging,
        blocked: bool,
    ) -> Result<(Outcome, Source), StoreError> {
        if self.failure == Failure::Local {
            return self
                .local
                .decide_now(items, charging, blocked)
                .map(|o| (o, Source::FallbackLocal))
                .map_err(StoreError::Decide);
        }
        let policies: Vec<_> = items.iter().map(|i| i.policy).collect();
        let each = match Limits::stack(&policies) {
            Ok(limits) if self.failure == Failure::Open => fleet::fail_open(&limits).each,
            Ok(limits) => fleet::fail_closed(&limits, NANOS_PER_SEC).each,
            Err(_) => Vec::new(), // no counted limit
        };
        let source = if self.failure == Failure::Open {
            Source::FallbackOpen
        } else {
            Source::FallbackClosed
        };
        let outcome = Outcome {
            each,
            writes: Vec::new(),
        };
        Ok((outcome, source))
    }
}

/// Why a call to Redis gave no decision.
enum Failed {
    /// Redis cannot serve now (down, refused, slow, or it said so): the declared
    /// [`Failure`] behaviour decides.
    Unavailable,
    /// An answer the protocol does not allow, or a refusal of the core: the caller's error.
    Error(StoreError),
}

fn unexpected_reply() -> Failed {
    Failed::Error(StoreError::Redis("unexpected script reply".into()))
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

impl Store for RedisStore {
    async fn decide(
        &self,
        domain: &str,
        items: Vec<Item>,
        charging: Charging,
        blocked: bool,
    ) -> Result<(Outcome, Source), StoreError> {
        let keys: Vec<String> = items
            .iter()
            .map(|i| format!("{}{{{domain}}}{}", self.prefix, i.key))
            .collect();
        match self.on_redis(&items, &keys, charging, blocked).await {
            Ok(outcome) => Ok((outcome, Source::Redis)),
            Err(Failed::Unavailable) => self.fail(&items, charging, blocked),
            Err(Failed::Error(e)) => Err(e),
        }
    }

    fn now(&self) -> Nanos {
        SystemClock.now()
    }
}

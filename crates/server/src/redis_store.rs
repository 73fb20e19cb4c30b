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
//! When Redis does not answer within `timeout` (down, refused, slow), the request gets the
//! declared [`Failure`] behaviour and its [`Source`] says so; nothing waits longer.

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::Script;
use tollgate::store::Write;
use tollgate::{ceil_millis, Decision, Nanos, State, NANOS_PER_SEC};
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

    async fn eval(
        &self,
        script: &Script,
        keys: &[String],
        args: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, ()> {
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
            _ => Err(()),
        }
    }

    /// Decides on Redis; `Err(())` when Redis did not answer in time.
    async fn on_redis(
        &self,
        items: &[Item],
        keys: &[String],
        charging: Charging,
        blocked: bool,
    ) -> Result<Result<Outcome, StoreError>, ()> {
        let mut reply = self.eval(&self.read, keys, &[]).await?;
        let mut at = 0;
        let deadline = Instant::now() + self.retry_for;
        loop {
            let (now, versions, loaded) = match view(&reply[at..], keys.len()) {
                Some(v) => v,
                None => return Ok(Err(StoreError::Redis("unexpected reply".into()))),
            };
            let outcome = match engine::decide(items, &loaded, now, charging, blocked) {
                Ok(o) => o,
                Err(e) => return Ok(Err(StoreError::Decide(e))),
            };
            if outcome.writes.is_empty() {
                return Ok(Ok(outcome));
            }
            let mut args: Vec<Vec<u8>> = vec![b"cas".to_vec()];
            let mut writes: Vec<Option<&Write>> = vec![None; keys.len()];
            for (i, w) in &outcome.writes {
                writes[*i] = Some(w);
            }
            for (version, write) in versions.iter().zip(writes) {
                args.push(version.clone());
                let (action, value, ttl) = match write {
                    None => ("k", Vec::new(), String::new()),
                    Some(Write::Delete) => ("d", Vec::new(), String::new()),
                    Some(Write::Put { state, fresh_after }) => {
                        let mut value = fastrand::u64(..).to_le_bytes().to_vec();
                        value.extend_from_slice(&state.to_bytes());
                        // Until fresh, and a second more; a key never fresh by time (none
                        // here: concurrency is refused by the config) a day.
                        let ttl = fresh_after.map_or(86_400_000, |f| ceil_millis(f) + 1000);
                        ("p", value, ttl.to_string())
                    }
                };
                args.extend([action.as_bytes().to_vec(), value, ttl.into_bytes()]);
            }
            reply = self.eval(&self.commit, keys, &args).await?;
            match reply.first().map(Vec::as_slice) {
                Some(b"ok") => return Ok(Ok(outcome)),
                Some(b"conflict") if Instant::now() < deadline => at = 1,
                Some(b"conflict") => return Err(()),
                _ => return Ok(Err(StoreError::Redis("unexpected reply".into()))),
            }
        }
    }

    fn fail(
        &self,
        items: &[Item],
        charging: Charging,
        blocked: bool,
    ) -> Result<(Outcome, Source), StoreError> {
        match self.failure {
            Failure::Local => self
                .local
                .decide_now(items, charging, blocked)
                .map(|o| (o, Source::FallbackLocal))
                .map_err(StoreError::Decide),
            Failure::Open | Failure::Closed => {
                let allowed = self.failure == Failure::Open;
                let each = items
                    .iter()
                    .map(|i| Decision {
                        allowed,
                        limit: i.policy.limit(),
                        remaining: if allowed { i.policy.limit() } else { 0 },
                        retry_after: if allowed { 0 } else { NANOS_PER_SEC },
                        ..Decision::default()
                    })
                    .collect();
                let source = if allowed {
                    Source::FallbackOpen
                } else {
                    Source::FallbackClosed
                };
                Ok((
                    Outcome {
                        each,
                        writes: Vec::new(),
                    },
                    source,
                ))
            }
        }
    }
}

/// The time and each key's version and state from a read's reply (`seconds, microseconds,
/// values...`).
type View = (Nanos, Vec<Vec<u8>>, Vec<Option<State>>);

fn view(fields: &[Vec<u8>], n: usize) -> Option<View> {
    if fields.len() != n + 2 {
        return None;
    }
    let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
    let now = number(&fields[0])?
        .saturating_mul(NANOS_PER_SEC)
        .saturating_add(number(&fields[1])? * 1_000);
    let mut versions = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(n);
    for v in &fields[2..] {
        if v.is_empty() {
            versions.push(Vec::new());
            states.push(None);
            continue;
        }
        let (version, bytes) = v.split_at(8.min(v.len()));
        versions.push(version.to_vec());
        // A value that is not a state (another writer's layout) is read as fresh and
        // overwritten by the commit (its version still guards the write).
        states.push(State::from_bytes(bytes).ok());
    }
    Some((now, versions, states))
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
            Ok(r) => r.map(|o| (o, Source::Redis)),
            Err(()) => self.fail(&items, charging, blocked),
        }
    }

    fn now(&self) -> Nanos {
        SystemClock.now()
    }
}

//! Plans on Redis: the limit depends on who calls (free 100/min, pro 1,000/min), a caller
//! keeps what it spent when its plan changes, and per-caller overrides live in Redis, so
//! every process sees one at its next check of that caller.
//!
//! The rule is the core's ([`tollgate::store::fleet::plan`]): a caller's slots are its own
//! (`<prefix>:{<namespace>:<key>}:<i>`, whatever plan the call names), each value names the
//! policy it was written under, and a check under other limits carries the states to them
//! first ([`PlanRound`]). The caller's override, at `<prefix>:{<namespace>:<key>}:o`, is read
//! in the same round trip as the states. On the same link as
//! [`RedisLimiter`](crate::RedisLimiter): its timeout, failure rule, mark-down until the next
//! probe and declared fallback. Two ways, the same decisions on the same keys and bytes:
//!
//! * **The module** (one round trip): `TOLLGATE.PLAN`, with the core's argument layout
//!   ([`tollgate::store::fleet::plan_command`]), decided atomically inside Redis.
//! * **The scripts** (two): `read.lua` reads the slots and the override with Redis's clock,
//!   the core decides here, `commit.lua` writes only if no slot, and not the override,
//!   changed since (the override's write id is compared like a state's): an override set
//!   between the read and the commit makes the check decide again under it.
//!
//! There is no deny cache here: a remembered denial would outlive an override that raised
//! the caller's limit.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError};
use tollgate::keyed::{PlanCheckError, PlanLimiter};
use tollgate::plans::{Override, Plans};
use tollgate::stack::StackDecision;
use tollgate::store::fleet::plan::{
    self, decode_override, decode_value_under, limits_for, PlanRound, PlanValueError, Written,
};
use tollgate::store::fleet::{self, plan_command, Commit, Ttl};
use tollgate::store::{KeyLayout, Limits, Slot};
use tollgate::{Decision, Nanos};

use crate::link::{conflict_pause, unexpected_reply, Committed, Failure, Link};
use crate::{module_decision, Error, Fallback, Options, Source, Stats, Why};

/// The answer to one plan check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOutcome {
    /// The combined decision over the caller's limits.
    pub decision: Decision,
    /// Each limit's decision, in order.
    pub each: Vec<Decision>,
    /// Where it was decided.
    pub source: Source,
    /// Whether the caller's override decided (else the plan its call named).
    pub overridden: bool,
}

/// A fleet-wide limiter on Redis whose limits depend on the caller: named [`Plans`], and
/// per-caller overrides stored in Redis. Cheap to clone.
///
/// **The bound on overrides**: one Redis key per caller that has one, of at most
/// `8 + 1 + 256 * 16` bytes plus the plan's name (in practice a few dozen bytes), without
/// expiry; this process keeps none of them (each check reads its caller's). Their number is
/// bounded by Redis's memory only: run Redis with `maxmemory-policy noeviction` or a
/// `volatile-*` policy (which evicts only keys with a time to live, never an override), so
/// that an override is never evicted.
pub struct RedisPlans<C> {
    inner: Arc<Shared<C>>,
}

impl<C> Clone for RedisPlans<C> {
    fn clone(&self) -> Self {
        RedisPlans {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Shared<C> {
    link: Link<C>,
    plans: Plans,
    /// How many slots every caller has: the longest plan's stack.
    slots: usize,
    layout: KeyLayout,
    options: Options,
    /// The fallback's own limiter ([`Fallback::Local`]), without overrides.
    local: Option<PlanLimiter>,
    epoch: Instant,
    /// Turns: this process's checks of one caller go to Redis one after another.
    turns: Vec<tokio::sync::Mutex<()>>,
    hasher: RandomState,
}

/// How many locks the callers are spread over for the turns.
const TURNS: usize = 64;

/// Why a check got no decision from Redis.
enum Stop {
    FallBack(Why),
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Fail(e)
    }
}

/// A decision from Redis: each limit's, the combined one, and whether the override decided.
type Decided = (StackDecision, bool);

impl<C> RedisPlans<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A limiter over `plans` on the connection `conn`, with `options` (its namespace names
    /// the callers' keys). Errors: a plan whose stack is longer than a fleet store keeps
    /// ([`Error::Plan`]), a plan with a concurrency limit (no release yet: [`Error::Config`]),
    /// an invalid option.
    pub fn new(conn: C, plans: Plans, options: Options) -> Result<Self, Error> {
        let layout = KeyLayout::new(&options.prefix, &options.namespace)?;
        options.check()?;
        plan::check_plans(&plans).map_err(plan_error)?;
        // A concurrency limit's slots are freed by a release, which plans have not yet: they
        // would stay taken until the key's lease ran out.
        if let Some(p) = plans.iter().find(|p| p.limits().holds_slots()) {
            return Err(Error::Config {
                field: "plans",
                reason: format!(
                    "plan \"{}\" has a concurrency limit, which RedisPlans cannot release yet",
                    p.name()
                ),
            });
        }
        let link = Link::new(
            conn,
            options.timeout,
            options.probe_every,
            plan_command::COMMAND,
            options.on_transition.clone(),
            None,
        );
        let local = match options.fallback {
            Fallback::Local { max_keys } => Some(PlanLimiter::new(plans.clone(), max_keys, 0)),
            Fallback::Open | Fallback::Closed => None,
        };
        Ok(RedisPlans {
            inner: Arc::new(Shared {
                link,
                slots: plan::longest(&plans),
                plans,
                layout,
                options,
                local,
                epoch: Instant::now(),
                turns: (0..TURNS).map(|_| tokio::sync::Mutex::new(())).collect(),
                hasher: RandomState::new(),
            }),
        })
    }

    /// The plans.
    pub fn plans(&self) -> &Plans {
        &self.inner.plans
    }

    /// The key layout (to inspect a caller's keys with `redis-cli`).
    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// Where decisions were made so far.
    pub fn stats(&self) -> Stats {
        self.inner.link.stats()
    }

    /// Decides one request of `cost` for the caller `key`, whose call names the plan `plan`:
    /// under the caller's override when it has one, else under the plan; its states
    /// carried to those limits first when another plan wrote them (spend is kept). Errors:
    /// a plan that does not exist ([`Error::Plan`]), a cost above the limits' capacity
    /// ([`Error::Decide`]), Redis's errors; nothing is charged.
    pub async fn check(&self, key: &str, plan: &str, cost: u64) -> Result<PlanOutcome, Error> {
        let s = &*self.inner;
        bounded(key)?;
        let asking = s.plans.get(plan).map_err(plan_error)?;
        let base = s.layout.base(key);
        let decided = if s.link.is_down() {
            Err(Stop::FallBack(Why::Unreachable))
        } else if s.options.use_module && s.link.has_module().await == Some(true) {
            s.in_module(&base, asking, cost).await
        } else {
            let _turn = s.turn(key).await;
            s.by_scripts(key, asking, cost).await
        };
        match decided {
            Ok((d, overridden)) => {
                s.link.counters.redis.fetch_add(1, Relaxed);
                Ok(PlanOutcome {
                    decision: d.decision,
                    each: d.each,
                    source: Source::Redis,
                    overridden,
                })
            }
            Err(Stop::FallBack(why)) => s.fall_back(key, plan, asking, cost, why),
            Err(Stop::Fail(e)) => Err(e),
        }
    }

    /// Gives the caller `key` an override: another plan, or limits of its own (at most as
    /// many policies as the longest plan's stack). Stored in Redis, resolved (a plan's
    /// policies as they are now), without expiry: every process's next check of `key`
    /// decides under it. Errors: [`Error::Plan`] (a plan that does not exist, no limits,
    /// too many), Redis's.
    pub async fn set(&self, key: &str, what: Override) -> Result<(), Error> {
        let s = &*self.inner;
        bounded(key)?;
        let value =
            plan::encode_override(fastrand::u64(..), &what, &s.plans).map_err(plan_error)?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(s.layout.override_key(key)).arg(value);
        s.admin::<()>(cmd).await
    }

    /// The caller `key`'s override, as it was set; `None` when it has none.
    pub async fn get(&self, key: &str) -> Result<Option<Override>, Error> {
        let s = &*self.inner;
        bounded(key)?;
        let name = s.layout.override_key(key);
        let mut cmd = redis::cmd("GET");
        cmd.arg(&name);
        let value: Option<Vec<u8>> = s.admin(cmd).await?;
        let stored = decode_override(&value.unwrap_or_default())
            .map_err(|reason| Error::CorruptPlan { key: name, reason })?;
        Ok(stored.map(|o| o.given))
    }

    /// Clears the caller `key`'s override: its next check (in any process) decides under
    /// the plan its call names, its spend carried. Returns whether it had one.
    pub async fn clear(&self, key: &str) -> Result<bool, Error> {
        let s = &*self.inner;
        bounded(key)?;
        let mut cmd = redis::cmd("DEL");
        cmd.arg(s.layout.override_key(key));
        Ok(s.admin::<u64>(cmd).await? > 0)
    }
}

/// The core's bound on a key's bytes ([`tollgate::store::bounds`]).
fn bounded(key: &str) -> Result<(), Error> {
    tollgate::store::bounds::check_key(key.as_bytes())
        .map_err(|over| Error::OverBound { field: "key", over })
}

fn plan_error(e: tollgate::plans::PlanError) -> Error {
    Error::Plan(Box::new(e))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<C> Shared<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// An override's command (`SET`, `GET`, `DEL`) within the timeout; a failure is the
    /// caller's error (an override is configuration: no fallback sets one).
    async fn admin<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, Error> {
        let mut conn = self.link.conn.clone();
        self.link.counters.round_trips.fetch_add(1, Relaxed);
        match tokio::time::timeout(self.options.timeout, cmd.query_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Err(_) => Err(Error::Redis(RedisError::from((
                ErrorKind::Io,
                "override call timed out",
            )))),
        }
    }

    /// The clock a decision uses: Redis's, or a test's.
    fn clock(&self, redis_now: Nanos) -> Nanos {
        #[cfg(feature = "testing")]
        if let Some(c) = &self.options.test_clock {
            return c.load(Relaxed);
        }
        redis_now
    }

    fn test_clock(&self) -> bool {
        #[cfg(feature = "testing")]
        if self.options.test_clock.is_some() {
            return true;
        }
        false
    }

    /// Redis failed a call: marked down until the next probe, the fallback decides; a call
    /// that may have written is never sent again (indeterminate).
    fn failed(&self, failure: Failure, wrote: bool) -> Stop {
        match failure {
            Failure::Unavailable(why) => {
                if wrote {
                    self.link.counters.indeterminate.fetch_add(1, Relaxed);
                }
                self.link.mark_down(why);
                Stop::FallBack(why)
            }
            Failure::Fatal(e) => Stop::Fail(Error::Redis(e)),
        }
    }

    /// One `TOLLGATE.PLAN`, decided and written atomically inside Redis.
    async fn in_module(&self, base: &str, asking: &Limits, cost: u64) -> Result<Decided, Stop> {
        let mut cmd = redis::cmd(plan_command::COMMAND);
        cmd.arg(base);
        for arg in plan_command::encode(self.slots, cost, asking) {
            cmd.arg(arg);
        }
        if self.test_clock() {
            let now = self.clock(0);
            cmd.arg("NOW").arg(now / tollgate::NANOS_PER_MS);
        }
        let mut conn = self.link.conn.clone();
        let reply: redis::Value = self
            .link
            .send(cmd.query_async(&mut conn))
            .await
            .map_err(|f| self.failed(f, true))?;
        let overridden = match &reply {
            redis::Value::Array(f) => match f.get(fleet::DECISION_FIELDS + 1) {
                Some(redis::Value::Int(n)) => *n == 1,
                _ => return Err(Stop::Fail(Error::Redis(unexpected_reply()))),
            },
            _ => return Err(Stop::Fail(Error::Redis(unexpected_reply()))),
        };
        let decided =
            module_decision(&reply).ok_or_else(|| Stop::Fail(Error::Redis(unexpected_reply())))?;
        Ok((decided, overridden))
    }

    /// Read the caller's slots and override, decide under the override's limits or the
    /// plan's (the states carried to them), commit if neither changed since; on a
    /// conflict, decide again on the values it answered, after a random pause, for up to
    /// `retry_for`.
    async fn by_scripts(&self, key: &str, asking: &Limits, cost: u64) -> Result<Decided, Stop> {
        let mut keys: Vec<String> = (0..self.slots)
            .map(|i| self.layout.slot_key(key, None, Slot::Layer(i)))
            .collect();
        keys.push(self.layout.override_key(key));
        let ttl = (!self.test_clock()).then(|| Ttl {
            grace_ms: millis(self.options.grace),
            lease_ms: millis(self.options.lease),
        });
        let started = Instant::now();
        let mut view = self
            .link
            .read(&keys)
            .await
            .map_err(|f| self.failed(f, false))?;
        let mut retries = 0u32;
        loop {
            let (versions, written, over) = decode(&keys, &view.values)?;
            let limits = limits_for(asking, over.as_ref());
            let now = self.clock(view.now);
            let mut round = PlanRound::new(limits, &written, now).map_err(Error::Decide)?;
            let decided = round.batch().decide(cost).map_err(Error::Decide)?;
            let writes = round.key_writes(ttl, || fastrand::u64(..));
            if writes.is_empty() {
                return Ok((decided, over.is_some()));
            }
            let args = fleet::commit_args(Commit::Cas, &versions, writes);
            match self.link.commit(&keys, &args).await {
                Ok(Committed::Written) => return Ok((decided, over.is_some())),
                Ok(Committed::Conflict(current)) => {
                    self.link.counters.conflicts.fetch_add(1, Relaxed);
                    let waited = started.elapsed();
                    if waited >= self.options.retry_for {
                        return Err(Stop::Fail(Error::Contended { waited }));
                    }
                    retries += 1;
                    conflict_pause(retries).await;
                    view = current;
                }
                Err(f) => return Err(self.failed(f, true)),
            }
        }
    }

    /// The declared fallback's answer: open or closed under the plan named, or this
    /// process's own plan limiter (which knows no override).
    fn fall_back(
        &self,
        key: &str,
        plan: &str,
        asking: &Limits,
        cost: u64,
        why: Why,
    ) -> Result<PlanOutcome, Error> {
        self.link.counters.fallback.fetch_add(1, Relaxed);
        let d = match &self.local {
            Some(local) => {
                let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                local
                    .check_detailed(key, plan, now, cost)
                    .map_err(|e| match e {
                        PlanCheckError::Decide(e) => Error::Decide(e),
                        PlanCheckError::UnknownPlan { name } => {
                            plan_error(tollgate::plans::PlanError::UnknownPlan { name })
                        }
                    })?
            }
            None => match self.options.fallback {
                Fallback::Closed => fleet::fail_closed(asking, self.link.probe_nanos()),
                _ => fleet::fail_open(asking),
            },
        };
        Ok(PlanOutcome {
            decision: d.decision,
            each: d.each,
            source: Source::Fallback(why),
            overridden: false,
        })
    }

    /// Waits for this check's turn on its caller, for at most the timeout: without turns,
    /// concurrent checks of one caller all read the same version, and all but one commit
    /// conflict and start over. Only a shortcut: the compare-and-set commit keeps decisions
    /// exact without it (and across processes).
    async fn turn(&self, key: &str) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        let i = self.hasher.hash_one(key) as usize % TURNS;
        let deadline = tokio::time::Instant::now() + self.link.timeout;
        tokio::time::timeout_at(deadline, self.turns[i].lock())
            .await
            .ok()
    }
}

/// What one read of a caller holds: each key's version (empty when absent), the slots'
/// values, and the caller's override.
type Read = (
    Vec<Vec<u8>>,
    Vec<Option<Written>>,
    Option<plan::StoredOverride>,
);

/// The [`Read`] of a caller's values (its override the last); a value that is neither
/// layout is an error naming its key, never read as fresh.
fn decode(keys: &[String], values: &[Vec<u8>]) -> Result<Read, Error> {
    let corrupt = |i: usize| {
        let key = keys[i].clone();
        move |reason: PlanValueError| Error::CorruptPlan { key, reason }
    };
    let n = values.len() - 1;
    let mut versions = Vec::with_capacity(values.len());
    let mut written = Vec::with_capacity(n);
    for (i, v) in values[..n].iter().enumerate() {
        let w = decode_value_under(v).map_err(corrupt(i))?;
        versions.push(w.as_ref().map_or(Vec::new(), |w| w.version.to_vec()));
        written.push(w);
    }
    let over = decode_override(&values[n]).map_err(corrupt(n))?;
    versions.push(over.as_ref().map_or(Vec::new(), |o| o.version.to_vec()));
    Ok((versions, written, over))
}

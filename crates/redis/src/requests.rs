//! Requests of limits on separate keys (an Envoy request's descriptors), decided together by
//! the core's rule ([`tollgate::store::request`]: all or nothing, shadow limits, charge
//! each, per-limit costs, a blocking limit), on the same link as
//! [`RedisLimiter`](crate::RedisLimiter): its timeouts, failure rule, mark-down until the next probe,
//! declared fallback and deny cache. Two ways, the same decisions on the same keys and
//! bytes:
//!
//! * **The module** (one round trip): `TOLLGATE.REQUEST`, with the core's argument layout
//!   ([`tollgate::store::request::command`]), decided atomically inside Redis.
//! * **The scripts** (two): read the keys with Redis's clock, decide here, commit only if
//!   no key changed since; a conflict answers the new values and the request is decided
//!   again after a random pause, for up to [`Options::retry_for`].
//!
//! Every key of a request is `<base><suffix>`: the base must hold a hash tag (`{...}`), so
//! that on a Redis Cluster all of them live on one node. Decisions are not counted in the
//! `metrics` facade here: the front end (tollgate-rls) counts them with its own labels.

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, Commit, Ttl};
use tollgate::store::request::{self, command, Charging, Counted};
use tollgate::store::{DenyCache, Limits};
use tollgate::{DecideError, Decision, Nanos};

use crate::link::{conflict_pause, decode, unexpected_reply, Committed, Failure, Link};
use crate::{module_decision, Error, Fallback, Options, Source, Stats, Why};

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Each limit's decision, in the request's order.
    pub each: Vec<Decision>,
    /// Where it was decided.
    pub source: Source,
}

/// Requests of limits on separate keys, on Redis. Cheap to clone.
pub struct RedisRequests<C> {
    inner: Arc<Shared<C>>,
}

impl<C> Clone for RedisRequests<C> {
    fn clone(&self) -> Self {
        RedisRequests {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Shared<C> {
    link: Link<C>,
    options: Options,
    denials: Option<Mutex<DenyCache<String>>>,
    /// The deny cache's clock: nanoseconds since `epoch`.
    epoch: Instant,
    /// Turns: this process's requests for the same keys go to Redis one after another.
    turns: Vec<tokio::sync::Mutex<()>>,
    hasher: RandomState,
}

/// How many locks the keys are spread over for the turns.
const TURNS: usize = 64;

/// Why a request got no decision from Redis.
enum Stop {
    /// The declared fallback decides, for this reason.
    FallBack(Why),
    /// The caller's error.
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Fail(e)
    }
}

impl<C> RedisRequests<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Requests on the connection `conn`, with `options`' timeout, conflict retries, probe
    /// interval, fallback, key lifetimes, deny cache and module use (its prefix and
    /// namespace are not used: each request names its keys). With [`Fallback::Local`], the
    /// caller decides in its own memory (see [`RedisRequests::request`]).
    pub fn new(conn: C, options: Options) -> Result<Self, Error> {
        options.check()?;
        let link = Link::new(
            conn,
            options.timeout,
            options.probe_every,
            command::COMMAND,
            options.on_transition.clone(),
            None,
        );
        let denials = (options.deny_cache && options.deny_entries > 0)
            .then(|| Mutex::new(DenyCache::new(options.deny_entries)));
        Ok(RedisRequests {
            inner: Arc::new(Shared {
                link,
                options,
                denials,
                epoch: Instant::now(),
                turns: (0..TURNS).map(|_| tokio::sync::Mutex::new(())).collect(),
                hasher: RandomState::new(),
            }),
        })
    }

    /// Whether requests are decided by tollgate's module: asks the server now if not known
    /// yet (`None`: it did not answer; asked again by the next request). `Some(false)` when
    /// [`Options::use_module`] is off.
    pub async fn uses_module(&self) -> Option<bool> {
        if !self.inner.options.use_module {
            return Some(false);
        }
        self.inner.link.has_module().await
    }

    /// Where decisions were made so far.
    pub fn stats(&self) -> Stats {
        self.inner.link.stats()
    }

    /// Decides a request: each of `limits` on the key `<base><suffix>`. `local` decides it
    /// in this process's memory, called only when Redis cannot and the declared fallback is
    /// [`Fallback::Local`].
    pub async fn request(
        &self,
        base: &str,
        limits: &[(&str, Counted)],
        charging: Charging,
        blocked: bool,
        local: impl FnOnce() -> Result<Vec<Decision>, DecideError>,
    ) -> Result<Answer, Error> {
        let s = &*self.inner;
        // Only an all-or-nothing request is remembered (in the other mode a denied request
        // still charges the limits with room), and not one with a blocking limit (denied
        // without a store decision).
        let cached = match &s.denials {
            Some(d) if charging == Charging::AllOrNothing && !blocked => {
                Some((d, deny_key(base, limits)))
            }
            _ => None,
        };
        let remembered = || {
            let (denials, key) = cached.as_ref()?;
            let d = lock(denials).get(key, 1, s.since(Instant::now()))?;
            s.link.counters.deny_cache.fetch_add(1, Relaxed);
            Some(Answer {
                each: d.each,
                source: Source::DenyCache,
            })
        };
        if let Some(answer) = remembered() {
            return Ok(answer);
        }
        let downs = s.link.downs();
        let decided = if s.link.is_down() {
            Err(Stop::FallBack(Why::Unreachable))
        } else if s.options.use_module && s.link.has_module().await == Some(true) {
            s.in_module(base, limits, charging, blocked).await
        } else {
            let keys: Vec<String> = limits.iter().map(|(k, _)| format!("{base}{k}")).collect();
            let _turn = s.turn(&keys).await;
            // The request before this one in line may have been this very denial, or found
            // Redis down (then this one does not wait for its own timeout).
            if let Some(answer) = remembered() {
                return Ok(answer);
            }
            match s.link.downs() == downs {
                true => s.by_scripts(&keys, limits, charging, blocked).await,
                false => Err(Stop::FallBack(Why::Unreachable)),
            }
        };
        match decided {
            Ok((each, sent, rounded_up)) => {
                s.link.counters.redis.fetch_add(1, Relaxed);
                if let Some((denials, key)) = cached {
                    remember(denials, key, limits, &each, s.since(sent), rounded_up);
                }
                Ok(Answer {
                    each,
                    source: Source::Redis,
                })
            }
            Err(Stop::FallBack(why)) => s.fall_back(limits, why, local),
            Err(Stop::Fail(e)) => Err(e),
        }
    }
}

/// Each limit's decisions, when the values decided on were read, and whether its
/// durations are whole ms rounded up (the module's).
type Decided = (Vec<Decision>, Instant, bool);

impl<C> Shared<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn since(&self, t: Instant) -> Nanos {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
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

    /// One `TOLLGATE.REQUEST`, decided and written atomically inside Redis.
    async fn in_module(
        &self,
        base: &str,
        limits: &[(&str, Counted)],
        charging: Charging,
        blocked: bool,
    ) -> Result<Decided, Stop> {
        let mut cmd = redis::cmd(command::COMMAND);
        cmd.arg(base);
        let items = limits.iter().map(|(k, c)| (k.as_bytes(), c));
        for arg in command::encode(items, charging, blocked) {
            cmd.arg(arg);
        }
        let sent = Instant::now();
        let mut conn = self.link.conn.clone();
        let reply: redis::Value = self
            .link
            .send(cmd.query_async(&mut conn))
            .await
            .map_err(|f| self.failed(f, true))?;
        let decided = module_decision(&reply)
            .filter(|d| d.each.len() == limits.len())
            .ok_or_else(|| Stop::Fail(Error::Redis(unexpected_reply())))?;
        Ok((decided.each, sent, true))
    }

    /// Read, decide, commit if no key changed since; on a conflict, decide again on the
    /// values it answered, after a random pause, for up to `retry_for`.
    async fn by_scripts(
        &self,
        keys: &[String],
        limits: &[(&str, Counted)],
        charging: Charging,
        blocked: bool,
    ) -> Result<Decided, Stop> {
        let counted: Vec<Counted> = limits.iter().map(|(_, c)| *c).collect();
        let ttl = Ttl {
            grace_ms: millis(self.options.grace),
            lease_ms: millis(self.options.lease),
        };
        let started = Instant::now();
        let mut sent = started;
        let mut view = self
            .link
            .read(keys)
            .await
            .map_err(|f| self.failed(f, false))?;
        let mut retries = 0u32;
        loop {
            let (versions, loaded) = decode(keys, &view.values)?;
            let outcome = request::decide(&counted, &loaded, view.now, charging, blocked)
                .map_err(Error::Decide)?;
            if outcome.writes.is_empty() {
                return Ok((outcome.each, sent, false));
            }
            let writes = outcome
                .writes
                .into_iter()
                .map(|(i, w)| (i, fleet::key_write(w, Some(ttl), || fastrand::u64(..))))
                .collect();
            let args = fleet::commit_args(Commit::Cas, &versions, writes);
            let committing = Instant::now();
            match self.link.commit(keys, &args).await {
                Ok(Committed::Written) => return Ok((outcome.each, sent, false)),
                Ok(Committed::Conflict(current)) => {
                    self.link.counters.conflicts.fetch_add(1, Relaxed);
                    let waited = started.elapsed();
                    if waited >= self.options.retry_for {
                        return Err(Stop::Fail(Error::Contended { waited }));
                    }
                    retries += 1;
                    conflict_pause(retries).await;
                    view = current;
                    sent = committing;
                }
                Err(f) => return Err(self.failed(f, true)),
            }
        }
    }

    /// The declared fallback's answer.
    fn fall_back(
        &self,
        limits: &[(&str, Counted)],
        why: Why,
        local: impl FnOnce() -> Result<Vec<Decision>, DecideError>,
    ) -> Result<Answer, Error> {
        self.link.counters.fallback.fetch_add(1, Relaxed);
        let policies: Vec<_> = limits.iter().map(|(_, c)| c.policy).collect();
        let each = match (&self.options.fallback, Limits::stack(&policies)) {
            (Fallback::Local { .. }, _) => local()?,
            (_, Err(_)) => Vec::new(), // no limit
            (Fallback::Open, Ok(l)) => fleet::fail_open(&l).each,
            (Fallback::Closed, Ok(l)) => fleet::fail_closed(&l, self.link.probe_nanos()).each,
        };
        Ok(Answer {
            each,
            source: Source::Fallback(why),
        })
    }

    /// Waits for this request's turn on its keys (their locks, in order, so two requests
    /// never wait for each other), for at most the timeout: without turns, concurrent
    /// requests for one hot key all read the same version, and all but one commit conflict
    /// and start over. Only a shortcut: the compare-and-set commit keeps decisions exact
    /// without it (and across processes), so a request that waited the timeout goes on
    /// without its turn rather than queue behind a Redis that does not answer.
    async fn turn(&self, keys: &[String]) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut which: Vec<usize> = keys
            .iter()
            .map(|k| self.hasher.hash_one(k) as usize % TURNS)
            .collect();
        which.sort_unstable();
        which.dedup();
        let deadline = tokio::time::Instant::now() + self.link.timeout;
        let mut held = Vec::with_capacity(which.len());
        for i in which {
            match tokio::time::timeout_at(deadline, self.turns[i].lock()).await {
                Ok(guard) => held.push(guard),
                Err(_) => return Vec::new(),
            }
        }
        held
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The deny cache's key of a request: its base, and every limit's key, policy, cost and
/// shadow flag.
fn deny_key(base: &str, limits: &[(&str, Counted)]) -> String {
    let mut key = String::from(base);
    for (k, c) in limits {
        let _ = write!(key, "\x1e{k}\x1f{}\x1f{}\x1f{}", c.policy, c.cost, c.shadow);
    }
    key
}

/// Remembers a request that an enforced limit denied, decided on values read at `at`,
/// until the latest retry time of its denying limits (it cannot pass before: more traffic
/// only pushes that later). `rounded_up`: the durations are whole ms rounded up (the
/// module's), so the lower bound is remembered ([`fleet::lower_bound`]).
fn remember(
    denials: &Mutex<DenyCache<String>>,
    key: String,
    limits: &[(&str, Counted)],
    each: &[Decision],
    at: Nanos,
    rounded_up: bool,
) {
    let denying = limits
        .iter()
        .zip(each)
        .filter(|((_, c), d)| !c.shadow && !d.allowed)
        .map(|(_, d)| *d)
        .max_by_key(|d| d.retry_after);
    let Some(decision) = denying else {
        return; // admitted: nothing to remember
    };
    let retry = match rounded_up {
        true => fleet::lower_bound(decision.retry_after),
        false => decision.retry_after,
    };
    let decided = StackDecision {
        decision,
        each: each.to_vec(),
    };
    lock(denials).remember(key, 1, at, &decided, retry);
}

fn lock(m: &Mutex<DenyCache<String>>) -> std::sync::MutexGuard<'_, DenyCache<String>> {
    // Each call is one get or insert: a poisoned cache is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

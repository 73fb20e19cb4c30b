//! Stores: where a policy's counters live. The layer asks a [`Store`] to decide each
//! request; every store decides with the core ([`tollgate::store`]'s contract), so the
//! in-memory and the Redis store make the same decisions.
//!
//! * [`Memory`]: the core's keyed limiter ([`tollgate::keyed::KeyedLimiter`], bounded
//!   memory, thread-safe) with a [`Clock`]; one process, no I/O.
//! * `tollgate_redis::RedisLimiter` (feature `redis`): one exact limit for a fleet of
//!   processes, Redis's clock, its own declared fallback when Redis is unreachable.
//! * `RedisPlanStore` (feature `redis`): a policy of plans on `tollgate_redis::RedisPlans`,
//!   overrides stored in Redis.

use std::future::Future;
use std::num::NonZeroUsize;

pub use tollgate::clock::{Clock, ManualClock, MonotonicClock};
use tollgate::keyed::{KeyedLimiter, PlanCheckError, PlanLimiter};
use tollgate::plans::{Override, Plans};
use tollgate::settle::Reservation;
use tollgate::store::fallback::Why;
use tollgate::store::Limits;
use tollgate::{DecideError, Decision, Overage, PolicyError, ReservationError};

/// Where a decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// In this process's memory ([`Memory`]).
    Memory,
    /// On the states held by Redis, at Redis's clock.
    Redis,
    /// From the Redis store's memory of a denial that still holds (no round trip).
    DenyCache,
    /// By the Redis store's declared fallback (Redis unreachable, slow, or an answer lost).
    Fallback,
}

/// A store's answer for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The combined decision over every limit of the policy.
    pub decision: Decision,
    /// Each limit's decision, in stack order (a fair share's tenant window last, when the
    /// request has a tenant).
    pub each: Vec<Decision>,
    /// Where it was decided.
    pub source: Source,
}

/// A store's answer to a reserve ([`Store::reserve_now`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Reserved {
    /// The decision, as a check's.
    pub checked: Checked,
    /// When admitted, the reservation to settle ([`Store::settle`]).
    pub reservation: Option<Reservation>,
}

/// A store of plans' answer that must wait for it ([`Store::check_plan`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanChecked {
    /// The decision, as a check's.
    pub checked: Checked,
    /// The key's override that decided it, if any: the layer reports the limits it gives.
    pub overridden: Option<Override>,
}

/// A store of one policy's counters (a single policy, a stack or a fair share): decides
/// requests by key, with the core.
pub trait Store: Send + Sync + 'static {
    /// Why a request could not be decided (the layer's `on_error` then answers).
    type Error: std::error::Error + Send + Sync + 'static;

    /// The limits this store decides (names and `RateLimit-Policy` come from them).
    fn limits(&self) -> &Limits;

    /// Decides one request of `cost` for `key` on behalf of `tenant` (a fair share's tenant
    /// window; other limits ignore it). All or nothing across the limits.
    ///
    /// The layer drops the future when the request is cancelled (the client went away). A
    /// store whose decision may still be made after that (in a task of its own) must give
    /// back the concurrency slots of an admission nobody waits for: the layer releases only
    /// what it was told was admitted.
    fn check(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, Self::Error>> + Send;

    /// [`Store::check`] when the store decides without waiting (in memory): the answer now,
    /// so that the layer calls the inner service at once instead of from a future that
    /// holds a clone of it. `None` (the default): the decision needs the future.
    fn check_now(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> Option<Result<Checked, Self::Error>> {
        let _ = (key, tenant, cost);
        None
    }

    /// Gives back `cost` slots of every concurrency limit for `key`: a request that
    /// [`Store::check`] admitted has ended. The layer calls it exactly once per admitted
    /// request of a policy with a concurrency limit (never for other policies), from a
    /// destructor: it must not block or panic. A store that needs I/O starts it and
    /// returns.
    fn release(&self, key: &str, cost: u64);

    /// [`Store::check_now`] for a store of plans ([`Memory::with_plans`]): the request
    /// decided under the plan named `plan`, the key's spend carried across its plan
    /// changes. `None` (the default): the store has no plans, or must wait for its answer
    /// ([`Store::check_plan`]).
    fn check_plan_now(
        &self,
        key: &str,
        plan: &str,
        cost: u64,
    ) -> Option<Result<Checked, Self::Error>> {
        let _ = (key, plan, cost);
        None
    }

    /// The override a store of plans keeps for `key` ([`Memory::plan_limiter`]), if any:
    /// the layer reports the limits it gives. `None` (the default): no plans, or none set.
    fn plan_override(&self, key: &str) -> Option<Override> {
        let _ = key;
        None
    }

    /// [`Store::check_plan_now`] for a store of plans that must wait for its answer
    /// (`RedisPlanStore`): the decision, and the override that decided it, which such a
    /// store learns only with the decision (the layer reports the limits it gives). The
    /// layer calls it only when `check_plan_now` is `None`. `None` (the default): the store
    /// has no plans.
    fn check_plan(
        &self,
        key: &str,
        plan: &str,
        cost: u64,
    ) -> impl Future<Output = Option<Result<PlanChecked, Self::Error>>> + Send {
        let _ = (key, plan, cost);
        std::future::ready(None)
    }

    /// Whether this store reserves and settles ([`Store::reserve_now`], [`Store::settle`]).
    /// `false` (the default): the builder refuses a route that settles on it
    /// ([`crate::Route::count_when`], [`crate::Route::measured`]).
    fn settles(&self) -> bool {
        false
    }

    /// Reserves `estimate` for `key` now (the core's reserve: a decision that charges the
    /// estimate) and, when admitted, the reservation to settle with the real cost. `None`
    /// (the default): the store does not settle ([`Store::settles`]).
    fn reserve_now(&self, key: &str, estimate: u64) -> Option<Result<Reserved, Self::Error>> {
        let _ = (key, estimate);
        None
    }

    /// [`Store::reserve_now`] for a store that must wait for its answer (Redis): the same
    /// answer in a future. The layer calls it only when `reserve_now` is `None` and the
    /// store [`Store::settles`]. The default answers `None` (the store does not settle).
    fn reserve(
        &self,
        key: &str,
        estimate: u64,
    ) -> impl Future<Output = Option<Result<Reserved, Self::Error>>> + Send {
        let _ = (key, estimate);
        std::future::ready(None)
    }

    /// Settles `reservation` (of `key`) with the `actual` cost: gives back or charges the
    /// difference by the core's rule ([`tollgate::settle`]), an overage charged in full
    /// (a debt later requests wait out). The layer calls it at most once per reservation,
    /// possibly from a destructor: it must not block or panic. A settle the store refuses
    /// leaves the reservation charged at its estimate.
    fn settle(&self, key: &str, reservation: Reservation, actual: u64) {
        let _ = (key, reservation, actual);
    }

    /// Why a check failed, as the store failures metric names it (`tollgate.failure.reason`,
    /// [`Why::as_str`]). Default: unreachable.
    fn failure(&self, error: &Self::Error) -> Why {
        let _ = error;
        Why::Unreachable
    }
}

/// The in-memory store: the core's keyed limiter over a policy's limits, with a clock; or,
/// [`Memory::with_plans`], the core's limiter of plans.
pub struct Memory<C = MonotonicClock> {
    limits: Limits,
    limiter: KeyedLimiter,
    clock: C,
    max_keys: NonZeroUsize,
    plans: Option<PlanLimiter>,
}

impl Memory<MonotonicClock> {
    /// A store over `limits` keeping at most `max_keys` limited keys per limit (idle keys
    /// are evicted first), on the process's monotonic clock.
    pub fn new(limits: Limits, max_keys: NonZeroUsize) -> Result<Self, PolicyError> {
        Memory::with_clock(limits, max_keys, MonotonicClock::default())
    }
}

impl<C: Clock> Memory<C> {
    /// A store over `limits` on `clock`.
    pub fn with_clock(
        limits: Limits,
        max_keys: NonZeroUsize,
        clock: C,
    ) -> Result<Self, PolicyError> {
        let limiter = KeyedLimiter::from_limits(&limits, max_keys);
        Ok(Memory {
            limits,
            limiter,
            clock,
            max_keys,
            plans: None,
        })
    }

    /// The same store deciding by `plans` ([`PlanLimiter`], with at most `max_overrides`
    /// per-key overrides): a request names its plan ([`Store::check_plan_now`]), and a key
    /// keeps what it has spent when its plan changes. The store's own
    /// [`limits`](Store::limits) stay those it was made with (the builder makes it with the
    /// plan of callers without a known key).
    pub fn with_plans(self, plans: Plans, max_overrides: usize) -> Self {
        Memory {
            plans: Some(PlanLimiter::new(plans, self.max_keys, max_overrides)),
            ..self
        }
    }

    /// The limiter of plans ([`Memory::with_plans`]): to set, read or clear a key's
    /// override at run time.
    pub fn plan_limiter(&self) -> Option<&PlanLimiter> {
        self.plans.as_ref()
    }

    /// The keyed limiter (to peek, reset or count keys).
    pub fn limiter(&self) -> &KeyedLimiter {
        &self.limiter
    }

    fn decide(&self, key: &str, tenant: Option<&str>, cost: u64) -> Result<Checked, DecideError> {
        let now = self.clock.now();
        if self.limits.layers().len() == 1 && self.limits.tenant().is_none() {
            let decision = self.limiter.check(key, now, cost)?;
            return Ok(Checked {
                decision,
                each: vec![decision],
                source: Source::Memory,
            });
        }
        let d = self.limiter.check_detailed(key, tenant, now, cost)?;
        Ok(Checked {
            decision: d.decision,
            each: d.each,
            source: Source::Memory,
        })
    }
}

impl<C: Clock> Store for Memory<C> {
    type Error = DecideError;

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn check(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, DecideError>> + Send {
        std::future::ready(self.decide(key, tenant, cost))
    }

    fn check_now(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> Option<Result<Checked, DecideError>> {
        Some(self.decide(key, tenant, cost))
    }

    fn plan_override(&self, key: &str) -> Option<Override> {
        self.plans.as_ref()?.get(key)
    }

    fn check_plan_now(
        &self,
        key: &str,
        plan: &str,
        cost: u64,
    ) -> Option<Result<Checked, DecideError>> {
        let limiter = self.plans.as_ref()?;
        let now = self.clock.now();
        Some(match limiter.check_detailed(key, plan, now, cost) {
            Ok(d) => Ok(Checked {
                decision: d.decision,
                each: d.each,
                source: Source::Memory,
            }),
            Err(PlanCheckError::Decide(e)) => Err(e),
            // The layer names only its own plans.
            Err(PlanCheckError::UnknownPlan { .. }) => return None,
        })
    }

    fn settles(&self) -> bool {
        true
    }

    fn reserve_now(&self, key: &str, estimate: u64) -> Option<Result<Reserved, DecideError>> {
        let now = self.clock.now();
        Some(match self.limiter.reserve(key, now, estimate) {
            Ok((decision, reservation)) => Ok(Reserved {
                checked: Checked {
                    decision,
                    each: vec![decision],
                    source: Source::Memory,
                },
                reservation,
            }),
            Err(ReservationError::Decide(e)) => Err(e),
            // A leaky queue refuses the reserve; the builder refuses it on a route that
            // settles, so this is never reached: decided as a check, the request stays
            // charged as any request is.
            Err(_) => self.decide(key, None, estimate).map(|checked| Reserved {
                checked,
                reservation: None,
            }),
        })
    }

    fn settle(&self, key: &str, reservation: Reservation, actual: u64) {
        // Refused (an actual above the core's bound): the estimate stays charged, as for a
        // reservation never settled.
        drop(
            self.limiter
                .settle(key, reservation, actual, self.clock.now(), Overage::Debt),
        );
    }

    fn release(&self, key: &str, cost: u64) {
        // The only error is a limiter without a concurrency limit, which the layer never
        // releases.
        match &self.plans {
            Some(plans) => drop(plans.release(key, cost)),
            None => drop(self.limiter.release(key, cost)),
        }
    }
}

#[cfg(feature = "redis")]
impl<C> Store for tollgate_redis::RedisLimiter<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Error = tollgate_redis::Error;

    fn limits(&self) -> &Limits {
        tollgate_redis::RedisLimiter::limits(self)
    }

    fn check(
        &self,
        key: &str,
        tenant: Option<&str>,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, tollgate_redis::Error>> + Send {
        let key = key.to_string();
        let tenant = tenant.map(str::to_string);
        let this = self.clone();
        let holds_slots = self.limits().holds_slots();
        async move {
            let o = if holds_slots {
                check_holding(&this, key, tenant, cost).await?
            } else {
                this.check_tenant_uncounted(&key, tenant.as_deref(), cost)
                    .await?
            };
            Ok(checked(o))
        }
    }

    fn settles(&self) -> bool {
        true
    }

    /// `RedisLimiter::reserve`: the estimate charged on Redis's states, exactly across the
    /// fleet. While Redis is unavailable the store's fallback decides and there is nothing
    /// to settle (no reservation).
    fn reserve(
        &self,
        key: &str,
        estimate: u64,
    ) -> impl Future<Output = Option<Result<Reserved, tollgate_redis::Error>>> + Send {
        let key = key.to_string();
        let this = self.clone();
        async move {
            Some(
                this.reserve(&key, estimate)
                    .await
                    .map(|(o, reservation)| Reserved {
                        checked: checked(o),
                        reservation,
                    }),
            )
        }
    }

    /// `RedisLimiter::settle` (one round trip, recorded in Redis so that it charges once)
    /// as a task on the runtime the request was served on. A settle refused or lost (Redis
    /// unavailable: never guessed by the fallback) leaves the estimate charged, as a
    /// reservation never settled does.
    fn settle(&self, key: &str, reservation: Reservation, actual: u64) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let this = self.clone();
            let key = key.to_string();
            runtime.spawn(async move {
                let _ = this
                    .settle(&key, reservation, actual, tollgate::settle::Overage::Debt)
                    .await;
            });
        }
    }

    /// A round trip, so it runs as a task on the runtime the request was served on (and
    /// falls to the store's declared fallback when Redis is unreachable, as a check does).
    /// A release that fails or never runs (no runtime: the server is gone) is not retried:
    /// the count is freed when its lease (`Options::lease`) expires.
    fn release(&self, key: &str, cost: u64) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let this = self.clone();
            let key = key.to_string();
            runtime.spawn(async move {
                let _ = this.release_uncounted(&key, cost).await;
            });
        }
    }

    fn failure(&self, error: &tollgate_redis::Error) -> Why {
        redis_failure(error)
    }
}

/// Why a Redis store's check failed: contention past `Options::retry_for` as a timeout;
/// anything else as unreachable (a Redis that cannot serve is the store's own fallback's to
/// decide, never an error).
#[cfg(feature = "redis")]
fn redis_failure(error: &tollgate_redis::Error) -> Why {
    match error {
        tollgate_redis::Error::Contended { .. } | tollgate_redis::Error::Timeout { .. } => {
            Why::Timeout
        }
        _ => Why::Unreachable,
    }
}

/// Where a Redis store's decision was made, as the layer reports it.
#[cfg(feature = "redis")]
fn redis_source(source: tollgate_redis::Source) -> Source {
    match source {
        tollgate_redis::Source::Redis => Source::Redis,
        tollgate_redis::Source::DenyCache => Source::DenyCache,
        tollgate_redis::Source::Fallback(_) => Source::Fallback,
    }
}

/// The layer's answer of a Redis store's outcome.
#[cfg(feature = "redis")]
fn checked(o: tollgate_redis::Outcome) -> Checked {
    Checked {
        decision: o.decision,
        each: o.each,
        source: redis_source(o.source),
    }
}

/// The Redis store of a policy of plans ([`crate::Builder::redis_plans`]): every decision is
/// `tollgate_redis::RedisPlans`'s (the fleet's exact count per caller, its spend kept across
/// plan changes, overrides stored in Redis and seen by every process at its next check of
/// that caller, the link's timeout, mark-down and declared fallback). Its own
/// [`limits`](Store::limits) are those of the plan of callers without a known key.
#[cfg(feature = "redis")]
pub struct RedisPlanStore<C> {
    plans: tollgate_redis::RedisPlans<C>,
    /// The plan of callers without a known key (a check that names no plan).
    default: String,
    limits: Limits,
}

#[cfg(feature = "redis")]
impl<C> RedisPlanStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store deciding by `plans`, whose own limits are those of the plan `default`.
    /// Errors: no plan of that name (`tollgate_redis::Error::Plan`).
    pub fn new(
        plans: tollgate_redis::RedisPlans<C>,
        default: &str,
    ) -> Result<Self, tollgate_redis::Error> {
        let limits = plans
            .plans()
            .get(default)
            .map_err(|e| tollgate_redis::Error::Plan(Box::new(e)))?
            .clone();
        Ok(RedisPlanStore {
            plans,
            default: default.into(),
            limits,
        })
    }

    /// The limiter of plans: to set, read or clear a caller's override at run time
    /// (`RedisPlans::set`, `get`, `clear`), under the key the layer counts the caller by
    /// (`key:<sha256>`, `custom:<key>`, `sub:<subject>`).
    pub fn plans(&self) -> &tollgate_redis::RedisPlans<C> {
        &self.plans
    }
}

#[cfg(feature = "redis")]
impl<C> Store for RedisPlanStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Error = tollgate_redis::Error;

    fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Decided under the default plan (the layer names a plan for every request of a
    /// policy of plans: [`Store::check_plan`]).
    fn check(
        &self,
        key: &str,
        _tenant: Option<&str>,
        cost: u64,
    ) -> impl Future<Output = Result<Checked, tollgate_redis::Error>> + Send {
        let (this, key, plan) = (self.plans.clone(), key.to_string(), self.default.clone());
        async move {
            let answer = plan_checked(&this, &key, &plan, cost).await?;
            Ok(answer.checked)
        }
    }

    /// `RedisPlans::check`; when the caller's override decided, what it is (a `GET`, only
    /// for callers with an override), so that the layer reports the limits it gives. An
    /// override cleared or changed between the two, or a `GET` that fails, is reported at
    /// the caller's next request, as on the memory store: this one is then reported under
    /// the plan its request named.
    fn check_plan(
        &self,
        key: &str,
        plan: &str,
        cost: u64,
    ) -> impl Future<Output = Option<Result<PlanChecked, tollgate_redis::Error>>> + Send {
        let (this, key, plan) = (self.plans.clone(), key.to_string(), plan.to_string());
        async move { Some(plan_checked(&this, &key, &plan, cost).await) }
    }

    /// Nothing to give back: `RedisPlans` refuses a plan with a concurrency limit, so the
    /// layer never releases for it.
    fn release(&self, key: &str, cost: u64) {
        let _ = (key, cost);
    }

    fn failure(&self, error: &tollgate_redis::Error) -> Why {
        redis_failure(error)
    }
}

/// [`RedisPlanStore::check_plan`]'s answer.
#[cfg(feature = "redis")]
async fn plan_checked<C>(
    plans: &tollgate_redis::RedisPlans<C>,
    key: &str,
    plan: &str,
    cost: u64,
) -> Result<PlanChecked, tollgate_redis::Error>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let o = plans.check(key, plan, cost).await?;
    let overridden = match o.overridden {
        true => plans.get(key).await.ok().flatten(),
        false => None,
    };
    let checked = Checked {
        decision: o.decision,
        each: o.each,
        source: redis_source(o.source),
    };
    Ok(PlanChecked {
        checked,
        overridden,
    })
}

/// A check of a policy with a concurrency limit that gives the slots back if nobody is
/// waiting for its answer any more. The Redis store decides in a task of its own, so a
/// check whose caller stopped waiting (the request's future was dropped: the client went
/// away while Redis answered) still takes its slots, and the layer, which never learns of
/// the admission, could not release them: they would stay taken until the lease expires.
#[cfg(feature = "redis")]
async fn check_holding<C>(
    limiter: &tollgate_redis::RedisLimiter<C>,
    key: String,
    tenant: Option<String>,
    cost: u64,
) -> Result<tollgate_redis::Outcome, tollgate_redis::Error>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return limiter
            .check_tenant_uncounted(&key, tenant.as_deref(), cost)
            .await;
    };
    let (answer, answered) = tokio::sync::oneshot::channel();
    let this = limiter.clone();
    runtime.spawn(async move {
        let outcome = this
            .check_tenant_uncounted(&key, tenant.as_deref(), cost)
            .await;
        // The caller is gone: nothing will hold these slots, so give them back.
        if let Err(Ok(o)) = answer.send(outcome) {
            if o.decision.allowed {
                let _ = this.release_uncounted(&key, cost).await;
            }
        }
    });
    answered.await.unwrap_or_else(|_| {
        Err(tollgate_redis::Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Client,
            "the check's task stopped before answering",
        ))))
    })
}

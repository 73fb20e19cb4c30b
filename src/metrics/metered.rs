//! [`Metered`]: the in-memory keyed limiter reporting the model through the `metrics` facade.

use core::borrow::Borrow;
use core::hash::Hash;

use alloc::borrow::ToOwned;

use super::facade::PolicySeries;
use super::Source;
#[cfg(feature = "acquire")]
use super::WaitResult;
use crate::keyed::KeyedLimiter;
#[cfg(feature = "acquire")]
use crate::keyed::{AcquireError, Wait};
use crate::stack::StackDecision;
use crate::{DecideError, Decision, Nanos};

/// A [`KeyedLimiter`] that records every decision it makes on the
/// [`metrics`](https://docs.rs/metrics) facade (feature `metrics-facade`), under the model's names
/// ([`super::facade`]), labelled with a policy name (and a route, if given; never the key):
///
/// * `tollgate_decisions_total` by outcome (`admitted`, `denied`) and source `store` (the
///   process's memory is the store; this limiter has no deny cache and no fallback), one per
///   [`check`](Self::check), [`check_detailed`](Self::check_detailed) and
///   [`acquire_with`](Self::acquire_with) (its last decision: admitted, or denied when it
///   gave up);
/// * `tollgate_near_limit_total`: admissions that left less than 20% of the limit;
/// * `tollgate_wait_duration_seconds` by result (`admitted`, `gave_up`): how long
///   `acquire_with`'s callers waited, on the limiter's clock;
/// * `tollgate_concurrency_in_use`, for a limiter with a concurrency policy: slots taken by
///   admissions and given back by [`release`](Self::release).
///
/// A request that cannot be decided (a [`DecideError`]: a cost above the capacity) is not a
/// decision and is not counted. The limiter itself is unchanged: the recording is around its
/// calls, and [`limiter`](Self::limiter) gives the unrecorded operations (`peek`, `reset`,
/// `admit`, ...). `Metered` has no `admit`: [`KeyedLimiter::admit`]'s short answer has no
/// `remaining`, which the near-limit count needs; use [`check`](Self::check).
///
/// The series are registered with the recorder installed at the first decision (install it
/// before); without one they are the facade's no-op handles, and a check costs a few
/// instructions more than the limiter's own (PERF.md gives the count).
///
/// ```
/// use std::num::NonZeroUsize;
/// use metrics_util::debugging::{DebugValue, DebuggingRecorder};
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::metrics::Metered;
///
/// let recorder = DebuggingRecorder::new();
/// let snapshotter = recorder.snapshotter();
/// metrics::with_local_recorder(&recorder, || {
///     let limiter = KeyedLimiter::new("fixed-window 5/s".parse().unwrap(), NonZeroUsize::MIN);
///     let limiter = Metered::new(limiter, "login");
///     for _ in 0..7 {
///         limiter.check("alice", 0, 1).unwrap();
///     }
/// });
/// // One snapshot (a snapshot of the debugging recorder drains its counters).
/// let snapshot = snapshotter.snapshot().into_vec();
/// let count = |name: &str, labels: &[(&str, &str)]| {
///     snapshot.iter().find_map(|(key, _, _, value)| {
///         let key = key.key();
///         let found = key.name() == name
///             && key.labels().count() == labels.len() + 1 // and the policy
///             && labels.iter().all(|&(k, v)| key.labels().any(|l| (l.key(), l.value()) == (k, v)));
///         match value {
///             DebugValue::Counter(n) if found => Some(*n),
///             _ => None,
///         }
///     })
/// };
/// let decisions = |outcome| {
///     count("tollgate_decisions_total", &[("tollgate_outcome", outcome), ("tollgate_source", "store")])
/// };
/// assert_eq!(decisions("admitted"), Some(5));
/// assert_eq!(decisions("denied"), Some(2));
/// // The 5th admission left 0 of 5 (under 20%); the 4th left 1, exactly 20%.
/// assert_eq!(count("tollgate_near_limit_total", &[]), Some(1));
/// ```
pub struct Metered<K = alloc::string::String> {
    limiter: KeyedLimiter<K>,
    series: PolicySeries,
    /// Whether the limiter holds a concurrency limit (its admissions take slots).
    slots: bool,
}

impl<K: Hash + Eq + Clone> Metered<K> {
    /// `limiter`, recording under the policy name `policy` (the configuration's name for the
    /// limit, e.g. `login`; never the policy text or a key).
    pub fn new(limiter: KeyedLimiter<K>, policy: &str) -> Self {
        Metered::with_series(limiter, PolicySeries::new(policy, None))
    }

    /// `limiter`, recording under the policy name `policy` on the route `route` (for an
    /// application with routes of its own: the route's pattern, never a path with ids).
    pub fn on_route(limiter: KeyedLimiter<K>, policy: &str, route: &str) -> Self {
        Metered::with_series(limiter, PolicySeries::new(policy, Some(route)))
    }

    fn with_series(limiter: KeyedLimiter<K>, series: PolicySeries) -> Self {
        let slots = limiter.holds_slots();
        Metered {
            limiter,
            series,
            slots,
        }
    }

    /// The limiter, for the operations that are not decisions (`peek`, `reset`, `len`) or
    /// that are not to be recorded.
    pub fn limiter(&self) -> &KeyedLimiter<K> {
        &self.limiter
    }

    /// The limiter, no longer recorded.
    pub fn into_inner(self) -> KeyedLimiter<K> {
        self.limiter
    }

    /// The series it records on.
    pub fn series(&self) -> &PolicySeries {
        &self.series
    }

    /// Counts one decision made for a request of `cost`.
    #[inline]
    fn record(&self, decision: &Decision, cost: u64) {
        self.series.decision(decision, false, Source::Store);
        if self.slots && decision.allowed {
            self.series.slots_taken(cost);
        }
    }

    /// [`KeyedLimiter::check`], recorded.
    #[inline]
    pub fn check<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Result<Decision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The limiter's check inlined here (`check_inlined` says why).
        let decision = self.limiter.check_inlined(key, now, cost)?;
        self.record(&decision, cost);
        Ok(decision)
    }

    /// [`KeyedLimiter::check_detailed`] (a fair share's tenant, every limit's decision),
    /// recorded: one decision, the combined one.
    pub fn check_detailed<Q>(
        &self,
        key: &Q,
        tenant: Option<&str>,
        now: Nanos,
        cost: u64,
    ) -> Result<StackDecision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let decided = self.limiter.check_detailed(key, tenant, now, cost)?;
        self.record(&decided.decision, cost);
        Ok(decided)
    }

    /// [`KeyedLimiter::release`], recorded: the slots given back.
    pub fn release<Q>(&self, key: &Q, cost: u64) -> Result<(), DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.limiter.release(key, cost)?;
        self.series.slots_given_back(cost);
        Ok(())
    }

    /// [`KeyedLimiter::acquire_with`], recorded: the wait (from the call until it returns, on
    /// `clock`, a leaky queue's delay included) by its result, and one decision: the
    /// admitting one, or a denial when the caller gave up.
    #[cfg(feature = "acquire")]
    pub async fn acquire_with<Q, C, S, F>(
        &self,
        key: &Q,
        wait: Wait<'_>,
        clock: C,
        sleep: S,
    ) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Fn() -> Nanos,
        S: FnMut(Nanos) -> F,
        F: core::future::Future<Output = ()>,
    {
        let start = clock();
        let cost = wait.cost;
        let result = self.limiter.acquire_with(key, wait, &clock, sleep).await;
        match &result {
            Ok(decision) => {
                self.series
                    .wait(WaitResult::Admitted, clock().saturating_sub(start));
                self.record(decision, cost);
            }
            Err(AcquireError::Timeout { waited, .. }) => {
                self.series.wait(WaitResult::GaveUp, *waited);
                let denied = Decision {
                    allowed: false,
                    ..Decision::default()
                };
                self.record(&denied, cost);
            }
            Err(AcquireError::Decide(_) | AcquireError::Reservation(_)) => {}
        }
        result
    }

    /// [`KeyedLimiter::acquire`] (tokio's timer, the clock [`crate::keyed::unix_now`]),
    /// recorded as [`Self::acquire_with`].
    #[cfg(feature = "tokio")]
    pub async fn acquire<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Nanos,
    ) -> Result<Decision, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire_with(
            key,
            Wait::new(cost, max_wait),
            crate::keyed::unix_now,
            |d| tokio::time::sleep(core::time::Duration::from_nanos(d)),
        )
        .await
    }
}

impl<K> core::fmt::Debug for Metered<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Metered")
            .field("series", &self.series)
            .finish_non_exhaustive()
    }
}

//! The one entry point every store and binding calls: dispatch on the policy, check the
//! cost, run the algorithm's maths.

#[cfg(feature = "alloc")]
use crate::algorithms::sliding_log::{self, SlidingLogState};
use crate::algorithms::{
    concurrency::{self, ConcurrencyState},
    fixed_window::{self, FixedWindowState},
    gcra::{self, GcraState},
    leaky_bucket::{self, LeakyBucketState},
    leaky_queue::{self, LeakyQueueState},
    sliding_window::{self, SlidingWindowState},
    token_bucket::{self, TokenBucketState},
};
use crate::{Algorithm, DecideError, Decision, Nanos, Policy};

/// The stored state of one key under one policy: plain data, for the store to keep.
///
/// Every variant but the sliding log is `Copy`-sized and allocation-free.
///
/// With `serde`, a state is externally tagged by its algorithm's name, e.g.
/// `{"gcra": {"tat": 1700000000000000000000}}` (128-bit values are JSON integers; an internally
/// tagged form cannot carry them through serde's buffering).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum State {
    /// See [`crate::algorithms::token_bucket`].
    TokenBucket(TokenBucketState),
    /// See [`crate::algorithms::gcra`].
    Gcra(GcraState),
    /// See [`crate::algorithms::sliding_window`].
    SlidingWindow(SlidingWindowState),
    /// See [`crate::algorithms::fixed_window`].
    FixedWindow(FixedWindowState),
    /// See [`crate::algorithms::sliding_log`].
    #[cfg(feature = "alloc")]
    SlidingLog(SlidingLogState),
    /// See [`crate::algorithms::leaky_bucket`].
    LeakyBucket(LeakyBucketState),
    /// See [`crate::algorithms::leaky_queue`].
    LeakyQueue(LeakyQueueState),
    /// See [`crate::algorithms::concurrency`].
    Concurrency(ConcurrencyState),
}

impl State {
    /// The algorithm this state belongs to.
    pub const fn algorithm(&self) -> Algorithm {
        match self {
            State::TokenBucket(_) => Algorithm::TokenBucket,
            State::Gcra(_) => Algorithm::Gcra,
            State::SlidingWindow(_) => Algorithm::SlidingWindow,
            State::FixedWindow(_) => Algorithm::FixedWindow,
            #[cfg(feature = "alloc")]
            State::SlidingLog(_) => Algorithm::SlidingLog,
            State::LeakyBucket(_) => Algorithm::LeakyBucket,
            State::LeakyQueue(_) => Algorithm::LeakyQueue,
            State::Concurrency(_) => Algorithm::Concurrency,
        }
    }
}

/// Unwraps `state` as variant `$v`. Every caller has checked the state's algorithm first
/// (see [`check_state`]), so another variant cannot occur; it would read as fresh.
macro_rules! take {
    ($state:expr, $v:ident) => {
        match $state {
            Some(State::$v(s)) => Some(s),
            _ => None,
        }
    };
}

/// Reports a `state` made by another algorithm than `policy`'s.
#[inline(always)]
fn check_state(policy: &Policy, state: &Option<State>) -> Result<(), DecideError> {
    match state {
        Some(s) if s.algorithm() != policy.algorithm() => Err(mismatch(policy, s)),
        _ => Ok(()),
    }
}

/// Decides one request: `(decision, state to store)`. A returned `None` state means
/// "fresh": the store may delete the key.
///
/// `now` is the caller's clock (nanoseconds since a fixed epoch); `cost` the number of units
/// the request spends (1 for most requests; 0 asks without spending). For a concurrency
/// policy this acquires `cost` slots; see [`release`].
///
/// Errors: [`DecideError::CostExceedsCapacity`] when `cost` is above [`Policy::limit`] (no
/// wait would ever admit it), [`DecideError::StateMismatch`] when `state` was made by another
/// algorithm. A denial is not an error. This function never panics.
pub fn decide(
    policy: &Policy,
    mut state: Option<State>,
    now: Nanos,
    cost: u64,
) -> Result<(Decision, Option<State>), DecideError> {
    let decision = decide_at(policy, &mut state, now, cost)?;
    Ok((decision, state))
}

/// [`decide`] on a state kept in place: the one out-of-line copy of the dispatch that
/// [`decide`], the keyed store and the stacks share. On an error `state` is left untouched.
#[inline(never)]
pub(crate) fn decide_at(
    policy: &Policy,
    state: &mut Option<State>,
    now: Nanos,
    cost: u64,
) -> Result<Decision, DecideError> {
    decide_in_place(policy, state, now, cost)
}

/// The short answer of [`admit`]: what a caller needs to act on a request, and nothing it
/// would have to pay for without reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Admitted, and its cost charged. `delay` is the leaky-bucket queue's wait before the
    /// request may proceed (zero for every other algorithm).
    Allowed {
        /// See [`Decision::delay`].
        delay: Nanos,
    },
    /// Denied, nothing charged; the same request would be admitted after `retry_after`.
    Denied {
        /// See [`Decision::retry_after`].
        retry_after: Nanos,
    },
}

impl Verdict {
    /// Whether the request was admitted.
    pub const fn is_allowed(self) -> bool {
        matches!(self, Verdict::Allowed { .. })
    }
}

impl From<&Decision> for Verdict {
    #[inline]
    fn from(d: &Decision) -> Verdict {
        if d.allowed {
            Verdict::Allowed { delay: d.delay }
        } else {
            Verdict::Denied {
                retry_after: d.retry_after,
            }
        }
    }
}

/// Decides one request in place and answers only admitted-or-not (with the wait): the same
/// maths as [`decide`], for callers that do not report `remaining` or `reset_after`, which
/// then are never computed (this function is inlined into its caller, where the unused
/// parts of the decision are dropped by the compiler).
///
/// `state` is updated in place (`None` when the key is fresh). On an error it is left
/// untouched. Errors as [`decide`].
///
/// ```
/// use tollgate::{admit, Policy, Verdict};
/// let policy: Policy = "gcra 2/s".parse().unwrap();
/// let mut state = None;
/// assert!(admit(&policy, &mut state, 0, 1).unwrap().is_allowed());
/// assert!(admit(&policy, &mut state, 0, 1).unwrap().is_allowed());
/// assert_eq!(
///     admit(&policy, &mut state, 0, 1).unwrap(),
///     Verdict::Denied { retry_after: 500_000_000 }
/// );
/// ```
#[inline(always)]
pub fn admit(
    policy: &Policy,
    state: &mut Option<State>,
    now: Nanos,
    cost: u64,
) -> Result<Verdict, DecideError> {
    decide_in_place(policy, state, now, cost).map(|d| Verdict::from(&d))
}

/// [`decide`] on a state kept in place: the full decision, with `state` updated where it
/// lies (`None` when the key is fresh) instead of moved in and out. For a caller that keeps
/// the state in its own slot and decides in a hot loop: it is inlined into its caller, and
/// copies neither the state nor the decision through memory as [`decide`] does (PERF.md,
/// "Measured reasons in the code", gives how much faster). On an error `state` is left untouched. Errors as
/// [`decide`].
///
/// ```
/// use tollgate::{decide_in_place, Policy};
/// let policy: Policy = "gcra 2/s".parse().unwrap();
/// let mut state = None;
/// let d = decide_in_place(&policy, &mut state, 0, 1).unwrap();
/// assert!(d.allowed && d.remaining == 1 && d.reset_after == 500_000_000);
/// decide_in_place(&policy, &mut state, 0, 1).unwrap();
/// let d = decide_in_place(&policy, &mut state, 0, 1).unwrap();
/// assert!(!d.allowed && d.remaining == 0 && d.retry_after == 500_000_000);
/// assert!(state.is_some());
/// ```
///
/// How: one match on the policy, and in each arm the cost check and the algorithm's own
/// state variant read by value and written back (no second dispatch on the state). The
/// crate's own callers share one out-of-line copy of it; [`admit`] inlines it and
/// drops the fields it does not report.
#[inline(always)]
pub fn decide_in_place(
    policy: &Policy,
    state: &mut Option<State>,
    now: Nanos,
    cost: u64,
) -> Result<Decision, DecideError> {
    /// Runs `$decide` on the state variant `$v` (a `Copy` state), after the cost check.
    macro_rules! arm {
        ($v:ident, $limit:expr, |$cur:ident| $decide:expr) => {{
            if cost > $limit {
                return Err(cost_error(cost, $limit));
            }
            let $cur = match state {
                None => None,
                Some(State::$v(s)) => Some(*s),
                Some(other) => return Err(mismatch(policy, other)),
            };
            let (decision, next) = $decide;
            *state = next.map(State::$v);
            Ok(decision)
        }};
    }
    match policy {
        Policy::TokenBucket(b) => arm!(TokenBucket, b.capacity(), |cur| {
            token_bucket::decide(b, cur, now, cost)
        }),
        Policy::Gcra(b) => arm!(Gcra, b.capacity(), |cur| gcra::decide(b, cur, now, cost)),
        Policy::LeakyBucket(b) => arm!(LeakyBucket, b.capacity(), |cur| {
            leaky_bucket::decide(b, cur, now, cost)
        }),
        Policy::LeakyQueue(b) => arm!(LeakyQueue, b.capacity(), |cur| {
            leaky_queue::decide(b, cur, now, cost)
        }),
        Policy::SlidingWindow(q) => arm!(SlidingWindow, q.limit(), |cur| {
            sliding_window::decide(q, cur, now, cost)
        }),
        Policy::FixedWindow(q) => arm!(FixedWindow, q.limit(), |cur| {
            fixed_window::decide(q, cur, now, cost)
        }),
        Policy::Concurrency(n) => arm!(Concurrency, n.get(), |cur| {
            concurrency::acquire(*n, cur, cost)
        }),
        #[cfg(feature = "alloc")]
        Policy::SlidingLog(q) => {
            // Not `Copy` (a list of instants): moved out and back.
            if cost > q.limit() {
                return Err(cost_error(cost, q.limit()));
            }
            check_state(policy, state)?;
            let (decision, next) =
                sliding_log::decide(q, take!(state.take(), SlidingLog), now, cost);
            *state = next.map(State::SlidingLog);
            Ok(decision)
        }
        #[cfg(not(feature = "alloc"))]
        Policy::SlidingLog(q) => {
            if cost > q.limit() {
                return Err(cost_error(cost, q.limit()));
            }
            check_state(policy, state)?;
            Err(DecideError::SlidingLogNeedsAlloc)
        }
    }
}

/// [`DecideError::CostExceedsCapacity`], built out of line (the error path is cold).
#[cold]
#[inline(never)]
fn cost_error(cost: u64, capacity: u64) -> DecideError {
    DecideError::CostExceedsCapacity { cost, capacity }
}

/// [`DecideError::StateMismatch`], built out of line (the error path is cold).
#[cold]
#[inline(never)]
fn mismatch(policy: &Policy, state: &State) -> DecideError {
    DecideError::StateMismatch {
        policy: policy.algorithm(),
        state: state.algorithm(),
    }
}

/// Releases `cost` slots of a concurrency policy (a request that acquired them finished).
/// The count never goes below zero.
pub fn release(
    policy: &Policy,
    state: Option<State>,
    cost: u64,
) -> Result<Option<State>, DecideError> {
    match policy {
        Policy::Concurrency(_) => {
            check_state(policy, &state)?;
            Ok(concurrency::release(take!(state, Concurrency), cost).map(State::Concurrency))
        }
        _ => Err(DecideError::NotConcurrency {
            policy: policy.algorithm(),
        }),
    }
}

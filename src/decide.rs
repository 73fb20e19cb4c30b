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

/// Unwraps `state` as variant `$v`, or reports a mismatch.
macro_rules! take {
    ($state:expr, $policy:expr, $v:ident) => {
        match $state {
            None => None,
            Some(State::$v(s)) => Some(s),
            Some(other) => {
                return Err(DecideError::StateMismatch {
                    policy: $policy.algorithm(),
                    state: other.algorithm(),
                })
            }
        }
    };
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
    state: Option<State>,
    now: Nanos,
    cost: u64,
) -> Result<(Decision, Option<State>), DecideError> {
    if cost > policy.limit() {
        return Err(DecideError::CostExceedsCapacity {
            cost,
            capacity: policy.limit(),
        });
    }
    Ok(match policy {
        Policy::TokenBucket(b) => {
            let (d, s) = token_bucket::decide(b, take!(state, policy, TokenBucket), now, cost);
            (d, s.map(State::TokenBucket))
        }
        Policy::Gcra(b) => {
            let (d, s) = gcra::decide(b, take!(state, policy, Gcra), now, cost);
            (d, s.map(State::Gcra))
        }
        Policy::LeakyBucket(b) => {
            let (d, s) = leaky_bucket::decide(b, take!(state, policy, LeakyBucket), now, cost);
            (d, s.map(State::LeakyBucket))
        }
        Policy::LeakyQueue(b) => {
            let (d, s) = leaky_queue::decide(b, take!(state, policy, LeakyQueue), now, cost);
            (d, s.map(State::LeakyQueue))
        }
        Policy::SlidingWindow(q) => {
            let (d, s) = sliding_window::decide(q, take!(state, policy, SlidingWindow), now, cost);
            (d, s.map(State::SlidingWindow))
        }
        Policy::FixedWindow(q) => {
            let (d, s) = fixed_window::decide(q, take!(state, policy, FixedWindow), now, cost);
            (d, s.map(State::FixedWindow))
        }
        #[cfg(feature = "alloc")]
        Policy::SlidingLog(q) => {
            let (d, s) = sliding_log::decide(q, take!(state, policy, SlidingLog), now, cost);
            (d, s.map(State::SlidingLog))
        }
        #[cfg(not(feature = "alloc"))]
        Policy::SlidingLog(_) => return Err(DecideError::SlidingLogNeedsAlloc),
        Policy::Concurrency(n) => {
            let (d, s) = concurrency::acquire(*n, take!(state, policy, Concurrency), cost);
            (d, s.map(State::Concurrency))
        }
    })
}

/// Releases `cost` slots of a concurrency policy (a request that acquired them finished).
/// The count never goes below zero.
pub fn release(
    policy: &Policy,
    state: Option<State>,
    cost: u64,
) -> Result<Option<State>, DecideError> {
    match policy {
        Policy::Concurrency(_) => Ok(
            concurrency::release(take!(state, policy, Concurrency), cost).map(State::Concurrency),
        ),
        _ => Err(DecideError::NotConcurrency {
            policy: policy.algorithm(),
        }),
    }
}

//! The storage (and wire) form of a core [`State`].
//!
//! The core's own `State` serde form is internally tagged (`{"algorithm": ..., ...}`), and
//! serde buffers internally tagged enums in a form without 128-bit integers, so states with
//! `u128` fields (token bucket, GCRA, leaky bucket and queue) serialise but do not
//! deserialise from JSON. This externally tagged mirror (`{"gcra": {"tat": ...}}`) reads
//! back exactly; it is what the coordinator stores and sends.

use serde::{Deserialize, Serialize};
use tollgate::algorithms::{
    concurrency::ConcurrencyState, fixed_window::FixedWindowState, gcra::GcraState,
    leaky_bucket::LeakyBucketState, leaky_queue::LeakyQueueState, sliding_log::SlidingLogState,
    sliding_window::SlidingWindowState, token_bucket::TokenBucketState,
};
use tollgate::State;

/// A [`State`], externally tagged by algorithm name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stored {
    /// Token bucket.
    TokenBucket(TokenBucketState),
    /// GCRA.
    Gcra(GcraState),
    /// Sliding window counter.
    SlidingWindow(SlidingWindowState),
    /// Fixed window.
    FixedWindow(FixedWindowState),
    /// Sliding log.
    SlidingLog(SlidingLogState),
    /// Leaky bucket (meter).
    LeakyBucket(LeakyBucketState),
    /// Leaky bucket (queue).
    LeakyQueue(LeakyQueueState),
    /// Concurrency.
    Concurrency(ConcurrencyState),
}

impl From<State> for Stored {
    fn from(s: State) -> Stored {
        match s {
            State::TokenBucket(x) => Stored::TokenBucket(x),
            State::Gcra(x) => Stored::Gcra(x),
            State::SlidingWindow(x) => Stored::SlidingWindow(x),
            State::FixedWindow(x) => Stored::FixedWindow(x),
            State::SlidingLog(x) => Stored::SlidingLog(x),
            State::LeakyBucket(x) => Stored::LeakyBucket(x),
            State::LeakyQueue(x) => Stored::LeakyQueue(x),
            State::Concurrency(x) => Stored::Concurrency(x),
        }
    }
}

impl From<Stored> for State {
    fn from(s: Stored) -> State {
        match s {
            Stored::TokenBucket(x) => State::TokenBucket(x),
            Stored::Gcra(x) => State::Gcra(x),
            Stored::SlidingWindow(x) => State::SlidingWindow(x),
            Stored::FixedWindow(x) => State::FixedWindow(x),
            Stored::SlidingLog(x) => State::SlidingLog(x),
            Stored::LeakyBucket(x) => State::LeakyBucket(x),
            Stored::LeakyQueue(x) => State::LeakyQueue(x),
            Stored::Concurrency(x) => State::Concurrency(x),
        }
    }
}

/// The JSON text a state is stored as.
pub fn to_text(s: &State) -> String {
    serde_json::to_string(&Stored::from(s.clone())).unwrap_or_default()
}

/// Reads a stored state back.
pub fn from_text(text: &str) -> Result<State, serde_json::Error> {
    serde_json::from_str::<Stored>(text).map(State::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Policy;

    #[test]
    fn every_state_round_trips_through_json() {
        for p in [
            "gcra 10/s",
            "10/s",
            "leaky-bucket 10/s",
            "leaky-queue 10/s",
            "sliding-window 10/s",
            "fixed-window 10/s",
            "sliding-log 10/s",
            "concurrency 3",
        ] {
            let policy: Policy = p.parse().unwrap();
            let (_, s) = tollgate::decide(&policy, None, 1_700_000_000_000_000_000, 1).unwrap();
            let s = s.unwrap();
            let text = to_text(&s);
            assert_eq!(from_text(&text).unwrap(), s, "{p}: {text}");
        }
    }
}

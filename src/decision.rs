use crate::{ceil_millis, Nanos};

/// The answer to one request: the same shape in Rust, JSON, JavaScript and WIT.
///
/// Durations are nanoseconds here; bindings present them in whole milliseconds rounded up
/// ([`crate::ceil_millis`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Decision {
    /// Whether the request was admitted (and its cost charged).
    pub allowed: bool,
    /// The most a key can have: bucket capacity, window limit, or maximum in flight.
    pub limit: u64,
    /// How much cost the key could still spend right now, after this decision.
    pub remaining: u64,
    /// Time until the key is back to fresh (a full bucket, empty windows, an empty log or
    /// queue), if nothing more arrives.
    pub reset_after: Nanos,
    /// Time until this same request would be admitted; zero when allowed. For the
    /// concurrency limit it is zero as well: a slot frees when a holder releases it, which
    /// no clock can predict.
    pub retry_after: Nanos,
    /// Leaky-bucket queue only: how long the admitted request waits in the queue before it
    /// may proceed. Zero for every other algorithm and for rejected requests.
    pub delay: Nanos,
}

impl Decision {
    /// `reset_after` in whole milliseconds, rounded up.
    pub const fn reset_after_ms(&self) -> u64 {
        ceil_millis(self.reset_after)
    }
    /// `retry_after` in whole milliseconds, rounded up.
    pub const fn retry_after_ms(&self) -> u64 {
        ceil_millis(self.retry_after)
    }
    /// `delay` in whole milliseconds, rounded up.
    pub const fn delay_ms(&self) -> u64 {
        ceil_millis(self.delay)
    }
}

/// A [`Decision`] with its durations in whole milliseconds (rounded up): the shape every
/// binding and JSON API presents, `{allowed, limit, remaining, resetAfter, retryAfter,
/// delay}` (upstash's names, plus the queue's delay).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "camelCase")
)]
pub struct MillisDecision {
    /// See [`Decision::allowed`].
    pub allowed: bool,
    /// See [`Decision::limit`].
    pub limit: u64,
    /// See [`Decision::remaining`].
    pub remaining: u64,
    /// [`Decision::reset_after`] in ms, rounded up.
    pub reset_after: u64,
    /// [`Decision::retry_after`] in ms, rounded up.
    pub retry_after: u64,
    /// [`Decision::delay`] in ms, rounded up.
    pub delay: u64,
}

impl From<Decision> for MillisDecision {
    fn from(d: Decision) -> MillisDecision {
        MillisDecision {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_after: d.reset_after_ms(),
            retry_after: d.retry_after_ms(),
            delay: d.delay_ms(),
        }
    }
}

//! Concurrency limit: at most `n` requests in flight.
//!
//! A request acquires `cost` slots when `in_flight + cost <= n` and must release them when it
//! completes ([`release`]). By Little's law, `n` slots held for a service time `S` admit at
//! most `n / S` requests per second, and the admitted rate falls by itself when the upstream
//! slows down, which a rate limit would not notice (by Little's law, L = λW:
//! 30 slots held 0.25 s each admit 120 per second).
//!
//! Reserve and settle ([`crate::settle`]): a reserve is an acquire, and a settle is refused
//! ([`crate::ReservationError::NotSettleable`]): slots are not a cost spent over time but a
//! hold, given back whole by [`release`] when the request ends.
//!
//! Pros: protects a slow or struggling upstream; no clock involved. Cons: every acquire
//! needs a release (a crashed holder keeps its slot until the store resets the key); a
//! rejection cannot say when to retry, so `retry_after` is zero.
//!
//! ```
//! use tollgate::algorithms::concurrency;
//! use core::num::NonZeroU64;
//! let n = NonZeroU64::new(2).unwrap();
//! let (a, s) = concurrency::acquire(n, None, 1);
//! let (b, s) = concurrency::acquire(n, s, 1);
//! let (c, s) = concurrency::acquire(n, s, 1);
//! assert!(a.allowed && b.allowed && !c.allowed);
//! let s = concurrency::release(s, 1);
//! let (d, _) = concurrency::acquire(n, s, 1);
//! assert!(d.allowed);
//! ```

use core::num::NonZeroU64;

use crate::Decision;

/// A concurrency limit's state. No state means nothing in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConcurrencyState {
    /// Slots held.
    pub in_flight: u64,
}

/// Acquires `cost` slots if they are free.
#[inline(always)]
pub fn acquire(
    max: NonZeroU64,
    state: Option<ConcurrencyState>,
    cost: u64,
) -> (Decision, Option<ConcurrencyState>) {
    let mut in_flight = state.map_or(0, |s| s.in_flight);
    let allowed = in_flight.saturating_add(cost) <= max.get();
    if allowed {
        in_flight += cost;
    }
    let decision = Decision {
        allowed,
        limit: max.get(),
        remaining: max.get().saturating_sub(in_flight),
        reset_after: 0,
        retry_after: 0,
        delay: 0,
    };
    (
        decision,
        (in_flight > 0).then_some(ConcurrencyState { in_flight }),
    )
}

/// Releases `cost` slots. Releasing more than is held empties the state; the count never
/// goes below zero.
#[inline]
pub fn release(state: Option<ConcurrencyState>, cost: u64) -> Option<ConcurrencyState> {
    let in_flight = state.map_or(0, |s| s.in_flight).saturating_sub(cost);
    (in_flight > 0).then_some(ConcurrencyState { in_flight })
}

/// The slots `state` holds (see [`crate::carry`]): what a concurrency limit has "spent".
pub fn spent(state: Option<ConcurrencyState>) -> u64 {
    state.map_or(0, |s| s.in_flight)
}

/// The state holding `in_flight` slots (see [`crate::carry`]), above the new maximum if so:
/// the requests in flight are still in flight, and new ones wait for their releases.
///
/// ```
/// use tollgate::algorithms::concurrency::{acquire, with_in_flight};
/// use core::num::NonZeroU64;
/// let s = with_in_flight(5);
/// assert!(!acquire(NonZeroU64::new(3).unwrap(), s, 1).0.allowed);
/// ```
pub fn with_in_flight(in_flight: u64) -> Option<ConcurrencyState> {
    (in_flight > 0).then_some(ConcurrencyState { in_flight })
}

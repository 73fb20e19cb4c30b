//! Leaky bucket as a queue (a shaper).
//!
//! Requests join a queue of `capacity` slots that drains at `limit/window`, one request every
//! `window/limit`. An admitted request leaves at `max(now, last_departure) + cost *
//! window/limit` and its [`Decision::delay`] is that instant minus `now`: the first request
//! into an empty queue leaves one interval after it arrives. Requests still waiting at `now`
//! occupy the queue; a request that does not fit is rejected. The upstream never sees more
//! than the drain rate, whatever the bursts; the price is latency, at most
//! `capacity * window/limit`.
//!
//! Reserve and settle ([`crate::settle`]) are refused
//! ([`crate::ReservationError::NotSettleable`]): a queued request's departure, and with it
//! the departure of every request queued behind it, is fixed by its cost when it joins;
//! settling another cost later would either move requests already told when to go, or
//! leave the queue's tail wrong.
//!
//! For example: 9 requests at once, 6 slots, one every 0.5 s: 6 leave at 0.5, 1.0,
//! ..., 3.0 s and 3 are rejected.
//!
//! ```
//! use tollgate::algorithms::leaky_queue;
//! use tollgate::{Bucket, Quota};
//! use core::num::{NonZeroU32, NonZeroU64};
//! let queue = Bucket::new(Quota::per_second(NonZeroU32::new(2).unwrap()))
//!     .with_capacity(NonZeroU64::new(6).unwrap()).unwrap();
//! let mut state = None;
//! let mut delays = Vec::new();
//! let mut rejected = 0;
//! for _ in 0..9 {
//!     let (d, s) = leaky_queue::decide(&queue, state, 0, 1);
//!     state = s;
//!     if d.allowed { delays.push(d.delay / 1_000_000) } else { rejected += 1 }
//! }
//! assert_eq!(delays, [500, 1000, 1500, 2000, 2500, 3000]);
//! assert_eq!(rejected, 3);
//! ```

use crate::math::{ceil_div, mul_wide};
use crate::{Bucket, Decision, Nanos};

/// A leaky queue's state: when the last queued request leaves. Empty when there is no state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LeakyQueueState {
    /// Departure of the last queued request, in nanoseconds times `limit`.
    pub last_departure: u128,
}

/// Decides one request of `cost` at `now`: admitted with a delay, or rejected.
#[inline(always)]
pub fn decide(
    bucket: &Bucket,
    state: Option<LeakyQueueState>,
    now: Nanos,
    cost: u64,
) -> (Decision, Option<LeakyQueueState>) {
    let limit = bucket.rate().limit();
    let interval = bucket.rate().window();
    let (by_limit, by_interval) = (bucket.rate().by_limit(), bucket.rate().by_window());
    let slots = mul_wide(bucket.capacity(), interval);
    let now_s = mul_wide(now, limit);
    let tail = state.map_or(now_s, |s| s.last_departure.max(now_s));
    let backlog = tail - now_s;
    let add = mul_wide(cost, interval);
    let allowed = backlog.saturating_add(add) <= slots;
    let (tail, delay, retry_after) = if allowed && cost > 0 {
        (
            tail.saturating_add(add),
            by_limit.to_nanos(backlog.saturating_add(add)),
            0,
        )
    } else if allowed {
        (tail, 0, 0)
    } else {
        (
            tail,
            0,
            by_limit.to_nanos(backlog.saturating_add(add) - slots),
        )
    };
    let waiting = tail - now_s;
    let decision = Decision {
        allowed,
        limit: bucket.capacity(),
        remaining: (bucket.capacity() as u128).saturating_sub(by_interval.ceil_div(waiting)) as u64,
        reset_after: by_limit.to_nanos(waiting),
        retry_after,
        delay,
    };
    (
        decision,
        (waiting > 0).then_some(LeakyQueueState {
            last_departure: tail,
        }),
    )
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): the backlog still waiting, in
/// requests of cost 1, rounded up (above the capacity when a carry left a debt).
pub fn spent(bucket: &Bucket, state: Option<LeakyQueueState>, now: Nanos) -> u64 {
    let Some(s) = state else { return 0 };
    let backlog = s
        .last_departure
        .saturating_sub(mul_wide(now, bucket.rate().limit()));
    u64::try_from(ceil_div(backlog, bucket.rate().window() as u128)).unwrap_or(u64::MAX)
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): a backlog of `spent`
/// that drains at the rate; a backlog above the capacity rejects until it has drained below.
/// `None` for nothing.
///
/// ```
/// use tollgate::algorithms::leaky_queue::{spent, with_spent};
/// use tollgate::{Bucket, Quota};
/// use core::num::NonZeroU32;
/// let q = Bucket::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
/// assert_eq!(spent(&q, with_spent(&q, 5, 0), 1_000_000_000), 3); // 2 left in 1 s
/// ```
pub fn with_spent(bucket: &Bucket, spent: u64, now: Nanos) -> Option<LeakyQueueState> {
    (spent > 0).then(|| LeakyQueueState {
        last_departure: mul_wide(now, bucket.rate().limit())
            .saturating_add(mul_wide(spent, bucket.rate().window())),
    })
}

//! GCRA, the generic cell rate algorithm: the token bucket's policing in one timestamp.
//!
//! The state is the theoretical arrival time (TAT): the instant at which the bucket would be
//! full again. Each admitted unit of cost pushes it `window/limit` further; a request is
//! admitted when the pushed TAT lies at most `burst * window/limit` after `now`. For the same
//! capacity and rate it admits exactly the requests the token bucket admits (a property
//! test checks it), with one value of state instead of two.
//!
//! Pros: smallest state; no refill arithmetic. Cons: the state is less readable than a
//! token count. Time that goes backwards makes it stricter, never looser: the TAT is
//! compared with an earlier `now`, as if less time had passed since the bucket was drained.
//!
//! Exactness: the TAT is kept in "scaled" time, nanoseconds times `limit`, in which one
//! emission interval is exactly `window` nanoseconds; that is why the state is a `u128`
//! rather than a rounded `u64` (which would drift by up to 1 ns per request).
//!
//! # Settle (reserve an estimate, settle the real cost: [`crate::settle`])
//!
//! * **Refund** `r`: `tat = max(now, tat - r*T)`: the TAT that charging `actual` at the
//!   reserve would have left (`max(tat0, t0) + e*T - r*T = max(tat0, t0) + a*T`), never
//!   before `now` (a full bucket), never earlier by more than `r*T`. No window: it always
//!   counts.
//! * **Overage** `x`: by default `tat = max(tat, now) + x*T`, beyond the tolerance if need be
//!   (a debt: decisions are denied, and their `retry_after` says when it is paid off);
//!   [`crate::Overage::UpToLimit`] charges only the whole units still within the tolerance.
//!   A debt deeper than [`crate::MAX_COUNT`] units past the tolerance is not charged beyond it
//!   (reported unpaid).
//!
//! ```
//! use tollgate::algorithms::gcra;
//! use tollgate::settle::{Charge, Overage};
//! use tollgate::{Bucket, Quota};
//! use core::num::NonZeroU32;
//! // 10 per second, burst 10: T = 100 ms. Reserve 8 at t = 0: TAT = 800 ms.
//! let bucket = Bucket::new(Quota::per_second(NonZeroU32::new(10).unwrap()));
//! let (_, s) = gcra::decide(&bucket, None, 0, 8);
//! let charge = Charge { cost: 8, at: 0 };
//! // Settled at 200 ms for 3: TAT = max(200, 800 - 500) = 300 ms: 9 left at 200 ms.
//! let (done, s) = gcra::settle(&bucket, s, charge, 3, 200_000_000, Overage::Debt);
//! assert_eq!(done.refunded, 5);
//! assert_eq!(gcra::decide(&bucket, s, 200_000_000, 0).0.remaining, 9);
//! // Settled for 15 instead: TAT = 800 + 700 = 1500 ms, 500 ms past the tolerance (1 s).
//! let (_, s) = gcra::decide(&bucket, None, 0, 8);
//! let (done, s) = gcra::settle(&bucket, s, charge, 15, 200_000_000, Overage::Debt);
//! assert_eq!(done.charged, 7);
//! let (d, _) = gcra::decide(&bucket, s, 200_000_000, 1);
//! assert_eq!(d.retry_after, 400_000_000); // at 600 ms, TAT 1500 + 100 is within 1 s
//! ```
//!
//! ```
//! use tollgate::algorithms::gcra;
//! use tollgate::{Bucket, Quota};
//! use core::num::NonZeroU32;
//! let bucket = Bucket::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
//! let (a, s) = gcra::decide(&bucket, None, 0, 1);
//! let (b, s) = gcra::decide(&bucket, s, 0, 1);
//! let (c, _) = gcra::decide(&bucket, s, 0, 1);
//! assert!(a.allowed && b.allowed && !c.allowed);
//! assert_eq!(c.retry_after, 500_000_000); // one emission interval
//! ```

use crate::charge::{Charge, Overage, Settled};
use crate::math::{ceil_div, mul_wide};
use crate::{Bucket, Decision, Nanos, MAX_COUNT};

/// GCRA state: the theoretical arrival time, in nanoseconds times `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GcraState {
    /// Theoretical arrival time, scaled by the policy's limit.
    pub tat: u128,
}

/// Decides one request of `cost` at `now`.
#[inline(always)]
pub fn decide(
    bucket: &Bucket,
    state: Option<GcraState>,
    now: Nanos,
    cost: u64,
) -> (Decision, Option<GcraState>) {
    let limit = bucket.rate().limit();
    let interval = bucket.rate().window();
    let (by_limit, by_interval) = (bucket.rate().by_limit(), bucket.rate().by_window());
    let capacity = bucket.capacity();
    let tolerance = mul_wide(capacity, interval);
    let charge = mul_wide(cost, interval);
    let now_s = mul_wide(now, limit);
    // Admitted iff the TAT pushed by `charge` stays within `tolerance` of now:
    // `max(tat, now) + charge - now <= tolerance`, that is `tat <= now + slack` with
    // `slack = (capacity - cost) * interval` (which does not depend on the state, so the
    // state's path is one comparison). Bounds: `now_s < 2^104` and `tolerance < 2^95`
    // (counts are at most 2^40, windows under 2^55 ns), so the sums below cannot overflow;
    // a stored `tat` beyond them (hostile input) is denied and never added to.
    let slack = mul_wide(capacity.saturating_sub(cost), interval);
    let tat = state.map_or(0, |s| s.tat);
    let allowed = cost <= capacity && tat <= now_s + slack;
    let base = tat.max(now_s);
    let tat = if allowed { base + charge } else { base };
    let used = tat - now_s;
    let decision = Decision {
        allowed,
        limit: capacity,
        remaining: by_interval.div(tolerance.saturating_sub(used)) as u64,
        reset_after: by_limit.to_nanos(used),
        retry_after: if allowed {
            0
        } else {
            by_limit.to_nanos((base.saturating_add(charge) - now_s).saturating_sub(tolerance))
        },
        delay: 0,
    };
    (decision, (used > 0).then_some(GcraState { tat }))
}

/// Settles a reservation that charged `charge.cost` to this bucket: moves the TAT back by
/// the refund (never before `now`) or on by the overage (see the module docs). Returns what
/// was done and the state to store.
pub fn settle(
    bucket: &Bucket,
    state: Option<GcraState>,
    charge: Charge,
    actual: u64,
    now: Nanos,
    overage: Overage,
) -> (Settled, Option<GcraState>) {
    let interval = bucket.rate().window();
    let by_interval = bucket.rate().by_window();
    let now_s = mul_wide(now, bucket.rate().limit());
    let tat = state.map_or(now_s, |s| s.tat.max(now_s));
    let used = tat - now_s;
    let (settled, tat) = if actual <= charge.cost {
        let back = mul_wide(charge.cost - actual, interval).min(used);
        (Settled::refund(by_interval.div(back) as u64), tat - back)
    } else {
        let tolerance = mul_wide(bucket.capacity(), interval);
        let room = by_interval.div(tolerance.saturating_sub(used)) as u64;
        let deepest = tolerance + mul_wide(MAX_COUNT, interval);
        let most = by_interval.div(deepest.saturating_sub(used)) as u64;
        let settled = Settled::overage(actual - charge.cost, room, most, overage);
        (settled, tat + mul_wide(settled.charged, interval))
    };
    (settled, (tat > now_s).then_some(GcraState { tat }))
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): the TAT's lead over `now` in
/// emission intervals, rounded up (above the capacity when a carry left a debt).
pub fn spent(bucket: &Bucket, state: Option<GcraState>, now: Nanos) -> u64 {
    let Some(s) = state else { return 0 };
    let used = s.tat.saturating_sub(mul_wide(now, bucket.rate().limit()));
    u64::try_from(ceil_div(used, bucket.rate().window() as u128)).unwrap_or(u64::MAX)
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): the TAT `spent`
/// emission intervals after `now`. A spend above the capacity needs nothing special: the
/// TAT lies beyond the tolerance and is denied until time catches up. `None` for nothing.
///
/// ```
/// use tollgate::algorithms::gcra::{decide, spent, with_spent};
/// use tollgate::{Bucket, Quota};
/// use core::num::NonZeroU32;
/// let free = Bucket::new(Quota::per_minute(NonZeroU32::new(100).unwrap()));
/// let s = with_spent(&free, 250, 0);
/// assert_eq!(spent(&free, s, 0), 250);
/// // 150 owed at 100 per minute: the next request passes 90.6 s later (one interval more).
/// assert_eq!(decide(&free, s, 0, 1).0.retry_after, 90_600_000_000);
/// ```
pub fn with_spent(bucket: &Bucket, spent: u64, now: Nanos) -> Option<GcraState> {
    (spent > 0).then(|| GcraState {
        tat: mul_wide(now, bucket.rate().limit())
            .saturating_add(mul_wide(spent, bucket.rate().window())),
    })
}

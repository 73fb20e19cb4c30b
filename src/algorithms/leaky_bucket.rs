//! Leaky bucket as a meter (a policer).
//!
//! The bucket keeps only a level: each admitted request adds its cost, and the level drains
//! at `limit/window`. A request is admitted when `level + cost <= capacity`; nothing waits.
//! It is the token bucket's mirror image (`tokens = capacity - level`): the two admit exactly
//! the same requests, which a property test checks. Prefer it when "how full is the
//! bucket" reads more naturally than "how many tokens are left".
//!
//! Time that goes backwards counts as no time passing.
//!
//! # Settle (reserve an estimate, settle the real cost: [`crate::settle`])
//!
//! * **Refund** `r`: after leaking to `now`, `level = max(0, level - r)`: the level that
//!   charging `actual` at the reserve would have left (the token bucket's rule, mirrored),
//!   never below empty, never lower by more than `r`. No window: it always counts.
//! * **Overage** `x`: by default `level += x`, above the capacity if need be (a debt: the
//!   level leaks below the capacity before anything more is admitted, and `retry_after` says
//!   when); [`crate::Overage::UpToLimit`] adds only the whole units below the capacity. A
//!   level deeper than [`crate::MAX_COUNT`] past the capacity is not charged (reported unpaid).
//!
//! ```
//! use tollgate::algorithms::leaky_bucket;
//! use tollgate::settle::{Charge, Overage};
//! use tollgate::{Bucket, Quota};
//! use core::num::NonZeroU32;
//! // Capacity 10, leaking 10 per second. Reserve 8 at t = 0; at 100 ms the level is 7.
//! let bucket = Bucket::new(Quota::per_second(NonZeroU32::new(10).unwrap()));
//! let (_, s) = leaky_bucket::decide(&bucket, None, 0, 8);
//! let charge = Charge { cost: 8, at: 0 };
//! // It cost 3: the level drops by 5, to 2: 8 left.
//! let (done, s) = leaky_bucket::settle(&bucket, s, charge, 3, 100_000_000, Overage::Debt);
//! assert_eq!(done.refunded, 5);
//! assert_eq!(leaky_bucket::decide(&bucket, s, 100_000_000, 0).0.remaining, 8);
//! // It cost 15: the level rises by 7, to 14, 4 over the capacity.
//! let (_, s) = leaky_bucket::decide(&bucket, None, 0, 8);
//! let (done, s) = leaky_bucket::settle(&bucket, s, charge, 15, 100_000_000, Overage::Debt);
//! assert_eq!(done.charged, 7);
//! let (d, _) = leaky_bucket::decide(&bucket, s, 100_000_000, 1);
//! assert_eq!(d.retry_after, 500_000_000); // 14 + 1 - 10 = 5 units to leak
//! ```
//!
//! ```
//! use tollgate::algorithms::leaky_bucket;
//! use tollgate::{Bucket, Quota};
//! use core::num::NonZeroU32;
//! let bucket = Bucket::new(Quota::per_second(NonZeroU32::new(1).unwrap()));
//! let (a, s) = leaky_bucket::decide(&bucket, None, 0, 1);
//! let (b, _) = leaky_bucket::decide(&bucket, s, 400_000_000, 1);
//! assert!(a.allowed && !b.allowed);
//! assert_eq!(b.retry_after, 600_000_000);
//! ```

use crate::charge::{Charge, Overage, Settled};
use crate::math::{ceil_div, mul_wide};
use crate::{Bucket, Decision, Nanos, MAX_COUNT};

/// A leaky bucket meter's state. The bucket is empty when there is no state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LeakyBucketState {
    /// The level times the window length (ns), so leaks are exact.
    pub level: u128,
    /// The instant of the last leak.
    pub last: Nanos,
}

/// Decides one request of `cost` at `now`.
#[inline(always)]
pub fn decide(
    bucket: &Bucket,
    state: Option<LeakyBucketState>,
    now: Nanos,
    cost: u64,
) -> (Decision, Option<LeakyBucketState>) {
    let limit = bucket.rate().limit();
    let window = bucket.rate().window();
    let (by_limit, by_window) = (bucket.rate().by_limit(), bucket.rate().by_window());
    let capacity = mul_wide(bucket.capacity(), window);
    let (mut level, last) = match state {
        None => (0, now),
        Some(s) => {
            let leaked = mul_wide(now.saturating_sub(s.last), limit);
            (s.level.saturating_sub(leaked), s.last.max(now))
        }
    };
    let add = mul_wide(cost, window);
    let allowed = level.saturating_add(add) <= capacity;
    let retry_after = if allowed {
        level += add;
        0
    } else {
        by_limit.to_nanos(level.saturating_add(add) - capacity)
    };
    let decision = Decision {
        allowed,
        limit: bucket.capacity(),
        remaining: by_window.div(capacity.saturating_sub(level)) as u64,
        reset_after: by_limit.to_nanos(level),
        retry_after,
        delay: 0,
    };
    (
        decision,
        (level > 0).then_some(LeakyBucketState { level, last }),
    )
}

/// Settles a reservation that charged `charge.cost` to this bucket: lowers the level by the
/// refund (never below empty) or raises it by the overage (see the module docs). Returns
/// what was done and the state to store.
pub fn settle(
    bucket: &Bucket,
    state: Option<LeakyBucketState>,
    charge: Charge,
    actual: u64,
    now: Nanos,
    overage: Overage,
) -> (Settled, Option<LeakyBucketState>) {
    let window = bucket.rate().window();
    let by_window = bucket.rate().by_window();
    let (level, last) = match state {
        None => (0, now),
        Some(s) => {
            let leaked = mul_wide(now.saturating_sub(s.last), bucket.rate().limit());
            (s.level.saturating_sub(leaked), s.last.max(now))
        }
    };
    let (settled, level) = if actual <= charge.cost {
        let back = mul_wide(charge.cost - actual, window).min(level);
        (Settled::refund(by_window.div(back) as u64), level - back)
    } else {
        let capacity = mul_wide(bucket.capacity(), window);
        let room = by_window.div(capacity.saturating_sub(level)) as u64;
        let deepest = capacity + mul_wide(MAX_COUNT, window);
        let most = by_window.div(deepest.saturating_sub(level)) as u64;
        let settled = Settled::overage(actual - charge.cost, room, most, overage);
        (settled, level + mul_wide(settled.charged, window))
    };
    (
        settled,
        (level > 0).then_some(LeakyBucketState { level, last }),
    )
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): the level after leaking,
/// rounded up (above the capacity when a carry left a debt).
pub fn spent(bucket: &Bucket, state: Option<LeakyBucketState>, now: Nanos) -> u64 {
    let Some(s) = state else { return 0 };
    let leaked = mul_wide(now.saturating_sub(s.last), bucket.rate().limit());
    let level = s.level.saturating_sub(leaked);
    u64::try_from(ceil_div(level, bucket.rate().window() as u128)).unwrap_or(u64::MAX)
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): a level of `spent`,
/// above the capacity for a debt (denied until it has leaked below). `None` for nothing.
///
/// ```
/// use tollgate::algorithms::leaky_bucket::{spent, with_spent};
/// use tollgate::{Bucket, Quota};
/// use core::num::NonZeroU32;
/// let free = Bucket::new(Quota::per_minute(NonZeroU32::new(100).unwrap()));
/// let s = with_spent(&free, 250, 0);
/// assert_eq!(spent(&free, s, 30_000_000_000), 200); // 50 leaked in 30 s
/// ```
pub fn with_spent(bucket: &Bucket, spent: u64, now: Nanos) -> Option<LeakyBucketState> {
    (spent > 0).then(|| LeakyBucketState {
        level: mul_wide(spent, bucket.rate().window()),
        last: now,
    })
}

//! Lazy-refill token bucket.
//!
//! The bucket holds up to `B` tokens (the capacity, `burst`) and gains `r = limit/window`
//! tokens per unit of time, computed lazily from the time since the last refill:
//! `tokens = min(B, tokens + r * elapsed)`. A request of cost `c` is admitted when
//! `tokens >= c`, and then pays `c`; there is never a partial payment nor a negative balance.
//! In any interval of length `T` it admits at most `B + r*T`.
//!
//! Pros: burst and sustained rate are two separate knobs; idle clients build up credit.
//! Cons: a full bucket lets `B` through at once; pick `r` with `B + r*T <= N` when a peer
//! allows at most `N` per `T` (for example, at most 100 per 10 s with a burst of 40
//! gives `r = 6/s`).
//!
//! Exactness: credit is kept in "token-windows" (`tokens * window`), so that `elapsed *
//! limit` refills it exactly; no rounding happens until a duration is reported (rounded up).
//!
//! Time that goes backwards counts as no time passing (the last refill instant never moves
//! back).
//!
//! ```
//! use tollgate::algorithms::token_bucket;
//! use tollgate::{Bucket, Quota};
//! use core::num::{NonZeroU32, NonZeroU64};
//! // 6 per second, burst 40: at most 40 + 6*10 = 100 in any 10 s.
//! let bucket = Bucket::new(Quota::per_second(NonZeroU32::new(6).unwrap()))
//!     .with_capacity(NonZeroU64::new(40).unwrap()).unwrap();
//! let mut state = None;
//! let mut admitted = 0;
//! for ms in 0..10_000u64 {                       // one request per millisecond for 10 s
//!     let (d, s) = token_bucket::decide(&bucket, state, ms * 1_000_000, 1);
//!     state = s;
//!     admitted += d.allowed as u32;
//! }
//! assert_eq!(admitted, 40 + 6 * 10 - 1); // the last refill lands exactly at t = 10 s
//! ```

use crate::math::{ceil_div, mul_wide};
use crate::{Bucket, Decision, Nanos};

/// A token bucket's state. The bucket is full when there is no state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TokenBucketState {
    /// Tokens times the window length (ns), so refills are exact.
    pub credit: u128,
    /// The instant of the last refill.
    pub last: Nanos,
}

/// Decides one request of `cost` at `now`.
#[inline(always)]
pub fn decide(
    bucket: &Bucket,
    state: Option<TokenBucketState>,
    now: Nanos,
    cost: u64,
) -> (Decision, Option<TokenBucketState>) {
    let limit = bucket.rate().limit();
    let window = bucket.rate().window();
    let (by_limit, by_window) = (bucket.rate().by_limit(), bucket.rate().by_window());
    let full = mul_wide(bucket.capacity(), window);
    let (mut credit, last) = match state {
        None => (full, now),
        Some(s) => {
            let elapsed = now.saturating_sub(s.last);
            (
                full.min(s.credit.saturating_add(mul_wide(elapsed, limit))),
                s.last.max(now),
            )
        }
    };
    let need = mul_wide(cost, window);
    let allowed = credit >= need;
    let retry_after = if allowed {
        credit -= need;
        0
    } else {
        by_limit.to_nanos(need - credit)
    };
    let decision = Decision {
        allowed,
        limit: bucket.capacity(),
        remaining: by_window.div(credit) as u64,
        reset_after: by_limit.to_nanos(full - credit),
        retry_after,
        delay: 0,
    };
    let state = (credit < full).then_some(TokenBucketState { credit, last });
    (decision, state)
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): `capacity - tokens`, rounded
/// up, plus the debt a carry left as a refill instant after `now` (the time until then, at
/// the refill rate). Zero for a full bucket.
pub fn spent(bucket: &Bucket, state: Option<TokenBucketState>, now: Nanos) -> u64 {
    let Some(s) = state else { return 0 };
    let (limit, window) = (bucket.rate().limit(), bucket.rate().window());
    let full = mul_wide(bucket.capacity(), window);
    let credit = full.min(
        s.credit
            .saturating_add(mul_wide(now.saturating_sub(s.last), limit)),
    );
    let debt = mul_wide(s.last.saturating_sub(now), limit);
    u64::try_from(ceil_div(full - credit + debt, window as u128)).unwrap_or(u64::MAX)
}

/// The state of a bucket that has spent `spent` at `now` (see [`crate::carry`]): `capacity -
/// spent` tokens; a spend above the capacity is a debt, kept as an empty bucket whose refill
/// starts only once the debt has been repaid at the refill rate (the last refill instant
/// moved past `now`, as after a clock step back). `None` for nothing spent.
///
/// While the debt lasts, a decision's `retry_after` and `reset_after` leave the time still
/// owed out, as they do after a clock step back (the shared vector `token-bucket.json` pins
/// that report): a request retried then is denied again with the rest of the wait. Admission
/// is exact; for exact waits too, carry into GCRA, whose TAT holds a debt as it is.
///
/// ```
/// use tollgate::algorithms::token_bucket::{spent, with_spent};
/// use tollgate::{Bucket, Quota};
/// use core::num::NonZeroU32;
/// let free = Bucket::new(Quota::per_minute(NonZeroU32::new(100).unwrap()));
/// let s = with_spent(&free, 40, 0);
/// assert_eq!(spent(&free, s, 0), 40);
/// // 250 spent under a plan of 100: 150 owed, repaid at 100 per minute (90 s).
/// let s = with_spent(&free, 250, 0).unwrap();
/// assert_eq!((s.credit, s.last), (0, 90_000_000_000));
/// assert_eq!(spent(&free, Some(s), 30_000_000_000), 200);
/// ```
pub fn with_spent(bucket: &Bucket, spent: u64, now: Nanos) -> Option<TokenBucketState> {
    let (limit, window) = (bucket.rate().limit(), bucket.rate().window());
    let capacity = bucket.capacity();
    if spent == 0 {
        None
    } else if spent <= capacity {
        Some(TokenBucketState {
            credit: mul_wide(capacity - spent, window),
            last: now,
        })
    } else {
        let wait = ceil_div(mul_wide(spent - capacity, window), limit as u128);
        let wait = u64::try_from(wait).unwrap_or(u64::MAX);
        Some(TokenBucketState {
            credit: 0,
            last: now.saturating_add(wait),
        })
    }
}

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

use crate::math::mul_wide;
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

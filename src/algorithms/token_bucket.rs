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
//! back); the waits a decision reports are counted from the caller's `now`, so they include
//! the time until that stored instant (as GCRA's do).
//!
//! # Settle (reserve an estimate, settle the real cost: [`crate::settle`])
//!
//! The balance at `now` is `credit` refilled to `now`, or, while the last refill instant is
//! ahead of `now` (a debt, or time that went back), `credit` minus the refill still to come
//! before that instant: it may be negative.
//!
//! * **Refund** `r = estimate - actual`: the balance gains `r` tokens, capped at full. This
//!   is the very state that charging `actual` at the reserve would have left: with `c0` the
//!   credit before the reserve and `g` the refill since, `min(B, min(B, c0 - e + g) + (e - a))
//!   = min(B, c0 - a + g)` (both sides are `B` when the bucket refilled to full). A refund
//!   never lifts a bucket above full, nor by more than `r`. No window: it always counts.
//! * **Overage** `x = actual - estimate`: by default ([`crate::Overage::Debt`]) the balance
//!   loses `x` tokens even below zero. A negative balance is stored as credit `k*limit - debt`
//!   (in token-windows) with the last refill `k = ceil(debt / limit)` ns ahead of `now`: a
//!   decision before then refills nothing and is denied, and its `retry_after` counts the
//!   time to pay the debt off. Exact: the debt is repaid by the refill, to the nanosecond.
//!   ([`crate::Overage::UpToLimit`] charges only the whole tokens left and reports the rest.)
//!   A debt deeper than [`crate::MAX_COUNT`] tokens is not charged beyond it (reported
//!   unpaid), so every product stays within 128 bits.
//!
//! ```
//! use tollgate::algorithms::token_bucket;
//! use tollgate::settle::{Charge, Overage};
//! use tollgate::{Bucket, Quota};
//! use core::num::NonZeroU32;
//! // 10 per second, capacity 10. Reserve 8 at t = 0: 2 left.
//! let bucket = Bucket::new(Quota::per_second(NonZeroU32::new(10).unwrap()));
//! let (_, s) = token_bucket::decide(&bucket, None, 0, 8);
//! let charge = Charge { cost: 8, at: 0 };
//! // The request really cost 3: 5 come back, 7 left, as if 3 had been charged.
//! let (done, s) = token_bucket::settle(&bucket, s, charge, 3, 0, Overage::Debt);
//! assert_eq!(done.refunded, 5);
//! assert_eq!(token_bucket::decide(&bucket, s, 0, 0).0.remaining, 7);
//! // Had it cost 15 instead: 7 more are charged, 5 below zero.
//! let (_, s) = token_bucket::decide(&bucket, None, 0, 8);
//! let (done, s) = token_bucket::settle(&bucket, s, charge, 15, 0, Overage::Debt);
//! assert_eq!(done.charged, 7);
//! // The debt of 5 takes 500 ms to refill, and one more token 100 ms.
//! let (d, _) = token_bucket::decide(&bucket, s, 0, 1);
//! assert!(!d.allowed);
//! assert_eq!(d.retry_after, 600_000_000);
//! ```
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

use crate::charge::{Charge, Overage, Settled};
use crate::math::{ceil_div, mul_wide, sat_nanos};
use crate::{Bucket, Decision, Nanos, MAX_COUNT};

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
    // The refill instant ahead of `now` (a debt, or time that went back): no refill until
    // then, and every wait reported counts it.
    let ahead = last - now;
    let need = mul_wide(cost, window);
    let allowed = credit >= need;
    let retry_after = if allowed {
        credit -= need;
        0
    } else {
        by_limit.to_nanos(need - credit).saturating_add(ahead)
    };
    let decision = Decision {
        allowed,
        limit: bucket.capacity(),
        remaining: by_window.div(credit) as u64,
        reset_after: if credit < full {
            by_limit.to_nanos(full - credit).saturating_add(ahead)
        } else {
            0
        },
        retry_after,
        delay: 0,
    };
    let state = (credit < full).then_some(TokenBucketState { credit, last });
    (decision, state)
}

/// Settles a reservation that charged `charge.cost` to this bucket: gives back
/// `charge.cost - actual` (capped at full) or charges `actual - charge.cost` (see the module
/// docs for the rule and `overage`). Returns what was done and the state to store.
pub fn settle(
    bucket: &Bucket,
    state: Option<TokenBucketState>,
    charge: Charge,
    actual: u64,
    now: Nanos,
    overage: Overage,
) -> (Settled, Option<TokenBucketState>) {
    let limit = bucket.rate().limit();
    let by_window = bucket.rate().by_window();
    let window = bucket.rate().window();
    let full = mul_wide(bucket.capacity(), window);
    // The balance at `now` in token-windows, as `(have, owe)`: one of them is zero. Every
    // term is below 2^105 (counts under 2^40, windows and instants under 2^64).
    let (mut have, mut owe) = match state {
        None => (full, 0),
        Some(s) if now >= s.last => (
            full.min(s.credit.saturating_add(mul_wide(now - s.last, limit))),
            0,
        ),
        Some(s) => {
            let to_come = mul_wide(s.last - now, limit);
            let credit = s.credit.min(full);
            (
                credit.saturating_sub(to_come),
                to_come.saturating_sub(credit),
            )
        }
    };
    let settled = if actual <= charge.cost {
        let back = mul_wide(charge.cost - actual, window);
        // Paying back the debt first, then the credit up to full.
        let to_debt = back.min(owe);
        owe -= to_debt;
        let to_credit = (back - to_debt).min(full - have);
        have += to_credit;
        Settled::refund(by_window.div(to_debt + to_credit) as u64)
    } else {
        let room = by_window.div(have) as u64;
        let most = by_window.div((have + mul_wide(MAX_COUNT, window)).saturating_sub(owe)) as u64;
        let settled = Settled::overage(actual - charge.cost, room, most, overage);
        let take = mul_wide(settled.charged, window);
        let from_credit = take.min(have);
        have -= from_credit;
        owe += take - from_credit;
        settled
    };
    let state = if owe > 0 {
        // Stored as the refill instant `ahead` ns on, with the credit left at that instant.
        let ahead = owe.div_ceil(limit as u128);
        let last = now.saturating_add(sat_nanos(ahead));
        let credit = mul_wide(last - now, limit).saturating_sub(owe);
        Some(TokenBucketState { credit, last })
    } else {
        (have < full).then_some(TokenBucketState {
            credit: have,
            last: now,
        })
    };
    (settled, state)
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

//! Sliding window counter: two fixed windows, the previous one weighted.
//!
//! Each key keeps the cost admitted in the previous window (`prev`) and in the current one
//! (`cur`). The cost in the last `W` is estimated, before counting the new request, as
//! `estimate = prev * (1 - elapsed/W) + cur`, and a request of cost `c` is admitted when
//! `estimate + (c - 1) < limit` (`estimate < limit` for `c = 1`), computed exactly
//! in integers as `prev*(W - elapsed) + (cur + c - 1)*W < limit*W`. Only admitted requests
//! are counted.
//!
//! Pros: two counters per key, no boundary burst, capacity comes back gradually. Cons: an
//! approximation that assumes the previous window's requests were spread evenly: requests
//! bunched at its end are under-counted (it can admit a little more than the limit in some
//! `W`; the burst experiment in `tests/burst.rs` reaches 11 for a limit of 10) and requests bunched at
//! its start are over-counted (it rejects some requests the exact log would admit).
//!
//! Time that goes backwards stays in the stored window and counts the previous window in
//! full, which is stricter, never looser.
//!
//! A current count above the limit (only a settled overage makes one, see below) is a debt:
//! at each boundary the previous window takes at most `limit` of it and the rest stays
//! current, so nothing of it vanishes at a boundary. For every count within the limit this
//! is the plain roll-over (`prev = cur, cur = 0`).
//!
//! # Settle (reserve an estimate, settle the real cost: [`crate::settle`])
//!
//! * **Refund** `r`: to `cur` if the reservation was charged in the current window, to
//!   `prev` if in the previous one (`min(r, count)` either way), nothing if earlier (its
//!   window no longer counts).
//! * **Overage** `x`: `cur += x` in the current window, above the limit if need be (a debt,
//!   as above); [`crate::Overage::UpToLimit`] charges only the units still admissible now
//!   (the decision's `remaining`). A count deeper than [`crate::MAX_COUNT`] past the limit is
//!   not charged (reported unpaid).
//!
//! ```
//! use tollgate::algorithms::sliding_window;
//! use tollgate::settle::{Charge, Overage};
//! use tollgate::Quota;
//! use core::num::NonZeroU32;
//! let q = Quota::per_second(NonZeroU32::new(10).unwrap());
//! let ms = 1_000_000;
//! // Reserve 8 at 100 ms (window 0), settled at 1.5 s (window 1) for 3: the 5 come off
//! // `prev`, now 3, weighted by half: estimate 1.5, so 9 units are still admissible.
//! let (_, s) = sliding_window::decide(&q, None, 100 * ms, 8);
//! let charge = Charge { cost: 8, at: 100 * ms };
//! let (done, s) = sliding_window::settle(&q, s, charge, 3, 1_500 * ms, Overage::Debt);
//! assert_eq!(done.refunded, 5);
//! assert_eq!(sliding_window::decide(&q, s, 1_500 * ms, 0).0.remaining, 9);
//! // Settled in window 2 instead: window 0 no longer counts, nothing comes back.
//! let (_, s) = sliding_window::decide(&q, None, 100 * ms, 8);
//! let (done, _) = sliding_window::settle(&q, s, charge, 3, 2_500 * ms, Overage::Debt);
//! assert_eq!(done.refunded, 0);
//! // It cost 25: 17 more, cur = 25 in window 0. Window 1: prev 10, cur 15 (no room);
//! // window 2: prev 10, cur 5, where a request of 1 needs 10 * (1 - e) + 5 < 10, that is
//! // e > 1/2: admitted from 2.5 s + 1 ns, 2.4 s + 1 ns after 100 ms.
//! let (_, s) = sliding_window::decide(&q, None, 100 * ms, 8);
//! let (done, s) = sliding_window::settle(&q, s, charge, 25, 100 * ms, Overage::Debt);
//! assert_eq!(done.charged, 17);
//! let (d, _) = sliding_window::decide(&q, s, 100 * ms, 1);
//! assert_eq!(d.retry_after, 2_400 * ms + 1);
//! ```
//!
//! ```
//! use tollgate::algorithms::sliding_window::{decide, SlidingWindowState};
//! use tollgate::Quota;
//! use core::num::NonZeroU32;
//! // Limit 100 per 60 s, prev 80, cur 30, 15 s into the window:
//! // estimate 80 * 0.75 + 30 = 90 < 100, admitted.
//! let q = Quota::per_minute(NonZeroU32::new(100).unwrap());
//! let state = SlidingWindowState { window: 1, prev: 80, cur: 30 };
//! let (d, _) = decide(&q, Some(state), 75_000_000_000, 1);
//! assert!(d.allowed);
//! assert_eq!(d.remaining, 9);
//! ```

use crate::charge::{Charge, Overage, Settled};
use crate::math::{ceil_div, mul_wide, sat_nanos};
use crate::{Decision, Nanos, Quota, MAX_COUNT};

/// A sliding window counter's state. No state means both windows are empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SlidingWindowState {
    /// The current window's number `k` (window `[kW, (k+1)W)`).
    pub window: u64,
    /// Cost admitted in window `k - 1`.
    pub prev: u64,
    /// Cost admitted in window `k`.
    pub cur: u64,
}

/// The state's windows at `now`: the stored ones if still current (or later: time went
/// back), else rolled over, a debt carried (see the module docs).
#[inline(always)]
fn roll(quota: &Quota, state: Option<SlidingWindowState>, now: Nanos) -> (u64, u64, u64) {
    let current = now / quota.window();
    match state {
        Some(s) if s.window >= current => (s.window, s.prev, s.cur),
        Some(s) => {
            // What is left of `cur` after `n - 1` boundaries: at most `limit` becomes `prev`.
            let paid = quota.limit().saturating_mul(current - s.window - 1);
            let left = s.cur.saturating_sub(paid);
            let prev = left.min(quota.limit());
            (current, prev, left - prev)
        }
        None => (current, 0, 0),
    }
}

/// Settles a reservation that charged `charge.cost` at `charge.at`: the refund to its
/// window while that window counts, an overage to the current window (see the module
/// docs). Returns what was done and the state to store.
pub fn settle(
    quota: &Quota,
    state: Option<SlidingWindowState>,
    charge: Charge,
    actual: u64,
    now: Nanos,
    overage: Overage,
) -> (Settled, Option<SlidingWindowState>) {
    let (window, mut prev, mut cur) = roll(quota, state, now);
    let settled = if actual <= charge.cost {
        let r = charge.cost - actual;
        let charged_in = charge.at / quota.window();
        let back = if window == charged_in {
            let back = r.min(cur);
            cur -= back;
            back
        } else if charged_in.checked_add(1) == Some(window) {
            let back = r.min(prev);
            prev -= back;
            back
        } else {
            0
        };
        Settled::refund(back)
    } else {
        let w = quota.window() as u128;
        let start = mul_wide(window, quota.window());
        let elapsed = (now as u128).max(start) - start;
        // The decision's `remaining`: the units still admissible now.
        let used = prev as u128 * (w - elapsed) + cur as u128 * w;
        let room = ceil_div((quota.limit() as u128 * w).saturating_sub(used), w) as u64;
        let most = (quota.limit() + MAX_COUNT).saturating_sub(cur);
        let settled = Settled::overage(actual - charge.cost, room, most, overage);
        cur += settled.charged;
        settled
    };
    let state = (prev > 0 || cur > 0).then_some(SlidingWindowState { window, prev, cur });
    (settled, state)
}

/// Decides one request of `cost` at `now`.
#[inline(always)]
pub fn decide(
    quota: &Quota,
    state: Option<SlidingWindowState>,
    now: Nanos,
    cost: u64,
) -> (Decision, Option<SlidingWindowState>) {
    let w = quota.window() as u128;
    let limit = quota.limit() as u128;
    let (window, prev, mut cur) = roll(quota, state, now);
    let start = window as u128 * w;
    let elapsed = (now as u128).max(start) - start;
    let weighted_prev = prev as u128 * (w - elapsed);
    let c = cost as u128;
    let allowed = c == 0 || weighted_prev + (cur as u128 + c - 1) * w < limit * w;
    let retry_after = if allowed {
        cur = cur.saturating_add(cost);
        0
    } else {
        retry_after(w, limit, elapsed, prev as u128, cur as u128, c)
    };
    // Units still admissible now: the largest n with prev*(W-e) + (cur+n-1)*W < L*W.
    let room = (limit * w).saturating_sub(weighted_prev + cur as u128 * w);
    let reset_after = if cur > quota.limit() {
        // A debt: empty after `ceil(cur/limit)` boundaries, then one more window for `prev`.
        (w - elapsed) + (cur as u128).div_ceil(limit) * w
    } else if cur > 0 {
        2 * w - elapsed
    } else if prev > 0 {
        w - elapsed
    } else {
        0
    };
    let decision = Decision {
        allowed,
        limit: quota.limit(),
        remaining: ceil_div(room, w) as u64,
        reset_after: sat_nanos(reset_after),
        retry_after: sat_nanos(retry_after),
        delay: 0,
    };
    let state = (prev > 0 || cur > 0).then_some(SlidingWindowState { window, prev, cur });
    (decision, state)
}

/// The earliest wait after which a request of cost `c` (>= 1, <= limit) is admitted.
fn retry_after(w: u128, limit: u128, elapsed: u128, prev: u128, cur: u128, c: u128) -> u128 {
    // A debt (`cur` above the limit): no room until the boundary `n` after which
    // `cur - n*limit + c <= limit`; the rule below then runs from the start of that window,
    // with the windows rolled over as `roll` does.
    let (wait, elapsed, prev, cur) = if cur > limit {
        let n = (cur + c - limit).div_ceil(limit);
        let left = cur.saturating_sub((n - 1) * limit);
        let prev = left.min(limit);
        ((w - elapsed) + (n - 1) * w, 0, prev, left - prev)
    } else {
        (0, elapsed, prev, cur)
    };
    wait + retry_in_window(w, limit, elapsed, prev, cur, c)
}

/// [`retry_after`] for a current count within the limit.
fn retry_in_window(w: u128, limit: u128, elapsed: u128, prev: u128, cur: u128, c: u128) -> u128 {
    // Later in this window: need prev*(W - e') < Y with Y = (L - cur - c + 1)*W.
    let y = (limit * w).saturating_sub((cur + c - 1) * w);
    if y > 0 && prev > 0 {
        // prev*(W-e') < Y  <=>  W - e' <= ceil(Y/prev) - 1
        let e = (w + 1).saturating_sub(ceil_div(y, prev));
        if e < w {
            return e.saturating_sub(elapsed);
        }
    }
    // In the next window prev' = cur and cur' = 0: need cur*(W - e'') < (L - c + 1)*W.
    let z = (limit - c + 1) * w;
    let e = if cur == 0 {
        0
    } else {
        (w + 1).saturating_sub(ceil_div(z, cur))
    };
    (w - elapsed) + e
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): the window's estimate
/// (`prev * (1 - elapsed/W) + cur`, rounded up) of the state rolled to `now`, a debt carried
/// from earlier windows included (see [`decide`]); for a state in a window still to come
/// (time went back), `prev + cur` plus `limit` for every window before it.
pub fn spent(quota: &Quota, state: Option<SlidingWindowState>, now: Nanos) -> u64 {
    let w = quota.window();
    let current = now / w;
    let (window, prev, cur) = roll(quota, state, now);
    if window > current {
        let ahead = (window - current).saturating_mul(quota.limit());
        return prev.saturating_add(cur).saturating_add(ahead);
    }
    let elapsed = (now % w) as u128;
    let weighted = prev as u128 * (w as u128 - elapsed) + cur as u128 * w as u128;
    u64::try_from(ceil_div(weighted, w as u128)).unwrap_or(u64::MAX)
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): `spent` counted in the
/// current window (`cur`), above the limit for a debt, which the next windows pay off (as
/// any count above the limit is: see [`decide`]). `None` for nothing.
///
/// ```
/// use tollgate::algorithms::sliding_window::{spent, with_spent, SlidingWindowState};
/// use tollgate::Quota;
/// use core::num::NonZeroU32;
/// let free = Quota::per_minute(NonZeroU32::new(100).unwrap());
/// let s = with_spent(&free, 80, 0);
/// assert_eq!(s, Some(SlidingWindowState { window: 0, prev: 0, cur: 80 }));
/// // A window later, the 80 weigh 80 * (1 - 15/60) = 60 at 15 s into it.
/// assert_eq!(spent(&free, s, 75_000_000_000), 60);
/// ```
pub fn with_spent(quota: &Quota, spent: u64, now: Nanos) -> Option<SlidingWindowState> {
    (spent > 0).then(|| SlidingWindowState {
        window: now / quota.window(),
        prev: 0,
        cur: spent,
    })
}

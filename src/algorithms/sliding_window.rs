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

use crate::math::{ceil_div, sat_nanos};
use crate::{Decision, Nanos, Quota};

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
    let current = now / quota.window();
    let (window, prev, mut cur) = match state {
        Some(s) if s.window >= current => (s.window, s.prev, s.cur),
        Some(s) if s.window.checked_add(1) == Some(current) => (current, s.cur, 0),
        _ => (current, 0, 0),
    };
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
    let reset_after = if cur > 0 {
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
/// (`prev * (1 - elapsed/W) + cur`, rounded up) in the current window or the one after; for a
/// state in a window still to come (a carried debt), `prev + cur` plus `limit` for every
/// window before it.
pub fn spent(quota: &Quota, state: Option<SlidingWindowState>, now: Nanos) -> u64 {
    let Some(s) = state else { return 0 };
    let w = quota.window();
    let current = now / w;
    let elapsed = (now % w) as u128;
    let (prev, cur) = if s.window > current {
        let ahead = (s.window - current).saturating_mul(quota.limit());
        return s.prev.saturating_add(s.cur).saturating_add(ahead);
    } else if s.window == current {
        (s.prev, s.cur)
    } else if s.window.checked_add(1) == Some(current) {
        (s.cur, 0)
    } else {
        return 0;
    };
    let weighted = prev as u128 * (w as u128 - elapsed) + cur as u128 * w as u128;
    u64::try_from(ceil_div(weighted, w as u128)).unwrap_or(u64::MAX)
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): `spent` counted in the
/// current window (`cur`) when it fits the limit; otherwise `spent - k * limit` (between 1
/// and `limit`) counted in the window `k` after the current one, as
/// [`fixed_window::with_spent`](super::fixed_window::with_spent) does. `None` for nothing.
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
    let ahead = spent.checked_sub(1)? / quota.limit();
    Some(SlidingWindowState {
        window: (now / quota.window()).saturating_add(ahead),
        prev: 0,
        cur: spent - ahead * quota.limit(),
    })
}

//! Fixed window counter, windows aligned to the clock.
//!
//! Time is cut into windows `[kW, (k+1)W)`; each key counts the cost admitted in the current
//! window and a request is admitted when `count + cost <= limit`. The count restarts at every
//! boundary, for every key at once.
//!
//! Pros: the simplest state (a count and a window number); memory does not depend on the
//! limit. Cons: a client can spend the limit at the end of one window and again at the start
//! of the next, so up to `2 * limit` pass in an interval much shorter than `W`; clients
//! waiting for the reset all come back at the same instant (add jitter client-side).
//!
//! Only admitted requests are counted (counting rejections would not change who is
//! admitted, only the stored number). Time that goes backwards stays in the stored window.
//!
//! ```
//! use tollgate::algorithms::fixed_window;
//! use tollgate::Quota;
//! use core::num::NonZeroU32;
//! let q = Quota::per_second(NonZeroU32::new(3).unwrap());
//! let ms = 1_000_000;
//! let mut state = None;
//! let mut admitted = 0;
//! // 3 at 0.9 s and 3 at 1.0 s: six in 100 ms, twice the limit, around the boundary.
//! for t in [900, 900, 900, 900, 1000, 1000, 1000, 1000] {
//!     let (d, s) = fixed_window::decide(&q, state, t * ms, 1);
//!     state = s;
//!     admitted += d.allowed as u32;
//! }
//! assert_eq!(admitted, 6);
//! ```

use crate::math::{mul_wide, sat_nanos};
use crate::{Decision, Nanos, Quota};

/// A fixed window's state. No state means nothing counted in the current window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FixedWindowState {
    /// The window number `k` (window `[kW, (k+1)W)`).
    pub window: u64,
    /// Cost admitted in that window.
    pub count: u64,
}

/// Time from `now` to the end of the window `[kW, (k+1)W)` of `window` nanoseconds that
/// holds it: when a fixed window of that length counting at `now` restarts, whether or not
/// anything is counted yet (a counting decision's `reset_after`). Envoy's rate limit service
/// answers it as `duration_until_reset`, also for a limit that is never counted.
///
/// ```
/// use tollgate::algorithms::fixed_window::until_end;
/// let s = 1_000_000_000;
/// assert_eq!(until_end(60 * s, 61 * s), 59 * s);
/// assert_eq!(until_end(60 * s, 120 * s), 60 * s); // a boundary starts a whole window
/// // The same end as a counting decision's.
/// let q = tollgate::Quota::per_second(core::num::NonZeroU32::new(3).unwrap());
/// let (d, _) = tollgate::algorithms::fixed_window::decide(&q, None, 2_300_000_000, 1);
/// assert_eq!(d.reset_after, until_end(q.window(), 2_300_000_000));
/// ```
#[inline]
pub const fn until_end(window: Nanos, now: Nanos) -> Nanos {
    window - now % window
}

/// Decides one request of `cost` at `now`.
#[inline(always)]
pub fn decide(
    quota: &Quota,
    state: Option<FixedWindowState>,
    now: Nanos,
    cost: u64,
) -> (Decision, Option<FixedWindowState>) {
    let w = quota.window();
    let current = now / w;
    let (window, mut count) = match state {
        Some(s) if s.window >= current => (s.window, s.count),
        _ => (current, 0),
    };
    let start = mul_wide(window, w);
    let end = start + w as u128;
    let now_eff = (now as u128).max(start);
    let until_end = sat_nanos(end - now_eff);
    let allowed = count.saturating_add(cost) <= quota.limit();
    if allowed {
        count += cost;
    }
    let decision = Decision {
        allowed,
        limit: quota.limit(),
        remaining: quota.limit().saturating_sub(count),
        reset_after: if count > 0 { until_end } else { 0 },
        retry_after: if allowed { 0 } else { until_end },
        delay: 0,
    };
    (
        decision,
        (count > 0).then_some(FixedWindowState { window, count }),
    )
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): the count of the current
/// window; nothing once its window has passed; for a state in a window still to come (a
/// carried debt), its count plus `limit` for every window before it.
pub fn spent(quota: &Quota, state: Option<FixedWindowState>, now: Nanos) -> u64 {
    let Some(s) = state else { return 0 };
    let current = now / quota.window();
    match s.window.checked_sub(current) {
        None => 0,
        Some(ahead) => s.count.saturating_add(ahead.saturating_mul(quota.limit())),
    }
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): `spent` counted in the
/// current window when it fits the limit; otherwise the debt is paid by whole windows, the
/// count `spent - k * limit` (between 1 and `limit`) stored in the window `k` after the
/// current one, which the decision counts in until that window has passed. `None` for
/// nothing.
///
/// ```
/// use tollgate::algorithms::fixed_window::{spent, with_spent, FixedWindowState};
/// use tollgate::Quota;
/// use core::num::NonZeroU32;
/// let free = Quota::per_minute(NonZeroU32::new(100).unwrap());
/// let now = 90_000_000_000; // in window 1
/// assert_eq!(with_spent(&free, 70, now), Some(FixedWindowState { window: 1, count: 70 }));
/// // 250: two windows' limits owed (windows 1 and 2), 50 counted in window 3; the key's
/// // next admissions are charged to window 3 until it has passed.
/// let s = with_spent(&free, 250, now);
/// assert_eq!(s, Some(FixedWindowState { window: 3, count: 50 }));
/// assert_eq!(spent(&free, s, now), 250);
/// ```
pub fn with_spent(quota: &Quota, spent: u64, now: Nanos) -> Option<FixedWindowState> {
    let ahead = spent.checked_sub(1)? / quota.limit();
    Some(FixedWindowState {
        window: (now / quota.window()).saturating_add(ahead),
        count: spent - ahead * quota.limit(),
    })
}

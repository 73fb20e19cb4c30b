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
//! A count above the limit (only a settled overage makes one, see below) is a debt: at each
//! boundary the count restarts at `count - limit` (saturating), so after `n` windows it is
//! `count - n*limit`. For every count within the limit this is the plain restart at zero.
//!
//! # Settle (reserve an estimate, settle the real cost: [`crate::settle`])
//!
//! * **Refund** `r`: only while the stored window is the one the reservation was charged in
//!   (`count -= min(r, count)`); once that window is over its count no longer matters, and
//!   the refund is nothing (giving it to the current window would grant capacity the
//!   reservation never took from it).
//! * **Overage** `x`: charged to the current window, `count += x`, above the limit if need
//!   be (a debt carried into the next windows, as above: nothing vanishes at a boundary);
//!   [`crate::Overage::UpToLimit`] charges only what remains below the limit. A count deeper
//!   than [`crate::MAX_COUNT`] past the limit is not charged (reported unpaid).
//!
//! ```
//! use tollgate::algorithms::fixed_window;
//! use tollgate::settle::{Charge, Overage};
//! use tollgate::Quota;
//! use core::num::NonZeroU32;
//! let q = Quota::per_second(NonZeroU32::new(10).unwrap());
//! let ms = 1_000_000;
//! // Reserve 8 at 100 ms (window 0); it cost 3: 5 back, 7 left in window 0.
//! let (_, s) = fixed_window::decide(&q, None, 100 * ms, 8);
//! let charge = Charge { cost: 8, at: 100 * ms };
//! let (done, s) = fixed_window::settle(&q, s, charge, 3, 900 * ms, Overage::Debt);
//! assert_eq!(done.refunded, 5);
//! assert_eq!(fixed_window::decide(&q, s, 900 * ms, 0).0.remaining, 7);
//! // Settled in window 1 instead: window 0 no longer counts, nothing comes back.
//! let (_, s) = fixed_window::decide(&q, None, 100 * ms, 8);
//! let (done, _) = fixed_window::settle(&q, s, charge, 3, 1_100 * ms, Overage::Debt);
//! assert_eq!(done.refunded, 0);
//! // It cost 35: 27 more, count 35 in window 0; window 1 starts at 25, window 2 at 15,
//! // window 3 at 5: a request of 5 waits until window 3 (2.9 s from 100 ms).
//! let (_, s) = fixed_window::decide(&q, None, 100 * ms, 8);
//! let (done, s) = fixed_window::settle(&q, s, charge, 35, 100 * ms, Overage::Debt);
//! assert_eq!(done.charged, 27);
//! let (d, _) = fixed_window::decide(&q, s, 100 * ms, 5);
//! assert_eq!(d.retry_after, 2_900 * ms);
//! ```
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

use crate::charge::{Charge, Overage, Settled};
use crate::math::{mul_wide, sat_nanos};
use crate::{Decision, Nanos, Quota, MAX_COUNT};

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

/// The state's window and count at `now`: the stored window if it is still current (or
/// later: time went back), else the current window with the debt carried over, one limit
/// per window passed (see the module docs).
#[inline(always)]
fn roll(quota: &Quota, state: Option<FixedWindowState>, now: Nanos) -> (u64, u64) {
    let current = now / quota.window();
    match state {
        Some(s) if s.window >= current => (s.window, s.count),
        Some(s) => {
            let paid = quota.limit().saturating_mul(current - s.window);
            (current, s.count.saturating_sub(paid))
        }
        None => (current, 0),
    }
}

/// `(reset_after, retry_after)` of a denied request while `count` is above the limit (a
/// debt): the windows the debt still fills, after this one's `until_end`.
#[cold]
fn in_debt(quota: &Quota, until_end: Nanos, count: u64, cost: u64) -> (Nanos, Nanos) {
    let limit = quota.limit();
    // After `n` boundaries the count is `count - n*limit`: empty at `n = ceil(count/limit)`,
    // room for `cost` at `n = ceil((count + cost - limit) / limit)`.
    let after = |n: u64| sat_nanos(until_end as u128 + mul_wide(n - 1, quota.window()));
    // (A query of cost 0 is denied too while in debt, and told when the debt is paid.)
    (
        after(count.div_ceil(limit)),
        after((count.saturating_add(cost) - limit).div_ceil(limit)),
    )
}

/// Settles a reservation that charged `charge.cost` at `charge.at`: the refund to its
/// window while that window counts, an overage to the current window (see the module
/// docs). Returns what was done and the state to store.
pub fn settle(
    quota: &Quota,
    state: Option<FixedWindowState>,
    charge: Charge,
    actual: u64,
    now: Nanos,
    overage: Overage,
) -> (Settled, Option<FixedWindowState>) {
    let (window, mut count) = roll(quota, state, now);
    let settled = if actual <= charge.cost {
        let back = if window == charge.at / quota.window() {
            (charge.cost - actual).min(count)
        } else {
            0
        };
        count -= back;
        Settled::refund(back)
    } else {
        let room = quota.limit().saturating_sub(count);
        let most = (quota.limit() + MAX_COUNT).saturating_sub(count);
        let settled = Settled::overage(actual - charge.cost, room, most, overage);
        count += settled.charged;
        settled
    };
    (
        settled,
        (count > 0).then_some(FixedWindowState { window, count }),
    )
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
    let (window, mut count) = roll(quota, state, now);
    let start = mul_wide(window, w);
    let end = start + w as u128;
    let now_eff = (now as u128).max(start);
    let until_end = sat_nanos(end - now_eff);
    let allowed = count.saturating_add(cost) <= quota.limit();
    if allowed {
        count += cost;
    }
    let (reset_after, retry_after) = if count <= quota.limit() {
        (
            if count > 0 { until_end } else { 0 },
            if allowed { 0 } else { until_end },
        )
    } else {
        in_debt(quota, until_end, count, cost)
    };
    let decision = Decision {
        allowed,
        limit: quota.limit(),
        remaining: quota.limit().saturating_sub(count),
        reset_after,
        retry_after,
        delay: 0,
    };
    (
        decision,
        (count > 0).then_some(FixedWindowState { window, count }),
    )
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): the count of the current
/// window, a debt carried from earlier windows included (see [`decide`]); for a state in a
/// window still to come (time went back), its count plus `limit` for every window before it.
pub fn spent(quota: &Quota, state: Option<FixedWindowState>, now: Nanos) -> u64 {
    let current = now / quota.window();
    let (window, count) = roll(quota, state, now);
    count.saturating_add((window - current).saturating_mul(quota.limit()))
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): `spent` counted in the
/// current window, above the limit for a debt, which the next windows pay off one limit
/// each (as any count above the limit is). `None` for nothing.
///
/// ```
/// use tollgate::algorithms::fixed_window::{decide, spent, with_spent, FixedWindowState};
/// use tollgate::Quota;
/// use core::num::NonZeroU32;
/// let free = Quota::per_minute(NonZeroU32::new(100).unwrap());
/// let now = 90_000_000_000; // in window 1
/// assert_eq!(with_spent(&free, 70, now), Some(FixedWindowState { window: 1, count: 70 }));
/// // 250: windows 1 and 2 are full, 50 are counted in window 3.
/// let s = with_spent(&free, 250, now);
/// assert_eq!(spent(&free, s, now), 250);
/// assert_eq!(spent(&free, s, 150_000_000_000), 150);
/// assert_eq!(spent(&free, s, 210_000_000_000), 50);
/// assert_eq!(decide(&free, s, now, 1).0.retry_after, 90_000_000_000); // at 180 s
/// ```
pub fn with_spent(quota: &Quota, spent: u64, now: Nanos) -> Option<FixedWindowState> {
    (spent > 0).then(|| FixedWindowState {
        window: now / quota.window(),
        count: spent,
    })
}

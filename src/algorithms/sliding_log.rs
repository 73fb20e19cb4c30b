//! Sliding log: exact, keeps every admitted request in the window.
//!
//! Each key keeps the instants (and costs) of its admitted requests. At `t`, entries at or
//! before `t - W` have expired (the window is `(t - W, t]`); the request is admitted when the
//! cost still in the window plus its own is at most `limit`. Only admitted requests are
//! logged. It never admits more than `limit` in any window of length `W`.
//!
//! Pros: exact, no boundary effect, no estimate. Cons: memory grows with the traffic, up to
//! `limit` entries per key (requests admitted at the same instant share one entry).
//!
//! Time that goes backwards is treated as the newest logged instant.
//!
//! # Settle (reserve an estimate, settle the real cost: [`crate::settle`])
//!
//! * **Refund** `r`: the entry logged at the reservation's instant loses `min(r, its cost)`
//!   (and goes when nothing is left of it), if it is still logged; once it has expired its
//!   cost no longer counts and the refund is nothing.
//! * **Overage** `x`: a new entry of `x` at `now`, above the limit if need be (a debt: it
//!   counts for a window like any entry, and requests wait until enough has expired);
//!   [`crate::Overage::UpToLimit`] logs only what remains below the limit. The log is not
//!   charged deeper than [`crate::MAX_COUNT`] past the limit (the rest reported unpaid).
//!
//! ```
//! use tollgate::algorithms::sliding_log;
//! use tollgate::settle::{Charge, Overage};
//! use tollgate::Quota;
//! use core::num::NonZeroU32;
//! let q = Quota::per_second(NonZeroU32::new(10).unwrap());
//! let ms = 1_000_000;
//! // Reserve 8 at 100 ms; it cost 3 (settled at 600 ms): the entry keeps 3, 7 left.
//! let (_, s) = sliding_log::decide(&q, None, 100 * ms, 8);
//! let charge = Charge { cost: 8, at: 100 * ms };
//! let (done, s) = sliding_log::settle(&q, s, charge, 3, 600 * ms, Overage::Debt);
//! assert_eq!(done.refunded, 5);
//! assert_eq!(sliding_log::decide(&q, s, 600 * ms, 0).0.remaining, 7);
//! // Settled at 1.1 s instead: the entry has expired, nothing comes back.
//! let (_, s) = sliding_log::decide(&q, None, 100 * ms, 8);
//! let (done, _) = sliding_log::settle(&q, s, charge, 3, 1_100 * ms, Overage::Debt);
//! assert_eq!(done.refunded, 0);
//! // It cost 15 (settled at 600 ms): 7 logged at 600 ms, 15 in the log. A request of 1
//! // waits for the entry at 100 ms to expire (7 + 1 <= 10): until 1.1 s.
//! let (_, s) = sliding_log::decide(&q, None, 100 * ms, 8);
//! let (done, s) = sliding_log::settle(&q, s, charge, 15, 600 * ms, Overage::Debt);
//! assert_eq!(done.charged, 7);
//! let (d, _) = sliding_log::decide(&q, s, 600 * ms, 1);
//! assert_eq!(d.retry_after, 500 * ms);
//! ```
//!
//! ```
//! use tollgate::algorithms::sliding_log;
//! use tollgate::Quota;
//! use core::num::NonZeroU32;
//! let q = Quota::per_second(NonZeroU32::new(2).unwrap());
//! let ms = 1_000_000;
//! let (_, s) = sliding_log::decide(&q, None, 0, 1);
//! let (_, s) = sliding_log::decide(&q, s, 600 * ms, 1);
//! let (d, s) = sliding_log::decide(&q, s, 999 * ms, 1);
//! assert!(!d.allowed);
//! assert_eq!(d.retry_after, ms); // the entry at 0 expires at exactly 1 s
//! let (d, _) = sliding_log::decide(&q, s, 1000 * ms, 1);
//! assert!(d.allowed);
//! ```

use alloc::collections::VecDeque;

use crate::charge::{Charge, Overage, Settled};
use crate::math::sat_nanos;
use crate::{Decision, Nanos, Quota, MAX_COUNT};

/// One logged instant and the cost admitted at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Entry {
    /// When the cost was admitted.
    pub at: Nanos,
    /// The cost admitted at that instant.
    pub cost: u64,
}

/// A sliding log's state: admitted entries, oldest first. No state means an empty log.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SlidingLogState {
    /// Admitted entries still in the window, oldest first.
    pub entries: VecDeque<Entry>,
}

/// Drops the entries expired at `now` (or at the newest logged instant, if later: time
/// went back) and returns that instant.
#[inline(always)]
fn prune(log: &mut SlidingLogState, quota: &Quota, now: Nanos) -> Nanos {
    let w = quota.window() as u128;
    let now = log.entries.back().map_or(now, |e| e.at.max(now));
    while log
        .entries
        .front()
        .is_some_and(|e| e.at as u128 + w <= now as u128)
    {
        log.entries.pop_front();
    }
    now
}

/// The cost logged.
#[inline(always)]
fn used(log: &SlidingLogState) -> u64 {
    log.entries
        .iter()
        .fold(0u64, |a, e| a.saturating_add(e.cost))
}

/// Adds `cost` (> 0) at `now`, the newest logged instant or later.
fn log_at(log: &mut SlidingLogState, now: Nanos, cost: u64) {
    match log.entries.back_mut() {
        Some(last) if last.at == now => last.cost = last.cost.saturating_add(cost),
        _ => log.entries.push_back(Entry { at: now, cost }),
    }
}

/// Settles a reservation that charged `charge.cost` at `charge.at`: the refund from its
/// entry while it is logged, an overage as a new entry at `now` (see the module docs).
/// Returns what was done and the state to store.
pub fn settle(
    quota: &Quota,
    state: Option<SlidingLogState>,
    charge: Charge,
    actual: u64,
    now: Nanos,
    overage: Overage,
) -> (Settled, Option<SlidingLogState>) {
    let mut log = state.unwrap_or_default();
    let now = prune(&mut log, quota, now);
    let settled = if actual <= charge.cost {
        let r = charge.cost - actual;
        match log.entries.iter().rposition(|e| e.at == charge.at) {
            Some(i) => {
                let entry = &mut log.entries[i];
                let back = r.min(entry.cost);
                entry.cost -= back;
                if entry.cost == 0 {
                    log.entries.remove(i);
                }
                Settled::refund(back)
            }
            None => Settled::refund(0),
        }
    } else {
        let used = used(&log);
        let room = quota.limit().saturating_sub(used);
        let most = (quota.limit() + MAX_COUNT).saturating_sub(used);
        let settled = Settled::overage(actual - charge.cost, room, most, overage);
        if settled.charged > 0 {
            log_at(&mut log, now, settled.charged);
        }
        settled
    };
    (settled, (!log.entries.is_empty()).then_some(log))
}

/// Decides one request of `cost` at `now`.
#[inline(always)]
pub fn decide(
    quota: &Quota,
    state: Option<SlidingLogState>,
    now: Nanos,
    cost: u64,
) -> (Decision, Option<SlidingLogState>) {
    let w = quota.window() as u128;
    let limit = quota.limit();
    let mut log = state.unwrap_or_default();
    let now = prune(&mut log, quota, now);
    let used = used(&log);
    let allowed = used.saturating_add(cost) <= limit;
    let mut retry_after = 0;
    if !allowed {
        let mut freed = 0;
        for e in &log.entries {
            freed = (freed + e.cost).min(used);
            if (used - freed).saturating_add(cost) <= limit {
                retry_after = sat_nanos(e.at as u128 + w - now as u128);
                break;
            }
        }
    } else if cost > 0 {
        log_at(&mut log, now, cost);
    }
    let used = if allowed {
        used.saturating_add(cost)
    } else {
        used
    };
    let decision = Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(used),
        reset_after: log
            .entries
            .back()
            .map_or(0, |e| sat_nanos(e.at as u128 + w - now as u128)),
        retry_after,
        delay: 0,
    };
    (decision, (!log.entries.is_empty()).then_some(log))
}

/// The cost `state` has spent at `now` (see [`crate::carry`]): the cost logged in the window
/// that ends at `now` (or at the newest entry, if later); for a log whose newest entry lies
/// after `now` (a carried debt), plus `limit` for every window, begun or whole, until it.
pub fn spent(quota: &Quota, state: &Option<SlidingLogState>, now: Nanos) -> u64 {
    let Some(log) = state else { return 0 };
    let w = quota.window() as u128;
    let at = log.entries.back().map_or(now, |e| e.at.max(now));
    let logged = log
        .entries
        .iter()
        .filter(|e| e.at as u128 + w > at as u128)
        .fold(0u64, |a, e| a.saturating_add(e.cost));
    let ahead = ((at - now) as u128).div_ceil(w) as u64;
    logged.saturating_add(ahead.saturating_mul(quota.limit()))
}

/// The state that has spent `spent` at `now` (see [`crate::carry`]): one entry of `spent` at
/// `now` when it fits the limit; otherwise `spent - k * limit` (between 1 and `limit`)
/// logged `k` windows after `now`, which the log counts from until a window after that.
/// `None` for nothing.
///
/// ```
/// use tollgate::algorithms::sliding_log::{spent, with_spent};
/// use tollgate::Quota;
/// use core::num::NonZeroU32;
/// let free = Quota::per_minute(NonZeroU32::new(100).unwrap());
/// let s = with_spent(&free, 250, 0);
/// assert_eq!(s.as_ref().unwrap().entries[0].at, 120_000_000_000);
/// assert_eq!(spent(&free, &s, 0), 250);
/// ```
pub fn with_spent(quota: &Quota, spent: u64, now: Nanos) -> Option<SlidingLogState> {
    let ahead = spent.checked_sub(1)? / quota.limit();
    let mut log = SlidingLogState::default();
    log.entries.push_back(Entry {
        at: now.saturating_add(ahead.saturating_mul(quota.window())),
        cost: spent - ahead * quota.limit(),
    });
    Some(log)
}

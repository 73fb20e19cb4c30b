//! [`FleetLimits`]' deny cache (the core's [`DenyCache`](tollgate::store::DenyCache), as
//! `tollgate-redis`'s): denials remembered until a lower bound of their retry time, answered
//! without a round trip.

use tollgate::store::fleet;
use wasm_bindgen::prelude::*;

use super::numbers::{answer, stack_from};
use super::FleetLimits;
use crate::{cost_units, now_ns};

/// The most denials the deny cache holds (as `tollgate-redis`'s).
pub(super) const MAX_DENIALS: usize = 100_000;

/// A deny cache entry's key: the limiter's key and the request's tenant (a fair share's
/// tenant window is its own).
pub(super) type Denied = (String, Option<String>);

#[wasm_bindgen]
impl FleetLimits {
    /// The deny cache: the denial remembered for `key` (and `tenant`) that still holds at
    /// `now` (ms, `performance.now()`) for a request of `cost`, its waits counted down
    /// (the core's [`DenyCache::get`](tollgate::store::DenyCache::get)). Returns how many numbers it wrote at
    /// [`FleetLimits::out_ptr`] (one request's answer, as [`FleetLimits::decide`] writes
    /// it), or 0 when nothing is remembered.
    pub fn denied(&self, key: String, tenant: Option<String>, cost: f64, now: f64) -> usize {
        let hit = self
            .denials
            .borrow_mut()
            .get(&(key, tenant), cost_units(cost), now_ns(now));
        let io = &mut *self.io.borrow_mut();
        io.out.clear();
        match hit {
            Some(d) => answer(&mut io.out, &d),
            None => return 0,
        }
        io.out.len()
    }

    /// The deny cache: remembers the answer `numbers` (the combined decision's six numbers
    /// and each limit's, durations in whole ms rounded up, as the output gives them)
    /// decided for `key` (and `tenant`) and `cost` on a read sent at `sent` (ms,
    /// `performance.now()`), until a lower bound of its retry time
    /// ([`fleet::lower_bound`]: the whole ms were rounded up), so that the memory never
    /// outlasts the true retry time. Only a denial with a retry time is remembered
    /// ([`DenyCache::remember`](tollgate::store::DenyCache::remember)). Returns how many denials the cache holds: JavaScript
    /// skips [`FleetLimits::denied`] while it is 0 (the cache only grows here, so a count
    /// it last heard is never below the truth).
    pub fn remember(
        &self,
        key: String,
        tenant: Option<String>,
        cost: f64,
        sent: f64,
        numbers: &[f64],
    ) -> usize {
        let denials = &mut *self.denials.borrow_mut();
        if let Some(d) = stack_from(numbers) {
            let retry = fleet::lower_bound(d.decision.retry_after);
            denials.remember((key, tenant), cost_units(cost), now_ns(sent), &d, retry);
        }
        denials.len()
    }

    /// The deny cache: forgets every denial of `key` (a reset); returns how many it holds.
    pub fn forget(&self, key: &str) -> usize {
        let denials = &mut *self.denials.borrow_mut();
        denials.retain(|(k, _)| k != key);
        denials.len()
    }
}

//! [`FleetLimits`]' counts in the core's metric model ([`tollgate::metrics`]), told by
//! JavaScript, which knows where each decision came from and which calls failed.

use tollgate::store::fallback::{Behaviour, Why};
use wasm_bindgen::prelude::*;

use super::FleetLimits;
use crate::metrics;

#[wasm_bindgen]
impl FleetLimits {
    /// Counts a decision for a request of `cost` made at source `source` (its index in
    /// [`tollgate::metrics::Source::ALL`]: store, deny cache, fallback), sorted by the core
    /// from its `allowed`, `limit` and `remaining` (and the slots an admission took).
    pub fn record(&self, source: u32, allowed: bool, limit: f64, remaining: f64, cost: f64) {
        let t = &mut *self.tally.borrow_mut();
        metrics::decision(t, metrics::source(source), allowed, limit, remaining);
        self.in_use.decided(allowed, cost as u64);
    }

    /// Counts `cost` slots given back by a release that succeeded.
    pub fn released(&self, cost: f64) {
        self.in_use.released(cost as u64);
    }

    /// Slots of the concurrency limits this process holds now
    /// (`metrics::InUse::get`; -1 without one).
    #[wasm_bindgen(js_name = concurrencyInUse)]
    pub fn concurrency_in_use(&self) -> f64 {
        self.in_use.get()
    }

    /// Counts a failed store call after which the declared behaviour `behaviour` decided
    /// (its index in [`Behaviour::ALL`]: open, closed, local), for the reason `why` (its
    /// index in [`Why::ALL`]: unreachable, timeout, indeterminate).
    #[wasm_bindgen(js_name = recordFailure)]
    pub fn record_failure(&self, behaviour: u32, why: u32) {
        let behaviour = Behaviour::ALL.get(behaviour as usize);
        if let (Some(b), Some(w)) = (behaviour, Why::ALL.get(why as usize)) {
            self.tally.borrow_mut().failure(*b, *w);
        }
    }

    /// Counts a finished `acquire` of `cost`: admitted at source `source` after `waited` ms
    /// with the admitting decision's `limit` and `remaining` (and its slots taken), or given
    /// up.
    pub fn waited(
        &self,
        source: u32,
        admitted: bool,
        waited: f64,
        limit: f64,
        remaining: f64,
        cost: f64,
    ) {
        self.in_use.decided(admitted, cost as u64);
        let t = &mut *self.tally.borrow_mut();
        metrics::wait(
            t,
            metrics::source(source),
            admitted,
            waited,
            limit,
            remaining,
        );
    }

    /// The counts as plain numbers (`metrics::numbers`).
    pub fn counts(&self) -> Vec<f64> {
        metrics::numbers(&self.tally.borrow())
    }
}

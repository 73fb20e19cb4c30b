//! The controllers the simulator runs, behind one interface: tollgate's gradient
//! controller (the core's, adapted, never re-implemented) and a static limit. The other
//! baselines are in [`crate::baselines`].

use tollgate::adaptive::gradient::{self, Gradient, GradientParams, GradientState};
use tollgate::adaptive::{Outcome, ParamError};
use tollgate::Nanos;

/// A concurrency limit that admits requests and hears how they ended.
pub trait Controller {
    /// The name printed in the table.
    fn name(&self) -> &'static str;
    /// The limit now.
    fn limit(&self) -> u64;
    /// Admits one request at `now`, or sheds it.
    fn acquire(&mut self, now: Nanos) -> bool;
    /// One admitted request, started at `started`, ended at `now` with `outcome`;
    /// `random` is a fresh random draw.
    fn release(&mut self, now: Nanos, started: Nanos, outcome: Outcome, random: u64);
}

/// The limits every controller of a run shares: the floor, the ceiling and the start.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The floor.
    pub min: u32,
    /// The ceiling.
    pub max: u32,
    /// The limit at the start.
    pub initial: u32,
}

/// tollgate's gradient controller, from the core.
pub struct Tollgate {
    g: Gradient,
    s: GradientState,
}

impl Tollgate {
    /// The core's controller with its default parameters but the run's bounds.
    pub fn new(b: Bounds, seed: u64) -> Result<Tollgate, ParamError> {
        let g = Gradient::new(GradientParams {
            min_limit: b.min,
            max_limit: b.max,
            initial_limit: b.initial,
            ..GradientParams::default()
        })?;
        let s = GradientState::new(&g, 0, seed);
        Ok(Tollgate { g, s })
    }
}

impl Controller for Tollgate {
    fn name(&self) -> &'static str {
        "tollgate"
    }
    fn limit(&self) -> u64 {
        self.s.limit()
    }
    fn acquire(&mut self, now: Nanos) -> bool {
        gradient::acquire(&self.g, &mut self.s, now).allowed
    }
    fn release(&mut self, now: Nanos, started: Nanos, outcome: Outcome, random: u64) {
        gradient::release(&self.g, &mut self.s, now, started, outcome, random);
    }
}

/// A fixed limit (set at the nominal server's knee: the best a static limit can do when
/// the capacity is known and never changes).
pub struct Static {
    limit: u64,
    in_flight: u64,
}

impl Static {
    /// A fixed limit of `limit`.
    pub fn new(limit: u64) -> Static {
        Static {
            limit,
            in_flight: 0,
        }
    }
}

impl Controller for Static {
    fn name(&self) -> &'static str {
        "static"
    }
    fn limit(&self) -> u64 {
        self.limit
    }
    fn acquire(&mut self, _now: Nanos) -> bool {
        let allowed = self.in_flight < self.limit;
        self.in_flight += allowed as u64;
        allowed
    }
    fn release(&mut self, _now: Nanos, _started: Nanos, _outcome: Outcome, _random: u64) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

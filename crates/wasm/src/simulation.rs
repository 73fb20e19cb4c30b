//! `Simulation` (the `adapt-sim` feature, for the demo page only): the adaptive concurrency
//! simulator of `tollgate adapt simulate` ([`tollgate_adapt_sim`]: the same server model
//! and the core's gradient controller) stepped from JavaScript, so that the page shows the
//! same runs the CLI's tests hold to their bounds. Nothing of the model is in JS: the page
//! moves the sliders and draws the numbers.
//!
//! The server is the CLI's scenarios' (10 ms per request, constant or exponential; clients
//! time out after 1 s; the controller within [5, 1000] from 20). A step returns one row of
//! [`COLUMNS`] numbers per tick in one `Float64Array`, rather than an object per tick.

use tollgate::{Nanos, NANOS_PER_MS, NANOS_PER_SEC};
use tollgate_adapt_sim::controller::{Bounds, Controller, Tollgate};
use tollgate_adapt_sim::sim::{percentile, Service, Sim, SimError, TICK};
use wasm_bindgen::prelude::*;

use crate::errors::option_error;

/// The names of a row's numbers, in order (`Simulation.columns`).
pub const COLUMNS: [&str; 9] = [
    "time",     // the tick's end, s of virtual time
    "limit",    // the controller's limit at the tick's end
    "inFlight", // admitted requests not yet answered or timed out, at the tick's end
    "queue",    // requests waiting for a worker, at the tick's end
    "p99",      // the 99th percentile latency of the tick's answers, ms (0: none)
    "goodput",  // answers within the timeout, per second over the tick
    "shed",     // requests the controller refused, per second over the tick
    "offered",  // requests offered, per second over the tick
    "timeouts", // requests the client gave up on, per second over the tick
];

/// The mean service time (the CLI's scenarios').
const SERVICE: Nanos = 10 * NANOS_PER_MS;
/// The client's timeout (the CLI's scenarios').
const TIMEOUT: Nanos = NANOS_PER_SEC;
/// The controller's floor, ceiling and start (the CLI's scenarios').
const BOUNDS: Bounds = Bounds {
    min: 5,
    max: 1000,
    initial: 20,
};
/// The most workers a page may ask for: the simulation costs per request, and a tab
/// should not be asked for millions a second.
const MAX_WORKERS: u32 = 1000;
/// The most ticks one call steps (100 s of virtual time).
const MAX_TICKS: u32 = 1000;

/// The most load a page may offer (requests per second): twice the capacity of the most
/// workers (each request is a few events to simulate).
const MAX_LOAD: f64 = 2.0 * MAX_WORKERS as f64 * 100.0;

fn check_load(load: f64) -> Result<f64, JsValue> {
    let broken = if !load.is_finite() {
        Some((
            "not-a-number",
            "must be a finite number of requests per second",
        ))
    } else if load == 0.0 {
        Some(("zero", "must be more than 0 requests per second"))
    } else if load < 0.0 {
        Some(("negative", "must be more than 0 requests per second"))
    } else {
        None
    };
    if let Some((rule, explanation)) = broken {
        return Err(option_error("load", &load.into(), rule, explanation, true));
    }
    if load > MAX_LOAD {
        return Err(option_error(
            "load",
            &load.into(),
            "too-large",
            &format!("must be at most {MAX_LOAD} requests per second"),
            true,
        ));
    }
    Ok(load)
}

/// The model's own refusal of a load [`check_load`] let through (none: its rule is the
/// model's, positive and finite, checked first so that the error names the JS rule).
fn sim_error(e: SimError) -> JsValue {
    option_error("load", &JsValue::UNDEFINED, "invalid", &e.to_string(), true)
}

fn check_workers(workers: f64) -> Result<u32, JsValue> {
    if !(workers.fract() == 0.0 && (0.0..=MAX_WORKERS as f64).contains(&workers)) {
        return Err(option_error(
            "workers",
            &workers.into(),
            "out-of-range",
            &format!("must be a whole number from 0 to {MAX_WORKERS}"),
            true,
        ));
    }
    Ok(workers as u32)
}

/// A simulated server of `workers` workers behind tollgate's gradient controller, offered
/// `load` requests per second, in virtual time.
#[wasm_bindgen]
pub struct Simulation {
    sim: Sim,
    controller: Tollgate,
}

#[wasm_bindgen]
impl Simulation {
    /// A server of `workers` workers (at most 1000; 10 ms per request, so 100 workers
    /// serve 10,000 a second) offered `load` requests per second; `exponential`: service
    /// times drawn exponentially around 10 ms rather than always 10 ms. `seed` decides every
    /// draw: the same arguments and steps give the same run. Throws a `RangeError` naming
    /// `workers` (not a whole number from 0 to 1000) or `load` (not positive and finite, or
    /// above 200,000 a second).
    #[wasm_bindgen(constructor)]
    pub fn new(
        workers: f64,
        load: f64,
        exponential: bool,
        seed: u32,
    ) -> Result<Simulation, JsValue> {
        let service = if exponential {
            Service::Exponential(SERVICE)
        } else {
            Service::Constant(SERVICE)
        };
        let workers = check_workers(workers)?;
        let sim = Sim::new(service, TIMEOUT, workers, check_load(load)?, seed.into())
            .map_err(sim_error)?;
        let controller = Tollgate::new(BOUNDS, seed.into())
            .map_err(|e| option_error("bounds", &JsValue::NULL, "invalid", &e.to_string(), true))?;
        Ok(Simulation { sim, controller })
    }

    /// The names of a row's numbers, in order: `time` (s), `limit`, `inFlight`, `queue`,
    /// `p99` (ms), then per second over the tick `goodput`, `shed`, `offered`, `timeouts`.
    pub fn columns() -> Vec<String> {
        COLUMNS.iter().map(|c| c.to_string()).collect()
    }

    /// The length of a tick, ms of virtual time.
    #[wasm_bindgen(js_name = tickMs)]
    pub fn tick_ms() -> f64 {
        (TICK / NANOS_PER_MS) as f64
    }

    /// Steps `ticks` ticks (at most 1000) and returns their rows, `ticks` × `columns.length`
    /// numbers. Throws a `RangeError` naming `ticks` above the bound.
    pub fn step(&mut self, ticks: u32) -> Result<Vec<f64>, JsValue> {
        if ticks > MAX_TICKS {
            return Err(option_error(
                "ticks",
                &ticks.into(),
                "too-large",
                &format!("must be at most {MAX_TICKS}"),
                true,
            ));
        }
        let per_second = (NANOS_PER_SEC / TICK) as f64;
        let mut rows = Vec::with_capacity(ticks as usize * COLUMNS.len());
        for _ in 0..ticks {
            let mut t = self.sim.step(&mut self.controller as &mut dyn Controller);
            rows.extend_from_slice(&[
                self.sim.now() as f64 / NANOS_PER_SEC as f64,
                t.limit as f64,
                t.in_flight as f64,
                t.queue as f64,
                percentile(&mut t.latencies, 99),
                t.good as f64 * per_second,
                t.shed as f64 * per_second,
                t.offered as f64 * per_second,
                t.timeouts as f64 * per_second,
            ]);
        }
        Ok(rows)
    }

    /// The virtual time, s: the end of the last tick stepped.
    #[wasm_bindgen(getter)]
    pub fn time(&self) -> f64 {
        self.sim.now() as f64 / NANOS_PER_SEC as f64
    }

    /// The workers (capacity: 100 per 10,000 requests a second).
    #[wasm_bindgen(getter)]
    pub fn workers(&self) -> u32 {
        self.sim.workers()
    }

    /// Changes the workers from the next tick on (a whole number from 0 to 1000; 0: nothing
    /// is answered). Throws a `RangeError` naming `workers`, and the workers stay.
    #[wasm_bindgen(setter)]
    pub fn set_workers(&mut self, workers: f64) -> Result<(), JsValue> {
        self.sim.set_workers(check_workers(workers)?);
        Ok(())
    }

    /// The offered load, requests per second.
    #[wasm_bindgen(getter)]
    pub fn load(&self) -> f64 {
        self.sim.rate()
    }

    /// Changes the offered load (requests per second, positive, at most 200,000) from the
    /// next tick on. Throws a `RangeError` naming `load`, and the load stays.
    #[wasm_bindgen(setter)]
    pub fn set_load(&mut self, load: f64) -> Result<(), JsValue> {
        self.sim.set_rate(check_load(load)?).map_err(sim_error)
    }
}

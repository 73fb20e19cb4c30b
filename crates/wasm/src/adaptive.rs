//! `AdaptiveCore`, under the JS `AdaptiveLimiter` (`js/adaptive.js`): the core's gradient
//! controller ([`tollgate::adaptive::gradient`]) for one limit, its state in wasm memory.
//! The JS half keeps the tokens (each request's start) and turns outcomes into numbers;
//! every decision and every move of the limit is the core's.
//!
//! A limit is per process by nature (it measures what this process's requests see): there
//! is no fleet store for it.

use tollgate::adaptive::gradient::{self, Gradient, GradientParams, GradientState};
use tollgate::adaptive::{Outcome, Param};
use tollgate::Nanos;
use wasm_bindgen::prelude::*;

use crate::errors::option_error;

/// Milliseconds (possibly fractional, as from `performance.now()`) to nanoseconds; negative
/// and NaN count as 0 (the JS wrapper rejects them before they get here).
fn nanos(ms: f64) -> Nanos {
    (ms * 1e6).round() as Nanos
}

/// A parameter's name as the JS options spell it.
fn option_name(p: Param) -> &'static str {
    match p {
        Param::MinLimit => "minLimit",
        Param::MaxLimit => "maxLimit",
        Param::InitialLimit => "initialLimit",
        Param::Window => "windowMs",
        Param::MinSamples => "minSamples",
        Param::Percentile => "percentile",
        Param::Tolerance => "tolerance",
        Param::ProbeInterval => "probeIntervalMs",
        Param::Backoff => "backoff",
    }
}

/// One gradient controller and its state.
#[wasm_bindgen]
pub struct AdaptiveCore {
    g: Gradient,
    state: GradientState,
}

#[wasm_bindgen]
impl AdaptiveCore {
    /// A controller with these parameters (`undefined`: the core's default; the JS
    /// wrapper has checked that each given one is a whole number of the u32 range, or a
    /// finite number of ms), at `now_ms`; `random` jitters its first re-measurement.
    /// Throws a `RangeError` naming the parameter out of its bounds.
    #[wasm_bindgen(constructor)]
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        min_limit: Option<u32>,
        max_limit: Option<u32>,
        initial_limit: Option<u32>,
        window_ms: Option<f64>,
        min_samples: Option<u32>,
        percentile: Option<u32>,
        tolerance: Option<u32>,
        probe_interval_ms: Option<f64>,
        now_ms: f64,
        random: f64,
    ) -> Result<AdaptiveCore, JsValue> {
        let d = GradientParams::default();
        let g = Gradient::new(GradientParams {
            min_limit: min_limit.unwrap_or(d.min_limit),
            max_limit: max_limit.unwrap_or(d.max_limit),
            initial_limit: initial_limit.unwrap_or(d.initial_limit),
            window: window_ms.map_or(d.window, nanos),
            min_samples: min_samples.unwrap_or(d.min_samples),
            // Above 255 is above the bound (99) too: the error names the value given.
            percentile: percentile.map_or(d.percentile, |p| u8::try_from(p).unwrap_or(u8::MAX)),
            tolerance: tolerance.unwrap_or(d.tolerance),
            probe_interval: probe_interval_ms.map_or(d.probe_interval, nanos),
        })
        .map_err(|e| {
            // The value named is the one the caller passed (durations in ms).
            let value = match e.param {
                Param::Window | Param::ProbeInterval => e.value as f64 / 1e6,
                Param::Percentile => percentile.map_or(e.value as f64, f64::from),
                _ => e.value as f64,
            };
            let explanation = e.rule.to_string();
            option_error(
                option_name(e.param),
                &value.into(),
                e.rule.code(),
                &explanation,
                true,
            )
        })?;
        let state = GradientState::new(&g, nanos(now_ms), random as u64);
        Ok(AdaptiveCore { g, state })
    }

    /// Admits one request if the limit has room.
    pub fn acquire(&mut self, now_ms: f64) -> bool {
        gradient::acquire(&self.g, &mut self.state, nanos(now_ms)).allowed
    }

    /// Releases one admitted request that started at `started_ms` and ended at `now_ms`
    /// with `outcome` (0 success, 1 overload, 2 timeout); `random` jitters a re-measurement.
    pub fn release(&mut self, now_ms: f64, started_ms: f64, outcome: u32, random: f64) {
        let outcome = match outcome {
            0 => Outcome::Success,
            1 => Outcome::Overload,
            _ => Outcome::Timeout,
        };
        gradient::release(
            &self.g,
            &mut self.state,
            nanos(now_ms),
            nanos(started_ms),
            outcome,
            random as u64,
        );
    }

    /// The limit now.
    pub fn limit(&self) -> f64 {
        self.state.limit() as f64
    }

    /// Requests admitted and not yet released.
    #[wasm_bindgen(js_name = inFlight)]
    pub fn in_flight(&self) -> f64 {
        self.state.in_flight() as f64
    }
}

//! # tollgate-wasm
//!
//! The tollgate core compiled to WebAssembly with wasm-bindgen, for the npm package
//! `tollgate`. This crate is the low-level half: [`Core`] is a keyed limiter whose per-key
//! state lives inside wasm memory, bounded by `maxKeys`
//! ([`tollgate::keyed::KeyedLimiter`]). The JavaScript half (`js/`) wraps it in the
//! documented API (`Limiter`, `headers`, `fetchWithBackoff`, middleware).
//!
//! ## Modules
//! * `limiter`: [`Core`], under the JS `Limiter` (`js/limiter.js`): its buffers and calls;
//!   `limiter::headers` names its limits in the response headers and the 429 body;
//!   `limiter::strings` makes the same calls with Rust strings.
//! * `adaptive`: [`AdaptiveCore`], under the JS `AdaptiveLimiter` (`js/adaptive.js`).
//! * `wait`: the waiting rule of both entries' `acquire` ([`wait_step`]).
//! * `http`: a decision as numbers and back, the headers' items, the backoff ([`Backoff`]).
//! * `spec`, `errors`: policies and options read from JS values; the errors thrown to JS.
//! * `metrics`: the counts ([`tollgate::metrics`]) as plain numbers for JS.
//! * `plans` (the `plans` feature, `pkg/plans/` only): `PlanCore`, under the JS
//!   `PlanLimiter` of `tollgate/plans` (`js/plans.js`).
//! * `fleet` (the `store` feature, `pkg/redis/` only): `FleetLimits`, the core's side of
//!   `tollgate/redis`.
//! * `stateless` (the `state-json` feature): `decide_state`.
//! * `simulation` (the `adapt-sim` feature, the demo page's build only): `Simulation`, the
//!   adaptive concurrency simulator of `tollgate adapt simulate` stepped from JS.
//!
//! ## Crossing the boundary cheaply
//! A decision is six numbers. Building a JS object in Rust per call would cost more than the
//! decision itself, so [`Core::check`] returns only whether the request was allowed (or an
//! error status) and writes `limit, remaining, resetAfter, retryAfter, delay` into a small
//! buffer owned by the limiter ([`Core::out_ptr`]); the JS wrapper reads it through a reused
//! `Float64Array` over wasm memory and builds the `Decision` object. Keys (and tenants) go
//! the other way through a key buffer ([`Core::key_ptr`]): the wrapper writes them there,
//! ASCII ones (IP addresses, API key hashes) with a plain loop and others as UTF-8 with
//! `TextEncoder`, and passes only their lengths ([`Core::check_buf`]), which saves the
//! allocation, copy and free of wasm-bindgen's string passing on every call.
//!
//! `decide_state` (the `state-json` feature) is the stateless form: the caller keeps each
//! key's state as the core's JSON and passes it back (the demo page uses it to draw the state).
//!
//! ## Time
//! JavaScript speaks milliseconds (`Date.now()`), the core nanoseconds. A whole number of
//! milliseconds converts exactly with [`tollgate::millis`]; a fractional one (e.g. from
//! `performance.now()`) is `Math.round(now * 1e6)` nanoseconds. Negative, NaN and infinite
//! times count as 0 (the JS wrapper rejects them before they get here). Durations come back
//! in whole milliseconds rounded up ([`tollgate::MillisDecision`]).
#![deny(unsafe_code)]

use std::num::NonZeroUsize;

use tollgate::Nanos;
use wasm_bindgen::prelude::*;

mod adaptive;
mod errors;
#[cfg(feature = "store")]
mod fleet;
mod http;
mod limiter;
mod metrics;
#[cfg(feature = "plans")]
mod plans;
#[cfg(feature = "adapt-sim")]
mod simulation;
mod spec;
#[cfg(feature = "state-json")]
mod stateless;
mod wait;

// std's dlmalloc made allocation a large part of a keyed check (the keyed limiter allocates
// small vectors per decision); talc's wasm allocator is markedly faster, and a size-class
// cache in front of it gained nothing more (PERF.md, "Measured reasons in the code").
// SAFETY: wasm32-unknown-unknown without atomics is single-threaded, which is what
// `TalckWasm` (no locking) requires.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
#[allow(unsafe_code)]
static ALLOCATOR: talc::TalckWasm = unsafe { talc::TalckWasm::new_global() };

pub use adaptive::AdaptiveCore;
#[cfg(feature = "store")]
pub use fleet::{FleetLimits, FleetPlans};
pub use http::{Backoff, *};
pub use limiter::{Core, KEY_MAX, OUT_LEN, RESERVATION_LEN};
#[cfg(feature = "plans")]
pub use plans::PlanCore;
#[cfg(feature = "adapt-sim")]
pub use simulation::Simulation;
#[cfg(feature = "state-json")]
pub use stateless::decide_state;
pub use wait::{wait_step, GIVE_UP};

/// Status of a decision call: the request was denied.
pub const DENIED: u32 = 0;
/// Status of a decision call: the request was allowed.
pub const ALLOWED: u32 = 1;
/// Status of a decision call: it failed; [`Core::take_error`] gives the exception.
pub const FAILED: u32 = 2;

/// Numbers per decision in [`Core::check_detailed_buf`]'s answer and [`Core::headers`]'
/// argument: `allowed` (1 or 0), `limit, remaining, resetAfter, retryAfter, delay` (ms).
pub const DECISION_LEN: usize = 6;

/// Converts a JavaScript time in milliseconds to the core's nanoseconds (see the crate docs).
/// Whole milliseconds go through [`tollgate::millis`] (exact, saturating by a comparison);
/// fractional ones round to the nearest nanosecond, saturating (NaN becomes 0).
pub fn now_ns(now_ms: f64) -> Nanos {
    if now_ms.fract() == 0.0 && (0.0..=spec::MAX_SAFE_INTEGER).contains(&now_ms) {
        tollgate::millis(now_ms as u64)
    } else {
        (now_ms * 1e6).round() as Nanos
    }
}

/// A duration as JS gets it: whole ms, rounded up ([`tollgate::ceil_millis`]).
fn ms(ns: Nanos) -> f64 {
    tollgate::ceil_millis(ns) as f64
}

/// The cost of a request as the core wants it (the JS wrapper validates it first).
fn cost_units(cost: f64) -> u64 {
    cost as u64
}

fn max_keys(value: f64) -> Result<NonZeroUsize, JsValue> {
    let n = spec::count("maxKeys", &JsValue::from_f64(value))?;
    let max = u32::MAX as u64 - 1;
    if n == 0 || n > max {
        return Err(errors::option_error(
            "maxKeys",
            &JsValue::from_f64(value),
            if n == 0 { "zero" } else { "too-large" },
            "must be between 1 and 4294967294",
            true,
        ));
    }
    Ok(NonZeroUsize::new(n as usize).unwrap_or(NonZeroUsize::MIN))
}

/// The wasm instance's memory, for the JS wrapper's views of output buffers.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// Validates a policy (string or `PolicyObject`) and returns its canonical compact form;
/// throws the policy's `TypeError`/`RangeError` when invalid.
#[wasm_bindgen(js_name = parsePolicy)]
pub fn parse_policy(policy: &JsValue) -> Result<String, JsValue> {
    spec::policy(policy).map(|p| p.to_string())
}

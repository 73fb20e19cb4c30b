//! # tollgate-wasm
//!
//! The tollgate core compiled to WebAssembly with wasm-bindgen, for the npm package
//! `tollgate`. This crate is the low-level half: [`Core`] is a keyed limiter whose per-key
//! state lives inside wasm memory, bounded by `maxKeys`
//! ([`tollgate::keyed::KeyedLimiter`]). The JavaScript half (`js/`) wraps it in the
//! documented API (`Limiter`, `headers`, `fetchWithBackoff`, middleware).
//!
//! ## Crossing the boundary cheaply
//! A decision is six numbers. Building a JS object in Rust per call would cost more than the
//! decision itself, so [`Core::check`] returns only whether the request was allowed (or an
//! error status) and writes `limit, remaining, resetAfter, retryAfter, delay` into a small
//! buffer owned by the limiter ([`Core::out_ptr`]); the JS wrapper reads it through a reused
//! `Float64Array` over wasm memory and builds the `Decision` object. Keys go the other way
//! through a key buffer ([`Core::key_ptr`]): the wrapper writes short ASCII keys (IP
//! addresses, API key hashes) there and calls [`Core::check_buf`], which saves the allocation
//! and copy of wasm-bindgen's string passing; other keys take [`Core::check`].
//!
//! [`decide_state`] is the stateless form: the caller keeps each key's state as the core's
//! JSON and passes it back (the demo page uses it to draw the state).
//!
//! ## Time
//! JavaScript speaks milliseconds (`Date.now()`), the core nanoseconds. A whole number of
//! milliseconds converts exactly with [`tollgate::millis`]; a fractional one (e.g. from
//! `performance.now()`) is `Math.round(now * 1e6)` nanoseconds. Negative, NaN and infinite
//! times count as 0 (the JS wrapper rejects them before they get here). Durations come back
//! in whole milliseconds rounded up ([`tollgate::MillisDecision`]).

use std::cell::{Cell, RefCell, UnsafeCell};
use std::num::NonZeroUsize;

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::{DecideError, Decision, Nanos, Policy};
use wasm_bindgen::prelude::*;

mod errors;
mod http;
mod spec;
#[cfg(feature = "state-json")]
mod stateless;

// std's dlmalloc made allocation about half the cost of a keyed check (the keyed limiter
// allocates small vectors per decision); talc's wasm allocator is markedly faster (measured:
// check 1.9 -> 2.5-4.6 M ops/s; a size-class cache in front of talc gained nothing more).
// SAFETY: wasm32-unknown-unknown without atomics is single-threaded, which is what
// `TalckWasm` (no locking) requires.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: talc::TalckWasm = unsafe { talc::TalckWasm::new_global() };

pub use http::{Backoff, *};
#[cfg(feature = "state-json")]
pub use stateless::decide_state;

/// Status of a decision call: the request was denied.
pub const DENIED: u32 = 0;
/// Status of a decision call: the request was allowed.
pub const ALLOWED: u32 = 1;
/// Status of a decision call: it failed; [`Core::take_error`] gives the exception.
pub const FAILED: u32 = 2;

/// Number of `f64` slots in a limiter's output buffer.
pub const OUT_LEN: usize = 5;

/// The longest key (in bytes) the JS wrapper passes through a limiter's key buffer
/// ([`Core::key_ptr`]); longer or non-ASCII keys take wasm-bindgen's string path.
pub const KEY_MAX: usize = 128;

/// The largest whole number of milliseconds whose nanoseconds fit a `u64` (the year 2554).
const MAX_EXACT_MS: f64 = (u64::MAX / tollgate::NANOS_PER_MS) as f64;

/// Converts a JavaScript time in milliseconds to the core's nanoseconds (see the crate docs).
///
/// Whole milliseconds up to [`MAX_EXACT_MS`] convert exactly with a plain multiplication:
/// [`tollgate::millis`] would give the same value, but its overflow check
/// (`saturating_mul`) is a 128-bit multiply, a `__multi3` libcall on wasm32, on every
/// check. Larger times saturate through the float path, as `millis` would.
pub fn now_ns(now_ms: f64) -> Nanos {
    if now_ms.fract() == 0.0 && (0.0..=MAX_EXACT_MS).contains(&now_ms) {
        now_ms as u64 * tollgate::NANOS_PER_MS
    } else {
        // Saturating; NaN becomes 0.
        (now_ms * 1e6).round() as Nanos
    }
}

/// A duration as JS gets it: [`tollgate::ceil_millis`] (whole ms, rounded up, as
/// [`tollgate::MillisDecision`]), without its 64-bit division for the common zero (`retryAfter` and
/// `delay` of an admitted request).
fn ms(ns: Nanos) -> f64 {
    if ns == 0 {
        0.0
    } else {
        tollgate::ceil_millis(ns) as f64
    }
}

/// The cost of a request as the core wants it (the JS wrapper validates it first).
fn cost_units(cost: f64) -> u64 {
    cost as u64
}

/// A keyed limiter over one policy, an all-or-nothing stack, or a fair share, with its state
/// in wasm memory. Used through the JS `Limiter` class.
#[wasm_bindgen]
pub struct Core {
    limiter: KeyedLimiter<String>,
    /// `limit, remaining, resetAfter, retryAfter, delay` of the last decision, in ms.
    out: Box<[Cell<f64>; OUT_LEN]>,
    /// The key of the next [`Core::check_buf`] call, written by JS (ASCII, at most
    /// [`KEY_MAX`] bytes). Passing keys here costs no allocation per call. An `UnsafeCell`:
    /// JS writes it behind Rust's back, only ever between calls.
    key: Box<UnsafeCell<[u8; KEY_MAX]>>,
    error: RefCell<Option<DecideError>>,
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

#[wasm_bindgen]
impl Core {
    fn with(limiter: KeyedLimiter<String>) -> Core {
        Core {
            limiter,
            out: Box::default(),
            key: Box::new(UnsafeCell::new([0; KEY_MAX])),
            error: RefCell::new(None),
        }
    }

    /// A limiter with one policy (a string or a `PolicyObject`).
    pub fn single(policy: &JsValue, max_keys_: f64) -> Result<Core, JsValue> {
        let policy = spec::policy(policy)?;
        Ok(Core::with(KeyedLimiter::new(policy, max_keys(max_keys_)?)))
    }

    /// An all-or-nothing stack of policies.
    pub fn stack(policies: Vec<JsValue>, max_keys_: f64) -> Result<Core, JsValue> {
        let policies = policies
            .iter()
            .map(spec::policy)
            .collect::<Result<Vec<Policy>, JsValue>>()?;
        KeyedLimiter::stack(&policies, max_keys(max_keys_)?)
            .map(Core::with)
            .map_err(|e| errors::policy_error(&e))
    }

    /// A per-tenant fair share: `shared` per key, `tenant` per key and tenant.
    #[wasm_bindgen(js_name = fairShare)]
    pub fn fair_share(shared: &JsValue, tenant: &JsValue, max_keys_: f64) -> Result<Core, JsValue> {
        let fair = FairShare::new(spec::policy(shared)?, spec::policy(tenant)?)
            .map_err(|e| errors::policy_error(&e))?;
        Ok(Core::with(KeyedLimiter::fair_share(
            fair,
            max_keys(max_keys_)?,
        )))
    }

    /// The address of the output buffer in wasm memory (`OUT_LEN` `f64`s).
    #[wasm_bindgen(js_name = outPtr)]
    pub fn out_ptr(&self) -> u32 {
        self.out.as_ptr() as usize as u32
    }

    /// The address of the key buffer in wasm memory ([`KEY_MAX`] bytes).
    #[wasm_bindgen(js_name = keyPtr)]
    pub fn key_ptr(&self) -> u32 {
        self.key.get() as usize as u32
    }

    /// Runs `f` with the first `len` bytes of the key buffer as a string.
    fn with_key<R>(&self, len: usize, f: impl FnOnce(&str) -> R) -> R {
        // SAFETY: JS writes the key buffer only between calls into this module (wasm here is
        // single-threaded, and nothing below calls out to JS), so no write can overlap this
        // shared borrow, which ends before the call returns.
        let buffer: &[u8; KEY_MAX] = unsafe { &*self.key.get() };
        let bytes = &buffer[..len.min(KEY_MAX)];
        // JS writes only ASCII here; anything else would be a wrapper bug, and is refused
        // as an empty key rather than trusted.
        f(std::str::from_utf8(bytes).unwrap_or(""))
    }

    /// [`Core::check`] for the key in the key buffer (`len` bytes).
    #[wasm_bindgen(js_name = checkBuf)]
    pub fn check_buf(&self, len: usize, now: f64, cost: f64) -> u32 {
        let result = self.with_key(len, |key| {
            self.limiter.check(key, now_ns(now), cost_units(cost))
        });
        self.emit(result)
    }

    /// [`Core::peek`] for the key in the key buffer (`len` bytes).
    #[wasm_bindgen(js_name = peekBuf)]
    pub fn peek_buf(&self, len: usize, now: f64) -> u32 {
        let result = self.with_key(len, |key| self.limiter.peek(key, now_ns(now)));
        self.emit(result)
    }

    fn emit(&self, result: Result<Decision, DecideError>) -> u32 {
        match result {
            Ok(d) => {
                // MillisDecision's conversion (whole ms, rounded up), field by field.
                let out = &self.out;
                out[0].set(d.limit as f64);
                out[1].set(d.remaining as f64);
                out[2].set(ms(d.reset_after));
                out[3].set(ms(d.retry_after));
                out[4].set(ms(d.delay));
                if d.allowed {
                    ALLOWED
                } else {
                    DENIED
                }
            }
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                FAILED
            }
        }
    }

    /// Decides a request of `cost` for `key` at `now` (ms); see [`ALLOWED`], [`DENIED`],
    /// [`FAILED`].
    pub fn check(&self, key: &str, now: f64, cost: f64) -> u32 {
        self.emit(self.limiter.check(key, now_ns(now), cost_units(cost)))
    }

    /// Like [`Core::check`], on behalf of `tenant` (fair-share limiters).
    #[wasm_bindgen(js_name = checkTenant)]
    pub fn check_tenant(&self, key: &str, tenant: &str, now: f64, cost: f64) -> u32 {
        let result = self
            .limiter
            .check_detailed(key, Some(tenant), now_ns(now), cost_units(cost))
            .map(|d| d.decision);
        self.emit(result)
    }

    /// The key's standing at `now`, without charging it.
    pub fn peek(&self, key: &str, now: f64) -> u32 {
        self.emit(self.limiter.peek(key, now_ns(now)))
    }

    /// Releases `cost` slots of the concurrency policies for `key`: [`ALLOWED`] or [`FAILED`].
    pub fn release(&self, key: &str, cost: f64) -> u32 {
        match self.limiter.release(key, cost_units(cost)) {
            Ok(()) => ALLOWED,
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                FAILED
            }
        }
    }

    /// Forgets `key`; whether it was stored.
    pub fn reset(&self, key: &str) -> bool {
        self.limiter.reset(key)
    }

    /// The number of limited keys stored.
    pub fn size(&self) -> u32 {
        self.limiter.len() as u32
    }

    /// The policies in canonical compact form, in stack order (the tenant policy last).
    pub fn policies(&self) -> Vec<String> {
        self.limiter
            .policies()
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    /// Each policy's limit ([`Policy::limit`]), in the order of [`Core::policies`].
    pub fn limits(&self) -> Vec<f64> {
        self.limiter
            .policies()
            .iter()
            .map(|p| p.limit() as f64)
            .collect()
    }

    /// The exception for the last [`FAILED`] call.
    #[wasm_bindgen(js_name = takeError)]
    pub fn take_error(&self) -> JsValue {
        match self.error.borrow_mut().take() {
            Some(e) => errors::decide_error(&e),
            None => JsValue::UNDEFINED,
        }
    }
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

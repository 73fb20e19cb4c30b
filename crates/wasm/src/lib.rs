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

use std::cell::{Cell, RefCell};
use std::num::NonZeroUsize;

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::metrics::{Source, Tally};
use tollgate::wait::Step;
use tollgate::{DecideError, Decision, Nanos, Policy};
use wasm_bindgen::prelude::*;

mod errors;
#[cfg(feature = "store")]
mod fleet;
mod http;
mod metrics;
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
#[allow(unsafe_code)]
static ALLOCATOR: talc::TalckWasm = unsafe { talc::TalckWasm::new_global() };

#[cfg(feature = "store")]
pub use fleet::FleetLimits;
pub use http::{Backoff, *};
#[cfg(feature = "state-json")]
pub use stateless::decide_state;

/// Status of a decision call: the request was denied.
pub const DENIED: u32 = 0;
/// Status of a decision call: the request was allowed.
pub const ALLOWED: u32 = 1;
/// Status of a decision call: it failed; [`Core::take_error`] gives the exception.
pub const FAILED: u32 = 2;

/// Status of [`wait_step`]: stop waiting, the deadline cannot be met.
pub const GIVE_UP: u32 = 3;

/// Whether a waiter's decision with `left` ms before its deadline (negative: a look) may be
/// kept: the core's waiting rule, [`tollgate::wait::keeps`].
pub(crate) fn keeps_within(decision: &Decision, left: f64) -> bool {
    left >= 0.0 && tollgate::wait::keeps(decision, Some(now_ns(left)))
}

/// The core's waiting rule ([`tollgate::wait::step`]) for a decision (`allowed`, and its
/// `retryAfter` and `delay` in ms), having waited `waited` ms of at most `maxWait`
/// (Infinity: no deadline), with `jitter` ms the caller drew. Returns `[status, ms]`:
/// [`ALLOWED`] (go, after `ms`, the queue delay), [`DENIED`] (sleep `ms`, then decide again)
/// or [`GIVE_UP`] (`ms`: the retry time the timeout reports). For `js/waiting.js`, the wait
/// of both entries' `acquire`.
#[wasm_bindgen(js_name = waitStep)]
pub fn wait_step(
    allowed: bool,
    retry_after: f64,
    delay: f64,
    waited: f64,
    max_wait: f64,
    jitter: f64,
) -> Vec<f64> {
    let decision = Decision {
        allowed,
        retry_after: now_ns(retry_after),
        delay: now_ns(delay),
        ..Decision::default()
    };
    match tollgate::wait::step(&decision, now_ns(waited), now_ns(max_wait), now_ns(jitter)) {
        Step::Go { delay } => vec![ALLOWED as f64, ms(delay)],
        Step::Wait(d) => vec![DENIED as f64, ms(d)],
        Step::GiveUp { retry_after } => vec![GIVE_UP as f64, ms(retry_after)],
    }
}

/// Numbers per decision in [`Core::check_detailed_buf`]'s answer and [`Core::headers`]'
/// argument: `allowed` (1 or 0), `limit, remaining, resetAfter, retryAfter, delay` (ms).
pub const DECISION_LEN: usize = 6;

/// Number of `f64` slots in a limiter's output buffer.
pub const OUT_LEN: usize = 5;

/// The key buffer's first size in bytes ([`Core::key_ptr`]); longer keys (or a key and a
/// tenant) grow it ([`Core::key_buffer`]).
pub const KEY_MAX: usize = 128;

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

/// A keyed limiter over one policy, an all-or-nothing stack, or a fair share, with its state
/// in wasm memory. Used through the JS `Limiter` class.
#[wasm_bindgen]
pub struct Core {
    limiter: KeyedLimiter<String>,
    /// `limit, remaining, resetAfter, retryAfter, delay` of the last decision, in ms.
    out: Box<[Cell<f64>; OUT_LEN]>,
    /// The key (and tenant) of the next call, UTF-8, written by JS at [`Core::key_ptr`];
    /// [`KEY_MAX`] bytes to start with, grown by [`Core::key_buffer`]. Passing keys here
    /// costs no allocation and no wasm-bindgen string glue per call. JS writes it only
    /// between calls, when no borrow of the cell is alive.
    key: RefCell<Box<[u8]>>,
    error: RefCell<Option<DecideError>>,
    /// A fair share (its last policy is the tenant window, named `<name>.tenant`).
    fair_share: bool,
    /// The decisions' counts ([`metrics`]): the first for calls without a route, then one
    /// per route ([`Core::add_series`]).
    tallies: RefCell<Vec<Tally>>,
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
            key: RefCell::new(vec![0; KEY_MAX].into_boxed_slice()),
            error: RefCell::new(None),
            fair_share: false,
            tallies: RefCell::new(vec![Tally::default()]),
        }
    }

    /// Counts `decision` in series `series` (a decision made here, in the store: the core's
    /// [`Tally::decision`]). Not inlined: one copy for every call that decides (a smaller
    /// `.wasm`, the same speed).
    #[inline(never)]
    fn count(&self, series: u32, decision: &Decision) {
        if let Some(t) = self.tallies.borrow_mut().get_mut(series as usize) {
            t.decision(decision, false, Source::Store);
        }
    }

    /// A new series of counts (for a route); its index for [`Core::check_detailed_buf`].
    #[wasm_bindgen(js_name = addSeries)]
    pub fn add_series(&self) -> u32 {
        let mut tallies = self.tallies.borrow_mut();
        tallies.push(Tally::default());
        (tallies.len() - 1) as u32
    }

    /// Series `series`' counts as plain numbers (`metrics::numbers`; empty when there is
    /// no such series).
    pub fn counts(&self, series: u32) -> Vec<f64> {
        self.tallies
            .borrow()
            .get(series as usize)
            .map(metrics::numbers)
            .unwrap_or_default()
    }

    /// Counts a finished `acquire` in series `series`: admitted after `waited` ms with the
    /// admitting decision's `limit` and `remaining`, or given up (one decision, and the
    /// wait in the histogram).
    pub fn waited(&self, series: u32, admitted: bool, waited: f64, limit: f64, remaining: f64) {
        if let Some(t) = self.tallies.borrow_mut().get_mut(series as usize) {
            metrics::wait(t, Source::Store, admitted, waited, limit, remaining);
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
        let mut core = Core::with(KeyedLimiter::fair_share(fair, max_keys(max_keys_)?));
        core.fair_share = true;
        Ok(core)
    }

    /// The address of the output buffer in wasm memory (`OUT_LEN` `f64`s).
    #[wasm_bindgen(js_name = outPtr)]
    pub fn out_ptr(&self) -> u32 {
        self.out.as_ptr() as usize as u32
    }

    /// The address of the key buffer in wasm memory ([`KEY_MAX`] bytes, or as many as the
    /// last [`Core::key_buffer`] asked for).
    #[wasm_bindgen(js_name = keyPtr)]
    pub fn key_ptr(&self) -> u32 {
        self.key.borrow().as_ptr() as usize as u32
    }

    /// Makes the key buffer at least `bytes` long (its contents kept) and returns its
    /// address, which may have moved.
    #[wasm_bindgen(js_name = keyBuffer)]
    pub fn key_buffer(&self, bytes: usize) -> u32 {
        {
            let mut buffer = self.key.borrow_mut();
            if buffer.len() < bytes {
                let mut grown = vec![0; bytes.max(2 * buffer.len())].into_boxed_slice();
                grown[..buffer.len()].copy_from_slice(&buffer);
                *buffer = grown;
            }
        }
        self.key_ptr()
    }

    /// Runs `f` with the key buffer's first `key` bytes and the `tenant` bytes after them,
    /// as strings.
    fn keys<R>(&self, key: usize, tenant: usize, f: impl FnOnce(&str, &str) -> R) -> R {
        // JS writes the key buffer only between calls into this module, and nothing below
        // calls out to JS or grows the buffer, so this borrow ends before JS writes again.
        let buffer = self.key.borrow();
        let (key, rest) = buffer.split_at(key.min(buffer.len()));
        let tenant = &rest[..tenant.min(rest.len())];
        // JS writes UTF-8 here (TextEncoder's, or ASCII); anything else would be a wrapper
        // bug, and is refused as an empty string rather than trusted.
        f(
            std::str::from_utf8(key).unwrap_or(""),
            std::str::from_utf8(tenant).unwrap_or(""),
        )
    }

    /// Runs `f` with the key buffer's first `len` bytes as a string.
    fn with_key<R>(&self, len: usize, f: impl FnOnce(&str) -> R) -> R {
        self.keys(len, 0, |key, _| f(key))
    }

    /// Decides a request of `cost` for the key in the key buffer (`len` bytes) at `now`
    /// (ms); see [`ALLOWED`], [`DENIED`], [`FAILED`].
    #[wasm_bindgen(js_name = checkBuf)]
    pub fn check_buf(&self, len: usize, now: f64, cost: f64) -> u32 {
        let result = self.with_key(len, |key| {
            self.limiter.check(key, now_ns(now), cost_units(cost))
        });
        if let Ok(d) = &result {
            self.count(0, d);
        }
        self.emit(result)
    }

    /// [`Core::check_buf`]'s short answer, for `Limiter.allow`: [`ALLOWED`], [`DENIED`] or
    /// [`FAILED`], with nothing written to the output buffer. The same decision as `check`
    /// (the core's [`KeyedLimiter::check`]); what it saves per call is writing the answer's
    /// numbers (three of them converted to ms) and the object JS would build from them. The
    /// core's shorter [`KeyedLimiter::admit`] is not used: it is a second instantiation of
    /// the keyed store with every algorithm inlined, 6.5 KB more of gzipped `.wasm`
    /// (measured 2026-12-03: 50,828 against 44,320 bytes), over the package's budget.
    #[wasm_bindgen(js_name = allowBuf)]
    pub fn allow_buf(&self, len: usize, now: f64, cost: f64) -> u32 {
        let result = self.with_key(len, |key| {
            self.limiter.check(key, now_ns(now), cost_units(cost))
        });
        match result {
            Ok(d) => {
                self.count(0, &d);
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

    /// The standing of the key in the key buffer (`len` bytes) at `now`, without charging it.
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

    /// The full decision for the key in the key buffer (`key_len` bytes, then `tenant_len`
    /// bytes of tenant when `has_tenant`): the combined decision, then each limit's in stack
    /// order ([`tollgate::stack`]), [`DECISION_LEN`] numbers each (see [`http::decision`]).
    /// Counted in series `series` (0: no route; [`Core::add_series`]).
    #[wasm_bindgen(js_name = checkDetailed)]
    pub fn check_detailed_buf(
        &self,
        key_len: usize,
        tenant_len: usize,
        has_tenant: bool,
        now: f64,
        cost: f64,
        series: u32,
    ) -> Result<Vec<f64>, JsValue> {
        let d = self.keys(key_len, tenant_len, |key, tenant| {
            self.limiter.check_detailed(
                key,
                has_tenant.then_some(tenant),
                now_ns(now),
                cost_units(cost),
            )
        });
        if let Ok(d) = &d {
            self.count(series, &d.decision);
        }
        let d = d.map_err(|e| errors::decide_error(&e))?;
        Ok(std::iter::once(&d.decision)
            .chain(&d.each)
            .flat_map(http::numbers)
            .collect())
    }

    /// The response headers for a decision of this limiter, flattened as `[name, value,
    /// ...]`: `each` holds each limit's decision ([`DECISION_LEN`] numbers per limit, in
    /// stack order; a fair share's tenant window last, when the request had one). Limits
    /// are named as [`tollgate::headers::limit_name`] and
    /// [`tollgate::headers::tenant_name`] say; the core chooses the binding one(s).
    pub fn headers(&self, name: &str, each: &[f64], legacy: bool) -> Vec<String> {
        let (names, policies, decisions) = self.named(name, each);
        let items = http::items(&names, &policies, &decisions);
        tollgate::headers::response_headers(&items, legacy)
            .into_iter()
            .flat_map(|(k, v)| [k.to_string(), v])
            .collect()
    }

    /// The 429 problem+json body for a decision of this limiter (`each` as for
    /// [`Core::headers`]); `undefined` when every limit admitted.
    #[wasm_bindgen(js_name = quotaExceeded)]
    pub fn quota_exceeded(&self, name: &str, each: &[f64]) -> Option<String> {
        let (names, policies, decisions) = self.named(name, each);
        tollgate::headers::problem(&http::items(&names, &policies, &decisions))
    }

    /// The first limits of this limiter that `each` has decisions for, with their names.
    fn named(&self, name: &str, each: &[f64]) -> (Vec<String>, Vec<Policy>, Vec<Decision>) {
        let mut policies = self.limiter.policies();
        let decisions: Vec<Decision> = each
            .chunks_exact(DECISION_LEN)
            .map(http::decision)
            .collect();
        let count = policies.len() - self.fair_share as usize;
        let names = (0..policies.len())
            .map(|i| {
                if self.fair_share && i == count {
                    tollgate::headers::tenant_name(name)
                } else {
                    tollgate::headers::limit_name(name, i, count)
                }
            })
            .collect::<Vec<String>>();
        policies.truncate(decisions.len());
        (names, policies, decisions)
    }

    /// One decision for a waiting caller (the JS `acquire`, whose line of waiters and timers
    /// are `js/waiting.js`): decides a request of `cost` for the key (and tenant, `tenant_len`
    /// 0 for none) in the key buffer at `now`, keeping the charge only as the core's waiting
    /// rule says ([`tollgate::wait::keeps`]) with `left` ms before the deadline; a negative
    /// `left` is a look, which keeps nothing. Returns [`ALLOWED`], [`DENIED`] or [`FAILED`],
    /// the decision in the output buffer. All times in ms.
    #[wasm_bindgen(js_name = decideWaiting)]
    pub fn decide_waiting(
        &self,
        key_len: usize,
        tenant_len: usize,
        now: f64,
        cost: f64,
        left: f64,
    ) -> u32 {
        let result = self.keys(key_len, tenant_len, |key, tenant| {
            let keep = |d: &Decision| keeps_within(d, left);
            let (now, cost) = (now_ns(now), cost_units(cost));
            self.limiter
                .check_if(key, Some(tenant), now, cost, keep)
                .map(|d| d.decision)
        });
        self.emit(result)
    }

    /// Releases `cost` slots of the concurrency policies for the key in the key buffer
    /// (`len` bytes): [`ALLOWED`] or [`FAILED`].
    #[wasm_bindgen(js_name = release)]
    pub fn release_buf(&self, len: usize, cost: f64) -> u32 {
        match self.with_key(len, |key| self.limiter.release(key, cost_units(cost))) {
            Ok(()) => ALLOWED,
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                FAILED
            }
        }
    }

    /// Forgets the key in the key buffer (`len` bytes); whether it was stored.
    #[wasm_bindgen(js_name = reset)]
    pub fn reset_buf(&self, len: usize) -> bool {
        self.with_key(len, |key| self.limiter.reset(key))
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

    /// The exception for the last [`FAILED`] call.
    #[wasm_bindgen(js_name = takeError)]
    pub fn take_error(&self) -> JsValue {
        match self.error.borrow_mut().take() {
            Some(e) => errors::decide_error(&e),
            None => JsValue::UNDEFINED,
        }
    }
}

/// The same calls with Rust strings, through the key buffer as JS does (for Rust callers and
/// the wasm-bindgen tests; not exported).
impl Core {
    /// Writes `key` then `tenant` into the key buffer; their lengths in bytes.
    fn put(&self, key: &str, tenant: &str) -> (usize, usize) {
        let (k, t) = (key.len(), tenant.len());
        self.key_buffer(k + t);
        let mut buffer = self.key.borrow_mut();
        buffer[..k].copy_from_slice(key.as_bytes());
        buffer[k..k + t].copy_from_slice(tenant.as_bytes());
        (k, t)
    }

    /// Decides a request of `cost` for `key` at `now` (ms): [`Core::check_buf`].
    pub fn check(&self, key: &str, now: f64, cost: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.check_buf(k, now, cost)
    }

    /// [`Core::check_buf`] on behalf of a tenant (fair-share limiters; JS calls
    /// [`Core::check_detailed_buf`], this is for Rust callers and the tests): the key is the key
    /// buffer's first `key_len` bytes, the tenant the `tenant_len` bytes after them.
    pub fn check_tenant_buf(&self, key_len: usize, tenant_len: usize, now: f64, cost: f64) -> u32 {
        let result = self.keys(key_len, tenant_len, |key, tenant| {
            self.limiter
                .check_detailed(key, Some(tenant), now_ns(now), cost_units(cost))
                .map(|d| d.decision)
        });
        if let Ok(d) = &result {
            self.count(0, d);
        }
        self.emit(result)
    }

    /// [`Core::check_tenant_buf`] for `key` and `tenant`.
    pub fn check_tenant(&self, key: &str, tenant: &str, now: f64, cost: f64) -> u32 {
        let (k, t) = self.put(key, tenant);
        self.check_tenant_buf(k, t, now, cost)
    }

    /// [`Core::allow_buf`] for `key`.
    pub fn allow(&self, key: &str, now: f64, cost: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.allow_buf(k, now, cost)
    }

    /// [`Core::peek_buf`] for `key`.
    pub fn peek(&self, key: &str, now: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.peek_buf(k, now)
    }

    /// [`Core::release_buf`] for `key`.
    pub fn release(&self, key: &str, cost: f64) -> u32 {
        let (k, _) = self.put(key, "");
        self.release_buf(k, cost)
    }

    /// [`Core::reset_buf`] for `key`.
    pub fn reset(&self, key: &str) -> bool {
        let (k, _) = self.put(key, "");
        self.reset_buf(k)
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

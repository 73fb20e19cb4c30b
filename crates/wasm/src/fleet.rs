//! The wasm half of the npm entry `tollgate/redis` (the `store` feature, built only into
//! `pkg/redis/`, so the main package's `.wasm` does not carry it).
//!
//! JavaScript runs the Redis protocol (the scripts in `crates/redis/lua/`, shared with the
//! Rust crate `tollgate-redis`); every decision is made here, by the core's store contract
//! ([`tollgate::store`]): [`FleetLimits::decide`] takes the states read from Redis (the
//! bytes after each value's 8-byte version), Redis's clock and a round of queued requests,
//! decides them in order with one [`Batch`], and returns each request's decision and the
//! writes to commit, all or nothing.
//!
//! Nothing is allocated per round at the boundary: the states read, the numbers in (each
//! slot's state length, then the requests) and out (decisions and writes) and the states to
//! write live in buffers owned by [`FleetLimits`], which JavaScript reads and writes through
//! views over wasm memory ([`FleetLimits::prepare`] sizes them, the `*_ptr` methods say
//! where they are; see [`FleetLimits::decide`] for the layouts). Measured in Node at 10k keys:
//! passing them as arrays (wasm-bindgen copies each into a fresh allocation and the output
//! back out of one) was a sixth of the npm client's own work per check.

use std::cell::RefCell;

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::stack::StackDecision;
use tollgate::store::{Batch, Limits, Write};
use tollgate::{DecideError, Decision, Policy, State, NANOS_PER_SEC};
use wasm_bindgen::prelude::*;

use crate::{
    cost_units, errors, keeps_within, max_keys, ms, now_ns, spec, ALLOWED, DENIED, FAILED,
};

/// Status of a request in [`FleetLimits::decide`]'s output: a release was applied.
pub const RELEASED: u32 = 3;

/// A request kind in [`FleetLimits::decide`]'s input: a check of `cost`.
pub const OP_CHECK: u32 = 0;
/// A request kind: a peek (decided on a copy, charges nothing).
pub const OP_PEEK: u32 = 1;
/// A request kind: a release of `cost` concurrency slots.
pub const OP_RELEASE: u32 = 2;
/// A request kind: a check of `cost` by a waiting caller (`acquire`), decided on a copy of
/// the batch and kept only as the waiting rule says ([`tollgate::wait::keeps`] with the
/// request's `maxDelay`, the caller's remaining wait: not an admission whose leaky-queue
/// delay is above it). A negative `maxDelay` is a look: nothing is kept (a waiter behind
/// others, or woken after its deadline, asking the key's retry time).
pub const OP_ACQUIRE: u32 = 3;

/// The limits of one `RedisLimiter` (a policy, a stack or a fair share), the decisions on
/// states read from Redis, and the in-memory limiter of the `local` fallback.
#[wasm_bindgen]
pub struct FleetLimits {
    limits: Limits,
    /// The `local` fallback's limiter over the same limits, if that fallback was declared.
    local: Option<KeyedLimiter<String>>,
    /// The error of each failed request of the last call, by position.
    errors: RefCell<Vec<Option<DecideError>>>,
    /// The buffers shared with JavaScript.
    io: RefCell<Io>,
}

/// [`FleetLimits::decide`]'s input and output, reused from call to call.
#[derive(Default)]
struct Io {
    /// In: each slot's state bytes (after the value's version), one after the other.
    states: Vec<u8>,
    /// In: each slot's state length, then the requests' (kind, cost, maxDelay) triples.
    numbers: Vec<f64>,
    /// Out: the decisions and the writes.
    out: Vec<f64>,
    /// Out: the states to write, one after the other.
    bytes: Vec<u8>,
}

/// Appends a decision as six numbers: allowed (0/1), limit, remaining, then resetAfter,
/// retryAfter and delay in whole ms rounded up (as `Limiter.check`).
fn push(out: &mut Vec<f64>, d: &Decision) {
    out.extend([
        d.allowed as u32 as f64,
        d.limit as f64,
        d.remaining as f64,
        ms(d.reset_after),
        ms(d.retry_after),
        ms(d.delay),
    ]);
}

/// Appends a request's answer: its status, then (when decided) the combined decision and
/// each limit's.
fn answer(out: &mut Vec<f64>, d: &StackDecision) {
    out.push(if d.decision.allowed { ALLOWED } else { DENIED } as f64);
    push(out, &d.decision);
    for e in &d.each {
        push(out, e);
    }
}

fn local_limiter(
    limits: &Limits,
    max: Option<f64>,
) -> Result<Option<KeyedLimiter<String>>, JsValue> {
    let Some(max) = max else { return Ok(None) };
    let max = max_keys(max)?;
    Ok(Some(match limits.tenant() {
        Some(tenant) => KeyedLimiter::fair_share(
            FairShare::new(limits.layers()[0], *tenant).map_err(|e| errors::policy_error(&e))?,
            max,
        ),
        None => KeyedLimiter::stack(limits.layers(), max).map_err(|e| errors::policy_error(&e))?,
    }))
}

#[wasm_bindgen]
impl FleetLimits {
    fn with(limits: Limits, local_max_keys: Option<f64>) -> Result<FleetLimits, JsValue> {
        Ok(FleetLimits {
            local: local_limiter(&limits, local_max_keys)?,
            limits,
            errors: RefCell::new(Vec::new()),
            io: RefCell::new(Io::default()),
        })
    }

    /// One policy (a string or a `PolicyObject`). `localMaxKeys`: the size of the `local`
    /// fallback's in-memory limiter (`undefined`: no local fallback).
    pub fn single(policy: &JsValue, local_max_keys: Option<f64>) -> Result<FleetLimits, JsValue> {
        FleetLimits::with(Limits::single(spec::policy(policy)?), local_max_keys)
    }

    /// An all-or-nothing stack.
    pub fn stack(
        policies: Vec<JsValue>,
        local_max_keys: Option<f64>,
    ) -> Result<FleetLimits, JsValue> {
        let policies = policies
            .iter()
            .map(spec::policy)
            .collect::<Result<Vec<Policy>, JsValue>>()?;
        let limits = Limits::stack(&policies).map_err(|e| errors::policy_error(&e))?;
        FleetLimits::with(limits, local_max_keys)
    }

    /// A fair share: `shared` per key, `tenant` per key and tenant.
    #[wasm_bindgen(js_name = fairShare)]
    pub fn fair_share(
        shared: &JsValue,
        tenant: &JsValue,
        local_max_keys: Option<f64>,
    ) -> Result<FleetLimits, JsValue> {
        let fair = FairShare::new(spec::policy(shared)?, spec::policy(tenant)?)
            .map_err(|e| errors::policy_error(&e))?;
        FleetLimits::with(Limits::fair_share(fair), local_max_keys)
    }

    /// A key as it appears in key names (`%` and `}` percent-encoded: the core's
    /// `store::key_part`).
    #[wasm_bindgen(js_name = keyPart)]
    pub fn key_part(key: &str) -> String {
        tollgate::store::key_part(key).into_owned()
    }

    /// The key suffixes of a request's slots, in decision order (`tollgate-redis`'s layout:
    /// `"<i>"` for the stack's limit i, `"t:<tenant>"` for a fair share's tenant window,
    /// which requests without a tenant, or with `""` or `"default"`, skip).
    pub fn slots(&self, tenant: Option<String>) -> Vec<String> {
        self.limits
            .slots(tenant.as_deref())
            .into_iter()
            .map(|s| s.suffix(tenant.as_deref()))
            .collect()
    }

    /// The largest cost a request can have (the smallest capacity).
    pub fn capacity(&self) -> f64 {
        self.limits.capacity() as f64
    }

    /// Throws the core's `RangeError` (`rule: "cost-exceeds-capacity"`) for a cost no
    /// request from `tenant` may have (above the smallest capacity of the limits it touches:
    /// a request that skips the tenant window is not bound by it, as in the in-memory
    /// limiter), so that it is refused before any round trip.
    #[wasm_bindgen(js_name = checkCost)]
    pub fn check_cost(&self, cost: f64, tenant: Option<String>) -> Result<(), JsValue> {
        let cost = cost_units(cost);
        let capacity = self
            .limits
            .slots(tenant.as_deref())
            .into_iter()
            .map(|s| self.limits.policy(s).limit())
            .min()
            .unwrap_or(0);
        if cost > capacity {
            return Err(errors::decide_error(&DecideError::CostExceedsCapacity {
                cost,
                capacity,
            }));
        }
        Ok(())
    }

    /// Each policy's limit, in slot order (the tenant policy last).
    pub fn limits(&self) -> Vec<f64> {
        self.limits
            .policies()
            .iter()
            .map(|p| p.limit() as f64)
            .collect()
    }

    /// The policies in canonical compact form, in slot order.
    pub fn policies(&self) -> Vec<String> {
        self.limits
            .policies()
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    /// Sizes the input buffers for the next [`FleetLimits::decide`]: `states` bytes and
    /// `numbers` numbers (their contents are then written through
    /// [`FleetLimits::states_ptr`] and [`FleetLimits::numbers_ptr`]).
    pub fn prepare(&self, states: usize, numbers: usize) {
        let mut io = self.io.borrow_mut();
        io.states.resize(states, 0);
        io.numbers.resize(numbers, 0.0);
    }

    /// Where the input state bytes are in wasm memory (moves on [`FleetLimits::prepare`]).
    #[wasm_bindgen(js_name = statesPtr)]
    pub fn states_ptr(&self) -> *const u8 {
        self.io.borrow().states.as_ptr()
    }

    /// Where the input numbers are (`f64`s; moves on [`FleetLimits::prepare`]).
    #[wasm_bindgen(js_name = numbersPtr)]
    pub fn numbers_ptr(&self) -> *const f64 {
        self.io.borrow().numbers.as_ptr()
    }

    /// Where the last [`FleetLimits::decide`]'s output numbers are (`f64`s).
    #[wasm_bindgen(js_name = outPtr)]
    pub fn out_ptr(&self) -> *const f64 {
        self.io.borrow().out.as_ptr()
    }

    /// Where the last [`FleetLimits::decide`]'s states to write are, one after the other
    /// (their lengths are in its output).
    #[wasm_bindgen(js_name = bytesPtr)]
    pub fn bytes_ptr(&self) -> *const u8 {
        self.io.borrow().bytes.as_ptr()
    }

    /// Decides a round of requests on the states read from Redis; returns how many numbers
    /// it wrote at [`FleetLimits::out_ptr`].
    ///
    /// * `tenant`: the requests' tenant (they share their slots: [`FleetLimits::slots`]).
    /// * the input numbers ([`FleetLimits::prepare`]): first each slot's state length in the
    ///   input state bytes, one after the other (0: an absent key); then a triple (kind,
    ///   cost, maxDelay) per request: [`OP_CHECK`], [`OP_PEEK`], [`OP_RELEASE`],
    ///   [`OP_ACQUIRE`] (whose `maxDelay`, in ms, is the most queue delay it may keep,
    ///   negative for a look that keeps nothing; ignored by the other kinds).
    /// * `secs`, `micros`: the clock, as Redis `TIME` answers it.
    ///
    /// Output, for each request, `1 + 6 * (1 + slots)` numbers: its status ([`ALLOWED`],
    /// [`DENIED`], [`RELEASED`], or [`FAILED`]: [`FleetLimits::error`] gives the exception),
    /// then the combined decision and each slot's (six numbers each: allowed, limit,
    /// remaining, resetAfter, retryAfter, delay; zeros when not decided). Then, for each
    /// slot, the write: action (0 keep, 1 delete, 2 put), time to live in ms (the state's
    /// `fresh_after` rounded up; -1 for a concurrency count, which no clock frees) and the
    /// length of its state bytes at [`FleetLimits::bytes_ptr`]. Throws a `TypeError`
    /// (`field: "state"`, `rule: "corrupt-state"`, `value`: the slot's index) for bytes that
    /// are not a state; nothing is decided then.
    pub fn decide(&self, tenant: Option<String>, secs: f64, micros: f64) -> Result<usize, JsValue> {
        let slots = self.limits.slots(tenant.as_deref());
        let io = &mut *self.io.borrow_mut();
        let n = slots.len().min(io.numbers.len());
        let (lens, ops) = io.numbers.split_at(n);
        let mut loaded = Vec::with_capacity(slots.len());
        let mut at = 0usize;
        for (i, len) in lens.iter().enumerate() {
            let len = *len as usize;
            let bytes = io.states.get(at..at + len).unwrap_or_default();
            at += len;
            loaded.push(if bytes.is_empty() {
                None
            } else {
                Some(State::from_bytes(bytes).map_err(|e| {
                    errors::option_error(
                        "state",
                        &JsValue::from_f64(i as f64),
                        "corrupt-state",
                        &e.to_string(),
                        false,
                    )
                })?)
            });
        }
        loaded.resize(slots.len(), None);
        let now = (secs as u64)
            .saturating_mul(NANOS_PER_SEC)
            .saturating_add((micros as u64).saturating_mul(1_000));
        let mut batch = Batch::new(&self.limits, &slots, loaded, now);
        let stride = 1 + 6 * (1 + slots.len());
        let out = &mut io.out;
        out.clear();
        let mut errors = self.errors.borrow_mut();
        errors.clear();
        for op in ops.chunks_exact(3) {
            let (kind, cost) = (op[0] as u32, cost_units(op[1]));
            let start = out.len();
            let result = match kind {
                OP_CHECK => batch.decide(cost).map(Some),
                OP_ACQUIRE => {
                    // Decided on a copy, kept only as the waiting rule says (a waiter that
                    // gives up is never charged).
                    let mut trial = batch.clone();
                    let d = trial.decide(cost);
                    if let Ok(d) = &d {
                        if keeps_within(&d.decision, op[2]) {
                            batch = trial;
                        }
                    }
                    d.map(Some)
                }
                OP_PEEK => batch.clone().decide(0).map(Some),
                OP_RELEASE if batch.release(cost) => Ok(None),
                _ => Err(DecideError::NotConcurrency {
                    policy: self.limits.layers()[0].algorithm(),
                }),
            };
            errors.push(None);
            match result {
                Ok(Some(d)) => answer(out, &d),
                Ok(None) => out.push(RELEASED as f64),
                Err(e) => {
                    out.push(FAILED as f64);
                    *errors.last_mut().unwrap_or(&mut None) = Some(e);
                }
            }
            out.resize(start + stride, 0.0);
        }
        let mut writes: Vec<Option<Write>> = vec![None; slots.len()];
        for (i, w) in batch.writes() {
            writes[i] = Some(w);
        }
        io.bytes.clear();
        for w in writes {
            match w {
                None => out.extend([0.0, 0.0, 0.0]),
                Some(Write::Delete) => out.extend([1.0, 0.0, 0.0]),
                Some(Write::Put { state, fresh_after }) => {
                    let s = state.to_bytes();
                    io.bytes.extend_from_slice(&s);
                    let ttl = fresh_after.map_or(-1.0, ms);
                    out.extend([2.0, ttl, s.len() as f64]);
                }
            }
        }
        Ok(out.len())
    }

    /// The exception of the failed request at position `i` of the last call.
    pub fn error(&self, i: usize) -> JsValue {
        match self.errors.borrow_mut().get_mut(i).and_then(Option::take) {
            Some(e) => errors::decide_error(&e),
            None => JsValue::UNDEFINED,
        }
    }

    /// The `local` fallback: decides a request of `cost` (0: a peek) for `key` (and
    /// `tenant`) in this process's memory at `now` (ms). The output of one request of
    /// [`FleetLimits::decide`], with as many limits as the request had. `max_delay` is an
    /// [`OP_ACQUIRE`]'s (Infinity for a check): the charge is kept only as the waiting rule
    /// says.
    #[wasm_bindgen(js_name = localCheck)]
    pub fn local_check(
        &self,
        key: &str,
        tenant: Option<String>,
        now: f64,
        cost: f64,
        max_delay: f64,
    ) -> Vec<f64> {
        let mut out = Vec::new();
        let errors = &mut *self.errors.borrow_mut();
        errors.clear();
        let Some(local) = &self.local else {
            return out;
        };
        let keep = |d: &Decision| keeps_within(d, max_delay);
        match local.check_if(key, tenant.as_deref(), now_ns(now), cost_units(cost), keep) {
            Ok(d) => answer(&mut out, &d),
            Err(e) => {
                out.push(FAILED as f64);
                errors.push(Some(e));
            }
        }
        out
    }

    /// The `local` fallback: releases `cost` concurrency slots of `key`; [`ALLOWED`] or
    /// [`FAILED`] ([`FleetLimits::error`] at 0).
    #[wasm_bindgen(js_name = localRelease)]
    pub fn local_release(&self, key: &str, cost: f64) -> u32 {
        let errors = &mut *self.errors.borrow_mut();
        errors.clear();
        match self
            .local
            .as_ref()
            .map(|l| l.release(key, cost_units(cost)))
        {
            Some(Err(e)) => {
                errors.push(Some(e));
                FAILED
            }
            _ => ALLOWED,
        }
    }

    /// The `local` fallback: forgets `key`.
    #[wasm_bindgen(js_name = localReset)]
    pub fn local_reset(&self, key: &str) -> bool {
        self.local.as_ref().is_some_and(|l| l.reset(key))
    }
}

//! The wasm half of the npm entry `tollgate/redis` (the `store` feature, built only into
//! `pkg/redis/`, so the main package's `.wasm` does not carry it).
//!
//! JavaScript moves the bytes of the Redis protocol (the scripts in `crates/redis/lua/`,
//! shared with the Rust crate `tollgate-redis`); the protocol's rules are the core's
//! ([`tollgate::store`] and [`tollgate::store::fleet`]), applied here: [`FleetLimits::decide`]
//! takes the values read from Redis, Redis's clock and a round of queued requests, decodes
//! the values, decides the requests in order with one [`Batch`], and returns each request's
//! decision and the values to commit (a fresh write id and the state) with their times to
//! live, all or nothing. The key names ([`FleetLimits::key_head`], [`FleetLimits::slots`]),
//! the fallback's decisions and the handling of failed calls ([`FleetLimits::handle`]) are
//! the core's too.
//!
//! Nothing is allocated per round at the boundary: the states read, the numbers in (each
//! slot's state length, then the requests) and out (decisions and writes) and the states to
//! write live in buffers owned by [`FleetLimits`], which JavaScript reads and writes through
//! views over wasm memory ([`FleetLimits::prepare`] sizes them, the `*_ptr` methods say
//! where they are; see [`FleetLimits::decide`] for the layouts). Measured in Node at 10k keys:
//! passing them as arrays (wasm-bindgen copies each into a fresh allocation and the output
//! back out of one) was a sixth of the npm client's own work per check.

use std::cell::{Cell, RefCell};

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::metrics::{Behaviour, Tally, REASONS};
use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, KeyWrite, Ttl, DECISION_FIELDS};
use tollgate::store::{Batch, DenyCache, Limits, Op};
use tollgate::{DecideError, Decision, Policy, NANOS_PER_SEC};
use wasm_bindgen::prelude::*;

use crate::{
    cost_units, errors, keeps_within, max_keys, metrics, ms, now_ns, spec, ALLOWED, DENIED, FAILED,
};

mod protocol;

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

/// The most denials the deny cache holds (as `tollgate-redis`'s).
const MAX_DENIALS: usize = 100_000;

/// A deny cache entry's key: the limiter's key and the request's tenant (a fair share's
/// tenant window is its own).
type Denied = (String, Option<String>);

/// The limits of one `RedisLimiter` (a policy, a stack or a fair share), the decisions on
/// states read from Redis, the in-memory limiter of the `local` fallback, and the deny
/// cache (the core's [`DenyCache`]).
#[wasm_bindgen]
pub struct FleetLimits {
    limits: Limits,
    /// The `local` fallback's limiter over the same limits, if that fallback was declared.
    local: Option<KeyedLimiter<String>>,
    /// The error of each failed request of the last call, by position.
    errors: RefCell<Vec<Option<DecideError>>>,
    /// The buffers shared with JavaScript.
    io: RefCell<Io>,
    /// The keys' times to live ([`FleetLimits::times_to_live`]); `None` under a test clock.
    ttl: Cell<Option<Ttl>>,
    /// Where write ids come from: seeded once from the platform's randomness.
    ids: RefCell<fastrand::Rng>,
    /// Denials remembered until their retry time, on `performance.now()`'s clock.
    denials: RefCell<DenyCache<Denied>>,
    /// The limiter's counts ([`crate::metrics`]), told by JavaScript, which knows where each
    /// decision came from and which calls failed.
    tally: RefCell<Tally>,
}

/// [`FleetLimits::decide`]'s input and output, reused from call to call.
#[derive(Default)]
struct Io {
    /// In: each slot's value as read (version and state), one after the other.
    states: Vec<u8>,
    /// In: each slot's state length, then the requests' (kind, cost, maxDelay) triples.
    numbers: Vec<f64>,
    /// Out: the decisions and the writes.
    out: Vec<f64>,
    /// Out: the values to write (write id and state), one after the other.
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

/// A decision read back from six numbers of [`push`]'s form (durations in whole ms), with
/// the core's rule for a module reply's fields ([`fleet::decision_from_fields`]); `None`
/// when a number is not a whole number from 0 to 2^53 or `allowed` is not 0 or 1.
fn decision_from(numbers: &[f64]) -> Option<Decision> {
    if numbers.len() != DECISION_FIELDS {
        return None;
    }
    let mut fields = [0u64; DECISION_FIELDS];
    for (field, &x) in fields.iter_mut().zip(numbers) {
        if !(x.fract() == 0.0 && (0.0..=crate::spec::MAX_SAFE_INTEGER).contains(&x)) {
            return None;
        }
        *field = x as u64;
    }
    fleet::decision_from_fields(fields)
}

/// A combined decision and each limit's, read back from `numbers` (six each, the combined
/// first); `None` unless every one reads.
fn stack_from(numbers: &[f64]) -> Option<StackDecision> {
    if numbers.len() < 2 * DECISION_FIELDS || numbers.len() % DECISION_FIELDS != 0 {
        return None;
    }
    let mut all = numbers.chunks_exact(DECISION_FIELDS).map(decision_from);
    Some(StackDecision {
        decision: all.next()??,
        each: all.collect::<Option<Vec<Decision>>>()?,
    })
}

fn local_limiter(
    limits: &Limits,
    max: Option<f64>,
) -> Result<Option<KeyedLimiter<String>>, JsValue> {
    let Some(max) = max else { return Ok(None) };
    Ok(Some(limits.keyed(max_keys(max)?)))
}

/// A request kind of [`FleetLimits::decide`]'s input as the core's [`Op`].
fn op(kind: u32, cost: u64, max_delay_ms: f64) -> Option<Op> {
    Some(match kind {
        OP_CHECK => Op::Check(cost),
        // A negative maxDelay: a look, which keeps nothing.
        OP_ACQUIRE => Op::Acquire {
            cost,
            left: (max_delay_ms >= 0.0).then(|| now_ns(max_delay_ms)),
        },
        OP_PEEK => Op::Peek(0),
        OP_RELEASE => Op::Release(cost),
        _ => return None,
    })
}

#[wasm_bindgen]
impl FleetLimits {
    fn with(limits: Limits, local_max_keys: Option<f64>) -> Result<FleetLimits, JsValue> {
        Ok(FleetLimits {
            local: local_limiter(&limits, local_max_keys)?,
            limits,
            errors: RefCell::new(Vec::new()),
            io: RefCell::new(Io::default()),
            ttl: Cell::new(Some(Ttl {
                grace_ms: 1_000,
                lease_ms: 60_000,
            })),
            ids: RefCell::new(fastrand::Rng::with_seed(getrandom::u64().unwrap_or(0))),
            denials: RefCell::new(DenyCache::new(MAX_DENIALS)),
            tally: RefCell::default(),
        })
    }

    /// Counts a decision made at source `source` (its index in
    /// [`tollgate::metrics::Source::ALL`]: store, deny cache, fallback), sorted by the core
    /// from its `allowed`, `limit` and `remaining`.
    pub fn record(&self, source: u32, allowed: bool, limit: f64, remaining: f64) {
        let t = &mut *self.tally.borrow_mut();
        metrics::decision(t, metrics::source(source), allowed, limit, remaining);
    }

    /// Counts a failed store call after which the declared behaviour `behaviour` decided
    /// (its index in [`Behaviour::ALL`]: open, closed, local), for the reason `why` (its
    /// index in [`REASONS`]: unreachable, timeout, indeterminate).
    #[wasm_bindgen(js_name = recordFailure)]
    pub fn record_failure(&self, behaviour: u32, why: u32) {
        let behaviour = Behaviour::ALL.get(behaviour as usize);
        if let (Some(b), Some(w)) = (behaviour, REASONS.get(why as usize)) {
            self.tally.borrow_mut().failure(*b, *w);
        }
    }

    /// Counts a finished `acquire`: admitted at source `source` after `waited` ms with the
    /// admitting decision's `limit` and `remaining`, or given up.
    pub fn waited(&self, source: u32, admitted: bool, waited: f64, limit: f64, remaining: f64) {
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
    /// * the input numbers ([`FleetLimits::prepare`]): first each slot's value length in the
    ///   input bytes, the values as read, one after the other (0: an absent key); then a triple (kind,
    ///   cost, maxDelay) per request: [`OP_CHECK`], [`OP_PEEK`], [`OP_RELEASE`],
    ///   [`OP_ACQUIRE`] (whose `maxDelay`, in ms, is the most queue delay it may keep,
    ///   negative for a look that keeps nothing; ignored by the other kinds).
    /// * `secs`, `micros`: the clock, as Redis `TIME` answers it.
    ///
    /// Output, for each request, `1 + 6 * (1 + slots)` numbers: its status ([`ALLOWED`],
    /// [`DENIED`], [`RELEASED`], or [`FAILED`]: [`FleetLimits::error`] gives the exception),
    /// then the combined decision and each slot's (six numbers each: allowed, limit,
    /// remaining, resetAfter, retryAfter, delay; zeros when not decided). Then, for each
    /// slot, the write: action (0 keep, 1 delete, 2 put), time to live in ms (the core's
    /// [`Ttl`]) and the length of its value (a fresh write id and the state) at
    /// [`FleetLimits::bytes_ptr`]. Throws a `TypeError` (`field: "state"`,
    /// `rule: "corrupt-state"`, `value`: the slot's index) for a value that is not a
    /// state's; nothing is decided then.
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
            let stored = fleet::decode_value(bytes).map_err(|e| {
                let index = JsValue::from_f64(i as f64);
                errors::option_error("state", &index, "corrupt-state", &e.to_string(), false)
            })?;
            loaded.push(stored.map(|s| s.state));
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
        for request in ops.chunks_exact(3) {
            let start = out.len();
            let result = match op(request[0] as u32, cost_units(request[1]), request[2]) {
                Some(op) => batch.apply(op),
                None => Err(DecideError::NotConcurrency {
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
        let mut writes: Vec<Option<KeyWrite>> = vec![None; slots.len()];
        let ids = &mut *self.ids.borrow_mut();
        for (i, w) in fleet::key_writes(&batch, self.ttl.get(), || ids.u64(..)) {
            writes[i] = Some(w);
        }
        io.bytes.clear();
        for w in writes {
            match w {
                None => out.extend([0.0, 0.0, 0.0]),
                Some(KeyWrite::Delete) => out.extend([1.0, 0.0, 0.0]),
                Some(KeyWrite::Put { value, ttl_ms }) => {
                    io.bytes.extend_from_slice(&value);
                    out.extend([2.0, ttl_ms as f64, value.len() as f64]);
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

    /// Reads a `TOLLGATE.CHECK` / `PEEK` reply (the module's: six integers, then an array
    /// of six per limit), given flattened into the input numbers ([`FleetLimits::prepare`]:
    /// the combined decision's six, then each limit's six), by the core's rule for its
    /// fields. Returns how many numbers it wrote at [`FleetLimits::out_ptr`] (one request's
    /// answer, as [`FleetLimits::decide`] writes it), or 0 when the reply is not a
    /// decision.
    #[wasm_bindgen(js_name = moduleReply)]
    pub fn module_reply(&self) -> usize {
        let io = &mut *self.io.borrow_mut();
        io.out.clear();
        match stack_from(&io.numbers) {
            Some(d) => answer(&mut io.out, &d),
            None => return 0,
        }
        io.out.len()
    }

    /// The deny cache: the denial remembered for `key` (and `tenant`) that still holds at
    /// `now` (ms, `performance.now()`) for a request of `cost`, its waits counted down
    /// (the core's [`DenyCache::get`]). Returns how many numbers it wrote at
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
    /// ([`DenyCache::remember`]). Returns how many denials the cache holds: JavaScript
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

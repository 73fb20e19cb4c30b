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
//! where they are; see [`FleetLimits::decide`] for the layouts). Passed as arrays,
//! wasm-bindgen copies each into a fresh allocation and the output back out of one, a
//! measured part of the npm client's own work per check (PERF.md, "Measured reasons in the
//! code").

use std::cell::{Cell, RefCell};

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::metrics::Tally;
use tollgate::store::fleet::{self, KeyWrite, Ttl};
use tollgate::store::{Batch, DenyCache, Limits, Op};
use tollgate::{DecideError, Nanos, Policy, State, NANOS_PER_SEC};
use wasm_bindgen::prelude::*;

use crate::{cost_units, errors, now_ns, spec, FAILED};

mod counts;
mod deny;
mod headers;
mod local;
mod numbers;
mod plans;
mod protocol;
mod settle;

pub use plans::FleetPlans;

use deny::{Denied, MAX_DENIALS};
use local::local_limiter;
use numbers::answer;

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
/// states read from Redis, the in-memory limiter of the `local` fallback, and the deny
/// cache (the core's [`DenyCache`]).
#[wasm_bindgen]
pub struct FleetLimits {
    limits: Limits,
    /// The `local` fallback's limiter over the same limits, if that fallback was declared;
    /// keyed by bytes as `Core` is (one instantiation of the keyed store in this .wasm).
    local: Option<KeyedLimiter<Vec<u8>>>,
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
    /// Slots this process took by admissions and has not given back yet.
    in_use: crate::metrics::InUse,
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
    /// In and out: a module reply's numbers, read in place ([`FleetLimits::module_reply`]).
    /// Only [`FleetLimits::module_buffer`] resizes it, so JavaScript keeps its address.
    module: Vec<f64>,
    /// Out: the last [`FleetLimits::settle`]'s settle record (the core's
    /// [`fleet::settled_record`]), which the settle script writes with the states.
    record: Vec<u8>,
}
/// The clock as Redis `TIME` answers it (`secs`, `micros`), in ns.
fn instant(secs: f64, micros: f64) -> Nanos {
    (secs as u64)
        .saturating_mul(NANOS_PER_SEC)
        .saturating_add((micros as u64).saturating_mul(1_000))
}

/// The states of `slots` slots decoded from their values as read (`lens`: each value's
/// length in `states`, one after the other; 0: absent). Throws a `TypeError` (`field:
/// "state"`, `rule: "corrupt-state"`, `value`: the slot's index) for a value that is not a
/// state's.
fn loaded_states(states: &[u8], lens: &[f64], slots: usize) -> Result<Vec<Option<State>>, JsValue> {
    let mut loaded = Vec::with_capacity(slots);
    let mut at = 0usize;
    for (i, len) in lens.iter().enumerate() {
        let len = *len as usize;
        let bytes = states.get(at..at + len).unwrap_or_default();
        at += len;
        let stored = fleet::decode_value(bytes).map_err(|e| {
            let index = JsValue::from_f64(i as f64);
            errors::option_error("state", &index, "corrupt-state", &e.to_string(), false)
        })?;
        loaded.push(stored.map(|s| s.state));
    }
    loaded.resize(slots, None);
    Ok(loaded)
}

/// Appends the batch's writes to `out`, for each of its `slots` slots: action (0 keep, 1
/// delete, 2 put), time to live in ms and the length of its value (a fresh write id and
/// the state), which goes to `bytes`.
fn put_writes(
    out: &mut Vec<f64>,
    bytes: &mut Vec<u8>,
    batch: &Batch<'_>,
    slots: usize,
    ttl: Option<Ttl>,
    ids: &mut fastrand::Rng,
) {
    let mut writes: Vec<Option<KeyWrite>> = vec![None; slots];
    for (i, w) in fleet::key_writes(batch, ttl, || ids.u64(..)) {
        writes[i] = Some(w);
    }
    bytes.clear();
    for w in writes {
        match w {
            None => out.extend([0.0, 0.0, 0.0]),
            Some(KeyWrite::Delete) => out.extend([1.0, 0.0, 0.0]),
            Some(KeyWrite::Put { value, ttl_ms }) => {
                bytes.extend_from_slice(&value);
                out.extend([2.0, ttl_ms as f64, value.len() as f64]);
            }
        }
    }
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
            errors: RefCell::new(Vec::new()),
            io: RefCell::new(Io::default()),
            ttl: Cell::new(Some(Ttl {
                grace_ms: 1_000,
                lease_ms: 60_000,
            })),
            ids: RefCell::new(fastrand::Rng::with_seed(getrandom::u64().unwrap_or(0))),
            denials: RefCell::new(DenyCache::new(MAX_DENIALS)),
            tally: RefCell::default(),
            in_use: crate::metrics::InUse::new(limits.holds_slots()),
            limits,
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
    ///   cost, maxDelay) per request: `OP_CHECK`, `OP_PEEK`, `OP_RELEASE`,
    ///   `OP_ACQUIRE` (whose `maxDelay`, in ms, is the most queue delay it may keep,
    ///   negative for a look that keeps nothing; ignored by the other kinds).
    /// * `secs`, `micros`: the clock, as Redis `TIME` answers it.
    ///
    /// Output, for each request, `1 + 6 * (1 + slots)` numbers: its status
    /// ([`crate::ALLOWED`], [`crate::DENIED`], `RELEASED`, or [`FAILED`]:
    /// [`FleetLimits::error`] gives the exception), then the combined decision and each
    /// slot's (six numbers each: allowed, limit, remaining, resetAfter, retryAfter, delay;
    /// zeros when not decided). Then, for each slot, the write: action (0 keep, 1 delete, 2 put), time to live in ms (the core's
    /// [`Ttl`]) and the length of its value (a fresh write id and the state) at
    /// [`FleetLimits::bytes_ptr`]. Throws a `TypeError` (`field: "state"`,
    /// `rule: "corrupt-state"`, `value`: the slot's index) for a value that is not a
    /// state's; nothing is decided then.
    pub fn decide(&self, tenant: Option<String>, secs: f64, micros: f64) -> Result<usize, JsValue> {
        let slots = self.limits.slots(tenant.as_deref());
        let io = &mut *self.io.borrow_mut();
        let n = slots.len().min(io.numbers.len());
        let (lens, ops) = io.numbers.split_at(n);
        let loaded = loaded_states(&io.states, lens, slots.len())?;
        let now = instant(secs, micros);
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
        let ids = &mut *self.ids.borrow_mut();
        put_writes(out, &mut io.bytes, &batch, slots.len(), self.ttl.get(), ids);
        Ok(out.len())
    }

    /// The exception of the failed request at position `i` of the last call.
    pub fn error(&self, i: usize) -> JsValue {
        match self.errors.borrow_mut().get_mut(i).and_then(Option::take) {
            Some(e) => errors::decide_error(&e),
            None => JsValue::UNDEFINED,
        }
    }
}

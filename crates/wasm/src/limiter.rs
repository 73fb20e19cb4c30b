//! [`Core`], the keyed limiter under the JS `Limiter` (`js/limiter.js`): one policy, an
//! all-or-nothing stack or a fair share, with each key's state in wasm memory, bounded by
//! `maxKeys` ([`tollgate::keyed::KeyedLimiter`]). Its calls take keys through the key buffer
//! and answer decisions through the output buffer (see the crate docs); the response
//! headers for a decision are in `headers`, the same calls with Rust strings in `strings`.

use std::cell::{Cell, RefCell};

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::metrics::{Source, Tally};
use tollgate::settle::{Reservation, Settlement};
use tollgate::store::bounds::{self, Bound, OverBound};
use tollgate::{DecideError, Decision, Overage, Policy, ReservationError};
use wasm_bindgen::prelude::*;

use crate::wait::keeps_within;
use crate::{
    cost_units, errors, http, max_keys, metrics, ms, now_ns, spec, ALLOWED, DENIED, FAILED,
};

mod headers;
mod strings;

/// Number of `f64` slots in a limiter's output buffer.
pub const OUT_LEN: usize = 5;

/// The key buffer's first size in bytes ([`Core::key_ptr`]); longer keys (or a key and a
/// tenant) grow it ([`Core::key_buffer`]).
pub const KEY_MAX: usize = 128;

/// Number of `u64` slots in a limiter's reservation buffer ([`Core::reservation_ptr`]):
/// a [`Reservation`]'s `id, limiter, policies, key, estimate, at`, in that order.
pub const RESERVATION_LEN: usize = 6;

/// Why the last [`FAILED`] call failed.
enum Failure {
    /// The core refused the decision (a cost above the capacity, ...).
    Decide(DecideError),
    /// A key part (`"key"` or `"tenant"`) over the core's bound on its bytes; nothing was
    /// decided or stored.
    Key(&'static str, OverBound),
    /// The core refused a reserve or a settle (a leaky queue, a foreign reservation, ...).
    Reservation(ReservationError),
}

impl From<DecideError> for Failure {
    fn from(e: DecideError) -> Failure {
        Failure::Decide(e)
    }
}

impl Failure {
    /// The exception JS throws for it.
    fn to_js(&self) -> JsValue {
        match self {
            Failure::Decide(e) => errors::decide_error(e),
            Failure::Key(field, e) => errors::key_error(field, e),
            Failure::Reservation(e) => errors::reservation_error(e),
        }
    }
}

/// `Ok` when a key part of `len` bytes is within the core's bound
/// ([`bounds::MAX_KEY_BYTES`]). The length is JS's: the key's UTF-8 length even when it did
/// not fit in the key buffer (which grows only as far as two parts at the bound need).
fn check_part(field: &'static str, len: usize) -> Result<(), Failure> {
    bounds::check(Bound::KeyBytes, len).map_err(|e| Failure::Key(field, e))
}

/// A settlement as JS reads it: `refunded, charged, unpaid`, then each limit's three (a
/// stack only).
pub(crate) fn settlement_numbers(s: &Settlement) -> Vec<f64> {
    let total = [s.refunded, s.charged, s.unpaid];
    let each = s
        .each
        .iter()
        .flat_map(|e| [e.refunded, e.charged, e.unpaid]);
    total.into_iter().chain(each).map(|n| n as f64).collect()
}

/// The most the key buffer grows to: a key and a tenant, each at the bound. A longer key
/// is refused by its length alone, so JS never needs more room than this.
const KEY_ROOM: usize = 2 * bounds::MAX_KEY_BYTES;

/// A keyed limiter over one policy, an all-or-nothing stack, or a fair share, with its state
/// in wasm memory. Used through the JS `Limiter` class.
#[wasm_bindgen]
pub struct Core {
    /// Keyed by the key's UTF-8 bytes, not a `String`: a key is only an identity here, so a
    /// check needs no UTF-8 validation of it (`core::str::from_utf8` was a sixteenth of a
    /// check's wasm operators: `scripts/counts.sh --npm --profile`; (PERF.md, "Measured reasons in the code")).
    limiter: KeyedLimiter<Vec<u8>>,
    /// `limit, remaining, resetAfter, retryAfter, delay` of the last decision, in ms.
    out: Box<[Cell<f64>; OUT_LEN]>,
    /// The reservation of the last admitted [`Core::reserve_buf`], or the one JS writes for
    /// [`Core::settle_buf`] ([`RESERVATION_LEN`] numbers): u64s, which an `f64` would round.
    reservation: Box<[Cell<u64>; RESERVATION_LEN]>,
    /// The key (and tenant) of the next call, UTF-8, written by JS at [`Core::key_ptr`];
    /// [`KEY_MAX`] bytes to start with, grown by [`Core::key_buffer`]. Passing keys here
    /// costs no allocation and no wasm-bindgen string glue per call. JS writes it only
    /// between calls, when no borrow of the cell is alive.
    key: RefCell<Box<[u8]>>,
    error: RefCell<Option<Failure>>,
    /// A fair share (its last policy is the tenant window, named `<name>.tenant`).
    fair_share: bool,
    /// The decisions' counts ([`metrics`]): the first for calls without a route, then one
    /// per route ([`Core::add_series`]).
    tallies: RefCell<Vec<Tally>>,
    /// Slots taken by admissions and not given back by `release` yet, whatever the route
    /// (`tollgate.concurrency.in_use`).
    in_use: metrics::InUse,
}

#[wasm_bindgen]
impl Core {
    /// A core over `limiter`, with a concurrency gauge when the limiter holds slots
    /// ([`KeyedLimiter::holds_slots`], which reads its policies in place: asking for their
    /// copies instead made the `.wasm` larger, (PERF.md, "Measured reasons in the code")).
    fn with(limiter: KeyedLimiter<Vec<u8>>) -> Core {
        Core {
            out: Box::default(),
            reservation: Box::default(),
            key: RefCell::new(vec![0; KEY_MAX].into_boxed_slice()),
            error: RefCell::new(None),
            fair_share: false,
            tallies: RefCell::new(vec![Tally::default()]),
            in_use: metrics::InUse::new(limiter.holds_slots()),
            limiter,
        }
    }

    /// Counts `decision`, for a request of `cost`, in series `series` (a decision made here,
    /// in the store: the core's [`Tally::decision`]), and the slots an admission took.
    /// Inlined: the decision is no longer passed through memory for it, for fewer wasm
    /// operators a check and no larger a `.wasm` (PERF.md, "Measured reasons in the code"). With the feature
    /// `uncounted` it counts nothing: the npm suite builds that package too, to hold what
    /// counting costs a check (scripts/counts.sh --npm; PERF.md).
    #[inline]
    fn count(&self, series: u32, decision: &Decision, cost: u64) {
        if cfg!(feature = "uncounted") {
            return;
        }
        if let Some(t) = self.tallies.borrow_mut().get_mut(series as usize) {
            t.decision(decision, false, Source::Store);
        }
        self.in_use.decided(decision.allowed, cost);
    }

    /// Slots of the concurrency limit held now (`metrics::InUse::get`; -1 without one).
    #[wasm_bindgen(js_name = concurrencyInUse)]
    pub fn concurrency_in_use(&self) -> f64 {
        self.in_use.get()
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

    /// Counts a finished `acquire` of `cost` in series `series`: admitted after `waited` ms
    /// with the admitting decision's `limit` and `remaining` (and its slots taken), or given
    /// up (one decision, and the wait in the histogram).
    pub fn waited(
        &self,
        series: u32,
        admitted: bool,
        waited: f64,
        limit: f64,
        remaining: f64,
        cost: f64,
    ) {
        if let Some(t) = self.tallies.borrow_mut().get_mut(series as usize) {
            metrics::wait(t, Source::Store, admitted, waited, limit, remaining);
        }
        self.in_use.decided(admitted, cost_units(cost));
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
        let (shared, tenant) = (spec::policy(shared)?, spec::policy(tenant)?);
        let fair = FairShare::new(shared, tenant).map_err(|e| errors::policy_error(&e))?;
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

    /// Makes the key buffer at least `bytes` long, or as long as two key parts at the
    /// core's bound when `bytes` is more (`KEY_ROOM`: a longer key is refused by its
    /// length, so a megabyte key never becomes a megabyte of wasm memory), its contents
    /// kept, and returns its length in bytes (its address, [`Core::key_ptr`], may have moved).
    #[wasm_bindgen(js_name = keyBuffer)]
    pub fn key_buffer(&self, bytes: usize) -> usize {
        let mut buffer = self.key.borrow_mut();
        let bytes = bytes.min(KEY_ROOM);
        if buffer.len() < bytes {
            let mut grown = vec![0; bytes.max(2 * buffer.len())].into_boxed_slice();
            grown[..buffer.len()].copy_from_slice(&buffer);
            *buffer = grown;
        }
        buffer.len()
    }

    /// Runs `f` with the key buffer's first `key` bytes (the key, as bytes) and the `tenant`
    /// bytes after them (as a string), when both are within the core's bound.
    fn keys<R>(
        &self,
        key: usize,
        tenant: usize,
        f: impl FnOnce(&[u8], &str) -> R,
    ) -> Result<R, Failure> {
        check_part("key", key)?;
        check_part("tenant", tenant)?;
        // JS writes the key buffer only between calls into this module, and nothing below
        // calls out to JS or grows the buffer, so this borrow ends before JS writes again.
        let buffer = self.key.borrow();
        let (key, rest) = buffer.split_at(key.min(buffer.len()));
        let tenant = &rest[..tenant.min(rest.len())];
        // JS writes UTF-8 here (TextEncoder's, or ASCII); a tenant that is not would be a
        // wrapper bug, and is refused as an empty string rather than trusted.
        Ok(f(key, std::str::from_utf8(tenant).unwrap_or("")))
    }

    /// Runs `f` with the key buffer's first `len` bytes, the key, when it is within the
    /// core's bound (see [`Core::keys`]).
    ///
    /// (The bound is checked before `f` and `f` answers whole, so that a check's own result
    /// stays a `Result<Decision, DecideError>`: carried through as a `Result` with the key
    /// error in it, it cost every check 3-4% more wasm operators, PERF.md.)
    fn with_key<R>(&self, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R, Failure> {
        check_part("key", len)?;
        let buffer = self.key.borrow();
        Ok(f(&buffer[..len.min(buffer.len())]))
    }

    /// Decides a request of `cost` for the key in the key buffer (`len` bytes) at `now`
    /// (ms); see [`ALLOWED`], [`DENIED`], [`FAILED`].
    #[wasm_bindgen(js_name = checkBuf)]
    pub fn check_buf(&self, len: usize, now: f64, cost: f64) -> u32 {
        let cost = cost_units(cost);
        self.with_key(len, |key| {
            let result = self.limiter.check(key, now_ns(now), cost);
            if let Ok(d) = &result {
                self.count(0, d, cost);
            }
            self.emit(result)
        })
        .unwrap_or_else(|e| self.fail(e))
    }

    /// [`Core::check_buf`]'s short answer, for `Limiter.allow`: [`ALLOWED`], [`DENIED`] or
    /// [`FAILED`], with nothing written to the output buffer. The same decision as `check`
    /// (the core's [`KeyedLimiter::check`]); what it saves per call is writing the answer's
    /// numbers (three of them converted to ms) and the object JS would build from them. The
    /// core's shorter [`KeyedLimiter::admit`] is not used: it is a second instantiation of
    /// the keyed store with every algorithm inlined, kilobytes more of gzipped `.wasm`,
    /// over the package's budget (PERF.md, "Measured reasons in the code").
    #[wasm_bindgen(js_name = allowBuf)]
    pub fn allow_buf(&self, len: usize, now: f64, cost: f64) -> u32 {
        let cost = cost_units(cost);
        self.with_key(len, |key| {
            match self.limiter.check(key, now_ns(now), cost) {
                Ok(d) => {
                    self.count(0, &d, cost);
                    if d.allowed {
                        ALLOWED
                    } else {
                        DENIED
                    }
                }
                Err(e) => self.fail(e.into()),
            }
        })
        .unwrap_or_else(|e| self.fail(e))
    }

    /// The standing of the key in the key buffer (`len` bytes) at `now`, without charging it.
    #[wasm_bindgen(js_name = peekBuf)]
    pub fn peek_buf(&self, len: usize, now: f64) -> u32 {
        self.with_key(len, |key| self.emit(self.limiter.peek(key, now_ns(now))))
            .unwrap_or_else(|e| self.fail(e))
    }

    /// The address of the reservation buffer in wasm memory ([`RESERVATION_LEN`] `u64`s).
    #[wasm_bindgen(js_name = reservationPtr)]
    pub fn reservation_ptr(&self) -> u32 {
        self.reservation.as_ptr() as usize as u32
    }

    /// Reserves `estimate` for the key in the key buffer (`len` bytes) at `now` (ms): the
    /// core's [`KeyedLimiter::reserve`], a decision that charges the estimate as a check
    /// does. [`ALLOWED`] (the reservation in the reservation buffer), [`DENIED`] (nothing
    /// charged, no reservation) or [`FAILED`]; the decision in the output buffer. Counted as
    /// a check of `estimate` in the counts without a route.
    #[wasm_bindgen(js_name = reserveBuf)]
    pub fn reserve_buf(&self, len: usize, now: f64, estimate: f64) -> u32 {
        let estimate = cost_units(estimate);
        self.with_key(len, |key| {
            match self.limiter.reserve(key, now_ns(now), estimate) {
                Ok((d, issued)) => {
                    self.count(0, &d, estimate);
                    if let Some(r) = issued {
                        let parts = [r.id, r.limiter, r.policies, r.key, r.estimate, r.at];
                        for (slot, part) in self.reservation.iter().zip(parts) {
                            slot.set(part);
                        }
                    }
                    self.emit(Ok(d))
                }
                Err(e) => self.fail(Failure::Reservation(e)),
            }
        })
        .unwrap_or_else(|e| self.fail(e))
    }

    /// Settles the reservation in the reservation buffer (written by JS) for the key in the
    /// key buffer (`len` bytes) with the `actual` cost at `now` (ms): the core's
    /// [`KeyedLimiter::settle`], all or nothing; an overage is a debt, or charged only up to
    /// the limit when `up_to_limit`. Answers `refunded, charged, unpaid`, then each limit's
    /// three for a stack; throws the core's named error (nothing settled).
    #[wasm_bindgen(js_name = settleBuf)]
    pub fn settle_buf(
        &self,
        len: usize,
        now: f64,
        actual: f64,
        up_to_limit: bool,
    ) -> Result<Vec<f64>, JsValue> {
        let [id, limiter, policies, key, estimate, at] = self.reservation.each_ref().map(Cell::get);
        let reservation = Reservation {
            id,
            limiter,
            policies,
            key,
            estimate,
            at,
        };
        let overage = if up_to_limit {
            Overage::UpToLimit
        } else {
            Overage::Debt
        };
        let settled = self
            .with_key(len, |key| {
                self.limiter
                    .settle(key, reservation, cost_units(actual), now_ns(now), overage)
                    .map_err(|refused| Failure::Reservation(refused.error))
            })
            .and_then(|s| s)
            .map_err(|e| e.to_js())?;
        Ok(settlement_numbers(&settled))
    }

    /// Keeps `e` for [`Core::take_error`]: [`FAILED`].
    fn fail(&self, e: Failure) -> u32 {
        *self.error.borrow_mut() = Some(e);
        FAILED
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
            Err(e) => self.fail(e.into()),
        }
    }

    /// The full decision for the key in the key buffer (`key_len` bytes, then `tenant_len`
    /// bytes of tenant when `has_tenant`): the combined decision, then each limit's in stack
    /// order ([`tollgate::stack`]), [`crate::DECISION_LEN`] numbers each (see [`http::decision`]).
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
        let cost = cost_units(cost);
        let d = self
            .keys(key_len, tenant_len, |key, tenant| {
                self.limiter
                    .check_detailed(key, has_tenant.then_some(tenant), now_ns(now), cost)
            })
            .and_then(|d| d.map_err(Failure::Decide));
        if let Ok(d) = &d {
            self.count(series, &d.decision, cost);
        }
        let d = d.map_err(|e| e.to_js())?;
        Ok(std::iter::once(&d.decision)
            .chain(&d.each)
            .flat_map(http::numbers)
            .collect())
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
        self.keys(key_len, tenant_len, |key, tenant| {
            let keep = |d: &Decision| keeps_within(d, left);
            let (now, cost) = (now_ns(now), cost_units(cost));
            self.emit(
                self.limiter
                    .check_if(key, Some(tenant), now, cost, keep)
                    .map(|d| d.decision),
            )
        })
        .unwrap_or_else(|e| self.fail(e))
    }

    /// Releases `cost` slots of the concurrency policies for the key in the key buffer
    /// (`len` bytes): [`ALLOWED`] or [`FAILED`].
    #[wasm_bindgen(js_name = release)]
    pub fn release_buf(&self, len: usize, cost: f64) -> u32 {
        self.with_key(len, |key| {
            match self.limiter.release(key, cost_units(cost)) {
                Ok(()) => {
                    self.in_use.released(cost_units(cost));
                    ALLOWED
                }
                Err(e) => self.fail(e.into()),
            }
        })
        .unwrap_or_else(|e| self.fail(e))
    }

    /// Forgets the key in the key buffer (`len` bytes); whether it was stored (never, for a
    /// key over the bound: no check stores one).
    #[wasm_bindgen(js_name = reset)]
    pub fn reset_buf(&self, len: usize) -> bool {
        self.with_key(len, |key| self.limiter.reset(key))
            .unwrap_or(false)
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
            Some(e) => e.to_js(),
            None => JsValue::UNDEFINED,
        }
    }
}

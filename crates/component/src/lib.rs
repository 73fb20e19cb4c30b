//! # tollgate-component
//!
//! tollgate's keyed rate limiter as a WebAssembly component: the guest side of the WIT
//! world `tollgate:limiter/limiter` (`wit/tollgate.wit` at the repository root).
//!
//! This crate is a thin adapter: every decision is made by the `tollgate` core
//! ([`tollgate::keyed::KeyedLimiter`], and for the `adaptive` interface the core's gradient
//! controller, [`tollgate::adaptive::gradient`]); here we only convert between the core's
//! types and the WIT ones (milliseconds in, milliseconds rounded up out, typed errors).
//!
//! Built for `wasm32-unknown-unknown` and wrapped as a component (`jco new` or
//! `wasm-tools component new`), it imports nothing: no WASI, no clock, no randomness.
//! See `crates/component/README.md` for building and calling it from wasmtime and jco.
// The only unsafe code is wit-bindgen's generated ABI glue, allowed in `mod bindings`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod adaptive;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::settle::{Reservation, Settled, Settlement};
use tollgate::{
    millis, Algorithm, DecideError, Decision, Field, Identity, MillisDecision, Overage, Policy,
    PolicyError, ReservationError, Rule,
};

/// Generated from `wit/tollgate.wit`: the WIT types, the traits to implement, and the
/// canonical-ABI exports (wit-bindgen's unsafe glue; none of it is written by hand).
#[allow(missing_docs, unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        world: "limiter",
        path: "../../wit",
    });

    use super::Component;
    export!(Component with_types_in self);
}

use bindings::exports::tollgate::limiter::{keyed, policies, types as wit};

/// The component: implements every exported interface.
pub struct Component;

/// A `keyed-limiter` resource: the core's keyed limiter over `String` keys.
pub struct Limiter {
    inner: KeyedLimiter<String>,
    reservations: RefCell<Reservations>,
}

/// How many reservations a limiter remembers in each of its two records (the WIT
/// `keyed-limiter.settle` documents it).
const MAX_RESERVATIONS: usize = 100_000;

/// A limiter's record of its reservations, which makes a settle idempotent: those issued
/// and not settled yet, and the answers of those settled. Keyed by id, which the core
/// issues in increasing order, so the oldest is the first; each holds at most
/// [`MAX_RESERVATIONS`], dropping the oldest. The bound errs toward a charge, never a double
/// count: a reservation dropped unsettled stays charged at its estimate, and a settle of a
/// dropped one is `unknown-reservation`.
#[derive(Default)]
struct Reservations {
    /// The limiter number of this limiter's reservations, known from its first.
    issuer: Option<u64>,
    /// id -> the reservation as issued.
    open: BTreeMap<u64, wit::Reservation>,
    /// id -> the key it was settled on and the answer.
    settled: BTreeMap<u64, (String, wit::Settlement)>,
}

/// Inserts into a record, first dropping its oldest entry when it is full.
fn bounded<V>(record: &mut BTreeMap<u64, V>, id: u64, value: V) {
    if record.len() >= MAX_RESERVATIONS {
        record.pop_first();
    }
    record.insert(id, value);
}

/// What a settle finds in the record.
enum Found {
    /// Settled before on the same key: its answer.
    Settled(wit::Settlement),
    /// Waiting for its settle (or settled on another key, which the core refuses): the
    /// reservation as issued.
    Open(wit::Reservation),
    /// Another limiter's: the core names why it is foreign.
    Foreign,
}

impl policies::Guest for Component {
    fn parse_policy(policy: String) -> Result<wit::PolicyInfo, wit::PolicyError> {
        let parsed = parse(&policy, None)?;
        Ok(wit::PolicyInfo {
            canonical: parsed.to_string(),
            algorithm: algorithm(parsed.algorithm()),
            limit: parsed.limit(),
            rate: parsed.quota().map(|q| wit::Quota {
                limit: q.limit(),
                window_ms: q.window_ms(),
            }),
        })
    }
}

impl keyed::Guest for Component {
    type KeyedLimiter = Limiter;
}

impl keyed::GuestKeyedLimiter for Limiter {
    fn create(policy: String, max_keys: u32) -> Result<keyed::KeyedLimiter, wit::PolicyError> {
        let max = key_bound(max_keys)?;
        let policy = parse(&policy, None)?;
        Ok(Limiter::wrap(KeyedLimiter::new(policy, max)))
    }

    fn create_stack(
        policies: Vec<String>,
        max_keys: u32,
    ) -> Result<keyed::KeyedLimiter, wit::PolicyError> {
        let max = key_bound(max_keys)?;
        let parsed = policies
            .iter()
            .enumerate()
            .map(|(i, p)| parse(p, Some(i as u32)))
            .collect::<Result<Vec<_>, _>>()?;
        let inner = KeyedLimiter::stack(&parsed, max).map_err(|e| policy_error(e, None))?;
        Ok(Limiter::wrap(inner))
    }

    fn create_fair_share(
        shared: String,
        tenant: String,
        max_keys: u32,
    ) -> Result<keyed::KeyedLimiter, wit::PolicyError> {
        let max = key_bound(max_keys)?;
        let shared = parse(&shared, Some(0))?;
        let tenant = parse(&tenant, Some(1))?;
        let fair = FairShare::new(shared, tenant).map_err(|e| policy_error(e, Some(1)))?;
        Ok(Limiter::wrap(KeyedLimiter::fair_share(fair, max)))
    }

    fn check(
        &self,
        key: String,
        now_ms: u64,
        cost: u64,
    ) -> Result<wit::Decision, wit::DecideError> {
        self.inner
            .check(key.as_str(), millis(now_ms), cost)
            .map(decision)
            .map_err(decide_error)
    }

    fn check_tenant(
        &self,
        key: String,
        tenant: Option<String>,
        now_ms: u64,
        cost: u64,
    ) -> Result<wit::Decision, wit::DecideError> {
        self.check_detailed(key, tenant, now_ms, cost)
            .map(|d| d.decision)
    }

    fn check_detailed(
        &self,
        key: String,
        tenant: Option<String>,
        now_ms: u64,
        cost: u64,
    ) -> Result<wit::StackDecision, wit::DecideError> {
        let d = self
            .inner
            .check_detailed(key.as_str(), tenant.as_deref(), millis(now_ms), cost)
            .map_err(decide_error)?;
        Ok(wit::StackDecision {
            decision: decision(d.decision),
            each: d.each.into_iter().map(decision).collect(),
        })
    }

    fn peek(&self, key: String, now_ms: u64) -> Result<wit::Decision, wit::DecideError> {
        self.inner
            .peek(key.as_str(), millis(now_ms))
            .map(decision)
            .map_err(decide_error)
    }

    fn release(&self, key: String, cost: u64) -> Result<(), wit::DecideError> {
        self.inner.release(key.as_str(), cost).map_err(decide_error)
    }

    fn reset(&self, key: String) -> bool {
        self.inner.reset(key.as_str())
    }

    fn size(&self) -> u64 {
        self.inner.len() as u64
    }

    fn policies(&self) -> Vec<String> {
        self.inner
            .policies()
            .iter()
            .map(Policy::to_string)
            .collect()
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn reserve(
        &self,
        key: String,
        now_ms: u64,
        estimate: u64,
    ) -> Result<wit::Reserved, wit::ReservationError> {
        let (d, issued) = self
            .inner
            .reserve(key.as_str(), millis(now_ms), estimate)
            .map_err(reservation_error)?;
        let reservation = issued.map(|r| {
            let r = wit::Reservation {
                key,
                id: r.id,
                limiter: r.limiter,
                policies: r.policies,
                key_hash: r.key,
                estimate: r.estimate,
                at_ns: r.at,
            };
            let mut record = self.reservations.borrow_mut();
            record.issuer.get_or_insert(r.limiter);
            bounded(&mut record.open, r.id, r.clone());
            r
        });
        Ok(wit::Reserved {
            decision: decision(d),
            reservation,
        })
    }

    fn settle(
        &self,
        reservation: wit::Reservation,
        actual: u64,
        now_ms: u64,
        overage: wit::Overage,
    ) -> Result<wit::Settlement, wit::ReservationError> {
        // The numbers as issued when known (a copy edited since does not move a refund);
        // the key is the caller's, which the core checks against the reservation's.
        let issued = match self.find(&reservation)? {
            Found::Settled(answer) => return Ok(answer),
            Found::Open(issued) => core_reservation(&issued),
            Found::Foreign => core_reservation(&reservation),
        };
        let overage = match overage {
            wit::Overage::Debt => Overage::Debt,
            wit::Overage::UpToLimit => Overage::UpToLimit,
        };
        let id = issued.id;
        let done = self
            .inner
            .settle(
                reservation.key.as_str(),
                issued,
                actual,
                millis(now_ms),
                overage,
            )
            .map_err(|refused| reservation_error(refused.error))?;
        let answer = settlement(&done);
        let mut record = self.reservations.borrow_mut();
        record.open.remove(&id);
        bounded(&mut record.settled, id, (reservation.key, answer.clone()));
        Ok(answer)
    }
}

impl Limiter {
    fn wrap(inner: KeyedLimiter<String>) -> keyed::KeyedLimiter {
        keyed::KeyedLimiter::new(Limiter {
            inner,
            reservations: RefCell::default(),
        })
    }

    /// What the record says of `r` (see [`Reservations`]); `unknown-reservation` for one of
    /// this limiter in neither record.
    fn find(&self, r: &wit::Reservation) -> Result<Found, wit::ReservationError> {
        let record = self.reservations.borrow();
        if record.issuer != Some(r.limiter) {
            return Ok(Found::Foreign);
        }
        if let Some((key, answer)) = record.settled.get(&r.id) {
            if *key == r.key {
                return Ok(Found::Settled(answer.clone()));
            }
            // Settled on another key: the core refuses this one (foreign-key).
            return Ok(Found::Foreign);
        }
        match record.open.get(&r.id) {
            Some(issued) => Ok(Found::Open(issued.clone())),
            None => Err(wit::ReservationError::UnknownReservation),
        }
    }
}

/// The core's reservation for a WIT one (the key is passed to the core's settle apart).
fn core_reservation(r: &wit::Reservation) -> Reservation {
    Reservation {
        id: r.id,
        limiter: r.limiter,
        policies: r.policies,
        key: r.key_hash,
        estimate: r.estimate,
        at: r.at_ns,
    }
}

fn settled(s: &Settled) -> wit::Settled {
    wit::Settled {
        refunded: s.refunded,
        charged: s.charged,
        unpaid: s.unpaid,
    }
}

fn settlement(s: &Settlement) -> wit::Settlement {
    wit::Settlement {
        refunded: s.refunded,
        charged: s.charged,
        unpaid: s.unpaid,
        each: s.each.iter().map(settled).collect(),
    }
}

fn reservation_error(e: ReservationError) -> wit::ReservationError {
    match e {
        ReservationError::Decide(d) => wit::ReservationError::Decide(decide_error(d)),
        ReservationError::ActualTooLarge { max, .. } => wit::ReservationError::ActualTooLarge(max),
        ReservationError::Foreign { differs } => wit::ReservationError::Foreign(match differs {
            Identity::Key => wit::Identity::Key,
            Identity::Policy => wit::Identity::Policy,
            Identity::Limiter => wit::Identity::Limiter,
        }),
        ReservationError::NotSettleable { policy } => {
            wit::ReservationError::NotSettleable(algorithm(policy))
        }
    }
}

/// `max-keys` as the core's non-zero bound; zero is a `policy-error` on field `max-keys`.
fn key_bound(max_keys: u32) -> Result<NonZeroUsize, wit::PolicyError> {
    NonZeroUsize::new(max_keys as usize).ok_or_else(|| wit::PolicyError {
        field: wit::Field::MaxKeys,
        value: "0".into(),
        rule: wit::Rule::Zero,
        message: "invalid limiter: max-keys \"0\": must be at least 1".into(),
        index: None,
    })
}

fn parse(text: &str, index: Option<u32>) -> Result<Policy, wit::PolicyError> {
    text.parse::<Policy>().map_err(|e| policy_error(e, index))
}

/// The core's decision, durations in whole milliseconds rounded up.
fn decision(d: Decision) -> wit::Decision {
    let ms = MillisDecision::from(d);
    wit::Decision {
        allowed: ms.allowed,
        limit: ms.limit,
        remaining: ms.remaining,
        reset_after_ms: ms.reset_after,
        retry_after_ms: ms.retry_after,
        delay_ms: ms.delay,
    }
}

fn policy_error(e: PolicyError, index: Option<u32>) -> wit::PolicyError {
    wit::PolicyError {
        field: field(e.field),
        value: e.value.to_string(),
        rule: rule(e.rule),
        message: e.to_string(),
        index,
    }
}

fn field(f: Field) -> wit::Field {
    match f {
        Field::Policy => wit::Field::Policy,
        Field::Algorithm => wit::Field::Algorithm,
        Field::Limit => wit::Field::Limit,
        Field::Window => wit::Field::Window,
        Field::Burst => wit::Field::Burst,
        Field::MaxInFlight => wit::Field::MaxInFlight,
        Field::TenantPolicy => wit::Field::Tenant,
        Field::Stack => wit::Field::Policies,
    }
}

fn rule(r: Rule) -> wit::Rule {
    match r {
        Rule::Missing => wit::Rule::Missing,
        Rule::UnknownAlgorithm => wit::Rule::UnknownAlgorithm,
        Rule::NotANumber => wit::Rule::NotANumber,
        Rule::Zero => wit::Rule::Zero,
        Rule::TooLarge { max } => wit::Rule::TooLarge(max),
        Rule::TooSmall { min } => wit::Rule::TooSmall(min),
        Rule::UnknownUnit => wit::Rule::UnknownUnit,
        Rule::Unexpected => wit::Rule::Unexpected,
        Rule::BurstNotApplicable => wit::Rule::BurstNotApplicable,
        Rule::TenantAboveShared => wit::Rule::TenantAboveShared,
        Rule::EmptyStack => wit::Rule::EmptyStack,
        Rule::NotWholeMilliseconds => wit::Rule::NotWholeMilliseconds,
    }
}

fn algorithm(a: Algorithm) -> wit::Algorithm {
    match a {
        Algorithm::TokenBucket => wit::Algorithm::TokenBucket,
        Algorithm::Gcra => wit::Algorithm::Gcra,
        Algorithm::SlidingWindow => wit::Algorithm::SlidingWindow,
        Algorithm::FixedWindow => wit::Algorithm::FixedWindow,
        Algorithm::SlidingLog => wit::Algorithm::SlidingLog,
        Algorithm::LeakyBucket => wit::Algorithm::LeakyBucket,
        Algorithm::LeakyQueue => wit::Algorithm::LeakyQueue,
        Algorithm::Concurrency => wit::Algorithm::Concurrency,
    }
}

fn decide_error(e: DecideError) -> wit::DecideError {
    match e {
        DecideError::CostExceedsCapacity { cost, capacity } => {
            wit::DecideError::CostExceedsCapacity(wit::CostExceedsCapacity { cost, capacity })
        }
        DecideError::StateMismatch { policy, state } => {
            wit::DecideError::StateMismatch(wit::StateMismatch {
                policy: algorithm(policy),
                state: algorithm(state),
            })
        }
        DecideError::NotConcurrency { policy } => {
            wit::DecideError::NotConcurrency(algorithm(policy))
        }
        DecideError::SlidingLogNeedsAlloc => wit::DecideError::SlidingLogNeedsAlloc,
    }
}

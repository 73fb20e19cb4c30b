//! # tollgate-component
//!
//! tollgate's keyed rate limiter as a WebAssembly component: the guest side of the WIT
//! world `tollgate:limiter/limiter` (`wit/tollgate.wit` at the repository root).
//!
//! This crate is a thin adapter: every decision is made by the `tollgate` core
//! ([`tollgate::keyed::KeyedLimiter`]); here we only convert between the core's types and
//! the WIT ones (milliseconds in, milliseconds rounded up out, typed errors).
//!
//! Built for `wasm32-unknown-unknown` and wrapped as a component (`jco new` or
//! `wasm-tools component new`), it imports nothing: no WASI, no clock, no randomness.
//! See `crates/component/README.md` for building and calling it from wasmtime and jco.
// The only unsafe code is wit-bindgen's generated ABI glue, allowed in `mod bindings`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::num::NonZeroUsize;

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::{
    millis, Algorithm, DecideError, Decision, Field, MillisDecision, Policy, PolicyError, Rule,
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
}

impl Limiter {
    fn wrap(inner: KeyedLimiter<String>) -> keyed::KeyedLimiter {
        keyed::KeyedLimiter::new(Limiter { inner })
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

//! HTTP helpers for JavaScript: response headers for a decision, and the backoff schedule of
//! the `fetchWithBackoff` client. Both adapt the core (`tollgate::headers`,
//! `tollgate::backoff`); nothing here formats a header or draws a delay itself.

use std::num::NonZeroU32;

use tollgate::{millis, Decision, Nanos, Policy, NANOS_PER_MS};
use wasm_bindgen::prelude::*;

use crate::errors::option_error;
use crate::spec;

use tollgate::{backoff, headers};

/// Rebuilds a nanosecond decision from the millisecond one JavaScript holds. Header values
/// are whole seconds rounded up, and `ceil(ceil(ns / 1e6) / 1e3) == ceil(ns / 1e9)`, so no
/// header changes by going through milliseconds.
fn decision_from_ms(
    allowed: bool,
    limit: f64,
    remaining: f64,
    reset_after_ms: f64,
    retry_after_ms: f64,
) -> Decision {
    let whole = |v: f64| {
        if v.is_finite() && v > 0.0 {
            v.ceil() as u64
        } else {
            0
        }
    };
    Decision {
        allowed,
        limit: whole(limit),
        remaining: whole(remaining),
        reset_after: millis(whole(reset_after_ms)),
        retry_after: millis(whole(retry_after_ms)),
        delay: 0,
    }
}

/// A decision as [`crate::DECISION_LEN`] numbers: `allowed` (1 or 0), then `limit,
/// remaining, resetAfter, retryAfter, delay` in whole ms ([`tollgate::MillisDecision`]).
pub fn numbers(d: &Decision) -> [f64; crate::DECISION_LEN] {
    let ms = tollgate::MillisDecision::from(*d);
    [
        d.allowed as u8 as f64,
        ms.limit as f64,
        ms.remaining as f64,
        ms.reset_after as f64,
        ms.retry_after as f64,
        ms.delay as f64,
    ]
}

/// The decision [`numbers`] wrote (as far as headers need it: `delay` is dropped).
pub fn decision(n: &[f64]) -> Decision {
    decision_from_ms(n[0] != 0.0, n[1], n[2], n[3], n[4])
}

/// The first of `policies` (a limiter's, in slot order; a fair share's tenant window last)
/// that `each` has decisions for ([`crate::DECISION_LEN`] numbers per limit), with those
/// decisions and every limit's name as the core names them
/// ([`headers::limit_name`], [`headers::tenant_name`]).
pub fn named(
    name: &str,
    mut policies: Vec<Policy>,
    fair_share: bool,
    each: &[f64],
) -> (Vec<String>, Vec<Policy>, Vec<Decision>) {
    let decisions: Vec<Decision> = each
        .chunks_exact(crate::DECISION_LEN)
        .map(decision)
        .collect();
    let count = policies.len() - fair_share as usize;
    let names = (0..policies.len())
        .map(|i| {
            if fair_share && i == count {
                headers::tenant_name(name)
            } else {
                headers::limit_name(name, i, count)
            }
        })
        .collect::<Vec<String>>();
    policies.truncate(decisions.len());
    (names, policies, decisions)
}

/// One header item per limit: `names[i]`, `policies[i]` and `decisions[i]` (as many as
/// `policies` has).
pub fn items<'a>(
    names: &'a [String],
    policies: &'a [Policy],
    decisions: &'a [Decision],
) -> Vec<headers::Named<'a>> {
    names
        .iter()
        .zip(policies)
        .zip(decisions)
        .map(|((name, policy), decision)| headers::Named {
            name,
            policy,
            decision,
        })
        .collect()
}

/// The name the response headers give a key's own limits (an override of limits), as the
/// tower layer names them.
#[cfg(any(feature = "plans", feature = "store"))]
pub const OWN: &str = "own";

/// What a plan limiter's decision was made by, for its headers: the plan at an index of
/// the plans, or the key's own limits (an override of limits), named [`OWN`].
#[cfg(any(feature = "plans", feature = "store"))]
pub enum MadeBy {
    /// The plan at this index of the plans.
    Plan(usize),
    /// The key's own limits, as they were at the decision.
    Own(Vec<Policy>),
}

/// The header items' parts of a plan limiter's decision (`PlanCore`'s and `FleetPlans'`
/// alike): the limits that made it, named by their plan (`pro`, or `pro.1`, `pro.2`, ...
/// for a stack) or [`OWN`], with `each` limit's decision. `None` for a plan index that is
/// not one of `plans`.
#[cfg(any(feature = "plans", feature = "store"))]
fn plan_named(
    plans: &tollgate::plans::Plans,
    by: MadeBy,
    each: &[f64],
) -> Option<(Vec<String>, Vec<Policy>, Vec<Decision>)> {
    Some(match by {
        MadeBy::Plan(i) => {
            let p = plans.iter().nth(i)?;
            named(p.name(), p.limits().layers().to_vec(), false, each)
        }
        MadeBy::Own(limits) => named(OWN, limits, false, each),
    })
}

/// The response headers of a plan limiter's decision, flattened as `[name, value, ...]`
/// (named as `plan_named` names them); `None` for a plan that is not one of `plans`.
#[cfg(any(feature = "plans", feature = "store"))]
pub fn plan_headers(
    plans: &tollgate::plans::Plans,
    by: MadeBy,
    each: &[f64],
    legacy: bool,
) -> Option<Vec<String>> {
    let (names, policies, decisions) = plan_named(plans, by, each)?;
    Some(
        headers::response_headers(&items(&names, &policies, &decisions), legacy)
            .into_iter()
            .flat_map(|(k, v)| [k.to_string(), v])
            .collect(),
    )
}

/// The 429 problem+json body of a plan limiter's decision (`Some(None)` when every limit
/// admitted); `None` for a plan that is not one of `plans`.
#[cfg(any(feature = "plans", feature = "store"))]
pub fn plan_problem(
    plans: &tollgate::plans::Plans,
    by: MadeBy,
    each: &[f64],
) -> Option<Option<String>> {
    let (names, policies, decisions) = plan_named(plans, by, each)?;
    Some(headers::problem(&items(&names, &policies, &decisions)))
}

/// A retry schedule for 429/503 responses: full jitter, `Retry-After` first, a maximum
/// number of attempts (the core's `backoff::Backoff`, with randomness from `getrandom`,
/// i.e. `crypto.getRandomValues`).
#[wasm_bindgen]
pub struct Backoff {
    inner: backoff::Backoff,
}

fn whole_ms(field: &str, value: f64) -> Result<u64, JsValue> {
    spec::count(field, &JsValue::from_f64(value))
}

#[wasm_bindgen]
impl Backoff {
    /// `base_ms`: the first ceiling; `cap_ms`: the largest; `max_attempts`: attempts in all
    /// (the first request included), at least 1.
    #[wasm_bindgen(constructor)]
    pub fn new(base_ms: f64, cap_ms: f64, max_attempts: f64) -> Result<Backoff, JsValue> {
        let base = whole_ms("baseMs", base_ms)?;
        let cap = whole_ms("capMs", cap_ms)?;
        let attempts = whole_ms("maxAttempts", max_attempts)?;
        if attempts == 0 || attempts > u32::MAX as u64 {
            return Err(option_error(
                "maxAttempts",
                &JsValue::from_f64(max_attempts),
                if attempts == 0 { "zero" } else { "too-large" },
                "must be between 1 and 4294967295",
                true,
            ));
        }
        if cap < base {
            return Err(option_error(
                "capMs",
                &JsValue::from_f64(cap_ms),
                "below-base",
                "must be at least baseMs",
                true,
            ));
        }
        Ok(Backoff {
            inner: backoff::Backoff::new(
                millis(base),
                millis(cap),
                NonZeroU32::new(attempts as u32).unwrap_or(NonZeroU32::MIN),
            ),
        })
    }

    /// How long to wait (ms) after attempt `attempt` (counted from 1) failed, given the
    /// response's `Retry-After` as a wait in ms (`hint_ms`; negative or NaN when there was
    /// none or it was not valid; the JS wrapper gets it from [`parse_retry_after`]); `-1`
    /// means give up.
    pub fn delay(&self, attempt: u32, hint_ms: f64) -> f64 {
        // Whole ms from `parseRetryAfter`; saturating (NaN is not >= 0).
        let hint: Option<Nanos> = (hint_ms >= 0.0).then(|| millis(hint_ms as u64));
        let mut rng = || getrandom::u64().unwrap_or(0);
        match self.inner.delay(attempt, hint, &mut rng) {
            Some(ns) => ns.div_ceil(NANOS_PER_MS) as f64,
            None => -1.0,
        }
    }

    /// The largest delay (ms) full jitter may draw after attempt `attempt`.
    pub fn ceiling(&self, attempt: u32) -> f64 {
        self.inner.ceiling(attempt).div_ceil(NANOS_PER_MS) as f64
    }
}

/// Whether a response with `status` to a `method` request may be retried: 429 or 503, and an
/// idempotent method or an `Idempotency-Key`.
#[wasm_bindgen(js_name = isRetryable)]
pub fn is_retryable(method: &str, has_idempotency_key: bool, status: u16) -> bool {
    backoff::is_retryable(method, has_idempotency_key, status)
}

/// `Retry-After` (delay-seconds or an HTTP-date) as milliseconds from `now_ms`, rounded up,
/// or `-1` when the value is not valid (`tollgate::backoff::parse_retry_after`).
#[wasm_bindgen(js_name = parseRetryAfter)]
pub fn parse_retry_after(value: &str, now_ms: f64) -> f64 {
    let now_secs = if now_ms.is_finite() && now_ms > 0.0 {
        (now_ms / 1000.0).floor() as u64
    } else {
        0
    };
    match backoff::parse_retry_after(value, now_secs) {
        Some(ns) => ns.div_ceil(NANOS_PER_MS) as f64,
        None => -1.0,
    }
}

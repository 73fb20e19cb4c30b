//! `PlanCore`, under the JS `PlanLimiter` of the entry `tollgate/plans` (`js/plans.js`;
//! the `plans` feature, built into its own .wasm): the core's
//! [`tollgate::keyed::PlanLimiter`] (plans by name, per-key overrides, spend kept across
//! plan changes) in wasm memory. The JS half checks arguments and builds the objects; every
//! decision, carry, override and header rule is the core's.
//!
//! A decision says which limits it was made by (the plan the call named, the plan of the
//! key's override, or the key's own limits): the response headers name and describe those
//! ([`PlanCore::headers`]). The override is read right after the decision, in the same call:
//! wasm runs one call at a time, so no `set` or `clear` can come between.

use std::num::NonZeroUsize;

use js_sys::{Error, RangeError, TypeError};
use tollgate::keyed::{PlanCheckError, PlanLimiter};
use tollgate::plans::{Override, PlanError, Plans};
use tollgate::Policy;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::errors::{annotate, decide_error, is_range_rule, key_error};
use crate::http::{self, numbers, MadeBy};

/// What [`PlanCore::check`] answers in front of the decision's numbers when the key's own
/// limits decided (otherwise the index of the plan that did).
const OWN_LIMITS: f64 = -1.0;

/// The exception for invalid plans or an override the core refuses, with `field` (`plans`,
/// `plans.<name>`, `plans.<name>[i]` for a plan's policy, or the same under `override`),
/// `rule` the core's code ([`PlanError::code`]) and the core's message. `RangeError` for a
/// number out of range (a policy's) and a full table of overrides, `TypeError` otherwise.
fn plan_error(at: &str, e: &PlanError) -> JsValue {
    let (field, range) = match e {
        PlanError::Policy { plan, index, error } => {
            let mut field = String::from(at);
            if !plan.as_str().is_empty() {
                field.push('.');
                field.push_str(plan.as_str());
            }
            if let Some(i) = index {
                field.push_str(&format!("[{i}]"));
            }
            (field, is_range_rule(&error.rule))
        }
        PlanError::UnknownPlan { .. } => (format!("{at}.plan"), false),
        PlanError::EmptyName { index } | PlanError::DuplicateName { index, .. } => {
            (format!("{at}[{index}].name"), false)
        }
        // A bound on counts: a RangeError, as a full table of overrides is.
        PlanError::TooManyOverrides { .. } | PlanError::TooManyLayers { .. } => {
            (at.to_string(), true)
        }
        PlanError::NoPlans => (at.to_string(), false),
    };
    let message = format!("{e} [{}]", e.code());
    let error: Error = if range {
        RangeError::new(&message).unchecked_into()
    } else {
        TypeError::new(&message).unchecked_into()
    };
    annotate(&error, &field, e.code(), &JsValue::UNDEFINED)
}

/// The exception for a check the core refuses: a plan that does not exist (`TypeError`,
/// `field: "plan"`, `rule: "unknown-plan"`), or a decision that cannot be made (a cost above
/// the limits' capacity: as `Limiter.check` throws it).
fn check_error(e: &PlanCheckError) -> JsValue {
    match e {
        PlanCheckError::Decide(d) => decide_error(d),
        PlanCheckError::UnknownPlan { name } => {
            let error: Error =
                TypeError::new(&format!("plan: {e} [{}]", e.code())).unchecked_into();
            annotate(&error, "plan", e.code(), &name.as_str().into())
        }
    }
}

/// `key` within the core's bound on a key's bytes.
fn bounded(key: &str) -> Result<(), JsValue> {
    tollgate::store::bounds::check_key(key.as_bytes()).map_err(|e| key_error("key", &e))
}

/// Policies in the compact grammar (an override's own limits), or the first one's error,
/// named `override.limits[i]`.
fn parse_limits(texts: &[String]) -> Result<Vec<Policy>, JsValue> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.parse::<Policy>().map_err(|error| {
                plan_error(
                    "override.limits",
                    &PlanError::Policy {
                        plan: tollgate::Snippet::EMPTY,
                        index: Some(i),
                        error,
                    },
                )
            })
        })
        .collect()
}

/// The error of a decision made by no plan of these (nor by a key's own limits).
fn no_plan() -> JsValue {
    plan_error("decision", &PlanError::NoPlans)
}

/// A policy of plans and its keys' counters.
#[wasm_bindgen]
pub struct PlanCore {
    // Keys as bytes, as the `Core`'s keyed limiter holds them.
    inner: PlanLimiter<Vec<u8>>,
}

#[wasm_bindgen]
impl PlanCore {
    /// Plans `names[i]` of the policies `policies[start..start + counts[i]]` (in order, in the
    /// compact grammar), at most `max_keys` keys and `max_overrides` overrides. Errors name
    /// the plan and the policy's position (`plans.pro[1]`), as the core's [`PlanError`] does.
    #[wasm_bindgen(constructor)]
    pub fn new(
        names: Vec<String>,
        counts: Vec<u32>,
        policies: Vec<String>,
        max_keys: f64,
        max_overrides: u32,
    ) -> Result<PlanCore, JsValue> {
        let max_keys: NonZeroUsize = crate::max_keys(max_keys)?;
        let mut texts: Vec<Vec<&str>> = Vec::with_capacity(names.len());
        let mut at = 0usize;
        for n in &counts {
            let end = (at + *n as usize).min(policies.len());
            texts.push(policies[at..end].iter().map(String::as_str).collect());
            at = end;
        }
        let named: Vec<(&str, &[&str])> = names
            .iter()
            .zip(&texts)
            .map(|(n, t)| (n.as_str(), t.as_slice()))
            .collect();
        let plans = Plans::parse(&named).map_err(|e| plan_error("plans", &e))?;
        Ok(PlanCore {
            inner: PlanLimiter::new(plans, max_keys, max_overrides as usize),
        })
    }

    /// The plans' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.inner.plans().iter().map(|p| p.name().into()).collect()
    }

    /// The policies of the plan at `index` in canonical form (stack order).
    pub fn policies(&self, index: usize) -> Vec<String> {
        self.inner
            .plans()
            .iter()
            .nth(index)
            .map(|p| p.limits().layers().iter().map(|l| l.to_string()).collect())
            .unwrap_or_default()
    }

    /// Decides a request of `cost` for `key` under `plan` (or the key's override) at
    /// `now_ms`: what decided (the index of the plan, or -1 for the key's own limits), then
    /// the combined decision's numbers and each limit's (stack order; `decision.js`).
    pub fn check(
        &self,
        key: &str,
        plan: &str,
        now_ms: f64,
        cost: f64,
    ) -> Result<Vec<f64>, JsValue> {
        bounded(key)?;
        let d = self
            .inner
            .check_detailed(key.as_bytes(), plan, crate::now_ns(now_ms), cost as u64)
            .map_err(|e| check_error(&e))?;
        let by = match self.inner.get(key.as_bytes()) {
            Some(Override::Limits(_)) => OWN_LIMITS,
            Some(Override::Plan(name)) => self.index(&name),
            None => self.index(plan),
        };
        Ok(core::iter::once(by)
            .chain(
                core::iter::once(&d.decision)
                    .chain(&d.each)
                    .flat_map(numbers),
            )
            .collect())
    }

    /// The position of the plan called `name` (one of the plans: the core checked it).
    fn index(&self, name: &str) -> f64 {
        self.inner
            .plans()
            .iter()
            .position(|p| p.name() == name)
            .map_or(OWN_LIMITS, |i| i as f64)
    }

    /// The response headers for a decision, flattened as `[name, value, ...]`: made by the
    /// plan at `plan` (its limits named `<plan>`, or `<plan>.1`, `<plan>.2`, ... for a
    /// stack), or, when `plan` is -1, by the key's own limits `own` (named `own`). `each`
    /// holds each limit's decision ([`crate::DECISION_LEN`] numbers per limit).
    pub fn headers(
        &self,
        plan: i32,
        own: Option<Vec<String>>,
        each: &[f64],
        legacy: bool,
    ) -> Result<Vec<String>, JsValue> {
        http::plan_headers(self.inner.plans(), self.made_by(plan, own)?, each, legacy)
            .ok_or_else(no_plan)
    }

    /// The 429 problem+json body for a decision (arguments as for [`PlanCore::headers`]);
    /// `undefined` when every limit admitted.
    #[wasm_bindgen(js_name = quotaExceeded)]
    pub fn quota_exceeded(
        &self,
        plan: i32,
        own: Option<Vec<String>>,
        each: &[f64],
    ) -> Result<Option<String>, JsValue> {
        http::plan_problem(self.inner.plans(), self.made_by(plan, own)?, each).ok_or_else(no_plan)
    }

    /// What a decision was made by: the plan at `plan`, else the key's own limits `own`.
    fn made_by(&self, plan: i32, own: Option<Vec<String>>) -> Result<MadeBy, JsValue> {
        Ok(match (usize::try_from(plan), own) {
            (Ok(i), _) => MadeBy::Plan(i),
            (Err(_), Some(texts)) => MadeBy::Own(parse_limits(&texts)?),
            (Err(_), None) => return Err(no_plan()),
        })
    }

    /// Gives `key` another plan (`plan` set) or limits of its own (`limits`, policies) from
    /// its next check on.
    #[wasm_bindgen(js_name = setOverride)]
    pub fn set_override(
        &self,
        key: &str,
        plan: Option<String>,
        limits: Option<Vec<String>>,
    ) -> Result<(), JsValue> {
        bounded(key)?;
        let what = match (plan, limits) {
            (Some(p), _) => Override::Plan(p),
            (None, Some(l)) => Override::Limits(parse_limits(&l)?),
            (None, None) => Override::Limits(Vec::new()),
        };
        self.inner
            .set(key.as_bytes().to_vec(), what)
            .map_err(|e| plan_error("override", &e))
    }

    /// The override of `key`: `["plan", name]`, `["limits", policy, ...]` (canonical
    /// text), or `undefined`.
    #[wasm_bindgen(js_name = getOverride)]
    pub fn get_override(&self, key: &str) -> Option<Vec<String>> {
        self.inner.get(key.as_bytes()).map(|o| match o {
            Override::Plan(p) => vec!["plan".into(), p],
            Override::Limits(l) => core::iter::once("limits".into())
                .chain(l.iter().map(|p| p.to_string()))
                .collect(),
        })
    }

    /// Clears the override of `key`; whether it had one.
    #[wasm_bindgen(js_name = clearOverride)]
    pub fn clear_override(&self, key: &str) -> bool {
        self.inner.clear(key.as_bytes())
    }

    /// How many keys are stored (limited, not fresh).
    pub fn size(&self) -> f64 {
        self.inner.len() as f64
    }
}

//! `FleetPlans`, under the JS `RedisPlans` of the entry `tollgate/redis`: plans on the Redis
//! fleet, the core's rule ([`tollgate::store::fleet::plan`]) applied to the values
//! JavaScript reads, as the Rust client `tollgate-redis`'s `RedisPlans` applies it (the
//! same keys, values and scripts, so Node and Rust processes share one caller's count).
//!
//! A caller's slots are its own (`<base>:<i>`, whatever plan a call names), each value
//! names the policy it was written under, and a check under other limits carries the states
//! to them first ([`PlanRound`]). The caller's override (`<base>:o`) is read with the states
//! and decides instead of the plan named. JavaScript reads, sends and commits; every
//! decision, carry, value and override encoding is made here, by the core.

use std::cell::{Cell, RefCell};

use js_sys::{Array, Uint8Array};
use tollgate::keyed::{PlanCheckError, PlanLimiter};
use tollgate::plans::{Override, PlanError, Plans};
use tollgate::stack::StackDecision;
use tollgate::store::fleet::plan::{
    self, decode_override, decode_value_under, limits_for, PlanRound, StoredOverride, Written,
};
use tollgate::store::fleet::{self, plan_command, Commit, Ttl};
use tollgate::store::{Limits, Slot};
use tollgate::Policy;
use wasm_bindgen::prelude::*;

use super::instant;
use super::numbers::{answer, stack_from};
use crate::http::{self, MadeBy};
use crate::{cost_units, errors, max_keys, now_ns};

/// The `fallback` option as [`FleetPlans::fallback`] takes it (any other, 0: admit): deny until the next probe.
pub const FALL_CLOSED: u32 = 1;
/// The fallback: this process's own plan limiter (which knows no override).
pub const FALL_LOCAL: u32 = 2;

/// The exception for plans or an override the core refuses: a `TypeError` (a `RangeError`
/// for a policy's number out of range) naming `at` (`plans`, `override`), the core's rule
/// ([`PlanError::code`]) and its message.
fn plan_error(at: &str, e: &PlanError) -> JsValue {
    let range = matches!(e, PlanError::Policy { error, .. } if errors::is_range_rule(&error.rule));
    let field = match e {
        PlanError::Policy { plan, .. } if !plan.as_str().is_empty() => {
            format!("{at}.{}", plan.as_str())
        }
        PlanError::UnknownPlan { .. } => format!("{at}.plan"),
        _ => at.to_string(),
    };
    errors::option_error(&field, &JsValue::UNDEFINED, e.code(), &e.to_string(), range)
}

/// The exception for a stored value that is neither layout: `rule: "corrupt-state"`,
/// `value` the index of its key in the caller's keys (its slots, then its override), which
/// JavaScript names.
fn corrupt(index: usize, reason: &dyn core::fmt::Display) -> JsValue {
    let i = JsValue::from_f64(index as f64);
    errors::option_error("state", &i, "corrupt-state", &reason.to_string(), false)
}

/// Named plans on Redis, the writes' ids and times to live, and the `local` fallback's
/// plan limiter.
#[wasm_bindgen]
pub struct FleetPlans {
    plans: Plans,
    /// How many slots every caller has: the longest plan's stack.
    slots: usize,
    local: Option<PlanLimiter<Vec<u8>>>,
    ttl: Cell<Option<Ttl>>,
    ids: RefCell<fastrand::Rng>,
}

#[wasm_bindgen]
impl FleetPlans {
    /// Plans `names[i]` of the policies `policies[start..start + counts[i]]` (the compact
    /// grammar), with a `local` fallback of at most `local_max_keys` callers (`undefined`:
    /// none). Refused: invalid plans, a stack longer than a fleet store keeps, a
    /// concurrency limit (plans have no release).
    #[wasm_bindgen(constructor)]
    pub fn new(
        names: Vec<String>,
        counts: Vec<u32>,
        policies: Vec<String>,
        local_max_keys: Option<f64>,
    ) -> Result<FleetPlans, JsValue> {
        let mut named: Vec<(&str, Vec<&str>)> = Vec::with_capacity(names.len());
        let mut at = 0usize;
        for (name, n) in names.iter().zip(&counts) {
            let end = (at + *n as usize).min(policies.len());
            named.push((name, policies[at..end].iter().map(String::as_str).collect()));
            at = end;
        }
        let refs: Vec<(&str, &[&str])> = named.iter().map(|(n, p)| (*n, p.as_slice())).collect();
        let plans = Plans::parse(&refs).map_err(|e| plan_error("plans", &e))?;
        plan::check_plans(&plans).map_err(|e| plan_error("plans", &e))?;
        // A concurrency limit's slots are freed by a release, which plans have not.
        if let Some(p) = plans.iter().find(|p| p.limits().holds_slots()) {
            let reason = format!(
                "plan \"{}\" has a concurrency limit, which RedisPlans cannot release",
                p.name()
            );
            return Err(errors::option_error(
                "plans",
                &p.name().into(),
                "concurrency",
                &reason,
                false,
            ));
        }
        let local = match local_max_keys {
            Some(m) => Some(PlanLimiter::new(plans.clone(), max_keys(m)?, 0)),
            None => None,
        };
        Ok(FleetPlans {
            slots: plan::longest(&plans),
            plans,
            local,
            ttl: Cell::new(Some(Ttl {
                grace_ms: 1_000,
                lease_ms: 60_000,
            })),
            ids: RefCell::new(fastrand::Rng::with_seed(getrandom::u64().unwrap_or(0))),
        })
    }

    /// The plans' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.plans.iter().map(|p| p.name().into()).collect()
    }

    /// The policies of the plan at `index` in canonical form (stack order).
    pub fn policies(&self, index: usize) -> Vec<String> {
        self.plans
            .iter()
            .nth(index)
            .map(|p| p.limits().layers().iter().map(|l| l.to_string()).collect())
            .unwrap_or_default()
    }

    /// The suffixes of a caller's keys, each appended to its base: its slots (`":0"`, ...,
    /// as many as the longest plan's stack), then its override's (`":o"`).
    pub fn suffixes(&self) -> Vec<String> {
        let mut out: Vec<String> = (0..self.slots)
            .map(|i| Slot::Layer(i).key_suffix(None))
            .collect();
        out.push(String::from_utf8_lossy(&tollgate::store::override_name(b"")).into_owned());
        out
    }

    /// The values' times to live: `grace` ms past a state's freshness, `lease` ms for a
    /// count (the core's [`Ttl`]); under a test clock, the core's fixed test lifetime.
    #[wasm_bindgen(js_name = timesToLive)]
    pub fn times_to_live(&self, grace: f64, lease: f64, test_clock: bool) {
        self.ttl.set((!test_clock).then(|| Ttl {
            grace_ms: grace.ceil() as u64,
            lease_ms: lease.ceil() as u64,
        }));
    }

    /// The limits of the plan `name`, or the `TypeError` of a plan that does not exist
    /// (`field: "plan"`, `rule: "unknown-plan"`).
    fn asking(&self, name: &str) -> Result<&Limits, JsValue> {
        self.plans.get(name).map_err(|e| {
            let reason = format!("{e}");
            errors::option_error("plan", &name.into(), e.code(), &reason, false)
        })
    }

    /// `TOLLGATE.PLAN`'s arguments after `<base>` for a check of `cost` under the plan
    /// `plan` (the core's [`plan_command::encode`]).
    #[wasm_bindgen(js_name = moduleArgs)]
    pub fn module_args(&self, plan: &str, cost: f64) -> Result<Vec<String>, JsValue> {
        let limits = self.asking(plan)?;
        Ok(plan_command::encode(self.slots, cost_units(cost), limits)
            .into_iter()
            .map(|a| String::from_utf8_lossy(&a).into_owned())
            .collect())
    }

    /// A `TOLLGATE.PLAN` reply's decision fields (the combined decision's six, then each
    /// limit's six), read by the core's rule: one answer (its status, then the decisions'
    /// numbers), empty when they are not a decision.
    #[wasm_bindgen(js_name = moduleAnswer)]
    pub fn module_answer(&self, fields: &[f64]) -> Vec<f64> {
        let mut out = Vec::new();
        if let Some(d) = stack_from(fields) {
            answer(&mut out, &d);
        }
        out
    }

    /// Decides a check of `cost` for a caller whose call names `plan`, on `values` (its
    /// keys' values as read, [`FleetPlans::suffixes`]' order; empty when absent) at Redis's
    /// clock `secs`, `micros`: `[answer, by, commit]`, the answer's numbers, what decided
    /// (the plan's name: the one named or the override's; `null` for the caller's own
    /// limits) and the commit script's arguments (`undefined` when nothing changed): the
    /// writes, and the override's version compared like a state's.
    pub fn decide(
        &self,
        plan: &str,
        values: Array,
        secs: f64,
        micros: f64,
        cost: f64,
    ) -> Result<Array, JsValue> {
        let asking = self.asking(plan)?;
        let values: Vec<Vec<u8>> = values
            .iter()
            .map(|v| Uint8Array::new(&v).to_vec())
            .collect();
        if values.len() != self.slots + 1 {
            return Err(errors::option_error(
                "values",
                &JsValue::from_f64(values.len() as f64),
                "wrong-length",
                "must hold each slot's value and the override's",
                false,
            ));
        }
        let (versions, written, over) = read(&values)?;
        let limits = limits_for(asking, over.as_ref());
        let now = instant(secs, micros);
        let mut round =
            PlanRound::new(limits, &written, now).map_err(|e| errors::decide_error(&e))?;
        let decided: StackDecision = round
            .batch()
            .decide(cost_units(cost))
            .map_err(|e| errors::decide_error(&e))?;
        let ids = &mut *self.ids.borrow_mut();
        let writes = round.key_writes(self.ttl.get(), || ids.u64(..));
        let commit = if writes.is_empty() {
            JsValue::UNDEFINED
        } else {
            fleet::commit_args(Commit::Cas, &versions, writes)
                .iter()
                .map(|a| JsValue::from(Uint8Array::from(a.as_slice())))
                .collect::<Array>()
                .into()
        };
        let mut numbers = Vec::new();
        answer(&mut numbers, &decided);
        let by: JsValue = match over.as_ref().map(|o| &o.given) {
            Some(Override::Plan(name)) => name.as_str().into(),
            Some(Override::Limits(_)) => JsValue::NULL,
            None => plan.into(),
        };
        Ok(Array::of3(
            &js_sys::Float64Array::from(numbers.as_slice()),
            &by,
            &commit,
        ))
    }

    /// The declared fallback's answer to a check of `cost` for `key` under `plan`
    /// (0: admit; `FALL_CLOSED` (1): deny, retry after `retry_ms`; `FALL_LOCAL` (2): this
    /// process's own plan limiter at `now_ms`, without overrides).
    pub fn fallback(
        &self,
        mode: u32,
        key: &str,
        plan: &str,
        now_ms: f64,
        cost: f64,
        retry_ms: f64,
    ) -> Result<Vec<f64>, JsValue> {
        let asking = self.asking(plan)?;
        let d = match (&self.local, mode) {
            (Some(local), FALL_LOCAL) => local
                .check_detailed(key.as_bytes(), plan, now_ns(now_ms), cost_units(cost))
                .map_err(|e| match e {
                    PlanCheckError::Decide(d) => errors::decide_error(&d),
                    PlanCheckError::UnknownPlan { name } => {
                        plan_error("plan", &PlanError::UnknownPlan { name })
                    }
                })?,
            (_, FALL_CLOSED) => fleet::fail_closed(asking, now_ns(retry_ms)),
            _ => fleet::fail_open(asking),
        };
        let mut out = Vec::new();
        answer(&mut out, &d);
        Ok(out)
    }

    /// The response headers for a decision, flattened as `[name, value, ...]`, as
    /// `PlanCore`'s (one rule, `http::plan_headers`): made by the plan at `plan` (its
    /// limits named `<plan>`, or `<plan>.1`, `<plan>.2`, ... for a stack), or, when `plan`
    /// is -1, by the caller's own limits `own` (named `own`). `each` holds each limit's
    /// decision ([`crate::DECISION_LEN`] numbers per limit).
    pub fn headers(
        &self,
        plan: i32,
        own: Option<Vec<String>>,
        each: &[f64],
        legacy: bool,
    ) -> Result<Vec<String>, JsValue> {
        http::plan_headers(&self.plans, made_by(plan, own)?, each, legacy).ok_or_else(no_plan)
    }

    /// The 429 problem+json body for a decision (arguments as for [`FleetPlans::headers`]);
    /// `undefined` when every limit admitted.
    #[wasm_bindgen(js_name = quotaExceeded)]
    pub fn quota_exceeded(
        &self,
        plan: i32,
        own: Option<Vec<String>>,
        each: &[f64],
    ) -> Result<Option<String>, JsValue> {
        http::plan_problem(&self.plans, made_by(plan, own)?, each).ok_or_else(no_plan)
    }

    /// The value of an override: another plan (`plan`) or the caller's own limits
    /// (`limits`, policies), resolved now (the core's [`plan::encode_override`]), with a
    /// fresh write id. Errors name `override` and the core's rule.
    #[wasm_bindgen(js_name = encodeOverride)]
    pub fn encode_override(
        &self,
        plan: Option<String>,
        limits: Option<Vec<String>>,
    ) -> Result<Vec<u8>, JsValue> {
        let what = match (plan, limits) {
            (Some(p), _) => Override::Plan(p),
            (None, Some(texts)) => Override::Limits(parse_limits(&texts)?),
            (None, None) => Override::Limits(Vec::new()),
        };
        let id = self.ids.borrow_mut().u64(..);
        plan::encode_override(id, &what, &self.plans).map_err(|e| plan_error("override", &e))
    }

    /// An override's stored value read back: `["plan", name]`, `["limits", policy, ...]`
    /// (canonical text), or `undefined` for none (empty). A value that is not an override's
    /// is the `corrupt-state` error (`value` 0).
    #[wasm_bindgen(js_name = decodeOverride)]
    pub fn decode_override(&self, value: &[u8]) -> Result<Option<Vec<String>>, JsValue> {
        let stored = decode_override(value).map_err(|e| corrupt(0, &e))?;
        Ok(stored.map(|o| match o.given {
            Override::Plan(p) => vec!["plan".into(), p],
            Override::Limits(l) => core::iter::once("limits".into())
                .chain(l.iter().map(|p| p.to_string()))
                .collect(),
        }))
    }
}

/// What a decision was made by: the plan at `plan`, else the caller's own limits `own`.
fn made_by(plan: i32, own: Option<Vec<String>>) -> Result<MadeBy, JsValue> {
    Ok(match (usize::try_from(plan), own) {
        (Ok(i), _) => MadeBy::Plan(i),
        (Err(_), Some(texts)) => MadeBy::Own(parse_limits(&texts)?),
        (Err(_), None) => return Err(no_plan()),
    })
}

/// The error of a decision made by no plan of these (nor by a caller's own limits).
fn no_plan() -> JsValue {
    plan_error("decision", &PlanError::NoPlans)
}

/// Policies in the compact grammar (an override's own limits), or the first one's error,
/// named `override.limits[i]`.
fn parse_limits(texts: &[String]) -> Result<Vec<Policy>, JsValue> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.parse::<Policy>().map_err(|e| {
                let field = format!("override.limits[{i}]");
                errors::option_error(
                    &field,
                    &t.into(),
                    e.rule.code(),
                    &e.to_string(),
                    errors::is_range_rule(&e.rule),
                )
            })
        })
        .collect()
}

/// What one read of a caller holds: each key's version (empty when absent), the slots'
/// values, and its override.
type Read = (Vec<Vec<u8>>, Vec<Option<Written>>, Option<StoredOverride>);

/// The [`Read`] of a caller's values (its override the last); a value that is neither
/// layout is the `corrupt-state` error naming its index, never read as fresh.
fn read(values: &[Vec<u8>]) -> Result<Read, JsValue> {
    let n = values.len() - 1;
    let mut versions = Vec::with_capacity(values.len());
    let mut written = Vec::with_capacity(n);
    for (i, v) in values[..n].iter().enumerate() {
        let w = decode_value_under(v).map_err(|e| corrupt(i, &e))?;
        versions.push(w.as_ref().map_or(Vec::new(), |w| w.version.to_vec()));
        written.push(w);
    }
    let over = decode_override(&values[n]).map_err(|e| corrupt(n, &e))?;
    versions.push(over.as_ref().map_or(Vec::new(), |o| o.version.to_vec()));
    Ok((versions, written, over))
}

//! Turning core errors into JavaScript exceptions.
//!
//! Every exception thrown by the package names the field and the rule it broke, both in the
//! message and as properties, so callers can branch on them without parsing text:
//!
//! * policies: `TypeError` (a value of the wrong form: unknown algorithm or unit, not a
//!   number, missing, unexpected text) or `RangeError` (a number out of range: zero, too
//!   large, too small, a per-tenant limit above the shared one), with `field` (the core's
//!   [`Field::name`](tollgate::Field::name)), `rule` ([`Rule::code`](tollgate::Rule::code))
//!   and `value`;
//! * decisions that can never be made (a cost above the capacity): `RangeError` with
//!   `field: "cost"` and `rule` = [`DecideError::code`](tollgate::DecideError::code)
//!   (`field: "policy"` for a release on a limiter without a concurrency policy);
//! * a reserve or settle the core refuses ([`reservation_error`]): a reserve's decide
//!   error as above; `RangeError` with `field: "actual"` above the core's bound
//!   (`actual-too-large`), `field: "reservation"` for a reservation of another key,
//!   policy or limiter (`foreign-key`, `foreign-policy`, `foreign-limiter`), `field:
//!   "policy"` where the algorithm has no settle (`not-settleable`);
//! * a key (or tenant) longer than the core's bound on a caller-given key part
//!   ([`tollgate::store::bounds::MAX_KEY_BYTES`]): `RangeError` with `field: "key"` (or
//!   `"tenant"`), `rule: "too-long"` and `value` its length in bytes ([`key_error`]).

use js_sys::{Error, RangeError, Reflect, TypeError};
use tollgate::store::bounds::OverBound;
use tollgate::{DecideError, PolicyError, ReservationError, Rule};
use wasm_bindgen::{JsCast, JsValue};

/// Whether a broken rule is about a number's range (then a `RangeError`) rather than a
/// value's form (a `TypeError`).
pub(crate) fn is_range_rule(rule: &Rule) -> bool {
    matches!(
        rule,
        Rule::Zero | Rule::TooLarge { .. } | Rule::TooSmall { .. } | Rule::TenantAboveShared
    )
}

/// Sets `field`, `rule` and `value` on an error object.
pub(crate) fn annotate(error: &Error, field: &str, rule: &str, value: &JsValue) -> JsValue {
    let target: &JsValue = error.as_ref();
    // Setting a property on a fresh Error object cannot fail.
    let _ = Reflect::set(target, &"field".into(), &field.into());
    let _ = Reflect::set(target, &"rule".into(), &rule.into());
    let _ = Reflect::set(target, &"value".into(), value);
    target.clone()
}

/// The exception for an invalid policy.
pub fn policy_error(e: &PolicyError) -> JsValue {
    let message = format!("{e} [{}]", e.rule.code());
    let error: Error = if is_range_rule(&e.rule) {
        RangeError::new(&message).unchecked_into()
    } else {
        TypeError::new(&message).unchecked_into()
    };
    annotate(
        &error,
        e.field.name(),
        e.rule.code(),
        &e.value.as_str().into(),
    )
}

/// The exception for an invalid option (`maxKeys`, a policy object's property of the wrong
/// type, ...): `range` picks `RangeError` (`true`) or `TypeError` (`false`). The offending
/// value is the error's `value` property (not in the message: formatting arbitrary JS values
/// in Rust would cost kilobytes of wasm).
pub fn option_error(
    field: &str,
    value: &JsValue,
    rule: &str,
    explanation: &str,
    range: bool,
) -> JsValue {
    let message = format!("invalid option: {field}: {explanation} [{rule}]");
    let error: Error = if range {
        RangeError::new(&message).unchecked_into()
    } else {
        TypeError::new(&message).unchecked_into()
    };
    annotate(&error, field, rule, value)
}

/// The exception for a request that can never be decided as asked.
pub fn decide_error(e: &DecideError) -> JsValue {
    let error: Error = RangeError::new(&format!("{e} [{}]", e.code())).unchecked_into();
    let value = match e {
        DecideError::CostExceedsCapacity { cost, .. } => JsValue::from_f64(*cost as f64),
        _ => JsValue::UNDEFINED,
    };
    let field = match e {
        DecideError::CostExceedsCapacity { .. } => "cost",
        DecideError::NotConcurrency { .. } => "policy",
        _ => "state",
    };
    annotate(&error, field, e.code(), &value)
}

/// The rule code of a key (or tenant) over the core's bound on a key part's bytes.
pub const KEY_TOO_LONG: &str = "too-long";

/// The exception for a key part over its bound (`field`: `"key"` or `"tenant"`), e.g.
/// `key: 2000 bytes, at most 1024 [too-long]`; its `value` is the length in bytes (the key
/// itself may be a megabyte).
pub fn key_error(field: &str, e: &OverBound) -> JsValue {
    let error: Error = RangeError::new(&format!("{field}: {e} [{KEY_TOO_LONG}]")).unchecked_into();
    annotate(
        &error,
        field,
        KEY_TOO_LONG,
        &JsValue::from_f64(e.size as f64),
    )
}

/// The exception for a reserve or settle the core refused (see the module docs).
pub fn reservation_error(e: &ReservationError) -> JsValue {
    let (field, value) = match e {
        ReservationError::Decide(d) => return decide_error(d),
        ReservationError::ActualTooLarge { actual, .. } => {
            ("actual", JsValue::from_f64(*actual as f64))
        }
        ReservationError::Foreign { .. } => ("reservation", JsValue::UNDEFINED),
        ReservationError::NotSettleable { .. } => ("policy", JsValue::UNDEFINED),
    };
    let error: Error = RangeError::new(&format!("{e} [{}]", e.code())).unchecked_into();
    annotate(&error, field, e.code(), &value)
}

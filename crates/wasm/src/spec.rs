//! Policies and options as JavaScript gives them: a compact string (`"10/s burst 20"`) or a
//! `PolicyObject` (`{ algorithm?, limit, window, burst? }`), validated by the core.

use js_sys::Reflect;
use tollgate::{Algorithm, Field, Policy, PolicyError, Rule};
use wasm_bindgen::JsValue;

use crate::errors::{option_error, policy_error};

/// The largest integer a JavaScript number holds exactly (2^53 - 1).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Reads a policy from a string or a `PolicyObject`.
pub fn policy(value: &JsValue) -> Result<Policy, JsValue> {
    if let Some(text) = value.as_string() {
        return text.parse::<Policy>().map_err(|e| policy_error(&e));
    }
    if !value.is_object() || value.is_null() {
        return Err(option_error(
            "policy",
            value,
            "not-a-policy",
            "expected a policy string like \"10/s burst 20\" or an object { algorithm, limit, window, burst }",
            false,
        ));
    }
    let algorithm = match get(value, "algorithm")? {
        None => Algorithm::TokenBucket,
        Some(v) => {
            let name = v.as_string().ok_or_else(|| {
                option_error("algorithm", &v, "not-a-string", "must be a string", false)
            })?;
            Algorithm::from_name(&name).ok_or_else(|| {
                policy_error(&PolicyError {
                    field: Field::Algorithm,
                    value: tollgate::Snippet::new(&name),
                    rule: Rule::UnknownAlgorithm,
                })
            })?
        }
    };
    let limit_key = if algorithm == Algorithm::Concurrency && has(value, "maxInFlight") {
        "maxInFlight"
    } else {
        "limit"
    };
    let limit = match get(value, limit_key)? {
        Some(v) => count(limit_key, &v)?,
        None => {
            let field = if algorithm == Algorithm::Concurrency {
                Field::MaxInFlight
            } else {
                Field::Limit
            };
            return Err(policy_error(&PolicyError {
                field,
                value: tollgate::Snippet::new(""),
                rule: Rule::Missing,
            }));
        }
    };
    let window = match get(value, "window")? {
        None => None,
        Some(v) => Some(match v.as_string() {
            Some(text) => text,
            // A number is milliseconds, as in the core's JSON form.
            None => format!("{}ms", count("window", &v)?),
        }),
    };
    let burst = match get(value, "burst")? {
        None => None,
        Some(v) => Some(count("burst", &v)?),
    };
    Policy::from_parts(algorithm, limit, window.as_deref(), burst).map_err(|e| policy_error(&e))
}

/// A property of `object`, `None` when absent, undefined or null.
fn get(object: &JsValue, name: &str) -> Result<Option<JsValue>, JsValue> {
    let v = Reflect::get(object, &name.into())?;
    Ok(if v.is_undefined() || v.is_null() {
        None
    } else {
        Some(v)
    })
}

fn has(object: &JsValue, name: &str) -> bool {
    matches!(get(object, name), Ok(Some(_)))
}

/// A whole, non-negative number (zero is left for the core to reject with its own rule).
pub fn count(field: &str, v: &JsValue) -> Result<u64, JsValue> {
    match v.as_f64() {
        Some(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&n) => Ok(n as u64),
        Some(n) if n.fract() == 0.0 && n > MAX_SAFE_INTEGER => Err(option_error(
            field,
            v,
            "too-large",
            "must be at most 9007199254740991",
            true,
        )),
        _ => Err(option_error(
            field,
            v,
            "not-a-number",
            "must be a whole number, 0 or more",
            false,
        )),
    }
}

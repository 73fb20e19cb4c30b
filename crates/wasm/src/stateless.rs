//! The stateless, low-level decision: the caller keeps the state (as the core's serde JSON)
//! and passes it back on the next call. Made for the demo page (`www/`), which draws the
//! state the core returns (the bucket's credit, the two windows, the log's entries, the
//! queue's last departure) instead of re-deriving it in JavaScript.

use js_sys::{Object, Reflect};
use tollgate::{MillisDecision, State};
use wasm_bindgen::prelude::*;

use crate::errors::{decide_error, option_error};
use crate::{cost_units, now_ns, spec};

fn set(object: &Object, name: &str, value: JsValue) {
    // Setting a property on a fresh plain object cannot fail.
    let _ = Reflect::set(object, &name.into(), &value);
}

/// The decision as the JS API presents it (`{allowed, limit, remaining, resetAfter,
/// retryAfter, delay}`, durations in ms rounded up).
fn decision_object(m: MillisDecision) -> Object {
    let o = Object::new();
    set(&o, "allowed", m.allowed.into());
    set(&o, "limit", (m.limit as f64).into());
    set(&o, "remaining", (m.remaining as f64).into());
    set(&o, "resetAfter", (m.reset_after as f64).into());
    set(&o, "retryAfter", (m.retry_after as f64).into());
    set(&o, "delay", (m.delay as f64).into());
    o
}

/// Decides one request of `cost` at `now` (ms) under `policy` (a string or `PolicyObject`)
/// from `state`, the JSON a previous call returned (`null`/`undefined` for a fresh key).
///
/// Returns `{ decision, state }`, where `state` is the core's [`State`] as JSON (externally
/// tagged by algorithm, e.g. `{"token-bucket":{"credit":…,"last":…}}`, nanosecond
/// integers), or `null` when the key is back to fresh. A cost of 0 charges nothing and
/// returns the state brought up to `now` (a peek). Throws the policy's error for an invalid
/// policy, a `TypeError` (`field: "state"`, `rule: "invalid-state"`) for JSON that is not a
/// state, and the decision's `RangeError` for a cost above the capacity or a state made by
/// another algorithm.
#[wasm_bindgen(js_name = decideState)]
pub fn decide_state(
    policy: &JsValue,
    state: Option<String>,
    now: f64,
    cost: f64,
) -> Result<JsValue, JsValue> {
    let policy = spec::policy(policy)?;
    let state = match state.as_deref() {
        None => None,
        Some(text) => Some(serde_json::from_str::<State>(text).map_err(|e| {
            option_error(
                "state",
                &text.into(),
                "invalid-state",
                &format!("not a tollgate state ({e})"),
                false,
            )
        })?),
    };
    let (decision, next) = tollgate::decide(&policy, state, now_ns(now), cost_units(cost))
        .map_err(|e| decide_error(&e))?;
    let out = Object::new();
    set(
        &out,
        "decision",
        decision_object(MillisDecision::from(decision)).into(),
    );
    let next = match next {
        // Serialising plain integers and sequences cannot fail.
        Some(s) => serde_json::to_string(&s)
            .map(JsValue::from)
            .unwrap_or(JsValue::NULL),
        None => JsValue::NULL,
    };
    set(&out, "state", next);
    Ok(out.into())
}

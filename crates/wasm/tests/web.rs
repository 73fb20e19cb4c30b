//! wasm-bindgen-test tests of the binding layer, run in Node
//! (`CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner cargo test
//! --target wasm32-unknown-unknown -p tollgate-wasm --tests`) and, with
//! `WASM_BINDGEN_USE_BROWSER=1`, in headless Chromium through chromedriver.
#![cfg(target_arch = "wasm32")]

use js_sys::{Float64Array, RangeError, Reflect, TypeError, WebAssembly};
use tollgate_wasm::{parse_policy, parse_retry_after, Backoff, Core, ALLOWED, DENIED, FAILED};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

fn prop(v: &JsValue, name: &str) -> JsValue {
    Reflect::get(v, &name.into()).unwrap()
}

/// Reads the limiter's output buffer the way the JS wrapper does.
fn out(core: &Core) -> Vec<f64> {
    let memory: WebAssembly::Memory = tollgate_wasm::wasm_memory().unchecked_into();
    let all = Float64Array::new(&memory.buffer());
    let at = core.out_ptr() / 8;
    (0..5).map(|i| all.get_index(at + i)).collect()
}

#[wasm_bindgen_test]
fn check_writes_the_decision_in_ms() {
    let core = Core::single(&"10/s burst 2".into(), 100.0).unwrap();
    assert_eq!(core.check("a", 1000.0, 1.0), ALLOWED);
    assert_eq!(out(&core), vec![2.0, 1.0, 100.0, 0.0, 0.0]);
    assert_eq!(core.check("a", 1000.0, 1.0), ALLOWED);
    assert_eq!(core.check("a", 1000.0, 1.0), DENIED);
    assert_eq!(out(&core), vec![2.0, 0.0, 200.0, 100.0, 0.0]);
    assert_eq!(core.size(), 1);
    assert!(core.reset("a"));
    assert_eq!(core.size(), 0);
}

#[wasm_bindgen_test]
fn allow_charges_like_check_and_writes_no_answer() {
    let core = Core::single(&"10/s burst 2".into(), 100.0).unwrap();
    assert_eq!(core.check("b", 1000.0, 1.0), ALLOWED);
    let answer = out(&core);
    assert_eq!(core.allow("a", 1000.0, 1.0), ALLOWED);
    assert_eq!(core.allow("a", 1000.0, 1.0), ALLOWED);
    assert_eq!(core.allow("a", 1000.0, 1.0), DENIED);
    assert_eq!(out(&core), answer, "allow leaves the output buffer alone");
    // The bucket `allow` emptied is the one `check` sees: 100 ms later one token is back.
    assert_eq!(core.check("a", 1000.0, 1.0), DENIED);
    assert_eq!(core.check("a", 1100.0, 1.0), ALLOWED);
    assert_eq!(
        core.allow("a", 0.0, 3.0),
        FAILED,
        "a cost above the capacity"
    );
    assert!(core.take_error().is_object());
}

#[wasm_bindgen_test]
fn js_milliseconds_convert_like_the_core() {
    use tollgate_wasm::now_ns;
    for ms in [
        0u64,
        1,
        1_764_633_600_000,
        9_007_199_254_740_991 / 1_000_000,
    ] {
        assert_eq!(now_ns(ms as f64), tollgate::millis(ms));
    }
    // The largest whole ms that fits in u64 nanoseconds, and the first that saturates.
    assert_eq!(
        now_ns(18_446_744_073_709.0),
        tollgate::millis(18_446_744_073_709)
    );
    assert_eq!(now_ns(18_446_744_073_710.0), u64::MAX);
    assert_eq!(now_ns(9_007_199_254_740_991.0), u64::MAX);
    assert_eq!(now_ns(1.5), 1_500_000);
    assert_eq!(now_ns(-1.0), 0);
    assert_eq!(now_ns(f64::NAN), 0);
    assert_eq!(now_ns(f64::INFINITY), u64::MAX);
}

#[wasm_bindgen_test]
fn policy_objects_and_errors_name_field_and_rule() {
    let obj = js_sys::Object::new();
    Reflect::set(&obj, &"algorithm".into(), &"sliding-window".into()).unwrap();
    Reflect::set(&obj, &"limit".into(), &5.into()).unwrap();
    Reflect::set(&obj, &"window".into(), &"10s".into()).unwrap();
    assert_eq!(parse_policy(&obj.into()).unwrap(), "sliding-window 5/10s");

    let e = parse_policy(&"10/fortnight".into()).unwrap_err();
    assert!(e.is_instance_of::<TypeError>());
    assert_eq!(prop(&e, "field"), "window");
    assert_eq!(prop(&e, "rule"), "unknown-unit");
    let e = parse_policy(&"0/s".into()).unwrap_err();
    assert!(e.is_instance_of::<RangeError>());
    assert_eq!(prop(&e, "rule"), "zero");
    assert!(Core::single(&"1/s".into(), 0.0).is_err());
}

#[wasm_bindgen_test]
fn cost_above_capacity_fails_without_charging() {
    let core = Core::single(&"2/s".into(), 10.0).unwrap();
    assert_eq!(core.check("k", 0.0, 3.0), FAILED);
    let e = core.take_error();
    assert!(e.is_instance_of::<RangeError>());
    assert_eq!(prop(&e, "rule"), "cost-exceeds-capacity");
    assert_eq!(core.size(), 0);
}

#[wasm_bindgen_test]
fn stacks_and_fair_share() {
    let stack = Core::stack(vec!["5/s".into(), "fixed-window 1/min".into()], 10.0).unwrap();
    assert_eq!(stack.check("k", 0.0, 1.0), ALLOWED);
    assert_eq!(stack.check("k", 0.0, 1.0), DENIED);
    assert_eq!(out(&stack)[3], 60_000.0);
    let fair = Core::fair_share(&"10/s".into(), &"sliding-window 1/s".into(), 10.0).unwrap();
    assert_eq!(fair.check_tenant("k", "acme", 0.0, 1.0), ALLOWED);
    assert_eq!(fair.check_tenant("k", "acme", 0.0, 1.0), DENIED);
    assert_eq!(fair.check_tenant("k", "globex", 0.0, 1.0), ALLOWED);
}

#[wasm_bindgen_test]
fn headers_and_backoff_come_from_the_core() {
    let core = Core::single(&"fixed-window 100/min".into(), 1.0).unwrap();
    let h = core.headers("per-ip", &[0.0, 100.0, 0.0, 18_000.0, 18_000.0, 0.0], false);
    assert_eq!(
        h,
        vec![
            "RateLimit-Policy",
            "\"per-ip\";q=100;w=60",
            "RateLimit",
            "\"per-ip\";r=0;t=18",
            "Retry-After",
            "18",
            "Cache-Control",
            "no-store"
        ]
    );
    let b = Backoff::new(100.0, 1000.0, 3.0).unwrap();
    assert_eq!(b.delay(1, 2000.0), 2000.0); // Retry-After first
    assert_eq!(b.delay(3, -1.0), -1.0);
    let d = b.delay(2, -1.0); // random, from crypto.getRandomValues
    assert!((0.0..=200.0).contains(&d));
    let d = b.delay(2, f64::NAN); // no hint
    assert!((0.0..=200.0).contains(&d));
    assert_eq!(parse_retry_after(" 2 ", 0.0), 2000.0);
    assert_eq!(
        parse_retry_after("99999999999999999999999", 0.0),
        18_446_744_073_710.0
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", 784_111_777_000.0),
        10_000.0
    );
    assert_eq!(parse_retry_after("soon", 0.0), -1.0);
}

#[cfg(feature = "state-json")]
#[wasm_bindgen_test]
fn decide_state_round_trips_the_core_state_as_json() {
    let policy: JsValue = "2/s".into();
    let first = tollgate_wasm::decide_state(&policy, None, 0.0, 1.0).unwrap();
    let state = prop(&first, "state").as_string().unwrap();
    assert_eq!(state, r#"{"token-bucket":{"credit":1000000000,"last":0}}"#);
    let second = tollgate_wasm::decide_state(&policy, Some(state.clone()), 0.0, 1.0).unwrap();
    let third =
        tollgate_wasm::decide_state(&policy, prop(&second, "state").as_string(), 0.0, 1.0).unwrap();
    let d = prop(&third, "decision");
    assert_eq!(prop(&d, "allowed"), false);
    assert_eq!(prop(&d, "retryAfter"), 500.0);
    let e = tollgate_wasm::decide_state(&policy, Some("[]".into()), 0.0, 1.0).unwrap_err();
    assert!(e.is_instance_of::<TypeError>());
    assert_eq!(prop(&e, "rule"), "invalid-state");
}

/// Issue 43 in wasm itself: a stack of 100,000 limits decides, all or nothing, on wasm's
/// shadow stack and the engine's call stack (the core's loops, not a call a limit), and the
/// instance keeps deciding for every other limiter after it.
#[wasm_bindgen_test]
fn a_stack_of_100_000_limits_decides_all_or_nothing_in_wasm() {
    const DEEP: usize = 100_000;
    let other = Core::single(&"2/min".into(), 10.0).unwrap();
    assert_eq!(other.check("k", 0.0, 1.0), ALLOWED);
    for algorithm in ["fixed-window", "sliding-log"] {
        // The last limit is the tightest: two requests pass, the third charges nothing.
        let policies = (0..DEEP)
            .map(|i| JsValue::from(format!("{algorithm} {}/min", DEEP - i + 1)))
            .collect();
        let stack = Core::stack(policies, 10.0).unwrap();
        let decided: Vec<u32> = (0..3).map(|_| stack.check("k", 0.0, 1.0)).collect();
        assert_eq!(decided, [ALLOWED, ALLOWED, DENIED], "{algorithm}");
        // A peek (cost 0) of "k", still in the key buffer from the last check.
        let each = stack
            .check_detailed_buf(1, 0, false, 0.0, 0.0, 0)
            .unwrap_or_else(|_| panic!("{algorithm}: a peek of the stack"));
        assert_eq!(each.len(), (DEEP + 1) * tollgate_wasm::DECISION_LEN);
        // The first limit (limit 100,001) was charged twice, not by the denied request.
        assert_eq!(each[tollgate_wasm::DECISION_LEN + 2], (DEEP + 1 - 2) as f64);
    }
    assert_eq!(other.check("k", 0.0, 1.0), ALLOWED);
    assert_eq!(other.check("k", 0.0, 1.0), DENIED);
}

/// Issue 44: a key (or tenant) over the core's bound on a key part's bytes is refused with
/// a named RangeError, nothing charged or stored; one at the bound is decided.
#[wasm_bindgen_test]
fn a_key_over_the_core_bound_is_refused_by_name() {
    use tollgate::store::bounds::MAX_KEY_BYTES;
    let core = Core::fair_share(&"10/min".into(), &"1/min".into(), 10.0).unwrap();
    let at = "k".repeat(MAX_KEY_BYTES);
    assert_eq!(core.check(&at, 0.0, 1.0), ALLOWED);
    let over = "k".repeat(MAX_KEY_BYTES + 1);
    let calls: [(&dyn Fn() -> u32, &str); 4] = [
        (&|| core.check(&over, 0.0, 1.0), "key"),
        (&|| core.allow(&over, 0.0, 1.0), "key"),
        (&|| core.peek(&over, 0.0), "key"),
        (&|| core.check_tenant("k", &over, 0.0, 1.0), "tenant"),
    ];
    for (call, field) in calls {
        let status = call();
        assert_eq!(status, FAILED, "{field}");
        let e = core.take_error();
        assert!(e.is_instance_of::<RangeError>());
        assert_eq!(prop(&e, "field"), field);
        assert_eq!(prop(&e, "rule"), "too-long");
        assert_eq!(prop(&e, "value"), (MAX_KEY_BYTES + 1) as f64);
    }
    assert_eq!(core.check_tenant(&at, &at, 0.0, 1.0), ALLOWED);
    assert_eq!(core.size(), 1);
}

//! The reserve-and-settle vectors, `tests/vectors/settle/*.json`, on the keyed limiter
//! (`KeyedLimiter::reserve` and `settle`). Every runtime that learns reserve and settle
//! replays the same files (a subfolder, so that the runners of `tests/vectors/*.json` do
//! not meet ops they do not know yet).
//!
//! Format: `limiter` (`{"policy": ..}` or `{"stack": [..]}`), optionally `others` (more
//! limiters by name, for foreign reservations), and `steps` in order, each on key `key` at
//! `t` ms, on the limiter named by `on` (the main one when absent):
//!
//! * `{"op": "reserve", "as": name, "cost": estimate}`: `expect` is the decision (only the
//!   fields given are compared) and `reserved`, whether a reservation came back (kept as
//!   `name`); or `{"error": code}`.
//! * `{"op": "settle", "reservation": name, "actual": n, "overage": "debt" |
//!   "up-to-limit"}` (`debt` when absent): `expect` is `{refunded, charged, unpaid}` (and
//!   `each`, per limit, for a stack) or `{"error": code}`. A settle consumes its
//!   reservation; a refused one gives it back, unsettled (it may be settled again). A second settle of the same name answers the first settle's outcome and
//!   charges nothing, as a store that keeps idempotency by the reservation's id answers a
//!   retry (in Rust the reservation is moved by the first settle, so a second cannot be
//!   written: this runner answers it from its record of settled names).
//! * `{"op": "check", "cost": n}`: `expect` is the decision (fields given; `each` for a
//!   stack, per limit).
//! * `{"op": "release", "cost": n}`: releases a concurrency limit's slots.
//!
//! Expected numbers were derived by hand from the rules (each file's `description` shows
//! how), not printed by the code.

use std::collections::HashMap;
use std::fs;
use std::num::NonZeroUsize;
use std::path::Path;

use serde_json::{json, Map, Value};
use tollgate::keyed::KeyedLimiter;
use tollgate::settle::{Reservation, Settled, Settlement};
use tollgate::{millis, Decision, MillisDecision, Overage, Policy};

fn limiter(spec: &Value) -> KeyedLimiter {
    let max = NonZeroUsize::new(1000).unwrap();
    let policy = |v: &Value| -> Policy { v.as_str().unwrap().parse().unwrap() };
    if let Some(p) = spec.get("policy") {
        KeyedLimiter::new(policy(p), max)
    } else {
        let ps: Vec<Policy> = spec["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(policy)
            .collect();
        KeyedLimiter::stack(&ps, max).unwrap()
    }
}

fn decision(d: Decision) -> Value {
    serde_json::to_value(MillisDecision::from(d)).unwrap()
}

fn settled(s: &Settled) -> Value {
    json!({"refunded": s.refunded, "charged": s.charged, "unpaid": s.unpaid})
}

fn settlement(s: &Settlement) -> Value {
    let mut v = json!({"refunded": s.refunded, "charged": s.charged, "unpaid": s.unpaid});
    if !s.each.is_empty() {
        v["each"] = s.each.iter().map(settled).collect();
    }
    v
}

/// Whether `got` has every field of `want` with the same value (objects compared by the
/// fields `want` gives, arrays element by element and of the same length).
fn matches(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| matches(v, gv))),
        (Value::Array(w), Value::Array(g)) => {
            w.len() == g.len() && w.iter().zip(g).all(|(a, b)| matches(a, b))
        }
        _ => want == got,
    }
}

fn replay(path: &Path) -> usize {
    let v: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    assert!(
        v["description"].as_str().is_some_and(|d| d.len() > 40),
        "{name}: a description deriving the numbers"
    );
    let main = limiter(&v["limiter"]);
    let others: HashMap<String, KeyedLimiter> = v
        .get("others")
        .and_then(Value::as_object)
        .unwrap_or(&Map::new())
        .iter()
        .map(|(k, spec)| (k.clone(), limiter(spec)))
        .collect();
    let mut open: HashMap<String, Reservation> = HashMap::new();
    let mut settled_before: HashMap<String, Value> = HashMap::new();
    let steps = v["steps"].as_array().unwrap();
    for (i, step) in steps.iter().enumerate() {
        let l = match step.get("on").and_then(Value::as_str) {
            Some(n) => &others[n],
            None => &main,
        };
        let key = step["key"].as_str().expect("key");
        let now = millis(step["t"].as_u64().unwrap_or(0));
        let cost = step["cost"].as_u64().unwrap_or(1);
        let got = match step["op"].as_str().unwrap() {
            "reserve" => match l.reserve(key, now, cost) {
                Ok((d, r)) => {
                    let mut got = decision(d);
                    got["reserved"] = json!(r.is_some());
                    if let Some(r) = r {
                        open.insert(step["as"].as_str().unwrap().to_owned(), r);
                    }
                    got
                }
                Err(e) => json!({"error": e.code()}),
            },
            "settle" => {
                let name = step["reservation"].as_str().unwrap();
                let overage = match step.get("overage").and_then(Value::as_str) {
                    None | Some("debt") => Overage::Debt,
                    Some("up-to-limit") => Overage::UpToLimit,
                    Some(other) => panic!("{name}: unknown overage {other}"),
                };
                let actual = step["actual"].as_u64().unwrap();
                match (settled_before.get(name), open.remove(name)) {
                    (Some(first), _) => first.clone(),
                    (None, Some(r)) => match l.settle(key, r, actual, now, overage) {
                        Ok(s) => {
                            let got = settlement(&s);
                            settled_before.insert(name.to_owned(), got.clone());
                            got
                        }
                        Err(refused) => {
                            // Given back, unsettled: it may be settled again.
                            let code = refused.error.code();
                            open.insert(name.to_owned(), refused.reservation);
                            json!({"error": code})
                        }
                    },
                    (None, None) => panic!("{name} step {i}: no reservation {name}"),
                }
            }
            "check" => {
                let d = l.check_detailed(key, None, now, cost).unwrap();
                let mut got = decision(d.decision);
                got["each"] = d.each.into_iter().map(decision).collect();
                got
            }
            "release" => {
                l.release(key, cost).unwrap();
                continue;
            }
            other => panic!("{name} step {i}: unknown op {other}"),
        };
        let want = &step["expect"];
        assert!(
            matches(want, &got),
            "{name} step {i}: {step}\n want {want}\n  got {got}"
        );
    }
    steps.len()
}

#[test]
fn the_settle_vectors_replay_on_the_keyed_limiter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/settle");
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let names: Vec<_> = files.iter().map(|f| f.file_stem().unwrap()).collect();
    for algorithm in [
        "token-bucket",
        "gcra",
        "leaky-bucket",
        "fixed-window",
        "sliding-window",
        "sliding-log",
        "concurrency",
        "leaky-queue",
        "stack",
    ] {
        assert!(names.iter().any(|n| *n == algorithm), "no {algorithm}.json");
    }
    let steps: usize = files.iter().map(|f| replay(f)).sum();
    assert!(steps > 100, "only {steps} steps");
}

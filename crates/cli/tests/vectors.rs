//! The shared conformance vectors (`tests/vectors/*.json` at the repository root) through
//! the built `tollgate simulate`: every file is read; each one the CLI can express is run
//! and must match exactly; the others are named with the reason the CLI cannot express them
//! (a stack or fair share, `peek`/`reset`/`release` steps, or time going backwards, which
//! `simulate` rejects by design).
//!
//! * A single-policy file whose steps are all `check`s in non-decreasing time becomes a CSV
//!   trace; every decision must match (`delay` is compared for `leaky-queue`, where the
//!   output has `delay_ms`, and must be 0 elsewhere).
//! * An `error` step stops `simulate` (exit 2, the line named): it is checked by a run up
//!   to that step; the decisions are checked by a run without the error steps (the core
//!   leaves the state untouched on an error, so the rest is unchanged).
//! * `policy-errors.json`: each policy must fail with exit 2 and exactly the vector's message.

use std::fs;
use std::path::PathBuf;

use assert_cmd::Command;
use serde_json::Value;

fn vectors_dir() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", "..", "tests", "vectors"]
        .iter()
        .collect()
}

fn simulate(policy: &str, trace: &str) -> std::process::Output {
    Command::cargo_bin("tollgate")
        .unwrap()
        .args(["simulate", "--policy", policy, "--format", "csv"])
        .write_stdin(trace)
        .output()
        .unwrap()
}

fn csv_trace(steps: &[&Value]) -> String {
    let mut trace = String::from("time_ms,key,cost\n");
    for s in steps {
        trace.push_str(&format!(
            "{},{},{}\n",
            s["t"].as_u64().unwrap(),
            s["key"].as_str().unwrap(),
            s["cost"].as_u64().unwrap_or(1)
        ));
    }
    trace
}

/// Why the CLI cannot express a vector file, or `None` when it can.
fn inexpressible(v: &Value) -> Option<String> {
    let limiter = &v["limiter"];
    if limiter.get("policy").is_none() {
        let kind = limiter
            .as_object()
            .and_then(|o| o.keys().next().cloned())
            .unwrap_or_default();
        return Some(format!("a {kind} limiter (simulate takes one policy)"));
    }
    let steps = v["steps"].as_array().unwrap();
    if let Some(op) = steps
        .iter()
        .map(|s| s["op"].as_str().unwrap())
        .find(|&op| op != "check")
    {
        return Some(format!("a `{op}` step (simulate only checks)"));
    }
    let times: Vec<u64> = steps.iter().map(|s| s["t"].as_u64().unwrap()).collect();
    if times.windows(2).any(|w| w[1] < w[0]) {
        return Some("time going backwards (simulate rejects it by design)".into());
    }
    None
}

fn run_file(name: &str, v: &Value) {
    let policy = v["limiter"]["policy"].as_str().unwrap();
    let queue = policy.starts_with("leaky-queue");
    let steps: Vec<&Value> = v["steps"].as_array().unwrap().iter().collect();
    let is_error = |s: &Value| s["expect"].get("error").is_some();

    // Every error step: a run up to it stops there, naming its line (header = line 1).
    for (i, s) in steps.iter().enumerate().filter(|(_, s)| is_error(s)) {
        let before: Vec<&Value> = steps[..i]
            .iter()
            .copied()
            .filter(|s| !is_error(s))
            .chain([*s])
            .collect();
        let out = simulate(policy, &csv_trace(&before));
        assert_eq!(out.status.code(), Some(2), "{name} step {i}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let code = s["expect"]["error"].as_str().unwrap();
        assert_eq!(code, "cost-exceeds-capacity", "{name}: unknown error code");
        let line = before.len() + 1;
        assert!(
            stderr.starts_with(&format!("tollgate: <stdin> line {line}: cost "))
                && stderr.contains("exceeds the policy's capacity"),
            "{name} step {i}: {stderr}"
        );
    }

    // Every decision.
    let checks: Vec<&Value> = steps.iter().copied().filter(|s| !is_error(s)).collect();
    let out = simulate(policy, &csv_trace(&checks));
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), checks.len(), "{name}");
    for (i, (got, step)) in lines.iter().zip(&checks).enumerate() {
        let e = &step["expect"];
        let want = (
            e["allowed"].as_bool(),
            e["limit"].as_u64(),
            e["remaining"].as_u64(),
            e["resetAfter"].as_u64(),
            e["retryAfter"].as_u64(),
            e["delay"].as_u64().unwrap_or(0),
        );
        let have = (
            got["allowed"].as_bool(),
            got["limit"].as_u64(),
            got["remaining"].as_u64(),
            got["reset_after_ms"].as_u64(),
            got["retry_after_ms"].as_u64(),
            got["delay_ms"].as_u64().unwrap_or(0),
        );
        assert_eq!(have, want, "{name} check {i} ({step})");
        assert_eq!(got.get("delay_ms").is_some(), queue, "{name} check {i}");
        assert_eq!(got["time_ms"], step["t"], "{name} check {i}");
        assert_eq!(got["key"], step["key"], "{name} check {i}");
    }
}

fn run_policy_errors(v: &Value) -> usize {
    let cases = v["cases"].as_array().unwrap();
    for case in cases {
        let policy = case["policy"].as_str().unwrap();
        let out = simulate(policy, "time_ms,key\n");
        assert_eq!(out.status.code(), Some(2), "{policy:?}");
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            format!("tollgate: {}\n", case["message"].as_str().unwrap()),
            "{policy:?}"
        );
    }
    cases.len()
}

#[test]
fn shared_vectors_through_simulate() {
    let dir = vectors_dir();
    let Ok(entries) = fs::read_dir(&dir) else {
        panic!("no vectors folder at {}", dir.display());
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vector files in {}", dir.display());
    let (mut ran, mut skipped) = (Vec::new(), Vec::new());
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let v: Value = serde_json::from_str(&fs::read_to_string(path).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if v.get("cases").is_some() {
            let n = run_policy_errors(&v);
            ran.push(format!("{name} ({n} policies)"));
        } else if let Some(reason) = inexpressible(&v) {
            skipped.push(format!("{name}: {reason}"));
        } else {
            run_file(&name, &v);
            ran.push(format!(
                "{name} ({} steps)",
                v["steps"].as_array().unwrap().len()
            ));
        }
    }
    println!("vectors run through the CLI: {}", ran.join(", "));
    println!(
        "not expressible through simulate:\n  {}",
        skipped.join("\n  ")
    );
    assert!(ran.len() > 1, "no vector ran: {skipped:?}");
}

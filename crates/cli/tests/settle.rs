//! `tollgate settle`: reserve-then-settle beside charge-after on traces with an estimate
//! (`cost`) and an `actual` column, run through the built binary.

use assert_cmd::Command;
use serde_json::Value;

/// Runs `tollgate settle --json` on `trace` (from standard input) and returns the report.
fn report(policy: &str, trace: &str) -> Value {
    let out = Command::cargo_bin("tollgate")
        .unwrap()
        .args(["settle", "--policy", policy, "--json"])
        .write_stdin(trace)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `tollgate settle` expecting exit status 2; returns its one-line message.
fn fails(policy: &str, trace: &str) -> String {
    let out = Command::cargo_bin("tollgate")
        .unwrap()
        .args(["settle", "--policy", policy])
        .write_stdin(trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr.trim_end().to_owned()
}

fn way<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["ways"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["way"] == name)
        .unwrap()
}

/// Three overlapping requests estimated at 5 that cost 4, against 10 a minute.
const THREE: &str = "time_ms,key,cost,actual,duration_ms\n\
                     0,a,5,4,10000\n\
                     1,a,5,4,10000\n\
                     2,a,5,4,10000\n";

#[test]
fn reserve_then_settle_admits_what_the_estimates_fit_and_gives_the_rest_back() {
    let r = report("sliding-log 10/min", THREE);
    let w = way(&r, "reserve-then-settle");
    // 5 + 5 fill the 10; the third's 5 does not fit. Each settle gives 1 back.
    assert_eq!(w["admitted"], 2);
    assert_eq!(w["denied"], 1);
    assert_eq!(w["spent"], 8);
    assert_eq!(w["refunded"], 2);
    assert_eq!(w["charged_after"], 0);
    assert_eq!(w["max_in_window"], 8);
    assert_eq!(w["overspend"], 0);
    assert_eq!(r["bound"], 10);
    assert_eq!(r["estimated"], 15);
    assert_eq!(r["actual"], 12);
}

#[test]
fn charge_after_admits_every_request_that_starts_before_the_first_ends() {
    let r = report("sliding-log 10/min", THREE);
    let w = way(&r, "charge-after");
    // Checked for 0, all three start; their 12 is charged when they end, 2 past the 10.
    assert_eq!(w["admitted"], 3);
    assert_eq!(w["denied"], 0);
    assert_eq!(w["spent"], 12);
    assert_eq!(w["charged_after"], 12);
    assert_eq!(w["max_in_window"], 12);
    assert_eq!(w["overspend"], 2);
}

#[test]
fn a_charge_after_debt_is_waited_off_before_the_next_request() {
    // The three end at 10 s and are charged then: 12 of 10 in the log. A request at 20 s
    // is denied, one at 71 s (the log's minute past the charges) admitted.
    let trace = format!("{THREE}20000,a,5,4,0\n71000,a,5,4,0\n");
    let r = report("sliding-log 10/min", &trace);
    let w = way(&r, "charge-after");
    assert_eq!(w["admitted"], 4);
    assert_eq!(w["denied"], 1);
}

/// 200 LLM streams of one team within a minute, estimates 100-1,000 tokens, actual costs
/// at most the estimate (`over`: a tenth above it), streams of 1-30 s (a fixed LCG: the
/// same trace every run; `over` is `examples/llm-streams.csv`).
fn streams(over: bool) -> String {
    let mut seed: u64 = 42;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut rows = Vec::new();
    for i in 0..200u64 {
        let t = next(60_000);
        let estimate = 100 + next(901);
        let mut actual = estimate / 2 + next(estimate / 2 + 1);
        if over && i % 10 == 0 {
            actual = estimate + next(500);
        }
        rows.push((t, estimate, actual, 1_000 + next(29_001)));
    }
    rows.sort();
    let mut out = String::from("time_ms,key,cost,actual,duration_ms\n");
    for (t, e, a, d) in rows {
        out.push_str(&format!("{t},team,{e},{a},{d}\n"));
    }
    out
}

#[test]
fn with_actual_costs_within_estimates_reserve_then_settle_never_passes_the_budget() {
    for policy in [
        "sliding-log 10000/min",
        "gcra 10000/min",
        "token-bucket 10000/min",
    ] {
        let r = report(policy, &streams(false));
        let settle = way(&r, "reserve-then-settle");
        let after = way(&r, "charge-after");
        assert_eq!(settle["overspend"], 0, "{policy}: {r}");
        assert!(settle["charged_after"] == 0, "{policy}: {r}");
        // Charge-after starts every stream the budget has not yet seen the end of.
        assert!(after["overspend"].as_u64().unwrap() > 0, "{policy}: {r}");
        assert!(
            after["admitted"].as_u64() > settle["admitted"].as_u64(),
            "{policy}: {r}"
        );
    }
}

#[test]
fn overages_are_charged_in_full_as_debts() {
    let r = report("sliding-log 10000/min", &streams(true));
    let settle = way(&r, "reserve-then-settle");
    // A tenth of the streams cost more than their estimate: settled past the limit, never
    // lost.
    assert!(settle["charged_after"].as_u64().unwrap() > 0, "{r}");
    // What passes the budget is at most the overages.
    assert!(
        settle["overspend"].as_u64() <= settle["charged_after"].as_u64(),
        "{r}"
    );
    let after = way(&r, "charge-after");
    assert!(
        after["overspend"].as_u64() > settle["overspend"].as_u64(),
        "{r}"
    );
}

#[test]
fn a_line_without_an_actual_cost_is_named() {
    let e = fails(
        "sliding-log 10/min",
        "time_ms,key,cost,actual\n0,a,1,1\n1,a,1,\n",
    );
    assert!(e.contains("line 3") && e.contains("`actual`"), "{e}");
}

#[test]
fn a_policy_a_settle_cannot_settle_is_refused_by_name() {
    for policy in ["concurrency 5", "leaky-queue 5/s"] {
        let e = fails(policy, THREE);
        assert!(e.contains("--policy"), "{e}");
    }
}

#[test]
fn an_actual_cost_past_the_bound_is_named_with_its_line() {
    let e = fails(
        "sliding-log 10/min",
        "time_ms,key,cost,actual\n0,a,1,1\n1,a,1,2000000000000\n",
    );
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn the_example_trace_is_the_generated_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/llm-streams.csv");
    let file = std::fs::read_to_string(path).unwrap();
    let rows: Vec<&str> = file.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.join("\n") + "\n", streams(true));
}

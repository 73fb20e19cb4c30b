//! Runs the built `tollgate` binary on the traces and logs in `tests/data` and the example
//! `examples/burst80.csv`, asserting exact outputs, exit statuses and error messages.

use std::path::PathBuf;

use assert_cmd::Command;
use serde_json::{json, Value};

fn data(name: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "data", name]
        .iter()
        .collect();
    p.to_string_lossy().into_owned()
}

fn example(name: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "examples", name]
        .iter()
        .collect();
    p.to_string_lossy().into_owned()
}

fn tollgate() -> Command {
    Command::cargo_bin("tollgate").unwrap()
}

/// Runs and returns stdout, asserting success and an empty stderr.
fn ok(args: &[&str]) -> String {
    let out = tollgate().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {stderr}");
    assert_eq!(stderr, "", "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs, asserting exit status 2 and a one-line stderr; returns that line.
fn fails(args: &[&str]) -> String {
    fails_on(args, "")
}

/// [`fails`] with `stdin` as the command's input (a trace read from `-`).
fn fails_on(args: &[&str], stdin: &str) -> String {
    let out = tollgate().args(args).write_stdin(stdin).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
    stderr.trim_end().to_owned()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// ---------------------------------------------------------------- simulate

const SMALL_TOKEN_BUCKET: &str = r#"{"time_ms":0,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":1,"reset_after_ms":500,"retry_after_ms":0}
{"time_ms":0,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":0,"reset_after_ms":1000,"retry_after_ms":0}
{"time_ms":0,"key":"alice","cost":1,"allowed":false,"limit":2,"remaining":0,"reset_after_ms":1000,"retry_after_ms":500}
{"time_ms":0,"key":"bob","cost":1,"allowed":true,"limit":2,"remaining":1,"reset_after_ms":500,"retry_after_ms":0}
{"time_ms":250,"key":"alice","cost":1,"allowed":false,"limit":2,"remaining":0,"reset_after_ms":750,"retry_after_ms":250}
{"time_ms":500,"key":"alice","cost":2,"allowed":false,"limit":2,"remaining":1,"reset_after_ms":500,"retry_after_ms":500}
{"time_ms":1000,"key":"alice","cost":1,"allowed":true,"limit":2,"remaining":1,"reset_after_ms":500,"retry_after_ms":0}
"#;

#[test]
fn simulate_token_bucket_csv_exact() {
    // Capacity 2, one token per 500 ms: alice spends both at 0 ms and is told to come back
    // in 500 ms; bob is limited separately; at 500 ms one token is not enough for cost 2;
    // an empty cost is 1.
    let out = ok(&[
        "simulate",
        "--policy",
        "token-bucket 2/s",
        "--trace",
        &data("small.csv"),
    ]);
    assert_eq!(out, SMALL_TOKEN_BUCKET);
}

#[test]
fn simulate_reads_json_lines_detected_or_named() {
    let expected = SMALL_TOKEN_BUCKET.replace(r#""key":"bob""#, r#""key":"42""#);
    let detected = ok(&["simulate", "-p", "2/s", "-t", &data("small.jsonl")]);
    assert_eq!(detected, expected);
    let named = ok(&[
        "simulate",
        "-p",
        "2/s",
        "-t",
        &data("small.jsonl"),
        "--format",
        "jsonl",
    ]);
    assert_eq!(named, expected);
}

#[test]
fn simulate_reads_stdin() {
    let out = tollgate()
        .args(["simulate", "--policy", "sliding-window 1/s"])
        .write_stdin("time_ms,key\n0,a\n10,a\n1000,a\n")
        .output()
        .unwrap();
    assert!(out.status.success());
    let got: Vec<bool> = lines(&String::from_utf8(out.stdout).unwrap())
        .iter()
        .map(|v| v["allowed"].as_bool().unwrap())
        .collect();
    // 1000 ms: the previous window's 1 still weighs 1 * (1 - 0/1000) = 1, not < 1.
    assert_eq!(got, [true, false, false]);
}

#[test]
fn simulate_leaky_queue_reports_delay() {
    // 3 slots draining one every 500 ms: delays 500, 1000, 1500; the 4th does not fit and
    // may retry in 500 ms; at 600 ms 900 ms of queue remain, so the next waits 1400 ms.
    let out = ok(&[
        "simulate",
        "-p",
        "leaky-queue 2/s burst 3",
        "-t",
        &data("queue.csv"),
    ]);
    let got: Vec<(bool, u64, u64)> = lines(&out)
        .iter()
        .map(|v| {
            (
                v["allowed"].as_bool().unwrap(),
                v["delay_ms"].as_u64().unwrap(),
                v["retry_after_ms"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (true, 500, 0),
            (true, 1000, 0),
            (true, 1500, 0),
            (false, 0, 500),
            (true, 1400, 0)
        ]
    );
    assert_eq!(
        out.lines().next().unwrap(),
        r#"{"time_ms":0,"key":"a","cost":1,"allowed":true,"limit":3,"remaining":2,"reset_after_ms":500,"retry_after_ms":0,"delay_ms":500}"#
    );
    // Other algorithms have no delay field.
    assert!(!SMALL_TOKEN_BUCKET.contains("delay_ms"));
}

#[test]
fn simulate_concurrency_releases_at_time_plus_duration() {
    // 2 slots. 0 ms and 10 ms hold until 100 and 110; 20 ms finds both taken; at 100 ms the
    // first has finished (a release due at the same instant comes first); at 110 the second
    // has; at 115 the requests of 100 (until 150) and 110 (until 120) hold both.
    let out = ok(&[
        "simulate",
        "-p",
        "concurrency 2",
        "-t",
        &data("concurrency.csv"),
    ]);
    let got: Vec<(bool, u64)> = lines(&out)
        .iter()
        .map(|v| {
            (
                v["allowed"].as_bool().unwrap(),
                v["remaining"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (true, 1),
            (true, 0),
            (false, 0),
            (true, 0),
            (true, 0),
            (false, 0)
        ]
    );
}

#[test]
fn simulate_concurrency_needs_durations() {
    assert_eq!(
        fails(&["simulate", "-p", "concurrency 2", "-t", &data("small.csv")]),
        format!(
            "tollgate: {} line 2: a concurrency policy needs a duration_ms for every request \
             (how long it holds its slot)",
            data("small.csv")
        )
    );
}

#[test]
fn simulate_rejects_time_going_backwards_unless_sorted() {
    let out = tollgate()
        .args([
            "simulate",
            "-p",
            "fixed-window 2/s",
            "-t",
            &data("unordered.csv"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "tollgate: {} line 4: time_ms 50 is before the previous line's 100 (times must not \
             go backwards; pass --sort to sort the trace)\n",
            data("unordered.csv")
        )
    );
    // With --sort: decided in time order (0, 50, 100), printed in input order.
    let sorted = ok(&[
        "simulate",
        "-p",
        "fixed-window 2/s",
        "-t",
        &data("unordered.csv"),
        "--sort",
    ]);
    let got: Vec<(u64, bool)> = lines(&sorted)
        .iter()
        .map(|v| {
            (
                v["time_ms"].as_u64().unwrap(),
                v["allowed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(0, true), (100, false), (50, true)]);
}

// ---------------------------------------------------------------- errors

#[test]
fn bad_policy_names_field_value_and_rule() {
    assert_eq!(
        fails(&["simulate", "-p", "10/fortnight", "-t", &data("small.csv")]),
        "tollgate: invalid policy: window \"fortnight\": unknown unit (expected one of ms, s, \
         sec, m, min, h, hour, d, day)"
    );
    assert_eq!(
        fails(&[
            "replay",
            "-p",
            "sliding-window 10/s burst 5",
            "--log",
            &data("access.log")
        ]),
        "tollgate: invalid policy: burst \"5\": burst applies only to token-bucket, gcra, \
         leaky-bucket and leaky-queue"
    );
}

#[test]
fn unreadable_files_are_named() {
    let missing = data("no-such-trace.csv");
    assert_eq!(
        fails(&["simulate", "-p", "10/s", "-t", &missing]),
        format!("tollgate: cannot read {missing}: No such file or directory (os error 2)")
    );
    let dir = data("");
    let dir = dir.trim_end_matches('/');
    assert_eq!(
        fails(&["compare", "-l", "10/s", "-t", dir]),
        format!("tollgate: cannot read {dir}: is a directory")
    );
    let log = data("no-such.log");
    assert_eq!(
        fails(&["replay", "-p", "10/s", "--log", &log]),
        format!("tollgate: cannot read {log}: No such file or directory (os error 2)")
    );
}

#[test]
fn malformed_lines_are_named_by_number() {
    // Comment lines count: the bad cost is on line 4 of the file.
    assert_eq!(
        fails(&["simulate", "-p", "2/s", "-t", &data("malformed.csv")]),
        format!(
            "tollgate: {} line 4: cost \"one\" is not a whole number",
            data("malformed.csv")
        )
    );
    assert_eq!(
        fails(&[
            "simulate",
            "-p",
            "2/s",
            "-t",
            &data("queue.csv"),
            "--format",
            "jsonl"
        ]),
        format!(
            "tollgate: {} line 1: not a JSON object (for a CSV trace, pass --format csv)",
            data("queue.csv")
        )
    );
    assert_eq!(
        fails_on(
            &["simulate", "-p", "2/s"],
            "{\"time_ms\":0,\"key\":\"a\"}\n{\"time_ms\":-1,\"key\":\"a\"}\n"
        ),
        "tollgate: <stdin> line 2: not a trace record: invalid value: integer `-1`, expected u64"
    );
    assert_eq!(
        fails_on(&["simulate", "-p", "2/s"], "time,key\n0,a\n"),
        "tollgate: <stdin> line 1: the CSV header must name a `time_ms` column (found: time,key)"
    );
    assert_eq!(
        fails_on(&["simulate", "-p", "2/s"], "time_ms,key\n0,a\n1,b,3\n"),
        "tollgate: <stdin> line 3: 3 fields, but the header has 2"
    );
    assert_eq!(
        fails(&["replay", "-p", "2/s", "--log", &data("bad.log")]),
        format!(
            "tollgate: {} line 2: not an access-log line: time \"02/Dec/2026:10:00:00\" is not \
             like 10/Oct/2000:13:55:36 -0700",
            data("bad.log")
        )
    );
}

#[test]
fn impossible_costs_are_errors_naming_the_line() {
    assert_eq!(
        fails(&[
            "simulate",
            "-p",
            "token-bucket 1/s",
            "-t",
            &data("small.csv")
        ]),
        format!(
            "tollgate: {} line 7: cost 2 exceeds the policy's capacity 1: it can never be admitted",
            data("small.csv")
        )
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = tollgate().args(["simulate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy <POLICY>"));
    assert_eq!(
        fails(&["compare", "-l", "gcra 10/s", "-t", &example("burst80.csv")]),
        "tollgate: --limit takes <limit>/<window>, like 10/s or 600/10min (got \"gcra 10/s\")"
    );
    assert_eq!(
        fails(&[
            "replay",
            "-p",
            "concurrency 2",
            "--log",
            &data("access.log")
        ]),
        "tollgate: access logs carry no request durations, so a concurrency policy cannot be \
         replayed from them (use --format csv with a duration_ms column)"
    );
    assert_eq!(
        fails(&[
            "replay",
            "-p",
            "2/s",
            "--log",
            &data("access.log"),
            "--key",
            "field:cookie"
        ]),
        "tollgate: --key field:cookie: an access log has no field \"cookie\" (fields: \
         remote_addr, remote_user, request, method, path, status, body_bytes_sent, referer, \
         user_agent)"
    );
}

// ---------------------------------------------------------------- compare

fn burst80() -> Value {
    let out = ok(&[
        "compare",
        "--limit",
        "10/s",
        "--trace",
        &example("burst80.csv"),
        "--json",
    ]);
    serde_json::from_str(&out).unwrap()
}

fn row<'a>(report: &'a Value, algorithm: &str) -> &'a Value {
    report["algorithms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["algorithm"] == algorithm)
        .unwrap()
}

#[test]
fn compare_burst80_within_the_design_bounds() {
    let report = burst80();
    assert_eq!(report["requests"], 80);
    assert_eq!(report["keys"], 1);
    let peak = |a: &str| row(&report, a)["max_in_window"].as_u64().unwrap();
    let (l, b, r_t) = (10, 10, 10); // limit per 1 s, capacity, rate * 1 s
                                    // design.md's exact bounds...
    assert!(peak("fixed-window") <= 2 * l);
    assert!(peak("sliding-log") <= l);
    assert!(peak("token-bucket") <= b + r_t);
    assert!(peak("gcra") <= b + r_t);
    assert!(peak("leaky-bucket") <= b + r_t);
    assert!(peak("leaky-queue") <= r_t, "queue output");
    // ...and the figures the trace is designed to show.
    assert_eq!(peak("fixed-window"), 20, "2L near the 1 s boundary");
    assert_eq!(row(&report, "fixed-window")["max_window_start_ms"], 900);
    assert_eq!(peak("sliding-log"), 10);
    assert_eq!(
        peak("sliding-window"),
        11,
        "the sliding counter's measured error"
    );
    assert_eq!(peak("token-bucket"), 19, "stored burst, then the refill");
    assert_eq!(peak("gcra"), 19);
    assert_eq!(peak("leaky-queue"), 10);
    // Each row's bound column is what it is checked against.
    for a in [
        "fixed-window",
        "sliding-log",
        "token-bucket",
        "gcra",
        "leaky-bucket",
        "leaky-queue",
    ] {
        assert!(peak(a) <= row(&report, a)["bound"].as_u64().unwrap(), "{a}");
    }
    assert_eq!(row(&report, "sliding-window")["bound"], Value::Null);
    // The queue shapes instead of rejecting: 10 slots of 100 ms, so at most 1 s of delay.
    assert_eq!(row(&report, "leaky-queue")["max_delay_ms"], 1000);
    assert_eq!(row(&report, "token-bucket")["max_delay_ms"], 0);
    // Every request is either admitted or rejected.
    for r in report["algorithms"].as_array().unwrap() {
        assert_eq!(
            r["admitted"].as_u64().unwrap() + r["rejected"].as_u64().unwrap(),
            80
        );
    }
}

#[test]
fn compare_burst80_table() {
    let out = ok(&[
        "compare",
        "--limit",
        "10/s",
        "--trace",
        &example("burst80.csv"),
    ]);
    let expected = "\
limit 10/s, burst = limit, 80 requests, 1 key, peak over any 1000 ms

algorithm       admitted  rejected  max in 1000 ms  from (ms)  bound                 max delay (ms)
token-bucket          50        30              19       3000  20 (B + r*T)                       0
gcra                  50        30              19       3000  20 (B + r*T)                       0
sliding-window        31        49              11        900  - (approximation)                  0
fixed-window          41        39              20        900  20 (2L)                            0
sliding-log           31        49              10        900  10 (L)                             0
leaky-bucket          50        30              19       3000  20 (B + r*T)                       0
leaky-queue           50        30              10       1000  10 (r*T, output)                1000

max in 1000 ms: the most cost admitted for one key in any [t, t+1000 ms); leaky-queue is measured on its output (arrival + delay).
sliding-window is an approximation with no exact bound: any excess over the limit is its error.
";
    assert_eq!(out, expected);
}

#[test]
fn compare_shared_burst_trace_gives_the_same_figures() {
    // The core's own burst test uses tests/data/burst80.csv at the repository root: a
    // different 80-request design that must show the same figures through the CLI.
    let shared: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "tests",
        "data",
        "burst80.csv",
    ]
    .iter()
    .collect();
    if !shared.exists() {
        return;
    }
    let out = ok(&[
        "compare",
        "-l",
        "10/s",
        "-t",
        shared.to_str().unwrap(),
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    let peak = |a: &str| row(&report, a)["max_in_window"].as_u64().unwrap();
    assert_eq!(
        [
            peak("fixed-window"),
            peak("sliding-log"),
            peak("sliding-window"),
            peak("token-bucket"),
            peak("leaky-queue")
        ],
        [20, 10, 11, 19, 10]
    );
}

#[test]
fn compare_burst_and_window_options() {
    // A larger bucket raises the bucket algorithms' bound and peak, not the windows'.
    let out = ok(&[
        "compare",
        "-l",
        "10/s",
        "-b",
        "20",
        "-t",
        &example("burst80.csv"),
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        row(&report, "token-bucket")["policy"],
        "token-bucket 10/s burst 20"
    );
    assert_eq!(row(&report, "token-bucket")["bound"], 30);
    assert_eq!(row(&report, "fixed-window")["policy"], "fixed-window 10/s");
    assert_eq!(row(&report, "leaky-queue")["max_delay_ms"], 2000);
    for a in ["token-bucket", "gcra", "leaky-bucket", "leaky-queue"] {
        let r = row(&report, a);
        assert!(r["max_in_window"].as_u64() <= r["bound"].as_u64(), "{a}");
    }
    // Over 2 s the fixed window can pass 3L, the log 2L.
    let out = ok(&[
        "compare",
        "-l",
        "10/s",
        "--window-ms",
        "2000",
        "-t",
        &example("burst80.csv"),
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(row(&report, "fixed-window")["bound"], 30);
    assert_eq!(row(&report, "sliding-log")["bound"], 20);
    assert_eq!(row(&report, "token-bucket")["bound"], 30);
    assert_eq!(row(&report, "leaky-queue")["bound"], 20);
    for r in report["algorithms"].as_array().unwrap() {
        if let Some(bound) = r["bound"].as_u64() {
            assert!(r["max_in_window"].as_u64().unwrap() <= bound, "{r}");
        }
    }
}

// ---------------------------------------------------------------- replay

#[test]
fn replay_groups_ipv6_by_64_and_normalises_mapped_ipv4() {
    let out = ok(&[
        "replay",
        "-p",
        "fixed-window 2/min",
        "--log",
        &data("access.log"),
    ]);
    let expected = "\
policy        fixed-window 2/min
key           ip/64
requests      9
denied        3 (33.3%)
keys          4 (2 with denials)
first denial  2026-12-02T10:00:00Z (line 3, key 203.0.113.7)
out of order  1 line earlier than the line before (counted as no time passing)

top denied keys
key                requests    denied  first denial
203.0.113.7               4         2  2026-12-02T10:00:00Z
2001:db8:1:2::/64         3         1  2026-12-02T10:00:01Z
";
    assert_eq!(out, expected);
}

#[test]
fn replay_json_by_whole_address() {
    let out = ok(&[
        "replay",
        "-p",
        "fixed-window 2/min",
        "--log",
        &data("access.log"),
        "--key",
        "ip",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report,
        json!({
            "policy": "fixed-window 2/min",
            "key": "ip",
            "format": "nginx",
            "requests": 9,
            "denied": 2,
            "keys": 6,
            "keys_denied": 1,
            "first_denial": {"time_ms": 1_796_205_600_000u64, "line": 3, "key": "203.0.113.7"},
            "max_delay_ms": 0,
            "time_went_back": 1,
            "top_denied": [
                {"key": "203.0.113.7", "requests": 4, "denied": 2, "first_denied_ms": 1_796_205_600_000u64}
            ]
        })
    );
}

#[test]
fn replay_keys_by_a_log_field() {
    let out = ok(&[
        "replay",
        "-p",
        "fixed-window 2/min",
        "--log",
        &data("access.log"),
        "-k",
        "field:user_agent",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    let top: Vec<(&str, u64, u64)> = report["top_denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["key"].as_str().unwrap(),
                s["requests"].as_u64().unwrap(),
                s["denied"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        top,
        [
            ("curl/8.5.0", 4, 2),
            ("Mozilla/5.0 (X11; Linux x86_64)", 3, 1)
        ]
    );
    // curl, Mozilla, the quoted bot, and the common-format line without a user agent.
    assert_eq!(report["keys"], 4);
}

#[test]
fn replay_csv_log_with_costs() {
    // 192.0.2.1 (and its IPv4-mapped form) under 2/s: cost 1 at 0 ms, then cost 2 at 100 ms
    // finds 1.2 tokens and is denied; the two IPv6 addresses share 2001:db8::/64.
    let out = ok(&[
        "replay",
        "-p",
        "token-bucket 2/s",
        "--log",
        &data("access.csv"),
        "--format",
        "csv",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["requests"], 6);
    assert_eq!(report["denied"], 1);
    assert_eq!(report["keys"], 2);
    assert_eq!(
        report["first_denial"],
        json!({"time_ms": 100, "line": 3, "key": "192.0.2.1"})
    );
    let by_user = ok(&[
        "replay",
        "-p",
        "token-bucket 2/s",
        "--log",
        &data("access.csv"),
        "--format",
        "csv",
        "-k",
        "field:user",
    ]);
    assert!(
        by_user.contains("first denial  100 ms (line 3, key ann)"),
        "{by_user}"
    );
}

#[test]
fn replay_limiter_memory_is_bounded_by_max_keys() {
    // One key per line, each denied only if the limiter remembered it: with room for one
    // key, alternating keys are evicted before they come back, so nothing is denied (the
    // replay errs toward leniency, never toward over-counting).
    let log = "time_ms,ip\n0,192.0.2.1\n0,192.0.2.2\n0,192.0.2.1\n0,192.0.2.2\n";
    let run = |max_keys: &str| {
        let out = tollgate()
            .args([
                "replay",
                "-p",
                "fixed-window 1/min",
                "--format",
                "csv",
                "--json",
                "--max-keys",
                max_keys,
            ])
            .write_stdin(log)
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["denied"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(run("2"), 2);
    assert_eq!(run("1"), 0);
}

#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal() {
    let mut log = String::from("time_ms,ip\n");
    for i in 0..20_000u32 {
        log.push_str(&format!(
            "{},10.0.{}.{}\n",
            i / 10,
            (i / 256) % 256,
            i % 256
        ));
    }
    let out = tollgate()
        .args(["replay", "-p", "10/s", "--format", "csv", "--json"])
        .write_stdin(log)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stderr.is_empty());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"], 20_000);
}

#[test]
fn replay_concurrency_from_a_csv_log_with_durations() {
    // One slot: 10 ms finds it held until 100 ms; at 100 ms it has been released.
    let out = ok(&[
        "replay",
        "-p",
        "concurrency 1",
        "--log",
        &data("concurrency-log.csv"),
        "--format",
        "csv",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["requests"], 3);
    assert_eq!(report["denied"], 1);
    assert_eq!(
        report["first_denial"],
        json!({"time_ms": 10, "line": 3, "key": "192.0.2.1"})
    );
}

#[test]
fn an_empty_trace_has_no_requests() {
    let out = tollgate()
        .args(["simulate", "-p", "10/s"])
        .write_stdin("")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    let out = tollgate()
        .args(["compare", "-l", "10/s", "--json"])
        .write_stdin("time_ms,key\n")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"], 0);
    assert_eq!(
        row(&report, "sliding-log")["max_window_start_ms"],
        Value::Null
    );
}

#[test]
fn check_config_accepts_the_bundled_config() {
    let bundled = format!(
        "{}/../worker/config/tollgate.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = ok(&["check-config", &bundled]);
    assert!(out.contains("valid ("), "{out}");
}

#[test]
fn check_config_prints_the_workers_error_naming_the_field() {
    let config = r#"{"policies": {"a": {"limit": "10/s"}}, "routes": [{"path": "/api/", "policies": ["b"]}]}"#;
    // The same text the worker answers in its 500's `detail`.
    let expected = tollgate_config::Config::parse(config)
        .unwrap_err()
        .to_string();
    assert_eq!(
        expected,
        "invalid config: routes[0].policies[0]: no policy named \"b\" in [policies]"
    );
    let out = tollgate()
        .args(["check-config", "-"])
        .write_stdin(config)
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end(), format!("tollgate: {expected}"));
}

#[test]
fn check_config_validates_plans_and_the_key_table() {
    let hash = "ab".repeat(32);
    let config = |plan: &str| {
        format!(
            "[settings]\napi_keys = [{{ sha256 = \"{hash}\", plan = \"{plan}\" }}]\n\
             [policies.api]\nkey = \"api-key\"\ndefault = \"free\"\n\
             plans = [{{ name = \"free\", limit = \"100/min\" }}, {{ name = \"pro\", limit = \"1000/min\" }}]\n\
             [[routes]]\npath = \"/api/\"\npolicies = [\"api\"]\n"
        )
    };
    let out = tollgate()
        .args(["check-config", "-"])
        .write_stdin(config("pro"))
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(String::from_utf8(out.stdout).unwrap().contains("valid ("));
    let out = tollgate()
        .args(["check-config", "-"])
        .write_stdin(config("gold"))
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert_eq!(
        String::from_utf8(out.stderr).unwrap().trim_end(),
        "tollgate: invalid config: settings.api_keys[0].plan: no plan named \"gold\" in policies.api.plans"
    );
}

#[test]
fn check_config_validates_the_jwt_section() {
    let config = |secret: &str| {
        format!(
            "[settings.jwt]\nplan_claim = \"plan\"\n\
             keys = [{{ kid = \"hs-1\", alg = \"HS256\", secret = \"{secret}\" }}]\n"
        )
    };
    tollgate()
        .args(["check-config", "-"])
        .write_stdin(config("JWT_SECRET"))
        .assert()
        .success();
    // The secret itself written in the file is refused, naming the field.
    let out = tollgate()
        .args(["check-config", "-"])
        .write_stdin(config("hunter2 is my secret"))
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("tollgate: invalid config: settings.jwt.keys[0].secret: "),
        "{err}"
    );
}

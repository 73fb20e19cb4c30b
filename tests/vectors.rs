//! Shared conformance vectors: `tests/vectors/*.json`.
//!
//! Every runtime of the project (this Rust test, the npm package, the WIT component host and
//! the edge worker's `/v1/check`) replays these same files and must produce the same
//! decisions. The files were generated from the core once (`cargo test --all-features --test
//! vectors -- --ignored generate`), reviewed by hand, and committed; this test asserts that
//! the core still produces exactly what they say.
//!
//! Format: one limiter per file (`{"policy": ..}`, `{"stack": [..]}` or `{"fairShare":
//! {"shared": .., "tenant": ..}}`) and steps run in order against one keyed limiter. Times
//! `t` are integer milliseconds; expected durations are milliseconds rounded up.

use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::{millis, MillisDecision, Policy};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn policy(v: &Value) -> Policy {
    v.as_str()
        .expect("policy string")
        .parse()
        .expect("valid policy")
}

fn limiter(spec: &Value) -> KeyedLimiter<String> {
    let max = NonZeroUsize::new(10_000).unwrap();
    if let Some(p) = spec.get("policy") {
        KeyedLimiter::new(policy(p), max)
    } else if let Some(s) = spec.get("stack") {
        let ps: Vec<Policy> = s.as_array().unwrap().iter().map(policy).collect();
        KeyedLimiter::stack(&ps, max).unwrap()
    } else if let Some(f) = spec.get("fairShare") {
        let fs = FairShare::new(policy(&f["shared"]), policy(&f["tenant"])).unwrap();
        KeyedLimiter::fair_share(fs, max)
    } else {
        panic!("limiter spec needs policy, stack or fairShare: {spec}")
    }
}

/// Whether a limiter has several limits (a stack or a fair share): its check steps expect
/// each limit's decision as well (`each`, in stack order; a fair share: shared, then the
/// tenant window when the request has one).
fn stacked(spec: &Value) -> bool {
    spec.get("policy").is_none()
}

/// Runs one step and returns what a vector file would say about it (`None` for steps that
/// answer nothing).
fn run_step(l: &KeyedLimiter<String>, stacked: bool, step: &Value) -> Option<Value> {
    let op = step["op"].as_str().unwrap_or("check");
    let key = step["key"].as_str().expect("key");
    let now = millis(step["t"].as_u64().unwrap_or(0));
    let cost = step["cost"].as_u64().unwrap_or(1);
    let tenant = step.get("tenant").and_then(Value::as_str);
    let ms = |d: tollgate::Decision| serde_json::to_value(MillisDecision::from(d)).unwrap();
    let decision = |r: Result<tollgate::Decision, tollgate::DecideError>| match r {
        Ok(d) => ms(d),
        Err(e) => json!({ "error": e.code() }),
    };
    match op {
        "check" => Some(match l.check_detailed(key, tenant, now, cost) {
            Ok(d) if stacked => {
                let mut v = ms(d.decision);
                v["each"] = d.each.into_iter().map(ms).collect();
                v
            }
            other => decision(other.map(|d| d.decision)),
        }),
        "peek" => Some(decision(l.peek(key, now))),
        "release" => l
            .release(key, cost)
            .err()
            .map(|e| json!({ "error": e.code() })),
        "reset" => {
            l.reset(key);
            None
        }
        other => panic!("unknown op {other}"),
    }
}

fn vector_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir())
        .expect("tests/vectors exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn decision_vectors_match_the_core() {
    let mut checked = 0;
    for file in vector_files() {
        let v: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
        let Some(steps) = v.get("steps") else {
            continue;
        };
        let l = limiter(&v["limiter"]);
        let stacked = stacked(&v["limiter"]);
        for (i, step) in steps.as_array().unwrap().iter().enumerate() {
            let got = run_step(&l, stacked, step);
            let want = step.get("expect").cloned();
            assert_eq!(got, want, "{} step {i}: {step}", file.display());
            checked += 1;
        }
    }
    assert!(checked > 500, "only {checked} steps checked");
}

#[test]
fn policy_error_vectors_match_the_core() {
    let v: Value =
        serde_json::from_str(&fs::read_to_string(dir().join("policy-errors.json")).unwrap())
            .unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let text = case["policy"].as_str().unwrap();
        let err = text.parse::<Policy>().expect_err(text);
        assert_eq!(err.field.name(), case["field"], "{text}: {err}");
        assert_eq!(err.rule.code(), case["rule"], "{text}: {err}");
    }
}

// ---------------------------------------------------------------------------------------
// Generation (run by hand; review the diff before committing).

/// A small deterministic generator, so regenerating gives the same files.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn check(t: u64, key: &str, cost: u64) -> Value {
    json!({"op": "check", "t": t, "key": key, "cost": cost})
}

/// Hand-written scenarios: worked examples and the edges of each algorithm.
fn scenarios() -> Vec<(String, String, Value, Vec<Value>)> {
    let mut out = Vec::new();
    let burst =
        |t: u64, n: usize, key: &str| -> Vec<Value> { (0..n).map(|_| check(t, key, 1)).collect() };

    for (alg, name) in [
        ("token-bucket", "token-bucket"),
        ("gcra", "gcra"),
        ("leaky-bucket", "leaky-bucket"),
    ] {
        let mut steps = burst(0, 22, "a");
        steps.extend([
            check(50, "a", 1),
            check(100, "a", 1),
            check(100, "a", 1),
            check(150, "b", 5),
            check(400, "a", 3),
            check(400, "a", 21),
            check(399, "a", 1),
            json!({"op": "peek", "t": 1000, "key": "a"}),
            check(1000, "a", 0),
            check(5000, "a", 20),
            json!({"op": "reset", "t": 5000, "key": "a"}),
            check(5000, "a", 20),
        ]);
        out.push((
            name.to_string(),
            format!("{alg}: a burst of 22 on capacity 20 refilled at 10/s, weighted costs, a cost above capacity, time going back 1 ms, peek, cost 0, reset"),
            json!({"policy": format!("{alg} 10/s burst 20")}),
            steps,
        ));
    }

    let mut steps = burst(0, 9, "a");
    steps.extend([
        check(600, "a", 1),
        check(600, "a", 2),
        check(3100, "a", 1),
        check(3100, "a", 7),
    ]);
    out.push((
        "leaky-queue".into(),
        "leaky-queue: 9 at once into a queue of 6 slots draining one per 0.5 s (delays 0.5..3.0 s, 3 rejected), then the queue draining".into(),
        json!({"policy": "leaky-queue 2/s burst 6"}),
        steps,
    ));

    out.push((
        "sliding-window".into(),
        "sliding-window: the weighted estimate (limit 100/min; 80 in the previous window, 30 in the current one, 15 s in: 80 * 45/60 + 30 = 90, admitted), then the edge of the limit and the retry time".into(),
        json!({"policy": "sliding-window 100/min"}),
        vec![
            check(1_000, "a", 80),
            check(70_000, "a", 30),
            check(75_000, "a", 1),
            check(75_000, "a", 9),
            check(75_000, "a", 1),
            check(90_000, "a", 1),
            check(125_000, "a", 1),
            check(300_000, "a", 100),
            check(300_000, "a", 101),
        ],
    ));

    let mut steps = burst(900, 4, "a");
    steps.extend(burst(1000, 4, "a"));
    steps.extend([
        check(1999, "a", 1),
        check(2000, "a", 3),
        check(1500, "a", 1),
    ]);
    out.push((
        "fixed-window".into(),
        "fixed-window: 3 per clock-aligned second; 6 admitted within 100 ms around a boundary (the classic 2x), time going back into an earlier window".into(),
        json!({"policy": "fixed-window 3/s"}),
        steps,
    ));

    out.push((
        "sliding-log".into(),
        "sliding-log: exact (t-W, t] window of 3 per second; an entry expires exactly W after it was admitted".into(),
        json!({"policy": "sliding-log 3/s"}),
        vec![
            check(0, "a", 1),
            check(300, "a", 2),
            check(500, "a", 1),
            check(999, "a", 1),
            check(1000, "a", 1),
            check(1000, "a", 1),
            check(1299, "a", 1),
            check(1300, "a", 2),
            check(1300, "a", 4),
        ],
    ));

    out.push((
        "concurrency".into(),
        "concurrency: 2 in flight; a third is rejected until a release; releasing more than held never goes below zero".into(),
        json!({"policy": "concurrency 2"}),
        vec![
            check(0, "a", 1),
            check(0, "a", 1),
            check(0, "a", 1),
            json!({"op": "release", "t": 10, "key": "a", "cost": 1}),
            check(10, "a", 1),
            json!({"op": "release", "t": 20, "key": "a", "cost": 5}),
            check(20, "a", 2),
            check(20, "a", 3),
        ],
    ));

    let mut steps: Vec<Value> = burst(0, 4, "a");
    steps.extend([
        json!({"op": "peek", "t": 0, "key": "a"}),
        check(1000, "a", 1),
        check(1000, "a", 1),
        check(1000, "a", 1),
        check(60_000, "a", 3),
    ]);
    out.push((
        "stack".into(),
        "stack: a 3/s token bucket and a fixed window of 5/min; the 4th request at t=0 is denied by the bucket and the window is NOT charged for it, so at t=1 s two more pass before the window is spent".into(),
        json!({"stack": ["3/s", "fixed-window 5/min"]}),
        steps,
    ));

    out.push((
        "stack-queue".into(),
        "stack: a leaky-bucket queue (1/s, 3 slots) under a fixed window of 2/min; the 3rd request at t=0 is denied by the window: the queue had room, was not charged and reports what it really has (2 of 3 slots taken, no delay), and the denial has no delay; at t=60 s the window has rolled over".into(),
        json!({"stack": ["leaky-queue 1/s burst 3", "fixed-window 2/min"]}),
        vec![
            check(0, "a", 1),
            check(0, "a", 1),
            check(0, "a", 1),
            check(500, "a", 1),
            check(60_000, "a", 1),
        ],
    ));

    let mut steps = Vec::new();
    for _ in 0..6 {
        steps.push(json!({"op": "check", "t": 0, "key": "dns", "cost": 1, "tenant": "acme"}));
    }
    for _ in 0..3 {
        steps.push(json!({"op": "check", "t": 0, "key": "dns", "cost": 1, "tenant": "globex"}));
    }
    steps.push(json!({"op": "check", "t": 0, "key": "dns", "cost": 1, "tenant": "default"}));
    steps.push(json!({"op": "check", "t": 0, "key": "dns", "cost": 1}));
    steps.push(json!({"op": "check", "t": 0, "key": "dns", "cost": 1, "tenant": "initech"}));
    steps.push(json!({"op": "check", "t": 1000, "key": "dns", "cost": 1, "tenant": "acme"}));
    out.push((
        "fair-share".into(),
        "fair share: shared bucket 10/s, each tenant a sliding window of 4/s; acme cannot take more than its share, globex still gets in, default and tenant-less requests skip the tenant window".into(),
        json!({"fairShare": {"shared": "10/s", "tenant": "sliding-window 4/s"}}),
        steps,
    ));

    // Random traces: every algorithm on the same mixed trace (3 keys, costs 1..3, gaps
    // 0..400 ms), so that every runtime is compared on thousands of ordinary decisions.
    for (i, alg) in [
        "token-bucket 5/s burst 8",
        "gcra 5/s burst 8",
        "leaky-bucket 5/s burst 8",
        "leaky-queue 5/s burst 8",
        "sliding-window 8/s",
        "fixed-window 8/s",
        "sliding-log 8/s",
        "sliding-window 7/1500ms",
        "token-bucket 3/7s burst 4",
    ]
    .iter()
    .enumerate()
    {
        let mut rng = Lcg(42 + i as u64);
        let mut t = 1_700_000_000_000u64; // a Unix time in ms, like Date.now()
        let mut steps = Vec::new();
        for _ in 0..150 {
            t += [0, 0, 1, 7, 50, 120, 400][rng.below(7) as usize];
            let key = ["a", "b", "c"][rng.below(3) as usize];
            steps.push(check(t, key, 1 + rng.below(3)));
        }
        let p: Policy = alg.parse().unwrap();
        out.push((
            format!("random-{}", i + 1),
            format!("{p}: a deterministic random trace (3 keys, costs 1..3, gaps 0..400 ms, Unix-time ms)"),
            json!({"policy": alg}),
            steps,
        ));
    }
    out
}

fn policy_errors() -> Vec<&'static str> {
    vec![
        "",
        "10/fortnight",
        "0/s",
        "10/0s",
        "ten/s",
        "10",
        "10/s burst 0",
        "fixed-window 10/s burst 20",
        "sliding-window 10/s extra",
        "magic-bucket 10/s",
        "10/400d",
        "2000000000000/s",
        "concurrency 0",
        "concurrency",
        "token-bucket",
        "10/s burst",
        "10/s burst x",
    ]
}

/// Writes the vector files from the scenarios above. Run by hand, then review the diff.
#[test]
#[ignore]
fn generate() {
    fs::create_dir_all(dir()).unwrap();
    for (name, description, spec, steps) in scenarios() {
        let l = limiter(&spec);
        let stacked = stacked(&spec);
        let mut lines = Vec::new();
        for step in steps {
            let mut step = step;
            if let Some(e) = run_step(&l, stacked, &step) {
                step["expect"] = e;
            }
            lines.push(format!("    {}", serde_json::to_string(&step).unwrap()));
        }
        let text = format!(
            "{{\n  \"name\": {},\n  \"description\": {},\n  \"limiter\": {},\n  \"steps\": [\n{}\n  ]\n}}\n",
            json!(name),
            json!(description),
            spec,
            lines.join(",\n")
        );
        fs::write(dir().join(format!("{name}.json")), text).unwrap();
    }
    let cases: Vec<String> = policy_errors()
        .into_iter()
        .map(|p| {
            let e = p.parse::<Policy>().unwrap_err();
            format!(
                "    {}",
                json!({"policy": p, "field": e.field.name(), "rule": e.rule.code(), "message": e.to_string()})
            )
        })
        .collect();
    fs::write(
        dir().join("policy-errors.json"),
        format!(
            "{{\n  \"name\": \"policy-errors\",\n  \"description\": \"invalid policies: each runtime must reject them naming this field and rule\",\n  \"cases\": [\n{}\n  ]\n}}\n",
            cases.join(",\n")
        ),
    )
    .unwrap();
}

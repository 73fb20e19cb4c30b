//! `TOLLGATE.SETTLE` in a real redis-server: the shared settle vectors
//! (`tests/vectors/settle/*.json`, the format is in the root crate's `tests/settle.rs`)
//! replayed with module commands at the module's test clock, and `RedisLimiter::settle`
//! in one round trip on a server with the module, once per reservation across limiters.

#[path = "../../redis/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use redis::aio::ConnectionManager;
use serde_json::{json, Value};
use support::Server;
use tollgate::settle::{Reservation, Settlement};
use tollgate::store::fleet::{self, settle_command};
use tollgate::store::Limits;
use tollgate::{millis, MillisDecision, Overage};
use tollgate_redis::{Fallback, Options, RedisLimiter};

/// The module built next to this test (target/<profile>/libtollgate_redis_module.so).
fn module() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().parent().unwrap();
    let so = so.join("libtollgate_redis_module.so");
    assert!(
        so.exists(),
        "{} (cargo build -p tollgate-redis-module)",
        so.display()
    );
    so
}

fn with_module(module_args: &[&str]) -> Server {
    let so = module();
    let mut args = vec!["--save", "", "--loadmodule", so.to_str().unwrap()];
    args.extend_from_slice(module_args);
    Server::with_args(&args)
}

fn settlement(s: &Settlement) -> Value {
    let mut v = json!({"refunded": s.refunded, "charged": s.charged, "unpaid": s.unpaid});
    if !s.each.is_empty() {
        v["each"] = s
            .each
            .iter()
            .map(|e| json!({"refunded": e.refunded, "charged": e.charged, "unpaid": e.unpaid}))
            .collect();
    }
    v
}

/// Whether `got` has every field of `want` with the same value (as the root runner).
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

/// The code of a module error reply (`ERR <code>: <sentence>`).
fn code(e: &redis::RedisError) -> String {
    let text = e.detail().unwrap_or_default();
    text.split(':').next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settle_vectors_replay_in_the_module_at_its_test_clock() {
    let server = with_module(&["TESTCLOCK"]);
    let mut conn = support::connect(&server.url()).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/settle");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let (mut run, mut skipped) = (0, 0);
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let spec = &v["limiter"];
        let limits: Vec<String> = match spec.get("policy") {
            Some(p) => vec![p.as_str().unwrap().to_string()],
            None => {
                let ps = spec["stack"].as_array().unwrap();
                let mut a = vec!["STACK".to_string(), ps.len().to_string()];
                a.extend(ps.iter().map(|p| p.as_str().unwrap().to_string()));
                a
            }
        };
        // Reservations by name: (id, at, estimate).
        let mut open: HashMap<String, (u64, u64, u64)> = HashMap::new();
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            let want = &step["expect"];
            let client_side = want["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("foreign"))
                || (step["op"] == "reserve" && want.get("error").is_some())
                || step.get("on").is_some();
            if client_side {
                // A reservation's identity, and which algorithms reserve, are checked by
                // the client (tollgate-redis, replayed in crates/redis/tests/settle.rs); the
                // module is sent only the id.
                skipped += 1;
                continue;
            }
            let t = step["t"].as_u64().unwrap_or(0);
            let base = format!(
                "tollgate:{{settle:{name}:{}}}",
                step["key"].as_str().unwrap()
            );
            let cost = step["cost"].as_u64().unwrap_or(1);
            let decide = |command: &str| {
                let mut cmd = redis::cmd(command);
                cmd.arg(&base)
                    .arg(&limits)
                    .arg("COST")
                    .arg(cost)
                    .arg("NOW")
                    .arg(t);
                cmd
            };
            let got = match step["op"].as_str().unwrap() {
                "reserve" | "check" => {
                    let reply: redis::Value = decide("TOLLGATE.CHECK")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let d = tollgate_redis::module_decision(&reply).unwrap();
                    let mut got = serde_json::to_value(MillisDecision::from(d.decision)).unwrap();
                    got["each"] = d
                        .each
                        .iter()
                        .map(|e| serde_json::to_value(MillisDecision::from(*e)).unwrap())
                        .collect();
                    got["reserved"] = json!(d.decision.allowed);
                    if step["op"] == "reserve" && d.decision.allowed {
                        let id = open.len() as u64 + 1;
                        open.insert(step["as"].as_str().unwrap().into(), (id, millis(t), cost));
                    }
                    got
                }
                "settle" => {
                    let (id, at, estimate) = open[step["reservation"].as_str().unwrap()];
                    let overage = match step.get("overage").and_then(Value::as_str) {
                        Some("up-to-limit") => Overage::UpToLimit,
                        _ => Overage::Debt,
                    };
                    let args = settle_command::encode(&settle_command::SettleArgs {
                        id,
                        at,
                        estimate,
                        actual: step["actual"].as_u64().unwrap(),
                        overage,
                    });
                    let mut cmd = redis::cmd(settle_command::COMMAND);
                    cmd.arg(&base).arg(args).arg(&limits).arg("NOW").arg(t);
                    match cmd.query_async::<(Vec<u8>, u64)>(&mut conn).await {
                        Ok((record, _)) => {
                            settlement(&fleet::read_settled_record(&record).unwrap())
                        }
                        Err(e) => json!({"error": code(&e)}),
                    }
                }
                "release" => {
                    let _: redis::Value = decide("TOLLGATE.RELEASE")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    continue;
                }
                other => panic!("{name} step {i}: unknown op {other}"),
            };
            assert!(
                matches(want, &got),
                "{name} step {i}: {step}\n want {want}\n  got {got}"
            );
            run += 1;
        }
    }
    println!("{run} steps in the module, {skipped} checked by the client only");
    assert!(run > 100, "only {run} steps");
}

async fn limiter(server: &Server) -> RedisLimiter<ConnectionManager> {
    let options = Options::new("settle", Fallback::Closed).timeout(Duration::from_secs(2));
    let limits = Limits::single("fixed-window 1000/1d".parse().unwrap());
    RedisLimiter::new(support::connect(&server.url()).await, limits, options).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_module_a_reserve_and_a_settle_are_one_round_trip_each_and_settle_once() {
    let server = with_module(&[]);
    let first = limiter(&server).await;
    // The module's presence is asked once (COMMAND INFO), before the first decision.
    assert!(first.check("warm", 0).await.unwrap().decision.allowed);
    let before = first.stats().round_trips;
    let (o, r) = first.reserve("k", 800).await.unwrap();
    assert_eq!(o.decision.remaining, 200);
    assert_eq!(
        first.stats().round_trips - before,
        1,
        "one TOLLGATE.CHECK ... WITHTIME"
    );
    let r = r.unwrap();
    let kept = Reservation { ..r };
    let before = first.stats().round_trips;
    let done = first.settle("k", r, 300, Overage::Debt).await.unwrap();
    assert_eq!(first.stats().round_trips - before, 1, "one TOLLGATE.SETTLE");
    assert_eq!(done.refunded, 500);
    let restarted = limiter(&server).await;
    let again = restarted.settle("k", kept, 0, Overage::Debt).await.unwrap();
    assert_eq!(again, done, "the first settle's outcome");
    assert_eq!(
        restarted.peek("k", None).await.unwrap().decision.remaining,
        700
    );
}

/// The count charged to `key`, read from Redis.
async fn charged(
    l: &RedisLimiter<ConnectionManager>,
    conn: &mut ConnectionManager,
    key: &str,
) -> u64 {
    let name = l
        .layout()
        .slot_key(key, None, tollgate::store::Slot::Layer(0));
    let value: Vec<u8> = redis::cmd("GET")
        .arg(&name)
        .query_async(conn)
        .await
        .unwrap();
    match fleet::decode_value(&value).unwrap().map(|s| s.state) {
        None => 0,
        Some(tollgate::State::FixedWindow(w)) => w.count,
        Some(other) => panic!("{other:?}"),
    }
}

/// The fleet test of crates/redis/tests/settle_fleet.rs on the module's settle, lean: three
/// limiters share 10,000 tokens; 200 concurrent streams reserve 100-1,000 and settle at most
/// their estimate, every fifth twice (by another limiter). At Redis's clock (the module is
/// not used under a client's test clock), over a day's window, so that the window does not
/// roll over mid-test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_settling_in_the_module_stays_within_the_budget_and_exact_at_rest() {
    let server = with_module(&[]);
    let mut limiters = Vec::new();
    for _ in 0..3 {
        let options = Options::new("fleet", Fallback::Closed).timeout(Duration::from_secs(10));
        let limits = Limits::single("fixed-window 10000/1d".parse().unwrap());
        let conn = support::connect(&server.url()).await;
        limiters.push(RedisLimiter::new(conn, limits, options).unwrap());
    }
    let seed = fastrand::u64(..);
    println!("seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let key = format!("k{}", rng.u64(..));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (l, twin) = (limiters[i % 3].clone(), limiters[(i + 1) % 3].clone());
        let estimate = rng.u64(100..=1_000);
        let actual = rng.u64(0..=estimate);
        let start = Duration::from_micros(rng.u64(0..50_000));
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(start).await;
            let r = l.reserve(&key, estimate).await.unwrap().1?;
            let kept = Reservation { ..r };
            let done = l.settle(&key, r, actual, Overage::Debt).await.unwrap();
            if i % 5 == 0 {
                let again = twin
                    .settle(&key, kept, actual, Overage::Debt)
                    .await
                    .unwrap();
                assert_eq!(again, done, "a settle sent twice answers the first");
            }
            Some(actual)
        }));
    }
    let mut conn = support::connect(&server.url()).await;
    let mut peak = 0;
    let mut spent = 0;
    for t in tasks {
        peak = peak.max(charged(&limiters[0], &mut conn, &key).await);
        spent += t.await.unwrap().unwrap_or(0);
    }
    let at_rest = charged(&limiters[0], &mut conn, &key).await;
    assert!(peak.max(at_rest) <= 10_000, "passed the budget: {peak}");
    assert_eq!(
        at_rest, spent,
        "at rest: the admitted streams' actual costs"
    );
    let trips: u64 = limiters.iter().map(|l| l.stats().round_trips).sum();
    println!("module fleet: {spent} spent, {trips} round trips");
}

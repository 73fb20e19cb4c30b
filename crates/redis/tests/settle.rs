//! Reserve and settle on Redis (`RedisLimiter::reserve` / `settle`): the shared settle
//! vectors (`tests/vectors/settle/*.json`, the format is in the root crate's
//! `tests/settle.rs`) replayed at a test clock, and the settle's idempotency where only a
//! fleet store can lose it: a retry sent to Redis again, another limiter (a restarted
//! process), a Redis that is down.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use support::Server;
use tollgate::settle::{Reservation, Settled, Settlement};
use tollgate::store::Limits;
use tollgate::{millis, Decision, MillisDecision, Overage, Policy, ReservationError};
use tollgate_redis::{Error, Fallback, Options, RedisLimiter};

type Limiter = RedisLimiter<redis::aio::ConnectionManager>;

fn limits(spec: &Value) -> Limits {
    let policy = |v: &Value| -> Policy { v.as_str().unwrap().parse().unwrap() };
    match spec.get("policy") {
        Some(p) => Limits::single(policy(p)),
        None => {
            let ps: Vec<Policy> = spec["stack"]
                .as_array()
                .unwrap()
                .iter()
                .map(policy)
                .collect();
            Limits::stack(&ps).unwrap()
        }
    }
}

fn decision(d: Decision) -> Value {
    serde_json::to_value(MillisDecision::from(d)).unwrap()
}

fn settlement(s: &Settlement) -> Value {
    let one =
        |s: &Settled| json!({"refunded": s.refunded, "charged": s.charged, "unpaid": s.unpaid});
    let mut v = json!({"refunded": s.refunded, "charged": s.charged, "unpaid": s.unpaid});
    if !s.each.is_empty() {
        v["each"] = s.each.iter().map(one).collect();
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

/// The same reservation again: what a client holds when it retries (or a process that
/// kept it, serialised, before it restarted).
fn copy(r: &Reservation) -> Reservation {
    Reservation { ..*r }
}

fn code(e: &Error) -> String {
    match e {
        Error::Reservation(r) => r.code().to_string(),
        other => panic!("not a reservation error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settle_vectors_replay_on_redis_at_a_test_clock() {
    let server = Server::start();
    let conn = support::connect(&server.url()).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/settle");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    let mut steps_run = 0;
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let clock = Arc::new(AtomicU64::new(0));
        let make = |namespace: String, spec: &Value| -> Limiter {
            let options = Options::new(namespace, Fallback::Closed)
                .timeout(Duration::from_secs(5))
                .test_clock(Arc::clone(&clock));
            RedisLimiter::new(conn.clone(), limits(spec), options).unwrap()
        };
        let main = make(format!("settle:{name}"), &v["limiter"]);
        // Another limiter is another namespace (the same policy: foreign-limiter) or other
        // policies (foreign-policy).
        let others: HashMap<String, Limiter> = v
            .get("others")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, spec)| (k.clone(), make(format!("settle:{name}:{k}"), spec)))
            .collect();
        let mut open: HashMap<String, Reservation> = HashMap::new();
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            let l = match step.get("on").and_then(Value::as_str) {
                Some(n) => &others[n],
                None => &main,
            };
            clock.store(millis(step["t"].as_u64().unwrap_or(0)), Relaxed);
            let key = step["key"].as_str().unwrap();
            let cost = step["cost"].as_u64().unwrap_or(1);
            let got = match step["op"].as_str().unwrap() {
                "reserve" => match l.reserve(key, cost).await {
                    Ok((o, r)) => {
                        let mut got = decision(o.decision);
                        got["reserved"] = json!(r.is_some());
                        if let Some(r) = r {
                            open.insert(step["as"].as_str().unwrap().to_owned(), r);
                        }
                        got
                    }
                    Err(e) => json!({"error": code(&e)}),
                },
                "settle" => {
                    let name = step["reservation"].as_str().unwrap();
                    let overage = match step.get("overage").and_then(Value::as_str) {
                        Some("up-to-limit") => Overage::UpToLimit,
                        _ => Overage::Debt,
                    };
                    let actual = step["actual"].as_u64().unwrap();
                    // Every settle goes to Redis, a second one of a name too: Redis's record
                    // answers it.
                    let r = copy(&open[name]);
                    match l.settle(key, r, actual, overage).await {
                        Ok(s) => settlement(&s),
                        Err(refused) => json!({"error": code(&refused.error)}),
                    }
                }
                "check" => {
                    let o = l.check(key, cost).await.unwrap();
                    let mut got = decision(o.decision);
                    got["each"] = o.each.into_iter().map(decision).collect();
                    got
                }
                "release" => {
                    l.release(key, cost).await.unwrap();
                    continue;
                }
                other => panic!("{name} step {i}: unknown op {other}"),
            };
            let want = &step["expect"];
            assert!(
                matches(want, &got),
                "{name} step {i}: {step}\n want {want}\n  got {got}"
            );
            steps_run += 1;
        }
    }
    assert!(steps_run > 100, "only {steps_run} steps");
}

async fn limiter(server: &Server, policy: &str, fallback: Fallback) -> Limiter {
    let conn = support::connect(&server.url()).await;
    let options = Options::new("settle", fallback)
        .timeout(Duration::from_millis(500))
        .deny_cache(false);
    RedisLimiter::new(conn, Limits::single(policy.parse().unwrap()), options).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_retried_by_another_process_answers_the_first_and_charges_once() {
    let server = Server::start();
    let first = limiter(&server, "fixed-window 1000/1d", Fallback::Closed).await;
    let (o, r) = first.reserve("k", 800).await.unwrap();
    assert_eq!(o.decision.remaining, 200);
    let r = r.unwrap();
    let kept = copy(&r);
    let done = first.settle("k", r, 300, Overage::Debt).await.unwrap();
    assert_eq!(done.refunded, 500);
    // A new limiter on a new connection: a process that restarted and settles again.
    let restarted = limiter(&server, "fixed-window 1000/1d", Fallback::Closed).await;
    let again = restarted
        .settle("k", kept, 100, Overage::Debt)
        .await
        .unwrap();
    assert_eq!(
        again, done,
        "the first settle's outcome, not a second refund"
    );
    let left = restarted.peek("k", None).await.unwrap().decision.remaining;
    assert_eq!(left, 700, "charged 300 once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_of_another_key_is_refused_and_gives_the_reservation_back() {
    let server = Server::start();
    let l = limiter(&server, "fixed-window 1000/1d", Fallback::Closed).await;
    let r = l.reserve("alice", 800).await.unwrap().1.unwrap();
    let refused = l.settle("bob", r, 0, Overage::Debt).await.unwrap_err();
    assert!(matches!(
        refused.error,
        Error::Reservation(ReservationError::Foreign { .. })
    ));
    let done = l
        .settle("alice", refused.reservation, 0, Overage::Debt)
        .await;
    assert_eq!(done.unwrap().refunded, 800);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_while_redis_is_down_is_unknown_and_its_retry_settles_once() {
    let server = Server::start();
    let l = limiter(&server, "fixed-window 1000/1d", Fallback::Open).await;
    let r = l.reserve("k", 600).await.unwrap().1.unwrap();
    server.pause();
    let e = l.settle("k", r, 100, Overage::Debt).await.unwrap_err();
    assert!(
        matches!(e.error, Error::SettleUnknown { .. }),
        "{}",
        e.error
    );
    server.resume();
    // Past the probe interval, the same reservation settles, once.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut r = e.reservation;
    let kept = copy(&r);
    let done = loop {
        match l.settle("k", r, 100, Overage::Debt).await {
            Ok(s) => break s,
            Err(e) if matches!(e.error, Error::SettleUnknown { .. }) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                r = e.reservation;
            }
            Err(e) => panic!("{}", e.error),
        }
    };
    assert_eq!(done.refunded, 500);
    let again = l.settle("k", kept, 100, Overage::Debt).await.unwrap();
    assert_eq!(again, done);
    assert_eq!(l.peek("k", None).await.unwrap().decision.remaining, 900);
}

/// What PERF.md's "Redis round trips per stream" counts: a reserve is a read and a commit,
/// a settle a read and a commit (with the reservation's record), a second settle one read
/// (the record answers). Once the server has the scripts cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_stream_takes_four_round_trips_and_a_retry_one() {
    let server = Server::start();
    let l = limiter(&server, "fixed-window 1000/1d", Fallback::Closed).await;
    // A first stream fills the server's script cache (each script's first call is an
    // EVALSHA answered NOSCRIPT, then an EVAL: one round trip more, once).
    let warm = l.reserve("warm", 1).await.unwrap().1.unwrap();
    l.settle("warm", warm, 1, Overage::Debt).await.unwrap();
    let before = l.stats().round_trips;
    let r = l.reserve("k", 800).await.unwrap().1.unwrap();
    assert_eq!(l.stats().round_trips - before, 2, "reserve");
    let kept = copy(&r);
    l.settle("k", r, 300, Overage::Debt).await.unwrap();
    assert_eq!(l.stats().round_trips - before, 4, "reserve and settle");
    l.settle("k", kept, 300, Overage::Debt).await.unwrap();
    assert_eq!(l.stats().round_trips - before, 5, "and a retried settle");
}

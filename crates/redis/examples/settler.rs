//! A client process for the cross-runtime reserve-and-settle tests of the npm entry
//! `tollgate/redis` (crates/wasm/test-redis/settle-fleet.test.js), the twin of
//! crates/wasm/test-redis/settler.js:
//!
//! ```text
//! settler <redis url> <namespace> <policy> <clock ms>
//! ```
//!
//! decides at a test clock held at `<clock ms>` (so that a window cannot roll over
//! mid-test), prints `{"ready":true}` once connected, then answers each line of stdin with
//! one JSON line:
//!
//! * `streams\t<key>\t<count>`: `<count>` concurrent streams, each starting within 200 ms,
//!   reserving 100-1,000 and settling a random actual cost up to its estimate 0-20 ms later
//!   (every fifth settle sent twice); `{"admitted":n,"actual":sum of the admitted actual
//!   costs,"errors":n}`.
//! * `reserve\t<key>\t<estimate>`: `{"allowed","remaining","reservation":{...}}`, the reservation as
//!   the npm entry writes it (decimal strings for the 64-bit numbers).
//! * `settle\t<reservation as JSON>\t<actual>`: the settlement, `{"refunded":n,"charged":n,
//!   "unpaid":n}`, or `{"error":"..."}`.

#[path = "common/lines.rs"]
mod lines;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::settle::Reservation;
use tollgate::store::Limits;
use tollgate::{millis, Overage};
use tollgate_redis::{Fallback, Options, RedisLimiter};

type Limiter = RedisLimiter<redis::aio::ConnectionManager>;

fn usage() -> ! {
    eprintln!("usage: settler <redis url> <namespace> <policy> <clock ms>");
    std::process::exit(2);
}

/// One stream: start, reserve, hold, settle (twice when `twice`); its actual cost when
/// admitted.
async fn stream(l: Limiter, key: String, twice: bool) -> Result<Option<u64>, String> {
    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..200))).await;
    let estimate = fastrand::u64(100..=1_000);
    let (_, reservation) = l.reserve(&key, estimate).await.map_err(|e| e.to_string())?;
    let Some(r) = reservation else {
        return Ok(None);
    };
    let actual = fastrand::u64(0..=estimate);
    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=20))).await;
    let kept = Reservation { ..r };
    l.settle(&key, r, actual, Overage::Debt)
        .await
        .map_err(|e| e.to_string())?;
    if twice {
        l.settle(&key, kept, actual, Overage::Debt)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(Some(actual))
}

async fn streams(l: &Limiter, key: &str, count: usize) -> Value {
    let tasks: Vec<_> = (0..count)
        .map(|i| tokio::spawn(stream(l.clone(), key.to_string(), i % 5 == 0)))
        .collect();
    let (mut admitted, mut actual, mut errors) = (0u64, 0u64, 0u64);
    for t in tasks {
        match t.await.expect("a stream task") {
            Ok(Some(a)) => {
                admitted += 1;
                actual += a;
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("settler: {e}");
                errors += 1;
            }
        }
    }
    json!({"admitted": admitted, "actual": actual, "errors": errors})
}

/// A reservation in the npm entry's JSON form.
fn to_json(key: &str, r: &Reservation) -> Value {
    json!({
        "key": key,
        "id": r.id.to_string(),
        "limiter": r.limiter.to_string(),
        "policies": r.policies.to_string(),
        "keyHash": r.key.to_string(),
        "estimate": r.estimate,
        "at": r.at.to_string(),
    })
}

/// A reservation read back from the npm entry's JSON form, with its key.
fn from_json(v: &Value) -> Option<(String, Reservation)> {
    let n = |f: &str| v[f].as_str()?.parse::<u64>().ok();
    let r = Reservation {
        id: n("id")?,
        limiter: n("limiter")?,
        policies: n("policies")?,
        key: n("keyHash")?,
        estimate: v["estimate"].as_u64()?,
        at: n("at")?,
    };
    Some((v["key"].as_str()?.to_string(), r))
}

async fn answer(l: &Limiter, line: &str) -> Value {
    let parts: Vec<&str> = line.split('\t').collect();
    match parts.as_slice() {
        ["streams", key, count] => streams(l, key, count.parse().unwrap_or(0)).await,
        ["reserve", key, estimate] => match l.reserve(key, estimate.parse().unwrap_or(0)).await {
            Ok((o, r)) => json!({
                "allowed": o.decision.allowed,
                "remaining": o.decision.remaining,
                "reservation": r.map(|r| to_json(key, &r)),
            }),
            Err(e) => json!({"error": e.to_string()}),
        },
        ["settle", reservation, actual] => {
            let parsed = serde_json::from_str(reservation).ok();
            let Some((key, r)) = parsed.as_ref().and_then(from_json) else {
                return json!({"error": "not a reservation"});
            };
            match l
                .settle(&key, r, actual.parse().unwrap_or(0), Overage::Debt)
                .await
            {
                Ok(s) => json!({"refunded": s.refunded, "charged": s.charged, "unpaid": s.unpaid}),
                Err(e) => json!({"error": e.error.to_string()}),
            }
        }
        _ => json!({"error": format!("unknown line {line:?}")}),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, namespace, policy, clock] = args.as_slice() else {
        usage()
    };
    let (Ok(policy), Ok(clock)) = (policy.parse(), clock.parse::<u64>()) else {
        usage()
    };
    let conn = redis::Client::open(url.as_str())
        .expect("a redis url")
        .get_connection_manager()
        .await
        .expect("connected to redis");
    let options = Options::new(namespace, Fallback::Closed)
        // Long enough that the streams on one key never give up on conflicts.
        .timeout(Duration::from_secs(10))
        .test_clock(Arc::new(AtomicU64::new(millis(clock))));
    let limiter = RedisLimiter::new(conn, Limits::single(policy), options).expect("valid options");
    println!("{{\"ready\":true}}");
    let mut rx = lines::stdin_lines();
    while let Some(line) = rx.recv().await {
        println!("{}", answer(&limiter, &line).await);
    }
}

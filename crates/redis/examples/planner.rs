//! A client process for the cross-runtime plan tests of the npm entry `tollgate/redis`
//! (crates/wasm/test-redis/plans.test.js): a [`RedisPlans`] beside Node's on one caller.
//!
//! ```text
//! planner <redis url> <namespace> <clock ms> <module: true|false> <name>=<policy>...
//! ```
//!
//! decides at a test clock held at `<clock ms>`, by the module or by the scripts, over the
//! plans given (one policy each), prints `{"ready":true}` once connected, then answers each
//! line of stdin with one JSON line:
//!
//! * `check\t<key>\t<plan>\t<cost>`: `{"allowed","limit","remaining","overridden"}`;
//! * `set\t<key>\t<plan>`: `{}` once the caller's override names `<plan>`;
//! * `clear\t<key>`: `{"had": whether it had an override}`;
//!
//! or `{"error":"..."}`.

#[path = "common/lines.rs"]
mod lines;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::millis;
use tollgate::plans::{Override, Plans};
use tollgate_redis::{Fallback, Options, RedisPlans};

type Planner = RedisPlans<redis::aio::ConnectionManager>;

fn usage() -> ! {
    eprintln!(
        "usage: planner <redis url> <namespace> <clock ms> <module: true|false> <name>=<policy>..."
    );
    std::process::exit(2);
}

async fn answer(l: &Planner, line: &str) -> Value {
    let error = |e: tollgate_redis::Error| json!({"error": e.to_string()});
    match line.split('\t').collect::<Vec<_>>().as_slice() {
        ["check", key, plan, cost] => match l.check(key, plan, cost.parse().unwrap_or(1)).await {
            Ok(o) => json!({
                "allowed": o.decision.allowed,
                "limit": o.decision.limit,
                "remaining": o.decision.remaining,
                "overridden": o.overridden,
            }),
            Err(e) => error(e),
        },
        ["set", key, plan] => match l.set(key, Override::Plan(plan.to_string())).await {
            Ok(()) => json!({}),
            Err(e) => error(e),
        },
        ["clear", key] => match l.clear(key).await {
            Ok(had) => json!({"had": had}),
            Err(e) => error(e),
        },
        _ => json!({"error": format!("unknown line {line:?}")}),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, namespace, clock, module, plans @ ..] = args.as_slice() else {
        usage()
    };
    let (Ok(clock), Ok(module)) = (clock.parse::<u64>(), module.parse::<bool>()) else {
        usage()
    };
    let named: Vec<(&str, [&str; 1])> = plans
        .iter()
        .map(|p| p.split_once('=').map(|(n, policy)| (n, [policy])))
        .collect::<Option<_>>()
        .unwrap_or_else(|| usage());
    let refs: Vec<(&str, &[&str])> = named.iter().map(|(n, p)| (*n, &p[..])).collect();
    let plans = Plans::parse(&refs).unwrap_or_else(|e| {
        eprintln!("planner: {e}");
        usage()
    });
    let conn = redis::Client::open(url.as_str())
        .expect("a redis url")
        .get_connection_manager()
        .await
        .expect("connected to redis");
    let options = Options::new(namespace, Fallback::Closed)
        .timeout(Duration::from_secs(10))
        .use_module(module)
        .test_clock(Arc::new(AtomicU64::new(millis(clock))));
    let planner = RedisPlans::new(conn, plans, options).expect("valid options");
    println!("{{\"ready\":true}}");
    let mut rx = lines::stdin_lines();
    while let Some(line) = rx.recv().await {
        println!("{}", answer(&planner, &line).await);
    }
}

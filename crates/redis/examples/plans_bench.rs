//! What a plan costs on Redis next to a plain limiter (a measurement for PERF.md, not a
//! test): the same policy, `1000/min`, as a `RedisLimiter` and as the plan `pro` of a
//! `RedisPlans` (free 100/min, pro 1,000/min), in alternating rounds.
//!
//! ```text
//! plans_bench <redis url> <keys> <in flight> <ms> <rounds>
//!     prints one JSON line per limiter per round: checks/s and round trips per check
//! ```
//!
//! One thread (a current-thread runtime). With tollgate's module loaded, both decide in it.

use std::time::{Duration, Instant};

use tollgate::plans::Plans;
use tollgate::store::Limits;
use tollgate_redis::{Fallback, Options, RedisLimiter, RedisPlans, Stats};

fn arg(args: &[String], i: usize, name: &str) -> u64 {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
        eprintln!("usage: plans_bench <url> <keys> <in flight> <ms> <rounds> ({name})");
        std::process::exit(2)
    })
}

/// `in_flight` workers checking random keys among `keys` for `time` with `check`; how many
/// checks ran.
async fn run_for<F, Fut>(check: F, keys: u64, in_flight: u64, time: Duration) -> u64
where
    F: Fn(String) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = bool> + 'static,
{
    let deadline = Instant::now() + time;
    let local = tokio::task::LocalSet::new();
    let workers: Vec<_> = (0..in_flight)
        .map(|_| {
            let check = check.clone();
            local.spawn_local(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    check(format!("k{}", fastrand::u64(0..keys.max(1)))).await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    local
        .run_until(async move {
            let mut total = 0;
            for w in workers {
                total += w.await.expect("a worker");
            }
            total
        })
        .await
}

fn line(name: &str, checks: u64, seconds: f64, before: Stats, after: Stats) {
    println!(
        "{{\"limiter\":\"{name}\",\"checks\":{checks},\"perSec\":{:.0},\"roundTripsPerCheck\":{:.3}}}",
        checks as f64 / seconds,
        (after.round_trips - before.round_trips) as f64 / checks as f64
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args.first().cloned().unwrap_or_default();
    let (keys, in_flight, ms, rounds) = (
        arg(&args, 1, "keys"),
        arg(&args, 2, "in flight"),
        arg(&args, 3, "ms"),
        arg(&args, 4, "rounds"),
    );
    let conn = redis::Client::open(url.as_str())
        .expect("a redis url")
        .get_connection_manager()
        .await
        .expect("connected to redis");
    let options = |ns: &str| {
        // No deny cache for the plain limiter either: the plans have none.
        Options::new(ns, Fallback::Closed)
            .timeout(Duration::from_secs(5))
            .deny_cache(false)
    };
    let plain = RedisLimiter::new(
        conn.clone(),
        Limits::single("1000/min".parse().unwrap()),
        options("bench-plain"),
    )
    .unwrap();
    let plans = Plans::parse(&[("free", &["100/min"]), ("pro", &["1000/min"])]).unwrap();
    let planned = RedisPlans::new(conn, plans, options("bench-plans")).unwrap();
    let time = Duration::from_millis(ms);
    for _ in 0..rounds {
        let (before, started) = (plain.stats(), Instant::now());
        let l = plain.clone();
        let n = run_for(
            move |k| {
                let l = l.clone();
                async move { l.check(&k, 1).await.expect("decided").decision.allowed }
            },
            keys,
            in_flight,
            time,
        )
        .await;
        line(
            "RedisLimiter",
            n,
            started.elapsed().as_secs_f64(),
            before,
            plain.stats(),
        );
        let (before, started) = (planned.stats(), Instant::now());
        let l = planned.clone();
        let n = run_for(
            move |k| {
                let l = l.clone();
                async move {
                    l.check(&k, "pro", 1)
                        .await
                        .expect("decided")
                        .decision
                        .allowed
                }
            },
            keys,
            in_flight,
            time,
        )
        .await;
        line(
            "RedisPlans",
            n,
            started.elapsed().as_secs_f64(),
            before,
            planned.stats(),
        );
    }
}

//! A small client process for the cross-runtime tests and benchmark of the npm entry
//! `tollgate/redis` (crates/wasm/test/redis-fleet.test.js, crates/wasm/bench/redis.js).
//!
//! ```text
//! storm <redis url> <namespace> <policy> <key> <checks> [--wait]
//!     <checks> concurrent checks of cost 1 on <key>; prints {"admitted":n,...} as JSON.
//!     --wait: print {"ready":true} once connected, then wait for a line on stdin (a start
//!     barrier, so that several processes storm the key together).
//! storm serve <redis url> <namespace>
//!     the same for every line `<policy>\t<key>\t<checks>` read from stdin (one connection,
//!     one limiter per line), one JSON line each: no process start per round.
//! storm bench <redis url> <namespace> <policy> <keys> <in flight> <ms> [--warm <ms>]
//!     checks on <keys> keys (1: one hot key) with <in flight> requests in flight for
//!     <ms> milliseconds; prints checks/s and p50/p99 latency as JSON.
//! ```
//!
//! One thread (a current-thread runtime), like one Node process.

#[path = "common/lines.rs"]
mod lines;

use std::io::BufRead;
use std::time::{Duration, Instant};

use tollgate::store::Limits;
use tollgate_redis::{Fallback, Options, RedisLimiter, Source};

fn usage() -> ! {
    eprintln!("usage: storm <url> <namespace> <policy> <key> <checks> [--wait]");
    eprintln!("       storm serve <url> <namespace>   (lines: <policy>\\t<key>\\t<checks>)");
    eprintln!(
        "       storm bench <url> <namespace> <policy> <keys> <in flight> <ms> [--warm <ms>]"
    );
    std::process::exit(2);
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str) -> T {
    let Some(text) = args.get(i) else { usage() };
    text.parse().unwrap_or_else(|_| {
        eprintln!("storm: invalid {name}: {text:?}");
        std::process::exit(2)
    })
}

async fn connect(url: &str) -> redis::aio::ConnectionManager {
    redis::Client::open(url)
        .expect("a redis url")
        .get_connection_manager()
        .await
        .expect("connected to redis")
}

fn limiter(
    conn: redis::aio::ConnectionManager,
    namespace: &str,
    policy: &str,
) -> RedisLimiter<redis::aio::ConnectionManager> {
    let policy = policy.parse().unwrap_or_else(|e| {
        eprintln!("storm: {e}");
        std::process::exit(2)
    });
    let options = Options::new(namespace, Fallback::Closed).timeout(Duration::from_secs(5));
    RedisLimiter::new(conn, Limits::single(policy), options).expect("valid options")
}

/// `checks` concurrent checks on `key`; the result line.
async fn storm(
    limiter: &RedisLimiter<redis::aio::ConnectionManager>,
    key: &str,
    checks: usize,
) -> String {
    let tasks: Vec<_> = (0..checks)
        .map(|_| {
            let (l, key) = (limiter.clone(), key.to_string());
            tokio::spawn(async move { l.check(&key, 1).await })
        })
        .collect();
    let (mut admitted, mut elsewhere, mut errors) = (0, 0, 0);
    for t in tasks {
        match t.await.expect("a check task") {
            Ok(o) => {
                admitted += o.decision.allowed as u64;
                elsewhere += !matches!(o.source, Source::Redis | Source::DenyCache) as u64;
            }
            Err(e) => {
                eprintln!("storm: {e}");
                errors += 1;
            }
        }
    }
    let s = limiter.stats();
    format!(
        "{{\"admitted\":{admitted},\"notRedis\":{elsewhere},\"errors\":{errors},\"roundTrips\":{},\"conflicts\":{}}}",
        s.round_trips, s.conflicts
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("bench") {
        return bench(&args[1..]).await;
    }
    let (url, namespace, policy): (String, String, String) = (
        arg(&args, 0, "url"),
        arg(&args, 1, "namespace"),
        arg(&args, 2, "policy"),
    );
    if url == "serve" {
        return serve(&namespace, &policy).await; // storm serve <url> <namespace>
    }
    let key: String = arg(&args, 3, "key");
    let checks: usize = arg(&args, 4, "checks");
    let limiter = limiter(connect(&url).await, &namespace, &policy);
    if args.get(5).map(String::as_str) == Some("--wait") {
        println!("{{\"ready\":true}}");
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).expect("stdin");
    }
    println!("{}", storm(&limiter, &key, checks).await);
}

async fn serve(url: &str, namespace: &str) {
    let conn = connect(url).await;
    println!("{{\"ready\":true}}");
    let mut rx = lines::stdin_lines();
    while let Some(line) = rx.recv().await {
        let mut parts = line.split('\t');
        let (Some(policy), Some(key), Some(checks)) = (parts.next(), parts.next(), parts.next())
        else {
            eprintln!("storm serve: expected <policy>\\t<key>\\t<checks>, got {line:?}");
            std::process::exit(2)
        };
        let checks: usize = checks.parse().expect("a number of checks");
        let limiter = limiter(conn.clone(), namespace, policy);
        println!("{}", storm(&limiter, key, checks).await);
    }
}

async fn bench(args: &[String]) {
    let (url, namespace, policy): (String, String, String) = (
        arg(args, 0, "url"),
        arg(args, 1, "namespace"),
        arg(args, 2, "policy"),
    );
    let keys: u64 = arg(args, 3, "keys");
    let in_flight: usize = arg(args, 4, "in flight");
    let ms: u64 = arg(args, 5, "ms");
    let limiter = limiter(connect(&url).await, &namespace, &policy);
    if args.get(6).map(String::as_str) == Some("--warm") {
        // --warm <ms>: run that long first, print {"warm":true} and wait for a line on stdin
        // (the caller resets Redis's counters in between).
        let warm: u64 = arg(args, 7, "warm-up ms");
        run_for(&limiter, keys, in_flight, Duration::from_millis(warm)).await;
        println!("{{\"warm\":true}}");
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).expect("stdin");
    }
    let before = limiter.stats();
    let cpu = cpu_ms();
    let started = Instant::now();
    let (mut all, allowed) = run_for(&limiter, keys, in_flight, Duration::from_millis(ms)).await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_ms() - cpu;
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)] as f64 / 1e6;
    let s = limiter.stats();
    println!(
        "{{\"checks\":{},\"seconds\":{seconds:.3},\"perSec\":{:.0},\"p50Ms\":{:.3},\"p99Ms\":{:.3},\"allowed\":{allowed},\"cpuMs\":{cpu:.1},\"roundTrips\":{},\"denyCache\":{},\"conflicts\":{}}}",
        all.len(),
        all.len() as f64 / seconds,
        pct(0.50),
        pct(0.99),
        s.round_trips - before.round_trips,
        s.deny_cache - before.deny_cache,
        s.conflicts - before.conflicts
    );
}

/// `in_flight` workers checking random keys among `keys` for `time`: every latency (ns) and
/// the admitted count.
async fn run_for(
    limiter: &RedisLimiter<redis::aio::ConnectionManager>,
    keys: u64,
    in_flight: usize,
    time: Duration,
) -> (Vec<u64>, u64) {
    let deadline = Instant::now() + time;
    let workers: Vec<_> = (0..in_flight)
        .map(|_| {
            let l = limiter.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut allowed = 0u64;
                while Instant::now() < deadline {
                    let key = format!("k{}", fastrand::u64(0..keys.max(1)));
                    let t = Instant::now();
                    let o = l.check(&key, 1).await.expect("decided");
                    latencies.push(t.elapsed().as_nanos() as u64);
                    allowed += o.decision.allowed as u64;
                }
                (latencies, allowed)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut allowed = 0;
    for w in workers {
        let (l, a) = w.await.expect("a bench task");
        all.extend(l);
        allowed += a;
    }
    (all, allowed)
}

/// This process's CPU time (user and system) in ms, from /proc/self/stat (Linux; NaN
/// elsewhere). Clock ticks are 10 ms: enough for a bench of seconds.
fn cpu_ms() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // The fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // utime and stime are fields 14 and 15 of the line: 11 and 12 after the name and state.
    (ticks(11) + ticks(12)) * 10.0
}

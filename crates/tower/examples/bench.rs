//! The benchmark server (`bench/run.sh` drives it with wrk): one axum handler behind
//! tollgate-tower or tower_governor with the same quota (GCRA, 100 per second, bursts of
//! 100), keyed by the client's IP: for both, the `X-Forwarded-For` written by the trusted
//! loopback proxy (wrk), else the peer.
//!
//! `bench <tollgate|governor|governor-headers|bare>`: prints `port <n>` once it listens on
//! a free loopback port, then serves until killed (`bare`: the handler without a layer).
//!
//! `bench cost [rounds [mode [1|10k]]]`: the same services called in this process, without sockets or
//! HTTP/1 framing, on one thread: what each layer adds to a request (the service's time
//! less the bare handler's), at 1 key and 10k keys, round after round in a rotating order;
//! medians (and minima) of CPU time. The part of a request's cost that is the layer's own, measured without the
//! kernel's TCP path that dominates the wrk figures.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request};
use axum::routing::get;
use axum::Router;
use tollgate_tower::{Key, RateLimitLayer, Route};
use tower::{Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;
use tower_governor::GovernorLayer;

const MODES: [&str; 4] = ["bare", "tollgate", "governor", "governor-headers"];

/// The handler behind each contender.
fn app(mode: &str) -> Router {
    let app = Router::new().route("/", get(|| async { "hello" }));
    match mode {
        "bare" => app,
        "tollgate" => app.layer(
            RateLimitLayer::memory(NonZeroUsize::new(100_000).unwrap())
                .policy("per-ip", "gcra 100/s burst 100", Key::Ip)
                .route(Route::new("/").policy("per-ip"))
                .trusted_proxies(["127.0.0.1"])
                .build()
                .unwrap(),
        ),
        "governor" => {
            // One cell every 10 ms (what `per_millisecond(10)` means), bursts of 100.
            let config = GovernorConfigBuilder::default()
                .per_millisecond(10)
                .burst_size(100)
                .key_extractor(SmartIpKeyExtractor)
                .finish()
                .unwrap();
            app.layer(GovernorLayer::new(config))
        }
        "governor-headers" => {
            let config = GovernorConfigBuilder::default()
                .per_millisecond(10)
                .burst_size(100)
                .key_extractor(SmartIpKeyExtractor)
                .use_headers()
                .finish()
                .unwrap();
            app.layer(GovernorLayer::new(config))
        }
        other => panic!("mode {other:?}: {}, or cost", MODES.join(", ")),
    }
}

#[tokio::main]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode == "cost" {
        let rounds = std::env::args()
            .nth(2)
            .and_then(|r| r.parse().ok())
            .unwrap_or(7);
        let only = std::env::args().nth(3);
        let keys = std::env::args()
            .nth(4)
            .map(|k| if k == "10k" { 10_000 } else { 1 });
        return cost(rounds, only.as_deref(), keys).await;
    }
    let app = app(&mode);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("port {}", listener.local_addr().unwrap().port());
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .unwrap();
}

/// This thread's time on a CPU (ns), from the scheduler's statistics: unlike the time
/// elapsed, it leaves out the time other processes on this shared machine held the CPU.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (Linux) gives this thread's CPU time")
}

/// Requests per timed batch.
const BATCH: usize = 100_000;

/// `bench cost`: each mode's nanoseconds per request in process, per case and round.
async fn cost(rounds: usize, only: Option<&str>, only_keys: Option<usize>) {
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000)));
    let forwarded: Vec<HeaderValue> = (0..10_000u32)
        .map(|k| HeaderValue::from_str(&format!("198.18.{}.{}", k / 256, k % 256)).unwrap())
        .collect();
    let mut apps: Vec<Router> = MODES.iter().map(|m| app(m)).collect();
    // ns per request, per case, mode and round; the share of requests admitted.
    let mut ns = vec![vec![Vec::new(); MODES.len()]; 2];
    let mut admitted = vec![vec![0.0; MODES.len()]; 2];
    for round in 0..=rounds {
        for (case, keys) in [1usize, 10_000].into_iter().enumerate() {
            if only_keys.is_some_and(|k| k != keys) {
                continue;
            }
            for k in 0..MODES.len() {
                let m = (round + k) % MODES.len();
                if only.is_some_and(|o| o != MODES[m]) && m != 0 {
                    continue;
                }
                let svc = &mut apps[m];
                let mut ok = 0usize;
                let start = thread_cpu_ns();
                for i in 0..BATCH {
                    let mut req = Request::new(Body::empty());
                    req.extensions_mut().insert(peer);
                    if keys > 1 {
                        let v = forwarded[i % keys].clone();
                        req.headers_mut().insert("x-forwarded-for", v);
                    }
                    let resp = ServiceExt::<Request<Body>>::ready(svc)
                        .await
                        .unwrap()
                        .call(req)
                        .await
                        .unwrap();
                    ok += resp.status().is_success() as usize;
                    drop(resp);
                }
                let per = (thread_cpu_ns() - start) as f64 / BATCH as f64;
                // Round 0 warms up (fills the tables, the allocator's caches).
                if round > 0 {
                    ns[case][m].push(per);
                    admitted[case][m] = ok as f64 / BATCH as f64;
                }
            }
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    // For `bench/instructions.sh`, which counts instructions per request.
    println!("# {} requests per service and case", (rounds + 1) * BATCH);
    println!(
        "{:<5} {:<17} {:>10} {:>12} {:>10} {:>9}  per round (ns/request)",
        "keys", "service", "ns/req", "layer ns/req", "layer min", "admitted"
    );
    for (case, keys) in ["1", "10k"].into_iter().enumerate() {
        if ns[case][0].is_empty() {
            continue;
        }
        let bare = median(&ns[case][0]);
        let bare_min = ns[case][0].iter().copied().fold(f64::INFINITY, f64::min);
        for (m, mode) in MODES.iter().enumerate() {
            if ns[case][m].is_empty() {
                continue;
            }
            let med = median(&ns[case][m]);
            let min = ns[case][m].iter().copied().fold(f64::INFINITY, f64::min);
            let rounds: Vec<String> = ns[case][m].iter().map(|v| format!("{v:.0}")).collect();
            println!(
                "{keys:<5} {mode:<17} {med:>10.0} {:>12.0} {:>10.0} {:>8.0}%  {}",
                med - bare,
                min - bare_min,
                admitted[case][m] * 100.0,
                rounds.join(" ")
            );
        }
    }
}

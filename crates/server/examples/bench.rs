//! A benchmark (not a test): `ShouldRateLimit` calls per second and the p99 latency, over
//! real gRPC on loopback, for one descriptor value and for 10,000, against:
//!
//! * the ceiling: the same tonic server and protos answering `OK` without deciding;
//! * tollgate-rls's service in memory;
//! * the service on Redis, when `REDIS_URL` is set: by the fleet scripts (two round trips
//!   a decision), and by tollgate's Redis module (one) when that Redis has it loaded.
//!
//! ```sh
//! cargo run --release -p tollgate-rls --example bench
//! cargo build --release -p tollgate-redis-module
//! redis-server --port 6379 --save "" --loadmodule target/release/libtollgate_redis_module.so &
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release -p tollgate-rls --example bench
//! ```
//!
//! Settings by environment: `BENCH_SECS` (per run, default 3), `BENCH_CONCURRENCY` (calls in
//! flight, default 64), `BENCH_CHANNELS` (HTTP/2 connections, default 4). The client runs in
//! the same process and shares the machine: read the ratio to the ceiling, not the absolute
//! numbers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_rls::config::Config;
use tollgate_rls::redis_store::{ModuleUse, RedisStore};
use tollgate_rls::service::{Service, Settings};
use tollgate_rls::store::{Memory, Store};
use tollgate_rls::Grpc;

/// A limit that admits everything the benchmark sends: the decisions are made and written,
/// never denied.
const CONFIG: &str = "domain: bench\ndescriptors:\n  - key: client\n    rate_limit:\n      policy: \"token-bucket 100000000/s\"\n";

/// The ceiling: answers OK to every descriptor without deciding anything.
struct Ceiling;

#[tonic::async_trait]
impl RateLimitService for Ceiling {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let statuses = request
            .get_ref()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..Default::default()
        }))
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Serves `service` on a free loopback port; returns its address.
async fn serve<T: RateLimitService>(service: T) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(service))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

async fn service_of<S: Store>(store: S) -> String {
    let config = Config::from_texts([("bench.yaml", CONFIG)]).unwrap();
    serve(Grpc(Arc::new(Service::new(
        config,
        store,
        Settings::default(),
    ))))
    .await
}

/// Calls per second and the p99 latency of `secs` of calls with `values` descriptor values.
async fn measure(url: &str, values: u64) -> (f64, Duration) {
    let secs = env("BENCH_SECS", 3);
    let concurrency = env("BENCH_CONCURRENCY", 64);
    let channels = env("BENCH_CHANNELS", 4).max(1);
    let mut clients = Vec::new();
    for _ in 0..channels {
        clients.push(
            RateLimitServiceClient::connect(url.to_string())
                .await
                .unwrap(),
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let mut client = clients[(t % channels) as usize].clone();
        let (stop, measuring) = (stop.clone(), measuring.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let request = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "client".into(),
                            value: format!("c{}", i % values),
                        }],
                        ..Default::default()
                    }],
                    hits_addend: 0,
                };
                i = i.wrapping_add(concurrency);
                let start = Instant::now();
                let r = client.should_rate_limit(request).await.expect("answered");
                assert_eq!(r.get_ref().overall_code, Code::Ok as i32);
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(start.elapsed());
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // warm-up
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    let p99 = all
        .get(all.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default();
    (all.len() as f64 / elapsed.as_secs_f64(), p99)
}

#[tokio::main]
async fn main() {
    let mut targets = vec![
        ("ceiling (OK, no decision)", serve(Ceiling).await),
        ("memory", service_of(Memory::new()).await),
    ];
    if let Ok(url) = std::env::var("REDIS_URL") {
        let store = |prefix: &'static str, module: ModuleUse| {
            let url = url.clone();
            async move {
                RedisStore::connect(
                    &url,
                    prefix,
                    Duration::from_millis(500),
                    tollgate::store::fallback::Behaviour::Closed,
                )
                .await
                .expect("Redis at REDIS_URL")
                .use_module(module)
                .await
                .expect("Redis at REDIS_URL")
            }
        };
        let scripts = store("bench-scripts:", ModuleUse::Off).await;
        targets.push(("redis (scripts)", service_of(scripts).await));
        let module = store("bench-module:", ModuleUse::Auto).await;
        if module.uses_module() {
            targets.push(("redis (module)", service_of(module).await));
        } else {
            eprintln!("no tollgate module in that Redis: no module row");
        }
    }
    println!("| store | values | calls/s | p99 | of the ceiling |");
    println!("|---|---|---|---|---|");
    for values in [1, 10_000] {
        let mut ceiling = None;
        for (name, url) in &targets {
            let (rate, p99) = measure(url, values).await;
            let base = *ceiling.get_or_insert(rate);
            println!(
                "| {name} | {values} | {rate:.0} | {:.2} ms | {:.2}x |",
                p99.as_secs_f64() * 1000.0,
                rate / base
            );
        }
    }
}

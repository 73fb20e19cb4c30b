//! gRPC `ShouldRateLimit` calls per second and latency of tollgate-server, next to the same
//! tonic server answering OK without deciding (the ceiling: what tonic, HTTP/2 and the
//! protos cost on this machine), in one run, rounds interleaved. Not a test: figures only.
//!
//! ```sh
//! cargo run --release -p tollgate-server --example bench -- [--seconds 3] [--rounds 3] [--in-flight 64]
//! ```
//!
//! Cases: the ceiling; tollgate-server in memory with one descriptor value (every call the
//! same counter) and with 10k values (drawn at random). The policy is envoyproxy/ratelimit's
//! `requests_per_unit: 1000000` per second per value, so every call is decided and nearly
//! every one admitted. Client and server share this process and the machine's cores: the
//! ratio to the ceiling is the figure, not the absolute calls per second. Each call's
//! latency is measured at the client; p50 and p99 are over all the calls of a round.
//! On Redis (with the module, one round trip a call), the round trip is the cost: run the
//! binary with `REDIS_URL` and a load tool for that case.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tollgate_server::config::Config;
use tollgate_server::service::{Service, Settings};
use tollgate_server::store::Memory;
use tonic::transport::Channel;

const CONFIG: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000
";

/// The ceiling: a `RateLimitService` that answers OK without looking at the request.
struct AlwaysOk;

#[tonic::async_trait]
impl RateLimitService for AlwaysOk {
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}

/// Serves `service` on a free loopback port; returns the client's address.
async fn serve<S: RateLimitService>(service: S) -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(service))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

/// Serves tollgate-server's gRPC face over the bench configuration, in memory.
async fn serve_tollgate() -> String {
    let config = Config::from_texts([("bench.yaml", CONFIG)]).expect("the bench configuration");
    let service = Arc::new(Service::new(config, Memory::new(), Settings::default()));
    serve(tollgate_server::Grpc(service)).await
}

fn request(value: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: value.to_string(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

/// One round's figures.
struct Figures {
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    ok: f64,
}

/// `in_flight` callers over a few HTTP/2 connections, each calling with a value drawn from
/// `values`, for `seconds`.
async fn run(addr: &str, values: u64, in_flight: usize, seconds: f64) -> Figures {
    let mut channels = Vec::new();
    for _ in 0..4 {
        let channel = Channel::from_shared(addr.to_string())
            .expect("a URL")
            .connect()
            .await
            .expect("connect");
        channels.push(channel);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..in_flight {
        let mut client = RateLimitServiceClient::new(channels[i % channels.len()].clone());
        let stop = stop.clone();
        let mut rng = fastrand::Rng::with_seed(i as u64);
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut ok) = (Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = client
                    .should_rate_limit(request(rng.u64(0..values)))
                    .await
                    .expect("a call");
                latencies.push(t.elapsed().as_secs_f64() * 1e6);
                ok += u64::from(r.get_ref().overall_code == Code::Ok as i32);
            }
            (latencies, ok)
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut ok) = (Vec::new(), 0u64);
    for t in tasks {
        let (l, o) = t.await.expect("a caller");
        all.extend(l);
        ok += o;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Figures {
        per_sec: all.len() as f64 / elapsed,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        ok: ok as f64 / all.len() as f64,
    }
}

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let seconds = arg("--seconds", 3.0);
    let rounds = arg("--rounds", 3.0) as usize;
    let in_flight = arg("--in-flight", 64.0) as usize;
    let ceiling = serve(AlwaysOk).await;
    let tollgate = serve_tollgate().await;
    println!("in flight {in_flight}, {seconds} s a case, {rounds} rounds, client and servers in one process");
    println!("| round | case | calls/s | ratio to ceiling | p50 µs | p99 µs | OK |");
    println!("|---|---|---|---|---|---|---|");
    for round in 1..=rounds {
        for (case, values) in [("1 value", 1), ("10k values", 10_000)] {
            let top = run(&ceiling, values, in_flight, seconds).await;
            let got = run(&tollgate, values, in_flight, seconds).await;
            for (name, f) in [
                ("ceiling (no decision)", &top),
                ("tollgate-server, memory", &got),
            ] {
                println!(
                    "| {round} | {case}: {name} | {:.0} | {:.2} | {:.0} | {:.0} | {:.1}% |",
                    f.per_sec,
                    f.per_sec / top.per_sec,
                    f.p50_us,
                    f.p99_us,
                    100.0 * f.ok
                );
            }
        }
    }
}

//! A Redis outage under the built binary: a real redis-server started here is SIGSTOPped
//! while callers keep asking, then continued. The server's log says it once each way (down
//! with the reason and the declared behaviour, then up), `tollgate_server_store_up` follows,
//! and health is as documented: serving by default (every request is still answered with
//! `--redis-failure`'s behaviour), not serving with `--unhealthy-when-store-down` (as
//! envoyproxy/ratelimit). Durations are printed, never asserted.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::binary::{temp_dir, Server};
use support::redis_server;
use support::{code, desc, req};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Never denied by Redis: a denial is the fallback's (`closed`).
const CONFIG: &str =
    "domain: outage\ndescriptors:\n  - key: k\n    rate_limit:\n      policy: \"100000000/350d\"\n";
/// Callers asking at once, each in a loop.
const CALLERS: usize = 8;
/// How long Redis stays stopped: a few probes (one a second) fail in it.
const OUTAGE: Duration = Duration::from_millis(3500);
/// A guard against a hang only.
const GUARD: Duration = Duration::from_secs(30);

/// The status and the body of `GET path`.
async fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

/// The value of the gauge on `/metrics`.
async fn store_up(addr: &str) -> Option<u8> {
    let (_, text) = get(addr, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix("tollgate_server_store_up "))
        .map(|v| v.trim().parse().unwrap())
}

/// gRPC health of `service` ("" is the server's own).
async fn grpc_health(server: &Server, service: &str) -> ServingStatus {
    let channel = tonic::transport::Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let status = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    ServingStatus::try_from(status).unwrap()
}

/// What health says over HTTP and gRPC (both names), as (HTTP status, gRPC statuses).
async fn health(server: &Server) -> (u16, [ServingStatus; 2]) {
    let (status, _) = get(&server.http, "/healthcheck").await;
    let rls = "envoy.service.ratelimit.v3.RateLimitService";
    let grpc = [
        grpc_health(server, "").await,
        grpc_health(server, rls).await,
    ];
    (status, grpc)
}

/// The log's lines that contain `what`.
fn lines(log: &std::path::Path, what: &str) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .filter(|l| l.contains(what))
        .map(str::to_string)
        .collect()
}

/// Polls `done` every 20 ms until it holds (at most [`GUARD`]).
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let t = Instant::now();
    while !done().await {
        assert!(t.elapsed() < GUARD, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn outage(unhealthy_when_down: bool) {
    let mut redis = redis_server::Server::start();
    let dir = temp_dir("store-health");
    std::fs::write(dir.join("limits.yaml"), CONFIG).unwrap();
    let log = dir.join("stderr.log");
    let (dir_arg, url) = (dir.display().to_string(), redis.url());
    let mut args = vec!["--config-dir", &dir_arg, "--redis-url", &url];
    args.extend(["--redis-failure", "closed", "--redis-timeout-ms", "200"]);
    if unhealthy_when_down {
        args.push("--unhealthy-when-store-down");
    }
    let server = Server::start_with(&args, std::fs::File::create(&log).unwrap());
    let (ok, down_health) = (
        (200, [ServingStatus::Serving; 2]),
        match unhealthy_when_down {
            true => (500, [ServingStatus::NotServing; 2]),
            false => (200, [ServingStatus::Serving; 2]),
        },
    );

    // Before: Redis decides, the gauge is 1, health is serving.
    let mut client = server.client().await;
    let request = req("outage", vec![desc(&[("k", "v")])]);
    let first = client.should_rate_limit(request.clone()).await.unwrap();
    assert_eq!(code(first.get_ref().overall_code), Code::Ok);
    assert_eq!(store_up(&server.http).await, Some(1));
    assert_eq!(health(&server).await, ok);

    // Callers that never stop: during the outage each call is answered (closed: denied).
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, denied) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let mut client = server.client().await;
        let (stop, calls, denied, request) =
            (stop.clone(), calls.clone(), denied.clone(), request.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Relaxed) {
                let r = client.should_rate_limit(request.clone()).await.unwrap();
                calls.fetch_add(1, Relaxed);
                if code(r.get_ref().overall_code) == Code::OverLimit {
                    denied.fetch_add(1, Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }

    redis.pause();
    let paused = Instant::now();
    until("marked down", || async {
        store_up(&server.http).await == Some(0)
    })
    .await;
    println!("gauge 0 after {:?}", paused.elapsed());
    // gRPC health is set by the server's own task after the gauge: polled, then asserted.
    until("health down", || async {
        health(&server).await == down_health
    })
    .await;
    tokio::time::sleep(OUTAGE.saturating_sub(paused.elapsed())).await;
    // Still down after several failed probes, with health unchanged.
    assert_eq!(store_up(&server.http).await, Some(0));
    assert_eq!(health(&server).await, down_health, "health while down");
    let down = lines(&log, "redis store down");
    let (calls_down, denied_down) = (calls.load(Relaxed), denied.load(Relaxed));
    println!("in the outage: {calls_down} calls, {denied_down} denied; {down:?}");
    assert_eq!(down.len(), 1, "one line for the outage, not one per call");
    // A stopped Redis answers nothing: a read timed out, or a commit's answer was lost.
    let why = ["(timeout)", "(indeterminate)"];
    assert!(
        why.iter().any(|w| down[0].contains(w)),
        "{why:?}: {}",
        down[0]
    );
    for part in ["--redis-failure closed", "every limit denies"] {
        assert!(down[0].contains(part), "{part} in {}", down[0]);
    }
    assert!(
        denied_down > 2 * CALLERS as u64,
        "answered, closed, in the outage"
    );
    assert!(lines(&log, "redis store up").is_empty());

    redis.resume();
    let resumed = Instant::now();
    until("back up", || async {
        store_up(&server.http).await == Some(1)
    })
    .await;
    println!("gauge 1 after {:?}", resumed.elapsed());
    until("health back", || async { health(&server).await == ok }).await;
    stop.store(true, Relaxed);
    for c in callers {
        c.await.unwrap();
    }
    let up = lines(&log, "redis store up");
    println!("{up:?}");
    assert_eq!(up.len(), 1, "one line when Redis is back");
    assert_eq!(lines(&log, "redis store down").len(), 1);
    let last = client.should_rate_limit(request).await.unwrap();
    assert_eq!(code(last.get_ref().overall_code), Code::Ok, "Redis decides");
    drop((client, server));
    redis.kill();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_logs_once_each_way_and_the_gauge_follows_while_health_stays_serving() {
    outage(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_unhealthy_when_store_down_health_reports_not_serving_until_redis_is_back() {
    outage(true).await;
}

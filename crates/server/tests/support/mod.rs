//! The server under test: started in this process on free loopback ports (a real gRPC and
//! HTTP server), on a hand-set clock so that window boundaries never fall inside a test,
//! and a real tonic client built from the same Envoy protos.

#![allow(dead_code)]

pub mod binary;
/// Real redis-server processes and a local Redis Cluster: tollgate-redis' test launcher,
/// one file shared by both crates' tests.
#[path = "../../../redis/tests/support/redis_server.rs"]
pub mod redis_server;

use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tollgate_rls::config::Config;
use tollgate_rls::service::{Service, Settings};
use tollgate_rls::store::{ManualClock, Memory, Store};

/// A Unix time at the start of a day (so at the start of every unit up to a day).
pub const DAY_START: u64 = 19_675 * 86_400 * 1_000_000_000;

pub struct Running<S: Store = Memory<ManualClock>> {
    pub client: RateLimitServiceClient<tonic::transport::Channel>,
    pub http: SocketAddr,
    /// The memory store's clock (for another store, a clock nothing reads).
    pub clock: ManualClock,
    pub service: Arc<Service<S>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// Starts a server over the YAML files `files` (each its own file), on memory with a
/// hand-set clock.
pub async fn start(files: &[&str], settings: Settings) -> Running {
    let clock = ManualClock::new(DAY_START);
    let store = Memory::with_clock(clock.clone());
    let mut running = start_on(files, settings, store).await;
    running.clock = clock;
    running
}

/// The Redis module built by the suites (target/<profile>/libtollgate_redis_module.so).
pub fn redis_module() -> String {
    let exe = std::env::current_exe().unwrap();
    let so = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libtollgate_redis_module.so");
    assert!(
        so.exists(),
        "{} (cargo build -p tollgate-redis-module)",
        so.display()
    );
    so.display().to_string()
}

/// A redis-server with tollgate's module loaded.
pub fn redis_with_module() -> redis_server::Server {
    let so = redis_module();
    redis_server::Server::with_args(&["--save", "", "--appendonly", "no", "--loadmodule", &so])
}

/// Starts a server over the YAML files `files` on `store`.
pub async fn start_on<S: Store>(files: &[&str], settings: Settings, store: S) -> Running<S> {
    let named: Vec<(String, &str)> = files
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("file{i}.yaml"), *t))
        .collect();
    let config =
        Config::from_texts(named.iter().map(|(n, t)| (n.as_str(), *t))).expect("valid config");
    let clock = ManualClock::new(DAY_START);
    let service = Arc::new(Service::new(config, store, settings));
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr = grpc.local_addr().unwrap();
    let http_addr = http.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(tollgate_rls::run(
        service.clone(),
        grpc,
        http,
        None,
        async {
            let _ = rx.await;
        },
        std::time::Duration::from_secs(10),
    ));
    let client = RateLimitServiceClient::connect(format!("http://{grpc_addr}"))
        .await
        .expect("connect");
    Running {
        client,
        http: http_addr,
        clock,
        service,
        stop: Some(tx),
        task: Some(task),
    }
}

impl<S: Store> Running<S> {
    /// One `ShouldRateLimit` call.
    pub async fn call(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(request)
            .await
            .expect("ShouldRateLimit answers")
            .into_inner()
    }

    /// The overall codes of `n` identical calls.
    pub async fn codes(&mut self, request: &RateLimitRequest, n: usize) -> Vec<Code> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(code(self.call(request.clone()).await.overall_code));
        }
        out
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }

    /// A raw HTTP/1.1 request; the status and the body.
    pub async fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(self.http).await.unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out[9..12].parse().unwrap();
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }
}

pub fn code(c: i32) -> Code {
    Code::try_from(c).unwrap()
}

pub fn status_code(s: &DescriptorStatus) -> Code {
    code(s.code)
}

/// A descriptor of (key, value) entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A descriptor with its own `hits_addend`.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..desc(entries)
    }
}

/// A request of `descriptors` in `domain`.
pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

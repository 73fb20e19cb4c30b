//! The Redis fleet store: two server processes sharing one real redis-server decide one
//! exact limit between them; and when redis-server is killed, each answers with its
//! declared behaviour at once (no hang).

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::binary::{temp_dir, Redis, Server};
use support::{code, desc, req};

// A token bucket of 50 that refills one token a week: no refill, and no window boundary,
// can fall inside the test.
const FLEET: &str =
    "domain: fleet\ndescriptors:\n  - key: tenant\n    rate_limit:\n      policy: \"50/350d\"\n";

fn config_dir() -> std::path::PathBuf {
    let dir = temp_dir("fleet");
    std::fs::write(dir.join("fleet.yaml"), FLEET).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_one_redis_400_calls_against_50() {
    let redis = Redis::start();
    let dir = config_dir();
    let d = dir.display().to_string();
    let url = redis.url();
    let args = [
        "--config-dir",
        &d,
        "--redis-url",
        &url,
        "--reload-interval-ms",
        "0",
    ];
    let servers = [Server::start(&args), Server::start(&args)];
    let mut tasks = Vec::new();
    for i in 0..400 {
        let mut client = servers[i % 2].client().await;
        tasks.push(tokio::spawn(async move {
            let r = client
                .should_rate_limit(req("fleet", vec![desc(&[("tenant", "acme")])]))
                .await
                .expect("answered");
            code(r.into_inner().overall_code)
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap() == Code::Ok {
            ok += 1;
        }
    }
    assert_eq!(ok, 50, "exactly the limit, across two processes");
    // The shared counter says so too.
    let mut c = servers[0].client().await;
    let r = c
        .should_rate_limit(req("fleet", vec![desc(&[("tenant", "acme")])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(r.overall_code), Code::OverLimit);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn redis_killed_gives_the_declared_behaviour_without_hanging() {
    let mut redis = Redis::start();
    let dir = config_dir();
    let d = dir.display().to_string();
    let url = redis.url();
    let base = [
        "--config-dir",
        &d,
        "--redis-url",
        &url,
        "--redis-timeout-ms",
        "200",
    ];
    let closed = Server::start(&[&base[..], &["--redis-failure", "closed"]].concat());
    let open = Server::start(&[&base[..], &["--redis-failure", "open"]].concat());
    let local = Server::start(&[&base[..], &["--redis-failure", "local"]].concat());
    let call = req("fleet", vec![desc(&[("tenant", "t")])]);
    let mut clients = [
        closed.client().await,
        open.client().await,
        local.client().await,
    ];
    for c in clients.iter_mut() {
        let r = c
            .should_rate_limit(call.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code(r.overall_code), Code::Ok, "decided on Redis");
    }
    redis.kill();
    // A guard against a hang (not a timing claim): each answer must come at all.
    let guard = Duration::from_secs(30);
    let mut answers = Vec::new();
    for c in clients.iter_mut() {
        let r = tokio::time::timeout(guard, c.should_rate_limit(call.clone()))
            .await
            .expect("answered, no hang")
            .expect("an answer, not an error")
            .into_inner();
        answers.push(code(r.overall_code));
    }
    assert_eq!(answers, [Code::OverLimit, Code::Ok, Code::Ok]);
    // Each said where it was decided.
    for (server, source) in [
        (&closed, "fallback_closed"),
        (&open, "fallback_open"),
        (&local, "fallback_local"),
    ] {
        let metrics = http_get(&server.http, "/metrics").await;
        assert!(
            metrics.contains(&format!("source=\"{source}\"")),
            "{source} in {metrics}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

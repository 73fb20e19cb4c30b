//! The Redis fleet store: two server processes sharing one real redis-server, or a local
//! Redis Cluster of three primaries, decide one exact limit between them, by the scripts,
//! by tollgate's module (loaded into redis-server), or one each; and when redis-server is
//! killed, each answers with its declared behaviour at once (no hang), on either path.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use support::binary::{http_get, temp_dir, Server};
use support::redis_server::{Cluster, Server as Redis};
use support::{code, desc, desc_hits, redis_module, redis_with_module, req};

// A token bucket of 50 that refills one token a week: no refill, and no window boundary,
// can fall inside the test.
const FLEET: &str =
    "domain: fleet\ndescriptors:\n  - key: tenant\n    rate_limit:\n      policy: \"50/350d\"\n";

fn config_dir() -> std::path::PathBuf {
    let dir = temp_dir("fleet");
    std::fs::write(dir.join("fleet.yaml"), FLEET).unwrap();
    dir
}

/// Two server processes started with the store's flags `redis` and more flags each
/// (`each`), 400 concurrent calls spread over both against a limit of 50: exactly 50
/// admitted, and the next call denied.
async fn two_processes_admit_exactly_the_limit(redis: &[&str], each: [&[&str]; 2]) {
    let dir = config_dir();
    let d = dir.display().to_string();
    let args = |more: &[&str]| -> Vec<String> {
        ["--config-dir", &d, "--reload-interval-ms", "0"]
            .iter()
            .chain(redis)
            .chain(more)
            .map(|a| a.to_string())
            .collect()
    };
    let start = |more: &[&str]| {
        let a = args(more);
        Server::start(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let servers = [start(each[0]), start(each[1])];
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

/// On a Redis without the module, `auto` decides with the scripts; `on` refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_one_redis_400_calls_against_50_by_the_scripts() {
    let redis = Redis::start();
    let url = redis.url();
    two_processes_admit_exactly_the_limit(&["--redis-url", &url], [&[], &[]]).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
        .args(["--config-dir", &config_dir().display().to_string()])
        .args(["--grpc-port", "0", "--http-port", "0", "--redis-url", &url])
        .args(["--redis-module", "on"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("module is not loaded"), "{err}");
}

/// With the module loaded, `auto` decides inside Redis with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_one_redis_400_calls_against_50_by_the_module() {
    let redis = redis_with_module();
    two_processes_admit_exactly_the_limit(&["--redis-url", &redis.url()], [&[], &[]]).await;
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_tollgate.request:calls="), "{stats}");
    assert!(!stats.contains("cmdstat_evalsha"), "{stats}");
}

/// A mixed fleet on a Redis Cluster with the module on every node: one process decides
/// with the module, the other with the scripts, on the same keys and bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_one_redis_cluster_400_calls_against_50() {
    let so = redis_module();
    let cluster = Cluster::with_args(&["--loadmodule", &so]);
    let nodes = cluster.urls().join(",");
    two_processes_admit_exactly_the_limit(
        &["--redis-type", "cluster", "--redis-url", &nodes],
        [&["--redis-module", "on"], &["--redis-module", "off"]],
    )
    .await;
    // The counter is on the cluster: one key, on the node that owns the domain's hash tag.
    let keys: Vec<String> = cluster
        .nodes
        .iter()
        .flat_map(|n| {
            n.cli(&["KEYS", "*"])
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|k| !k.is_empty())
        .collect();
    assert_eq!(keys, ["tollgate:{fleet}fleet_tenant_acme_"]);
}

/// Each behaviour on each way of deciding: six processes on one Redis (module loaded),
/// three by the module and three by the scripts.
#[tokio::test]
async fn redis_killed_gives_the_declared_behaviour_without_hanging() {
    let mut redis = redis_with_module();
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
    let mut servers = Vec::new();
    for module in ["on", "off"] {
        for behaviour in ["closed", "open", "local"] {
            let flags = ["--redis-failure", behaviour, "--redis-module", module];
            servers.push((behaviour, Server::start(&[&base[..], &flags].concat())));
        }
    }
    let call = req("fleet", vec![desc(&[("tenant", "t")])]);
    let mut clients = Vec::new();
    for (_, s) in &servers {
        clients.push(s.client().await);
    }
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
    let declared = [Code::OverLimit, Code::Ok, Code::Ok];
    assert_eq!(answers, [declared, declared].concat());
    // Each said where it was decided, and counted the failure under its behaviour.
    let admitted = ["denied", "admitted", "admitted"];
    for ((behaviour, server), outcome) in servers.iter().zip(admitted.iter().cycle()) {
        let behaviour = *behaviour;
        let metrics = http_get(&server.http, "/metrics").await;
        let policy = "tollgate_policy=\"fleet.tenant\"";
        let fallback = format!(
            "tollgate_decisions_total{{{policy},tollgate_outcome=\"{outcome}\",tollgate_source=\"fallback\"}} 1\n"
        );
        assert!(metrics.contains(&fallback), "{fallback} in {metrics}");
        let failures: u64 = metrics
            .lines()
            .filter(|l| {
                l.starts_with("tollgate_store_failures_total{")
                    && l.contains(&format!("tollgate_failure_behaviour=\"{behaviour}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(failures, 1, "{behaviour}: {metrics}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Two tokens, one back every 2 s: a second request of 2 is denied for 4 s (no machine
/// stalls that long between two calls), and nothing refills within a call.
const DENY: &str = "domain: dc\ndescriptors:\n  - key: client\n    rate_limit:\n      policy: \"token-bucket 2/4s\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_answers_a_known_denial_and_forgets_it_at_the_retry_time() {
    let redis = redis_with_module();
    let dir = temp_dir("deny");
    std::fs::write(dir.join("dc.yaml"), DENY).unwrap();
    let d = dir.display().to_string();
    let url = redis.url();
    let base = [
        "--config-dir",
        &d,
        "--redis-url",
        &url,
        "--reload-interval-ms",
        "0",
    ];
    // The cached one decides with the module, the other with the scripts (one fleet).
    let cached = Server::start(&[&base[..], &["--redis-module", "on"]].concat());
    let plain = Server::start(
        &[
            &base[..],
            &["--deny-cache-entries", "0", "--redis-module", "off"],
        ]
        .concat(),
    );
    let (mut a, mut b) = (cached.client().await, plain.client().await);
    let two = || req("dc", vec![desc_hits(&[("client", "c")], 2)]);
    let ask = |c: &mut RateLimitServiceClient<tonic::transport::Channel>| {
        let mut c = c.clone();
        async move { c.should_rate_limit(two()).await.unwrap().into_inner() }
    };
    assert_eq!(code(ask(&mut a).await.overall_code), Code::Ok);
    let denied = ask(&mut a).await;
    assert_eq!(code(denied.overall_code), Code::OverLimit);
    // Asked again: the same answer, from memory.
    let again = ask(&mut a).await;
    assert_eq!(code(again.overall_code), Code::OverLimit);
    assert_eq!(
        again.statuses[0].limit_remaining,
        denied.statuses[0].limit_remaining
    );
    assert_eq!(
        again.statuses[0].current_limit,
        denied.statuses[0].current_limit
    );
    let metrics = http_get(&cached.http, "/metrics").await;
    let line = |outcome: &str, source: &str| {
        format!("tollgate_decisions_total{{tollgate_policy=\"dc.client\",tollgate_outcome=\"{outcome}\",tollgate_source=\"{source}\"}} ")
    };
    for (outcome, source, n) in [
        ("admitted", "store", 1),
        ("denied", "store", 1),
        ("denied", "deny_cache", 1),
    ] {
        assert!(
            metrics.contains(&format!("{}{n}\n", line(outcome, source))),
            "{outcome} {source} in {metrics}"
        );
    }
    // The process without the cache asks Redis, which says the same.
    assert_eq!(code(ask(&mut b).await.overall_code), Code::OverLimit);
    assert!(!http_get(&plain.http, "/metrics")
        .await
        .contains(&format!("{}1", line("denied", "deny_cache"))));
    // At the retry time the memory is gone: admitted, by Redis, and charged there (the
    // other process finds the bucket empty again).
    let retry: u64 = denied
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "Retry-After")
        .expect("Retry-After on a denial")
        .value
        .parse()
        .unwrap();
    assert!((1..=4).contains(&retry), "{retry}");
    tokio::time::sleep(Duration::from_secs(retry)).await;
    assert_eq!(
        code(ask(&mut a).await.overall_code),
        Code::Ok,
        "not denied past the retry time"
    );
    assert_eq!(code(ask(&mut b).await.overall_code), Code::OverLimit);
    let metrics = http_get(&cached.http, "/metrics").await;
    assert!(
        metrics.contains(&format!("{}2\n", line("admitted", "store"))),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

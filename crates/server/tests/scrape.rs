//! The built binary's `/metrics` and start-up, as an operator meets them: only series that
//! can move in this process (memory: decided at the store, which cannot fail; Redis: its
//! fallback and its declared behaviour's failures), linted by Prometheus' own `promtool`
//! and by the exposition rules checked here; the first load counted; a start that fails
//! logs only its failure and exits non-zero.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::process::{Command, Stdio};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::binary::{body, http_get, temp_dir, Server};
use support::{code, desc, redis_server, req};

/// Three rules: counted, unlimited, a block list.
const SHOP: &str = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: internal\n    rate_limit: { unlimited: true }\n  - key: banned\n    rate_limit: { unit: hour, requests_per_unit: 0 }\n";

/// Checks `text` as Prometheus does (`promtool check metrics`, installed by the suite from
/// Debian's `prometheus`) and by the rules below, and returns its samples by series.
fn lint(text: &str) -> BTreeMap<String, String> {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus; scripts/test.d/39-server.sh does)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );

    // HELP then TYPE once per family, before its samples; a counter's name ends in
    // _total; no series twice.
    let mut help = BTreeSet::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(help.insert(name.to_string()), "HELP {name} twice");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(help.contains(name), "TYPE {name} before its HELP");
            assert!(
                types.insert(name.into(), kind.into()).is_none(),
                "TYPE {name} twice"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "counter {name}");
            }
        } else if !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
                .unwrap_or(name);
            assert!(types.contains_key(family), "{series} before its TYPE");
            assert!(
                samples
                    .insert(series.to_string(), value.to_string())
                    .is_none(),
                "{series} twice"
            );
        }
    }
    samples
}

// Multi-threaded: the client's connections close on other threads while this one waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_server_shows_only_series_that_can_move() {
    let dir = temp_dir("scrape-memory");
    std::fs::write(dir.join("shop.yaml"), SHOP).unwrap();
    let dir_arg = dir.display().to_string();
    let server = Server::start(&["--config-dir", &dir_arg]);
    let mut client = server.client().await;
    for (key, want) in [
        ("user", Code::Ok),
        ("internal", Code::Ok),
        ("banned", Code::OverLimit),
    ] {
        let r = client
            .should_rate_limit(req("shop", vec![desc(&[(key, "x")])]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code(r.overall_code), want, "{key}");
    }
    let answer = http_get(&server.http, "/metrics").await;
    let text = body(&answer);
    let got = lint(text);
    println!("{} samples for 3 rules on the memory store", got.len());

    let mut want = BTreeMap::new();
    for policy in ["banned", "internal", "user"] {
        for outcome in ["admitted", "denied", "shadow_denied"] {
            want.insert(format!("tollgate_decisions_total{{tollgate_policy=\"shop.{policy}\",tollgate_outcome=\"{outcome}\",tollgate_source=\"store\"}}"), "0");
        }
        want.insert(
            format!("tollgate_near_limit_total{{tollgate_policy=\"shop.{policy}\"}}"),
            "0",
        );
    }
    for (policy, outcome) in [
        ("user", "admitted"),
        ("internal", "admitted"),
        ("banned", "denied"),
    ] {
        want.insert(format!("tollgate_decisions_total{{tollgate_policy=\"shop.{policy}\",tollgate_outcome=\"{outcome}\",tollgate_source=\"store\"}}"), "1");
    }
    for (code, n) in [("ok", "2"), ("over_limit", "1"), ("error", "0")] {
        want.insert(
            format!("tollgate_server_requests_total{{code=\"{code}\"}}"),
            n,
        );
    }
    // The load the server started with counts (reloads are on, so errors still can).
    want.insert(
        "tollgate_server_config_loads_total{result=\"success\"}".into(),
        "1",
    );
    want.insert(
        "tollgate_server_config_loads_total{result=\"error\"}".into(),
        "0",
    );
    for name in [
        "tollgate_store_evictions_total",
        "tollgate_store_keys",
        "tollgate_store_bytes",
        "tollgate_store_max_bytes",
    ] {
        want.insert(name.into(), got.get(name).map_or("absent", |v| v.as_str()));
    }
    let want: BTreeMap<String, String> =
        want.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    assert_eq!(got, want, "{text}");
    assert_eq!(got["tollgate_store_keys"], "1", "the user's window");
    drop(client);
    assert!(server.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_server_shows_its_fallback_and_its_declared_failures() {
    let redis = redis_server::Server::start();
    let dir = temp_dir("scrape-redis");
    std::fs::write(dir.join("shop.yaml"), SHOP).unwrap();
    let dir_arg = dir.display().to_string();
    let url = redis.url();
    // The second without reloads: then no load can fail after the start.
    for (deny_cache, sources, reload) in [
        ("100", &["store", "deny_cache", "fallback"][..], "1000"),
        ("0", &["store", "fallback"][..], "0"),
    ] {
        let server = Server::start(&[
            "--config-dir",
            &dir_arg,
            "--redis-url",
            &url,
            "--redis-failure",
            "local",
            "--deny-cache-entries",
            deny_cache,
            "--reload-interval-ms",
            reload,
        ]);
        let mut client = server.client().await;
        let r = client
            .should_rate_limit(req("shop", vec![desc(&[("user", "x")])]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code(r.overall_code), Code::Ok);
        let answer = http_get(&server.http, "/metrics").await;
        let text = body(&answer);
        let got = lint(text);
        let decided: BTreeSet<&str> = got
            .keys()
            .filter(|k| k.starts_with("tollgate_decisions_total{"))
            .map(|k| {
                k.rsplit_once("tollgate_source=\"")
                    .unwrap()
                    .1
                    .trim_end_matches("\"}")
            })
            .collect();
        assert_eq!(decided, sources.iter().copied().collect(), "{text}");
        let failures: Vec<&String> = got
            .keys()
            .filter(|k| k.starts_with("tollgate_store_failures_total{"))
            .collect();
        assert_eq!(failures.len(), 3, "local's three reasons: {text}");
        assert!(failures
            .iter()
            .all(|k| k.contains("tollgate_failure_behaviour=\"local\"")));
        assert!(!text.contains("tollgate_wait_duration_seconds"), "{text}");
        assert_eq!(
            got["tollgate_server_config_loads_total{result=\"success\"}"],
            "1"
        );
        let error = got.get("tollgate_server_config_loads_total{result=\"error\"}");
        assert_eq!(error.is_some(), reload != "0", "{text}");
        drop(client);
        assert!(server.terminate().success());
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_start_that_fails_logs_only_its_failure() {
    let dir = temp_dir("scrape-failed");
    std::fs::write(dir.join("shop.yaml"), SHOP).unwrap();
    // A loopback port nothing listens on (bound, then freed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
        .args(["--grpc-host", "127.0.0.1", "--grpc-port", "0"])
        .args(["--http-host", "127.0.0.1", "--http-port", "0"])
        .arg("--config-dir")
        .arg(&dir)
        .args(["--redis-url", &format!("redis://127.0.0.1:{port}/")])
        .args(["--redis-timeout-ms", "2000"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stderr}");
    assert!(!out.status.success());
    assert!(
        !stderr.contains("serving") && !stdout.contains("listening"),
        "{stdout}{stderr}"
    );
    let failure = format!("not started: redis at redis://127.0.0.1:{port}/: ");
    let line = stderr
        .lines()
        .find(|l| l.contains(&failure))
        .unwrap_or_else(|| panic!("no '{failure}' in {stderr}"));
    assert!(line.to_lowercase().contains("refused"), "the cause: {line}");
    let _ = std::fs::remove_dir_all(dir);
}

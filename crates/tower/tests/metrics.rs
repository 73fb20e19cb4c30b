//! The layer's metrics (feature `metrics`) as an operator reads them: the metrics example's
//! app (the layer, the Prometheus exporter and `/metrics`) served on a loopback port, a
//! scripted run of requests, then `/metrics` scraped over HTTP and read with a Prometheus
//! text parser (`prometheus-parse`): the counters equal the decisions made, by outcome and
//! source. With the Redis store against a real redis-server: a store error counted under
//! the layer's `on_error`, and Redis killed counted under the store's declared fallback.
#![cfg(all(feature = "metrics", feature = "redis"))]

mod common;
#[allow(dead_code)] // its `main`
#[path = "../examples/metrics.rs"]
mod example;
#[path = "../../redis/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use metrics_exporter_prometheus::PrometheusHandle;
use prometheus_parse::{Scrape, Value};
use support::Server;
use tollgate::metrics::{DECISIONS, INSTRUMENTS, NEAR_LIMIT, STORE_FAILURES};
use tollgate::store::Slot;
use tollgate_redis::{Fallback, Options, RedisLimiter};
use tollgate_tower::{Builder, Key, OnError, Route};

/// The exporter, installed once for the whole test binary (a process has one recorder);
/// each test counts under policies of its own.
fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| example::install_recorder().unwrap())
        .clone()
}

async fn fetch(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let c = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let r = c
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
        .unwrap();
    let status = r.status();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// `/metrics` over HTTP, parsed: each sample's value by its name and labels
/// (`name{a="x",b="y"}`, labels sorted).
async fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let (status, text) = fetch(addr, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        let mut labels: Vec<_> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        labels.sort();
        let value = match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            // (The Redis store's wait histograms: not what these tests count.)
            Value::Histogram(_) | Value::Summary(_) => continue,
        };
        out.insert(format!("{}{{{}}}", s.metric, labels.join(",")), value);
    }
    out
}

/// The sample `name{labels}` (labels given sorted), 0 when absent... never: absent fails,
/// so a series the layer should have registered cannot pass as a zero.
fn sample(samples: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut l: Vec<_> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    l.sort();
    let key = format!("{name}{{{}}}", l.join(","));
    *samples
        .get(&key)
        .unwrap_or_else(|| panic!("no sample {key} in {samples:#?}"))
}

fn decisions(samples: &BTreeMap<String, f64>, policy: &str, outcome: &str, source: &str) -> f64 {
    sample(
        samples,
        DECISIONS.prometheus,
        &[
            ("tollgate_policy", policy),
            ("tollgate_route", "/"),
            ("tollgate_outcome", outcome),
            ("tollgate_source", source),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_counts_each_decision() {
    let app = example::app(recorder(), "scripted").unwrap();
    let addr = common::serve(app, [127, 0, 0, 1].into()).await;
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(fetch(addr, "/").await.0.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    let s = scrape(addr).await;
    assert_eq!(decisions(&s, "scripted", "admitted", "store"), 5.0);
    assert_eq!(decisions(&s, "scripted", "denied", "store"), 3.0);
    for (outcome, source) in [
        ("shadow_denied", "store"),
        ("admitted", "fallback"),
        ("denied", "deny_cache"),
    ] {
        assert_eq!(
            decisions(&s, "scripted", outcome, source),
            0.0,
            "{outcome} {source}"
        );
    }
    // 5/min: the 5th admission left 0 (under 20% of 5); the 4th left 1, exactly 20%.
    let near = [("tollgate_policy", "scripted"), ("tollgate_route", "/")];
    assert_eq!(sample(&s, NEAR_LIMIT.prometheus, &near), 1.0);
    let failures = [
        ("tollgate_policy", "scripted"),
        ("tollgate_route", "/"),
        ("tollgate_failure_behaviour", "open"),
        ("tollgate_failure_reason", "unreachable"),
    ];
    assert_eq!(sample(&s, STORE_FAILURES.prometheus, &failures), 0.0);
    // Every name the exporter wrote for the layer is one of the model's.
    for name in s.keys().filter(|k| k.contains("\"scripted\"")) {
        let name = name.split('{').next().unwrap();
        assert!(
            INSTRUMENTS.iter().any(|i| i.prometheus == name),
            "{name} is not in the model"
        );
    }
}

/// The layer on the Redis store at `server`, its `/metrics` from the shared recorder.
async fn on_redis(
    server: &Server,
    policy: &str,
    fallback: Fallback,
    on_error: OnError,
) -> (SocketAddr, String) {
    let conn = support::connect(&server.url()).await;
    let layer = Builder::new(move |name, limits| {
        let options = Options::new(name, fallback.clone())
            .timeout(Duration::from_millis(200))
            .probe_every(Duration::from_secs(60));
        RedisLimiter::new(conn.clone(), limits, options)
    })
    .policy(policy, "fixed-window 2/hour", Key::Ip)
    .route(Route::new("/metrics").exempt())
    .route(Route::new("/").policy(policy))
    .on_error(on_error)
    .build()
    .unwrap();
    let key = layer
        .store(policy)
        .unwrap()
        .layout()
        .slot_key("ip4:127.0.0.1", None, Slot::Layer(0));
    let handle = recorder();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/metrics", get(move || async move { handle.render() }))
        .layer(layer);
    (common::serve(app, [127, 0, 0, 1].into()).await, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_error_counts_under_on_error() {
    let server = Server::start();
    let (addr, key) = on_redis(
        &server,
        "corrupt",
        Fallback::Closed,
        OnError::Closed {
            retry_after_secs: 1,
        },
    )
    .await;
    // A value no tollgate wrote at this client's key: the store cannot decide.
    assert_eq!(server.cli(&["SET", &key, "x"]), "OK");
    assert_eq!(fetch(addr, "/").await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(fetch(addr, "/").await.0, StatusCode::SERVICE_UNAVAILABLE);
    let s = scrape(addr).await;
    let failures = |behaviour| {
        sample(
            &s,
            STORE_FAILURES.prometheus,
            &[
                ("tollgate_policy", "corrupt"),
                ("tollgate_route", "/"),
                ("tollgate_failure_behaviour", behaviour),
                ("tollgate_failure_reason", "unreachable"),
            ],
        )
    };
    assert_eq!(failures("closed"), 2.0);
    assert_eq!(failures("open"), 0.0);
    assert_eq!(decisions(&s, "corrupt", "denied", "fallback"), 2.0);
    assert_eq!(decisions(&s, "corrupt", "denied", "store"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gone_counts_under_the_declared_fallback() {
    let mut server = Server::start();
    let (addr, _) = on_redis(&server, "fleet", Fallback::Open, OnError::Open).await;
    assert_eq!(fetch(addr, "/").await.0, StatusCode::OK);
    server.kill();
    for _ in 0..3 {
        assert_eq!(fetch(addr, "/").await.0, StatusCode::OK);
    }
    let s = scrape(addr).await;
    assert_eq!(decisions(&s, "fleet", "admitted", "store"), 1.0);
    assert_eq!(decisions(&s, "fleet", "admitted", "fallback"), 3.0);
    // The fleet store's own series: labelled with its policy (its namespace), no route.
    // The first failed call marked Redis down; the next two were decided without a call.
    let failed: f64 = ["unreachable", "timeout", "indeterminate"]
        .iter()
        .map(|reason| {
            sample(
                &s,
                STORE_FAILURES.prometheus,
                &[
                    ("tollgate_policy", "fleet"),
                    ("tollgate_failure_behaviour", "open"),
                    ("tollgate_failure_reason", reason),
                ],
            )
        })
        .sum();
    assert_eq!(failed, 1.0, "{s:#?}");
    // The layer counted the fleet's decisions once: the store's own decision series (no
    // route; registered, at zero, with its failure series) counted none of them.
    let by_store: f64 = s
        .iter()
        .filter(|(k, _)| {
            k.starts_with(DECISIONS.prometheus)
                && k.contains("tollgate_policy=\"fleet\"")
                && !k.contains("tollgate_route")
        })
        .map(|(_, v)| v)
        .sum();
    assert_eq!(by_store, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_concurrency_gauge_follows_held_slots() {
    let (gate, opened) = tokio::sync::watch::channel(false);
    let (entered, mut inside) = tokio::sync::mpsc::unbounded_channel();
    let layer = tollgate_tower::RateLimitLayer::memory(100.try_into().unwrap())
        .policy("slots", "concurrency 2", Key::Ip)
        .route(Route::new("/metrics").exempt())
        .route(Route::new("/").policy("slots"))
        .build()
        .unwrap();
    let handle = recorder();
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let mut opened = opened.clone();
                let entered = entered.clone();
                async move {
                    let _ = entered.send(());
                    let _ = opened.wait_for(|open| *open).await;
                    "done"
                }
            }),
        )
        .route("/metrics", get(move || async move { handle.render() }))
        .layer(layer);
    let addr = common::serve(app, [127, 0, 0, 1].into()).await;
    let in_use = |s: &BTreeMap<String, f64>| {
        sample(
            s,
            tollgate::metrics::CONCURRENCY_IN_USE.prometheus,
            &[("tollgate_policy", "slots"), ("tollgate_route", "/")],
        )
    };
    let held = tokio::spawn(async move { fetch(addr, "/").await });
    inside.recv().await.unwrap();
    assert_eq!(in_use(&scrape(addr).await), 1.0, "one request holds a slot");
    gate.send(true).unwrap();
    assert_eq!(held.await.unwrap(), (StatusCode::OK, "done".to_string()));
    // The slot is given back when the body has ended, before the client reads it whole.
    assert_eq!(in_use(&scrape(addr).await), 0.0);
}

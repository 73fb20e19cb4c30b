//! The limiter's metrics (feature `metrics`) against a real redis-server, read as an
//! operator reads them: the Prometheus exporter installed as the recorder, its text parsed
//! with a Prometheus text parser (`prometheus-parse`). Decisions by source (Redis, the deny
//! cache, the fallback), store failures by the declared behaviour, and `acquire`'s waits.
#![cfg(feature = "metrics")]

mod support;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use prometheus_parse::{Scrape, Value};
use support::Server;
use tollgate::metrics::{CONCURRENCY_IN_USE, DECISIONS, NEAR_LIMIT, STORE_FAILURES, WAIT_DURATION};
use tollgate::store::Limits;
use tollgate_redis::{Error, Fallback, Options, RedisLimiter};

/// The exporter, installed once for the test binary; each test counts under its own policy.
fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(WAIT_DURATION.prometheus.into()),
                    &tollgate_redis::metrics::wait_buckets(),
                )
                .unwrap()
                .install_recorder()
                .unwrap();
            tollgate_redis::metrics::describe();
            handle
        })
        .clone()
}

async fn limiter(
    server: &Server,
    policy: &str,
    options: Options,
) -> RedisLimiter<redis::aio::ConnectionManager> {
    recorder();
    let conn = support::connect(&server.url()).await;
    let limits = Limits::single(policy.parse().unwrap());
    RedisLimiter::new(conn, limits, options.timeout(Duration::from_millis(500))).unwrap()
}

/// The samples of the policy `policy`, by name and labels other than the policy (sorted);
/// a histogram by its `_count` (and each bucket's count).
fn scrape(policy: &str) -> BTreeMap<String, f64> {
    let text = recorder().render();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        if s.labels.get("tollgate_policy") != Some(policy) {
            continue;
        }
        let mut labels: Vec<_> = s
            .labels
            .iter()
            .filter(|(k, _)| *k != "tollgate_policy")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        labels.sort();
        let key = |name: &str| format!("{name}{{{}}}", labels.join(","));
        match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => {
                out.insert(key(&s.metric), v);
            }
            Value::Histogram(buckets) => {
                let count = buckets.last().map_or(0.0, |b| b.count);
                out.insert(key(&format!("{}_count", s.metric)), count);
            }
            Value::Summary(_) => panic!("{}: a summary, not the model's histogram", s.metric),
        }
    }
    out
}

fn get(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key} in {samples:#?}"))
}

fn decisions(s: &BTreeMap<String, f64>, outcome: &str, source: &str) -> f64 {
    let name = DECISIONS.prometheus;
    get(
        s,
        &format!("{name}{{tollgate_outcome={outcome},tollgate_source={source}}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_by_source() {
    let server = Server::start();
    let l = limiter(
        &server,
        "fixed-window 2/hour",
        Options::new("by-source", Fallback::Closed),
    )
    .await;
    let mut sources = Vec::new();
    for _ in 0..4 {
        let o = l.check("k", 1).await.unwrap();
        sources.push((o.decision.allowed, o.source));
    }
    use tollgate_redis::Source::{DenyCache, Redis};
    assert_eq!(
        sources,
        [
            (true, Redis),
            (true, Redis),
            (false, Redis),
            (false, DenyCache)
        ]
    );
    let s = scrape("by-source");
    assert_eq!(decisions(&s, "admitted", "store"), 2.0);
    assert_eq!(decisions(&s, "denied", "store"), 1.0);
    assert_eq!(decisions(&s, "denied", "deny_cache"), 1.0);
    assert_eq!(decisions(&s, "admitted", "fallback"), 0.0);
    // 2/hour: the second admission left 0, under 20% of 2; the first left 1 (50%).
    assert_eq!(get(&s, &format!("{}{{}}", NEAR_LIMIT.prometheus)), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gone_counts_failures_under_the_declared_behaviour() {
    let mut server = Server::start();
    let options = Options::new(
        "gone",
        Fallback::Local {
            max_keys: 100.try_into().unwrap(),
        },
    )
    .metrics_policy("named")
    .probe_every(Duration::from_secs(60));
    let l = limiter(&server, "fixed-window 5/hour", options).await;
    assert!(l.check("k", 1).await.unwrap().decision.allowed);
    server.kill();
    for _ in 0..3 {
        let o = l.check("k", 1).await.unwrap();
        assert!(
            matches!(o.source, tollgate_redis::Source::Fallback(_)),
            "{o:?}"
        );
    }
    let s = scrape("named");
    assert_eq!(decisions(&s, "admitted", "store"), 1.0);
    assert_eq!(decisions(&s, "admitted", "fallback"), 3.0);
    // One failed call (Redis then marked down until the next probe, 60 s away), counted
    // under the declared behaviour, `local`.
    let failures = |behaviour: &str| -> f64 {
        ["unreachable", "timeout", "indeterminate"]
            .iter()
            .map(|reason| {
                get(
                    &s,
                    &format!(
                        "{}{{tollgate_failure_behaviour={behaviour},tollgate_failure_reason={reason}}}",
                        STORE_FAILURES.prometheus
                    ),
                )
            })
            .sum()
    };
    assert_eq!(failures("local"), 1.0);
    assert_eq!(failures("open") + failures("closed"), 0.0);
    assert!(
        scrape("gone").is_empty(),
        "labelled by metrics_policy, not the namespace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_by_result() {
    let server = Server::start();
    let l = limiter(
        &server,
        "fixed-window 1/hour",
        Options::new("waits", Fallback::Closed),
    )
    .await;
    let o = l
        .acquire("k", None, 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(o.decision.allowed);
    // The next turn is an hour away: it gives up at once.
    let e = l
        .acquire("k", None, 1, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    let s = scrape("waits");
    let waits = |result: &str| {
        get(
            &s,
            &format!(
                "{}_count{{tollgate_wait_result={result}}}",
                WAIT_DURATION.prometheus
            ),
        )
    };
    assert_eq!(waits("admitted"), 1.0);
    assert_eq!(waits("gave_up"), 1.0);
    assert_eq!(decisions(&s, "admitted", "store"), 1.0);
    assert_eq!(decisions(&s, "denied", "store"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_in_use_by_admissions_and_releases() {
    let server = Server::start();
    let l = limiter(
        &server,
        "concurrency 4",
        Options::new("in-use", Fallback::Closed),
    )
    .await;
    let in_use = || {
        get(
            &scrape("in-use"),
            &format!("{}{{}}", CONCURRENCY_IN_USE.prometheus),
        )
    };
    assert!(l.check("a", 1).await.unwrap().decision.allowed);
    assert!(l.check("a", 2).await.unwrap().decision.allowed);
    // 3 of 4 held: a denial takes nothing.
    assert!(!l.check("a", 2).await.unwrap().decision.allowed);
    let o = l
        .acquire("b", None, 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(o.decision.allowed);
    assert_eq!(in_use(), 4.0);
    l.release("a", 2).await.unwrap();
    l.release("b", 1).await.unwrap();
    assert_eq!(in_use(), 1.0);
    // A limiter without a concurrency limit has no gauge.
    let plain = limiter(
        &server,
        "fixed-window 5/hour",
        Options::new("no-slots", Fallback::Closed),
    )
    .await;
    plain.check("a", 1).await.unwrap();
    let s = scrape("no-slots");
    assert!(
        !s.keys()
            .any(|k| k.starts_with(CONCURRENCY_IN_USE.prometheus)),
        "{s:#?}"
    );
}

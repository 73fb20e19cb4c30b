//! What tollgate-rls adds or decides differently, over gRPC: all-or-nothing descriptors
//! (and the switch back to charging every descriptor), `hits_addend`, shadow modes, the
//! `policy:` extension, the RateLimit headers; and the HTTP side. The descriptor semantics
//! run on memory and on Redis, by the scripts and by the module.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use std::time::Duration;
use support::*;
use tollgate::metrics::{Outcome, Source};
use tollgate::NANOS_PER_SEC;

use tollgate_rls::redis_store::{Failure, ModuleUse, RedisStore};
use tollgate_rls::service::Settings;
use tollgate_rls::store::Charging;
use tollgate_rls::store::Store;

const TWO_LIMITS: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: path
    value: /slow
    rate_limit:
      policy: "sliding-window 2/10s"
  - key: canary
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
"#;

fn user_and_tenant() -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    req(
        "api",
        vec![desc(&[("user", "alice")]), desc(&[("tenant", "acme")])],
    )
}

/// Starts servers over [`TWO_LIMITS`] on memory (the hand-set clock).
async fn on_memory(settings: Settings) -> Running {
    start(&[TWO_LIMITS], settings).await
}

/// Starts servers on `redis` (each on a key prefix of its own), deciding with the module or
/// the scripts; over [`TWO_LIMITS`] with years for minutes (the real clock: no window
/// boundary falls inside a case).
fn on_redis(url: String, module: ModuleUse) -> impl AsyncFn(Settings) -> Running<RedisStore> {
    async move |settings| {
        let prefix = format!("t{}:", fastrand::u64(..));
        let store = RedisStore::connect(&url, &prefix, Duration::from_secs(5), Failure::Closed)
            .await
            .unwrap()
            .use_module(module)
            .await
            .unwrap();
        assert_eq!(store.uses_module(), module == ModuleUse::On);
        let yearly = TWO_LIMITS.replace("unit: minute", "unit: year");
        start_on(&[&yearly], settings, store).await
    }
}

/// The descriptor semantics on Redis, both ways of deciding (one redis-server with the
/// module loaded): the cases the memory tests above run, each on a fresh key prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptor_semantics_hold_on_redis_scripts_and_module() {
    let redis = redis_with_module();
    for module in [ModuleUse::Off, ModuleUse::On] {
        eprintln!("deciding with {module:?}");
        let on = on_redis(redis.url(), module);
        an_over_limit_descriptor_charges_no_other(&on).await;
        the_compatibility_switch_charges_every_descriptor(&on).await;
        hits_addend_per_request_and_per_descriptor(&on).await;
        a_shadow_descriptor_never_denies_nor_blocks_the_others(&on).await;
    }
}

#[tokio::test]
async fn all_or_nothing_on_memory() {
    an_over_limit_descriptor_charges_no_other(&on_memory).await;
}

#[tokio::test]
async fn charge_every_descriptor_on_memory() {
    the_compatibility_switch_charges_every_descriptor(&on_memory).await;
}

#[tokio::test]
async fn hits_addend_on_memory() {
    hits_addend_per_request_and_per_descriptor(&on_memory).await;
}

#[tokio::test]
async fn shadow_descriptor_on_memory() {
    a_shadow_descriptor_never_denies_nor_blocks_the_others(&on_memory).await;
}

async fn an_over_limit_descriptor_charges_no_other<S: Store>(
    start: &impl AsyncFn(Settings) -> Running<S>,
) {
    let mut s = start(Settings::default()).await;
    assert_eq!(s.codes(&user_and_tenant(), 3).await, [Code::Ok; 3]);
    for _ in 0..5 {
        let r = s.call(user_and_tenant()).await;
        assert_eq!(code(r.overall_code), Code::OverLimit);
        assert_eq!(status_code(&r.statuses[0]), Code::OverLimit);
        assert_eq!(status_code(&r.statuses[1]), Code::Ok);
        assert_eq!(
            r.statuses[1].limit_remaining, 97,
            "the tenant stays at 3 spent"
        );
    }
    // Another user of the tenant still finds 97 left.
    let r = s
        .call(req(
            "api",
            vec![desc(&[("user", "bob")]), desc(&[("tenant", "acme")])],
        ))
        .await;
    assert_eq!(r.statuses[1].limit_remaining, 96);
    s.stop().await;
}

async fn the_compatibility_switch_charges_every_descriptor<S: Store>(
    start: &impl AsyncFn(Settings) -> Running<S>,
) {
    let settings = Settings {
        charging: Charging::Each,
        ..Settings::default()
    };
    let mut s = start(settings).await;
    assert_eq!(s.codes(&user_and_tenant(), 3).await, [Code::Ok; 3]);
    for spent in 4..9 {
        let r = s.call(user_and_tenant()).await;
        assert_eq!(code(r.overall_code), Code::OverLimit);
        assert_eq!(
            r.statuses[1].limit_remaining,
            100 - spent,
            "charged though denied"
        );
    }
    s.stop().await;
}

async fn hits_addend_per_request_and_per_descriptor<S: Store>(
    start: &impl AsyncFn(Settings) -> Running<S>,
) {
    let mut s = start(Settings::default()).await;
    let mut r = req("api", vec![desc(&[("tenant", "t1")])]);
    r.hits_addend = 40;
    assert_eq!(s.call(r.clone()).await.statuses[0].limit_remaining, 60);
    // A descriptor's own hits_addend wins over the request's; 0 checks without charging.
    let mut check = req("api", vec![desc_hits(&[("tenant", "t1")], 0)]);
    check.hits_addend = 40;
    assert_eq!(s.call(check).await.statuses[0].limit_remaining, 60);
    assert_eq!(s.call(r.clone()).await.statuses[0].limit_remaining, 20);
    // 40 more than the 20 left: over, and nothing charged.
    let over = s.call(r).await;
    assert_eq!(code(over.overall_code), Code::OverLimit);
    let left = s
        .call(req("api", vec![desc_hits(&[("tenant", "t1")], 20)]))
        .await;
    assert_eq!(code(left.overall_code), Code::Ok);
    assert_eq!(left.statuses[0].limit_remaining, 0);
    // Two descriptors, two costs, one decision: 4 on a limit of 3 can never pass, so the 50 on
    // the tenant is not taken either.
    let both = req(
        "api",
        vec![
            desc_hits(&[("user", "u")], 4),
            desc_hits(&[("tenant", "t2")], 50),
        ],
    );
    let r = s.call(both).await;
    assert_eq!(code(r.overall_code), Code::OverLimit);
    assert_eq!(r.statuses[1].limit_remaining, 100);
    s.stop().await;
}

#[tokio::test]
async fn a_policy_string_picks_the_algorithm() {
    let mut s = start(&[TWO_LIMITS], Settings::default()).await;
    let slow = req("api", vec![desc(&[("path", "/slow")])]);
    assert_eq!(
        s.codes(&slow, 3).await,
        [Code::Ok, Code::Ok, Code::OverLimit]
    );
    // A sliding window: 10 s later the previous window still weighs (a fixed window
    // would have reset), 20 s later it is empty.
    s.clock.advance(10 * NANOS_PER_SEC);
    assert_eq!(s.codes(&slow, 1).await, [Code::OverLimit]);
    s.clock.advance(10 * NANOS_PER_SEC);
    assert_eq!(
        s.codes(&slow, 3).await,
        [Code::Ok, Code::Ok, Code::OverLimit]
    );
    let r = s.call(slow).await;
    let policy = r
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "RateLimit-Policy")
        .unwrap();
    assert_eq!(policy.value, r#""api.path_/slow";q=2;w=10"#);
    s.stop().await;
}

#[tokio::test]
async fn headers_name_the_binding_limit_and_retry_after() {
    let mut s = start(&[TWO_LIMITS], Settings::default()).await;
    s.clock.advance(15 * NANOS_PER_SEC); // 45 s left in the minute
    let r = s.call(user_and_tenant()).await;
    let get = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse, k: &str| {
        r.response_headers_to_add
            .iter()
            .find(|h| h.key == k)
            .map(|h| h.value.clone())
    };
    assert_eq!(
        get(&r, "RateLimit-Policy").unwrap(),
        r#""api.user";q=3;w=60, "api.tenant";q=100;w=60"#
    );
    assert_eq!(get(&r, "RateLimit").unwrap(), r#""api.user";r=2;t=45"#);
    assert_eq!(get(&r, "Retry-After"), None);
    s.codes(&user_and_tenant(), 2).await;
    let r = s.call(user_and_tenant()).await;
    assert_eq!(get(&r, "Retry-After").unwrap(), "45");
    assert_eq!(r.statuses[0].duration_until_reset.unwrap().seconds, 45);
    s.stop().await;
}

async fn a_shadow_descriptor_never_denies_nor_blocks_the_others<S: Store>(
    start: &impl AsyncFn(Settings) -> Running<S>,
) {
    let mut s = start(Settings::default()).await;
    let r = req(
        "api",
        vec![desc(&[("canary", "c")]), desc(&[("tenant", "shadowed")])],
    );
    for spent in 1..=3u32 {
        let a = s.call(r.clone()).await;
        assert_eq!(code(a.overall_code), Code::Ok);
        assert_eq!(
            a.statuses[1].limit_remaining,
            100 - spent,
            "the tenant is charged"
        );
    }
    let t = s.service.metrics.tally("api.canary");
    assert_eq!(t.decisions(Outcome::ShadowDenied, Source::Store), 2);
    s.stop().await;
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_and_counts() {
    let settings = Settings {
        global_shadow: true,
        ..Settings::default()
    };
    let mut s = start(&[TWO_LIMITS], settings).await;
    let r = req("api", vec![desc(&[("user", "eve")])]);
    assert_eq!(s.codes(&r, 5).await, [Code::Ok; 5]);
    let t = s.service.metrics.tally("api.user");
    assert_eq!(t.decisions(Outcome::ShadowDenied, Source::Store), 2);
    assert_eq!(t.decisions(Outcome::Denied, Source::Store), 0);
    s.stop().await;
}

#[tokio::test]
async fn bad_requests_are_invalid_argument() {
    let mut s = start(&[TWO_LIMITS], Settings::default()).await;
    let err = s
        .client
        .should_rate_limit(req("", vec![desc(&[("user", "a")])]))
        .await;
    let err = err.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("domain"), "{}", err.message());
    let err = s
        .client
        .should_rate_limit(req("api", vec![]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    // An unknown domain limits nothing.
    let r = s.call(req("nope", vec![desc(&[("user", "a")])])).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    s.stop().await;
}

#[tokio::test]
async fn http_json_healthcheck_and_metrics() {
    let mut s = start(&[TWO_LIMITS], Settings::default()).await;
    let body = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]},{"entries":[{"key":"tenant","value":"j"}]}]}"#;
    for _ in 0..3 {
        assert_eq!(s.http("POST", "/json", body).await.0, 200);
    }
    let (status, text) = s.http("POST", "/json", body).await;
    assert_eq!(status, 429);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    assert_eq!(v["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 3);
    assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "MINUTE");
    assert_eq!(v["statuses"][1]["code"], "OK");
    assert_eq!(v["statuses"][1]["limitRemaining"], 97);
    let (status, text) = s.http("POST", "/json", "{\"domain\": 3}").await;
    assert_eq!(status, 400);
    assert!(text.contains("domain"), "{text}");
    assert_eq!(s.http("GET", "/healthcheck", "").await, (200, "OK".into()));
    let (status, text) = s.http("GET", "/metrics", "").await;
    assert_eq!(status, 200);
    assert!(
        text.contains("tollgate_server_requests_total{code=\"over_limit\"} 1"),
        "{text}"
    );
    assert!(text.contains(
        "tollgate_decisions_total{tollgate_policy=\"api.user\",tollgate_outcome=\"denied\",tollgate_source=\"store\"} 1\n"
    ));
    // The gRPC health service answers too.
    let r = s.call(req("api", vec![desc(&[("user", "h")])])).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    s.stop().await;
}

const SHOP: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: canary
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: internal
    rate_limit: { unlimited: true }
  - key: banned
    rate_limit: { unit: hour, requests_per_unit: 0 }
"#;

/// Every sample of a Prometheus text scrape by its name and labels, checking that every
/// instrument is declared once.
fn samples(text: &str) -> std::collections::BTreeMap<String, u64> {
    let mut declared = std::collections::HashSet::new();
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(declared.insert(name.to_string()), "{name} declared twice");
        } else if !line.starts_with('#') && !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').unwrap();
            if let Ok(v) = value.parse::<u64>() {
                assert!(
                    out.insert(series.to_string(), v).is_none(),
                    "{series} twice"
                );
            }
        }
    }
    out
}

#[tokio::test]
async fn metrics_after_a_scripted_run_are_the_model_exactly() {
    let mut s = start(&[SHOP], Settings::default()).await;
    let one = |k: &str| req("shop", vec![desc(&[(k, "x")])]);
    let codes = s.codes(&one("user"), 6).await;
    assert_eq!(codes[..5], [Code::Ok; 5]);
    assert_eq!(codes[5], Code::OverLimit);
    assert_eq!(s.codes(&one("canary"), 2).await, [Code::Ok; 2]);
    assert_eq!(s.codes(&one("internal"), 1).await, [Code::Ok]);
    assert_eq!(s.codes(&one("banned"), 1).await, [Code::OverLimit]);
    assert!(s.client.should_rate_limit(req("", vec![])).await.is_err());

    let (status, text) = s.http("GET", "/metrics", "").await;
    assert_eq!(status, 200);
    let got = samples(&text);
    let decisions = |policy: &str, outcome: &str, source: &str| {
        format!("tollgate_decisions_total{{tollgate_policy=\"shop.{policy}\",tollgate_outcome=\"{outcome}\",tollgate_source=\"{source}\"}}")
    };
    let near =
        |policy: &str| format!("tollgate_near_limit_total{{tollgate_policy=\"shop.{policy}\"}}");
    let mut want = std::collections::BTreeMap::new();
    for policy in ["banned", "canary", "internal", "user"] {
        for outcome in ["admitted", "denied", "shadow_denied"] {
            for source in ["store", "deny_cache", "fallback"] {
                want.insert(decisions(policy, outcome, source), 0);
            }
        }
        want.insert(near(policy), 0);
        for behaviour in ["open", "closed", "local"] {
            for reason in ["unreachable", "timeout", "indeterminate"] {
                want.insert(format!("tollgate_store_failures_total{{tollgate_policy=\"shop.{policy}\",tollgate_failure_behaviour=\"{behaviour}\",tollgate_failure_reason=\"{reason}\"}}"), 0);
            }
        }
    }
    // 5 admitted (the last one left 0 of 5: near the limit), then 1 denied.
    want.insert(decisions("user", "admitted", "store"), 5);
    want.insert(decisions("user", "denied", "store"), 1);
    want.insert(near("user"), 1);
    // Shadow mode: 1 admitted (0 of 1 left: near), then 1 that would have been denied.
    want.insert(decisions("canary", "admitted", "store"), 1);
    want.insert(decisions("canary", "shadow_denied", "store"), 1);
    want.insert(near("canary"), 1);
    want.insert(decisions("internal", "admitted", "store"), 1);
    want.insert(decisions("banned", "denied", "store"), 1);
    for (code, n) in [("ok", 8), ("over_limit", 2), ("error", 1)] {
        want.insert(
            format!("tollgate_server_requests_total{{code=\"{code}\"}}"),
            n,
        );
    }
    for result in ["success", "error"] {
        want.insert(
            format!("tollgate_server_config_loads_total{{result=\"{result}\"}}"),
            0,
        );
    }
    // The memory store: what it holds (the user's and the canary's windows), within the
    // default bound, nothing evicted.
    let memory = s.service.store().stats();
    assert_eq!(memory.keys, 2);
    want.insert("tollgate_store_keys".into(), 2);
    want.insert("tollgate_store_bytes".into(), memory.bytes as u64);
    want.insert("tollgate_store_max_bytes".into(), 64 << 20);
    want.insert("tollgate_store_evictions_total".into(), 0);
    let counted: std::collections::BTreeMap<String, u64> = got
        .into_iter()
        .filter(|(k, _)| !k.starts_with("tollgate_wait_duration_seconds"))
        .collect();
    assert_eq!(counted, want);
    s.stop().await;
}

const FAIR: &str = r#"
domain: search
descriptors:
  - key: route
    value: /search
    descriptors:
      - key: org
        rate_limit:
          policy: "fixed-window 10/min"          # every org on /search together
          tenant_policy: "fixed-window 4/min"    # and each org on its own
  - key: plan
    value: free
    descriptors:
      - key: org
        descriptors:
          - key: path
            rate_limit:
              policy: "fixed-window 3/min"
              tenant_policy: "fixed-window 2/min"
              tenant_key: org                    # the tenant: an earlier entry's value
"#;

#[tokio::test]
async fn fair_share_by_a_descriptor_entry() {
    let mut s = start(&[FAIR], Settings::default()).await;
    let org = |o: &str| req("search", vec![desc(&[("route", "/search"), ("org", o)])]);
    // Each org gets its 4; a denied request charges neither window.
    let a = s.codes(&org("a"), 6).await;
    assert_eq!(a[..4], [Code::Ok; 4]);
    assert_eq!(a[4..], [Code::OverLimit; 2]);
    assert_eq!(s.codes(&org("b"), 4).await, [Code::Ok; 4]);
    // 8 of the shared 10 are spent: c gets 2, then the shared window denies.
    let r = s.call(org("c")).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "the shared window binds: 10 - 9"
    );
    assert_eq!(code(s.call(org("c")).await.overall_code), Code::Ok);
    let r = s.call(org("c")).await;
    assert_eq!(code(r.overall_code), Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        10
    );
    // `default` has no window of its own, and the shared one is full.
    assert_eq!(
        code(s.call(org("default")).await.overall_code),
        Code::OverLimit
    );
    // The headers name both windows.
    let policy = r
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "RateLimit-Policy")
        .unwrap();
    assert!(policy.value.contains(".tenant"), "{}", policy.value);

    // tenant_key: the tenant is the `org` entry, the rule is on `path`.
    let free = |o: &str, p: &str| {
        req(
            "search",
            vec![desc(&[("plan", "free"), ("org", o), ("path", p)])],
        )
    };
    // Counters are per descriptor values, as everywhere: on each path, the orgs share 3
    // and each org has 2.
    assert_eq!(
        s.codes(&free("x", "/a"), 3).await,
        [Code::Ok, Code::Ok, Code::OverLimit]
    );
    assert_eq!(s.codes(&free("y", "/a"), 1).await, [Code::Ok]);
    assert_eq!(
        s.codes(&free("z", "/a"), 1).await,
        [Code::OverLimit],
        "the shared 3 are spent"
    );
    assert_eq!(code(s.call(free("z", "/b")).await.overall_code), Code::Ok);
    s.stop().await;
}

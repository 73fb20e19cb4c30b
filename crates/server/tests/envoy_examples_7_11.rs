//! envoyproxy/ratelimit's README examples 7-11, each configuration as written there, with
//! the decisions that README states, asked over gRPC by a tonic client of the Envoy protos.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::*;
use tollgate::NANOS_PER_SEC;
use tollgate_rls::service::Settings;

const EXAMPLE_7: &str = r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
"#;

#[tokio::test]
async fn example_7_replaces() {
    let mut s = start(&[EXAMPLE_7], Settings::default()).await;
    let one = desc(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let two = desc(&[("key_2", "value_2"), ("user", "bkthomps")]);
    // Together: 10 per second, the 5 per second rule replaced and untouched.
    let both = req("example7", vec![one.clone(), two.clone()]);
    let codes = s.codes(&both, 11).await;
    assert_eq!(codes[..10], [Code::Ok; 10]);
    assert_eq!(codes[10], Code::OverLimit);
    let r = s.call(req("example7", vec![one.clone()])).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(
        r.statuses[0].limit_remaining, 4,
        "the replaced limit was not charged"
    );
    s.clock.advance(NANOS_PER_SEC);
    let codes = s.codes(&req("example7", vec![one]), 6).await;
    assert_eq!(codes[..5], [Code::Ok; 5]);
    assert_eq!(codes[5], Code::OverLimit);
    s.stop().await;
}

const EXAMPLE_8: &str = r#"
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
"#;

#[tokio::test]
async fn example_8_detailed_metric() {
    let mut s = start(&[EXAMPLE_8], Settings::default()).await;
    for v in ["unspecified_value", "unspecified_value2"] {
        let codes = s
            .codes(&req("example8", vec![desc(&[("key1", v)])]), 11)
            .await;
        assert_eq!(codes[10], Code::OverLimit);
    }
    let codes = s
        .codes(&req("example8", vec![desc(&[("key1", "value1")])]), 21)
        .await;
    assert_eq!(codes[..20], [Code::Ok; 20]);
    assert_eq!(codes[20], Code::OverLimit);
    let text = s.service.metrics.render();
    for key in [
        "example8.key1_unspecified_value\"",
        "example8.key1_unspecified_value2\"",
        "example8.key1_value1\"",
    ] {
        assert!(text.contains(key), "{key} in\n{text}");
    }
    assert!(!text.contains("tollgate_policy=\"example8.key1\""));
    s.stop().await;
}

#[tokio::test]
async fn example_9_wildcards() {
    // The README's three example9 files, each in its own domain (one domain per file).
    let trailing = "domain: example9\ndescriptors:\n  - key: key1\n    value: value*\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n";
    let middle = "domain: example9_middle\ndescriptors:\n  - key: path\n    value: /api/*/action\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n";
    let multi = "domain: example9_multi\ndescriptors:\n  - key: route\n    value: /api/*/resource/*/action\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n";
    let mut s = start(&[trailing, middle, multi], Settings::default()).await;
    let limited = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    for (domain, key, value, matches) in [
        ("example9", "key1", "value1", true),
        ("example9", "key1", "valueXYZ", true),
        ("example9", "key1", "other", false),
        ("example9_middle", "path", "/api/123/action", true),
        ("example9_middle", "path", "/api/user-id/action", true),
        ("example9_middle", "path", "/api/123/other", false),
        (
            "example9_multi",
            "route",
            "/api/v1/resource/123/action",
            true,
        ),
        (
            "example9_multi",
            "route",
            "/api/v2/resource/456/action",
            true,
        ),
        ("example9_multi", "route", "/api/v2/other/456/action", false),
    ] {
        let r = s.call(req(domain, vec![desc(&[(key, value)])])).await;
        assert_eq!(limited(&r), matches.then_some(20), "{domain} {key}={value}");
    }
    // Without share_threshold each matching value has its own counter.
    let r = s
        .call(req("example9", vec![desc(&[("key1", "value1")])]))
        .await;
    assert_eq!(r.statuses[0].limit_remaining, 18);
    let r = s
        .call(req("example9", vec![desc(&[("key1", "value2")])]))
        .await;
    assert_eq!(r.statuses[0].limit_remaining, 19);
    s.stop().await;
}

const EXAMPLE_10: &str = r#"
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
"#;

#[tokio::test]
async fn example_10_value_to_metric() {
    let mut s = start(&[EXAMPLE_10], Settings::default()).await;
    for (route, method, subject) in [("api", "GET", "123"), ("web", "POST", "456")] {
        let d = desc(&[
            ("route", route),
            ("http_method", method),
            ("subject_id", subject),
        ]);
        let r = s.call(req("example10", vec![d])).await;
        assert_eq!(r.statuses[0].limit_remaining, 59);
    }
    let text = s.service.metrics.render();
    assert!(
        text.contains("tollgate_policy=\"example10.route_api.http_method_GET.subject_id\""),
        "{text}"
    );
    assert!(
        text.contains("tollgate_policy=\"example10.route_web.http_method_POST.subject_id\""),
        "{text}"
    );
    s.stop().await;
}

const EXAMPLE_11: &str = r#"
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
"#;

#[tokio::test]
async fn example_11_share_threshold() {
    let mut s = start(&[EXAMPLE_11], Settings::default()).await;
    let file = |k: &str, v: &str| req("example11", vec![desc(&[(k, v)])]);
    assert_eq!(
        s.codes(&file("files", "files/a.pdf"), 5).await,
        [Code::Ok; 5]
    );
    assert_eq!(
        s.codes(&file("files", "files/b.csv"), 5).await,
        [Code::Ok; 5]
    );
    let r = s.call(file("files", "files/c.txt")).await;
    assert_eq!(code(r.overall_code), Code::OverLimit);
    let codes = s
        .codes(&file("files_no_share", "files_no_share/a.pdf"), 11)
        .await;
    assert_eq!(codes[..10], [Code::Ok; 10]);
    assert_eq!(codes[10], Code::OverLimit);
    let codes = s
        .codes(&file("files_no_share", "files_no_share/b.csv"), 10)
        .await;
    assert_eq!(codes, [Code::Ok; 10]);
    s.stop().await;
}

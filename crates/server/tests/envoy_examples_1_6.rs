//! envoyproxy/ratelimit's README examples 1-6, each configuration as written there, with
//! the decisions that README states, asked over gRPC by a tonic client of the Envoy protos.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::*;
use tollgate::metrics::{Outcome, Source};
use tollgate::NANOS_PER_SEC;
use tollgate_rls::service::Settings;

const EXAMPLE_1: &str = r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"#;

#[tokio::test]
async fn example_1_two_values_each_500_per_second() {
    let mut s = start(&[EXAMPLE_1], Settings::default()).await;
    let users = req("mongo_cps", vec![desc(&[("database", "users")])]);
    let codes = s.codes(&users, 501).await;
    assert!(codes[..500].iter().all(|c| *c == Code::Ok));
    assert_eq!(codes[500], Code::OverLimit);
    // "default" has its own 500.
    let default = req("mongo_cps", vec![desc(&[("database", "default")])]);
    let r = s.call(default).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 499);
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (500, Unit::Second as i32)
    );
    // The next second is a new window.
    s.clock.advance(NANOS_PER_SEC);
    assert_eq!(code(s.call(users).await.overall_code), Code::Ok);
    s.stop().await;
}

const EXAMPLE_2: &str = r#"
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
"#;

#[tokio::test]
async fn example_2_nested_and_multiple_descriptors() {
    let mut s = start(&[EXAMPLE_2], Settings::default()).await;
    let both = |n: &str| {
        req(
            "messaging",
            vec![
                desc(&[("message_type", "marketing"), ("to_number", n)]),
                desc(&[("to_number", n)]),
            ],
        )
    };
    let codes = s.codes(&both("2061111111"), 5).await;
    assert_eq!(codes, [Code::Ok; 5]);
    let r = s.call(both("2061111111")).await;
    assert_eq!(code(r.overall_code), Code::OverLimit);
    assert_eq!(status_code(&r.statuses[0]), Code::OverLimit);
    assert_eq!(status_code(&r.statuses[1]), Code::Ok);
    // The denied message charged nothing: 5 of 100 spent, not 6.
    assert_eq!(r.statuses[1].limit_remaining, 95);
    // Each number gets its own 5 marketing messages.
    assert_eq!(
        code(s.call(both("2062222222")).await.overall_code),
        Code::Ok
    );
    // A non-marketing message to the first number counts against its 100 only.
    let plain = req("messaging", vec![desc(&[("to_number", "2061111111")])]);
    let r = s.call(plain).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 94);
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (100, Unit::Day as i32)
    );
    s.stop().await;
}

const EXAMPLE_3: &str = r#"
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
"#;

#[tokio::test]
async fn example_3_most_specific_match_first() {
    let mut s = start(&[EXAMPLE_3], Settings::default()).await;
    let ip = req(
        "edge_proxy_per_ip",
        vec![desc(&[("remote_address", "50.0.0.1")])],
    );
    let codes = s.codes(&ip, 11).await;
    assert_eq!(codes[..10], [Code::Ok; 10]);
    assert_eq!(codes[10], Code::OverLimit);
    // Another address has its own 10.
    let other = req(
        "edge_proxy_per_ip",
        vec![desc(&[("remote_address", "50.0.0.2")])],
    );
    assert_eq!(s.call(other).await.statuses[0].limit_remaining, 9);
    // The listed address matches its own rule (key and value) first: 0 per second.
    let blocked = req(
        "edge_proxy_per_ip",
        vec![desc(&[("remote_address", "50.0.0.5")])],
    );
    let r = s.call(blocked).await;
    assert_eq!(code(r.overall_code), Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .clone()
            .unwrap()
            .requests_per_unit,
        0
    );
    // No wait lets a listed address through: no Retry-After (see tests/block_list.rs).
    assert!(!r
        .response_headers_to_add
        .iter()
        .any(|h| h.key == "Retry-After"));
    s.stop().await;
}

const EXAMPLE_4_FLAT: &str = r#"
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
"#;

const EXAMPLE_4_NESTED: &str = r#"
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
"#;

#[tokio::test]
async fn example_4_levels_must_match() {
    let two = req(
        "example4",
        vec![desc(&[("key", "value"), ("subkey", "subvalue")])],
    );
    let mut s = start(&[EXAMPLE_4_FLAT], Settings::default()).await;
    let r = s.call(two.clone()).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(
        r.statuses[0].current_limit, None,
        "no rule at the request's depth"
    );
    s.stop().await;
    let mut s = start(&[EXAMPLE_4_NESTED], Settings::default()).await;
    let r = s.call(two).await;
    assert_eq!(
        r.statuses[0]
            .current_limit
            .clone()
            .unwrap()
            .requests_per_unit,
        300
    );
    assert_eq!(r.statuses[0].limit_remaining, 299);
    s.stop().await;
}

const EXAMPLE_5: &str = r#"
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
"#;

#[tokio::test]
async fn example_5_unlimited() {
    let mut s = start(&[EXAMPLE_5], Settings::default()).await;
    let ldap = req("internal", vec![desc(&[("ldap", "x")])]);
    for _ in 0..200 {
        let r = s.call(ldap.clone()).await;
        assert_eq!(code(r.overall_code), Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
        assert_eq!(r.statuses[0].current_limit, None);
    }
    assert!(s.service.store().is_empty(), "unlimited is never counted");
    let azure = req("internal", vec![desc(&[("azure", "x")])]);
    let codes = s.codes(&azure, 101).await;
    assert_eq!(codes[100], Code::OverLimit);
    assert!(codes[..100].iter().all(|c| *c == Code::Ok));
    s.stop().await;
}

const EXAMPLE_6: &str = r#"
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
"#;

#[tokio::test]
async fn example_6_shadow_mode() {
    let mut s = start(&[EXAMPLE_6], Settings::default()).await;
    let a = req(
        "example6",
        vec![desc(&[("service", "auth-service"), ("user", "user-a")])],
    );
    assert_eq!(s.codes(&a, 15).await, [Code::Ok; 15]);
    let t = s.service.metrics.tally("example6.service.user_user-a");
    assert_eq!(t.decisions(Outcome::Admitted, Source::Store), 10);
    assert_eq!(t.decisions(Outcome::ShadowDenied, Source::Store), 5);
    assert_eq!(t.decisions(Outcome::Denied, Source::Store), 0);
    let b = req(
        "example6",
        vec![desc(&[("service", "auth-service"), ("user", "user-b")])],
    );
    let codes = s.codes(&b, 21).await;
    assert_eq!(codes[..20], [Code::Ok; 20]);
    assert_eq!(codes[20], Code::OverLimit);
    s.stop().await;
}

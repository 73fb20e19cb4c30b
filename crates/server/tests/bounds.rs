//! The core's request bounds (`tollgate::store::bounds`) at the server's two doors, gRPC and
//! `/json`, on a real server on loopback: a request over a bound is refused with the field
//! and the bound, before it is matched, and the server goes on answering and counting; a
//! request exactly at every bound is decided.

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::json;
use support::*;
use tollgate::store::bounds::{MAX_ENTRIES, MAX_KEY_BYTES, MAX_LIMITS};
use tollgate_rls::bounds::{GRPC_MAX_MESSAGE, JSON_MAX_BODY};
use tollgate_rls::service::Settings;

const CONFIG: &str = r#"
domain: bounds
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: org
    descriptors:
      - key: path
        rate_limit:
          policy: "fixed-window 100/min"     # each path, every org together
          tenant_policy: "fixed-window 10/min"
          tenant_key: org                  # and each (org, path) on its own
"#;

/// A request in the proto3 JSON mapping.
fn to_json(r: &RateLimitRequest) -> String {
    let descriptors: Vec<_> = r
        .descriptors
        .iter()
        .map(|d| {
            let entries: Vec<_> = d
                .entries
                .iter()
                .map(|e| json!({"key": e.key, "value": e.value}))
                .collect();
            json!({ "entries": entries })
        })
        .collect();
    json!({"domain": r.domain, "descriptors": descriptors}).to_string()
}

/// The refusal of `r` over gRPC (`INVALID_ARGUMENT`) and over `/json` (400): the message,
/// the same at both doors.
async fn refused(s: &mut Running, r: RateLimitRequest) -> String {
    let status = s.client.should_rate_limit(r.clone()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    let (code, body) = s.http("POST", "/json", &to_json(&r)).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body, status.message());
    body
}

/// Alice's remaining count after one more request, over gRPC: the server still answers
/// and counts.
async fn alice_remaining(s: &mut Running) -> u32 {
    let r = s
        .call(req("bounds", vec![desc(&[("user", "alice")])]))
        .await;
    assert_eq!(code(r.overall_code), Code::Ok);
    r.statuses[0].limit_remaining
}

fn users(n: usize) -> RateLimitRequest {
    let d = (0..n)
        .map(|i| desc(&[("user", &format!("u{i}"))]))
        .collect();
    req("bounds", d)
}

/// `n` fair shares on `n` paths: two counted limits each.
fn orgs(n: usize) -> RateLimitRequest {
    let d = (0..n)
        .map(|i| desc(&[("org", &format!("o{i}")), ("path", &format!("/p{i}"))]))
        .collect();
    req("bounds", d)
}

#[tokio::test]
async fn a_hundred_thousand_matching_descriptors_are_refused_by_name_and_the_server_counts_on() {
    let mut s = start(&[CONFIG], Settings::default()).await;
    let many = users(100_000);
    let status = s.client.should_rate_limit(many).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        format!("descriptors: 100000 limits, at most {MAX_LIMITS}")
    );
    assert_eq!(alice_remaining(&mut s).await, 2);

    // Over /json too (`{"key": "user"}` matches the `user` rule).
    let one = r#"{"entries":[{"key":"user"}]}"#;
    let body = format!(
        r#"{{"domain":"bounds","descriptors":[{}]}}"#,
        vec![one; 100_000].join(",")
    );
    println!("100,000 descriptors: {} bytes of JSON", body.len());
    let (code, text) = s.http("POST", "/json", &body).await;
    assert_eq!((code, text.as_str()), (400, status.message()));
    assert_eq!(alice_remaining(&mut s).await, 1);
    s.stop().await;
}

#[tokio::test]
async fn a_message_over_the_transport_limits_is_refused_before_it_is_read() {
    let mut s = start(&[CONFIG], Settings::default()).await;
    let mut big = req("bounds", vec![desc(&[("user", "x")])]);
    big.descriptors[0].entries[0].value = "x".repeat(GRPC_MAX_MESSAGE);
    let status = s.client.should_rate_limit(big).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    let body = format!(r#"{{"domain":"{}"}}"#, "d".repeat(JSON_MAX_BODY));
    let (code, text) = s.http("POST", "/json", &body).await;
    assert_eq!(code, 413);
    assert!(
        text.starts_with(&format!("body: over {JSON_MAX_BODY} bytes")),
        "{text}"
    );
    assert_eq!(alice_remaining(&mut s).await, 2);
    s.stop().await;
}

#[tokio::test]
async fn a_descriptor_with_too_many_entries_is_refused_by_name() {
    let mut s = start(&[CONFIG], Settings::default()).await;
    let mut r = users(3);
    r.descriptors[1].entries = vec![Entry::default(); MAX_ENTRIES + 1];
    assert_eq!(
        refused(&mut s, r).await,
        format!(
            "descriptors[1].entries: {} entries, at most {MAX_ENTRIES}",
            MAX_ENTRIES + 1
        )
    );
    assert_eq!(alice_remaining(&mut s).await, 2, "nothing charged");
    s.stop().await;
}

#[tokio::test]
async fn a_value_or_a_domain_over_the_key_bound_is_refused_by_name() {
    let mut s = start(&[CONFIG], Settings::default()).await;
    let long = "v".repeat(MAX_KEY_BYTES + 1);
    let mut r = users(3);
    r.descriptors[2].entries[0].value = long.clone();
    let over = format!("{} bytes, at most {MAX_KEY_BYTES}", MAX_KEY_BYTES + 1);
    assert_eq!(
        refused(&mut s, r).await,
        format!("descriptors[2].entries[0].value: {over}")
    );
    let mut r = users(1);
    r.descriptors[0].entries[0].key = long.clone();
    assert_eq!(
        refused(&mut s, r).await,
        format!("descriptors[0].entries[0].key: {over}")
    );
    let mut r = users(1);
    r.domain = long;
    assert_eq!(refused(&mut s, r).await, format!("domain: {over}"));
    assert_eq!(alice_remaining(&mut s).await, 2, "nothing charged");
    s.stop().await;
}

#[tokio::test]
async fn fair_shares_that_count_over_the_limit_bound_are_refused_by_name() {
    let mut s = start(&[CONFIG], Settings::default()).await;
    // Each descriptor is within the bound; each fair share counts two windows.
    let n = MAX_LIMITS / 2 + 1;
    assert_eq!(
        refused(&mut s, orgs(n)).await,
        format!(
            "descriptors (limits counted after matching, a fair share two): {} limits, at most {MAX_LIMITS}",
            2 * n
        )
    );
    // Nothing was charged: o0's window on /p0 still has its 10.
    let r = s.call(orgs(1)).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 9);
    s.stop().await;
}

#[tokio::test]
async fn a_request_exactly_at_each_bound_is_decided() {
    let mut s = start(&[CONFIG], Settings::default()).await;
    // MAX_LIMITS descriptors, each a counted limit.
    let r = s.call(users(MAX_LIMITS)).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(r.statuses.len(), MAX_LIMITS);
    assert!(r.statuses.iter().all(|st| st.limit_remaining == 2));
    // MAX_LIMITS counted limits from fair shares.
    let r = s.call(orgs(MAX_LIMITS / 2)).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert!(r.statuses.iter().all(|st| st.limit_remaining == 9));
    // MAX_ENTRIES entries, and a value of MAX_KEY_BYTES, counted.
    let mut r = req(
        "bounds",
        vec![desc(&[("user", &"v".repeat(MAX_KEY_BYTES))])],
    );
    r.descriptors.push(desc(&[("k", "v")]));
    r.descriptors[1].entries = vec![Entry::default(); MAX_ENTRIES];
    let answer = s.call(r.clone()).await;
    assert_eq!(answer.statuses[0].limit_remaining, 2);
    let (code_json, body) = s.http("POST", "/json", &to_json(&r)).await;
    assert_eq!(code_json, 200, "{body}");
    assert!(body.contains(r#""limitRemaining":1"#), "{body}");
    // Every bound at once, at both doors (no rule matches: the sizes alone).
    let entry = Entry {
        key: "k".repeat(MAX_KEY_BYTES),
        value: "v".repeat(MAX_KEY_BYTES),
    };
    let mut r = users(MAX_LIMITS);
    r.domain = "d".repeat(MAX_KEY_BYTES);
    for d in &mut r.descriptors {
        d.entries = vec![entry.clone(); MAX_ENTRIES];
    }
    let answer = s.call(r.clone()).await;
    assert_eq!(answer.statuses.len(), MAX_LIMITS);
    let body = to_json(&r);
    println!("every bound at once: {} bytes of JSON", body.len());
    let (code_json, text) = s.http("POST", "/json", &body).await;
    assert_eq!(code_json, 200, "{}", &text[..text.len().min(200)]);
    s.stop().await;
}

//! A block list (`requests_per_unit: 0`) never admits, so no wait makes a request that
//! carries it pass: its answer has no `Retry-After` (RFC 9110 10.2.3 makes it a promise
//! that a follow-up after that time may succeed; RFC 6585 4 lets a 429 go without it), over
//! gRPC and over `/json`, alone or with a counted limit that is also over. A counted denial
//! alone still says when to retry.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use support::{code, desc, req, start};
use tollgate_rls::service::Settings;
use tollgate_rls::store::Charging;

const PER_IP: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: path
    value: /admin
    rate_limit: { unit: second, requests_per_unit: 0 }
"#;

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

#[tokio::test]
async fn a_block_list_denial_has_no_retry_after_over_grpc() {
    for charging in [Charging::AllOrNothing, Charging::Each] {
        let settings = Settings {
            charging,
            ..Settings::default()
        };
        let mut s = start(&[PER_IP], settings).await;
        let blocked = req("edge", vec![desc(&[("remote_address", "50.0.0.5")])]);
        for _ in 0..2 {
            let r = s.call(blocked.clone()).await;
            assert_eq!(code(r.overall_code), Code::OverLimit);
            assert_eq!(header(&r, "Retry-After"), None, "{charging:?}: {r:?}");
        }
        // A counted limit over too: its Retry-After would be as false (the block stays).
        let ip = desc(&[("remote_address", "50.0.0.1")]);
        let admin = desc(&[("path", "/admin")]);
        let r = s.call(req("edge", vec![ip.clone()])).await;
        assert_eq!(code(r.overall_code), Code::Ok);
        let r = s.call(req("edge", vec![ip.clone(), admin])).await;
        assert_eq!(code(r.overall_code), Code::OverLimit);
        assert_eq!(header(&r, "Retry-After"), None, "{charging:?}: {r:?}");
        // The counted limit alone, over: its Retry-After is true (the minute's end).
        let r = s.call(req("edge", vec![ip])).await;
        assert_eq!(code(r.overall_code), Code::OverLimit);
        assert_eq!(header(&r, "Retry-After"), Some("60"), "{charging:?}: {r:?}");
        s.stop().await;
    }
}

#[tokio::test]
async fn a_block_list_denial_has_no_retry_after_over_json() {
    let s = start(&[PER_IP], Settings::default()).await;
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}"#;
    let (status, text) = s.http("POST", "/json", body).await;
    assert_eq!(status, 429, "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["overallCode"], "OVER_LIMIT");
    let headers = json["responseHeadersToAdd"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(headers.iter().all(|h| h["key"] != "Retry-After"), "{text}");
    s.stop().await;
}

//! `/json` reads the proto3 JSON mapping as envoyproxy/ratelimit's `protojson.Unmarshal`
//! does by default: both spellings of a field (lowerCamelCase and the proto's snake_case),
//! and a 400 for a field the message does not have, named by its path. A misspelt field
//! is never silently a different request (`"vaule"` would otherwise be an entry with an
//! empty value, matched by another rule).

mod support;

use support::*;
use tollgate_rls::service::Settings;

const CONFIG: &str = r#"
domain: d
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
"#;

#[tokio::test]
async fn an_unknown_field_is_refused_by_its_path() {
    let s = start(&[CONFIG], Settings::default()).await;
    for (body, message) in [
        (
            r#"{"domian":"d","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
            "domian: unknown field of a RateLimitRequest (known: domain, descriptors, hitsAddend, hits_addend)",
        ),
        (
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","vaule":"a"}]}]}"#,
            "descriptors[0].entries[0].vaule: unknown field of an Entry (known: key, value)",
        ),
        (
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"a"}],"shadow":true}]}"#,
            "descriptors[0].shadow: unknown field of a RateLimitDescriptor (known: entries, limit, hitsAddend, hits_addend, isNegativeHits, is_negative_hits)",
        ),
        (
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"a"}],"limit":{"requestsPerUnit":1,"units":"SECOND"}}]}"#,
            "descriptors[0].limit.units: unknown field of a RateLimitOverride (known: requestsPerUnit, requests_per_unit, unit)",
        ),
    ] {
        assert_eq!(s.http("POST", "/json", body).await, (400, message.to_string()));
    }
    // Nothing was charged.
    let (code, body) = s
        .http(
            "POST",
            "/json",
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
        )
        .await;
    assert_eq!(code, 200);
    assert!(body.contains(r#""limitRemaining":2"#), "{body}");
    s.stop().await;
}

#[tokio::test]
async fn every_known_field_is_read_in_both_spellings() {
    let s = start(&[CONFIG], Settings::default()).await;
    let (code, body) = s
        .http(
            "POST",
            "/json",
            r#"{"domain":"d","hits_addend":2,"descriptors":[{"entries":[{"key":"user","value":"b"}]}]}"#,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""limitRemaining":1"#), "{body}");
    let (code, body) = s
        .http(
            "POST",
            "/json",
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"c"}],"hitsAddend":"3","limit":{"requests_per_unit":5,"unit":"MINUTE"}}]}"#,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""limitRemaining":2"#), "{body}");
    // isNegativeHits is read, and gives back as over gRPC: 2 of the 3 spent.
    let (code, body) = s
        .http(
            "POST",
            "/json",
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"c"}],"hitsAddend":"2","isNegativeHits":true,"limit":{"requests_per_unit":5,"unit":"MINUTE"}}]}"#,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""limitRemaining":4"#), "{body}");
    s.stop().await;
}

//! Envoy 1.38's `is_negative_hits` over gRPC, on memory: a descriptor that gives its hits
//! back (the core's settle rule for a charge of those hits at now whose actual was 0,
//! floored at fresh), and the recipe of the README for Envoy AI Gateway's request and
//! response costs (reserve the estimate at the request, give back the difference at the
//! stream's end) that does not overspend.

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::*;
use tollgate_rls::service::Settings;

const TOKENS: &str = r#"
domain: ai
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1000
"#;

/// A descriptor of `user` that gives `hits` back.
fn give_back(user: &str, hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        is_negative_hits: true,
        ..desc_hits(&[("user", user)], hits)
    }
}

/// What `user` has left: a check that charges nothing.
async fn left(s: &mut Running, user: &str) -> u64 {
    let r = s
        .call(req("ai", vec![desc_hits(&[("user", user)], 0)]))
        .await;
    r.statuses[0].limit_remaining as u64
}

#[tokio::test]
async fn negative_hits_give_back_and_report_what_is_left() {
    let mut s = start(&[TOKENS], Settings::default()).await;
    let r = s
        .call(req("ai", vec![desc_hits(&[("user", "a")], 400)]))
        .await;
    assert_eq!(r.statuses[0].limit_remaining, 600);
    let r = s.call(req("ai", vec![give_back("a", 150)])).await;
    assert_eq!(code(r.overall_code), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 750);
    assert_eq!(left(&mut s, "a").await, 750);
}

#[tokio::test]
async fn negative_hits_never_make_a_limit_fuller_than_fresh() {
    let mut s = start(&[TOKENS], Settings::default()).await;
    s.call(req("ai", vec![desc_hits(&[("user", "a")], 100)]))
        .await;
    let r = s.call(req("ai", vec![give_back("a", 5000)])).await;
    assert_eq!(r.statuses[0].limit_remaining, 1000);
    // No credit was banked: the whole limit, and no more, is left.
    let r = s
        .call(req("ai", vec![desc_hits(&[("user", "a")], 1000)]))
        .await;
    assert_eq!(code(r.overall_code), Code::Ok);
    let r = s
        .call(req("ai", vec![desc_hits(&[("user", "a")], 1)]))
        .await;
    assert_eq!(code(r.overall_code), Code::OverLimit);
    // A key never charged stays fresh.
    let r = s.call(req("ai", vec![give_back("b", 10)])).await;
    assert_eq!(r.statuses[0].limit_remaining, 1000);
}

#[tokio::test]
async fn a_request_that_both_takes_and_gives_back_is_refused_by_field() {
    let mut s = start(&[TOKENS], Settings::default()).await;
    let mixed = req(
        "ai",
        vec![desc_hits(&[("user", "a")], 10), give_back("b", 10)],
    );
    let err = s.client.should_rate_limit(mixed).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().starts_with("descriptors[1].is_negative_hits"),
        "{}",
        err.message()
    );
    // Nothing was charged.
    assert_eq!(left(&mut s, "a").await, 1000);
}

/// The README's recipe: each stream reserves its `max_tokens` at the request and gives
/// back `max_tokens - used` at its end. Parallel streams cannot spend more than the budget
/// (charge-after, a check of 0 then the real cost at the end, admits them all).
#[tokio::test]
async fn the_ai_gateway_recipe_holds_the_budget_across_parallel_streams() {
    let mut s = start(&[TOKENS], Settings::default()).await;
    // Three streams of max_tokens 400 start before any ends: the third does not fit.
    let reserve = req("ai", vec![desc_hits(&[("user", "a")], 400)]);
    let codes = s.codes(&reserve, 3).await;
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    // The two admitted used 120 and 400 tokens: 280 and 0 come back.
    for used in [120, 400] {
        let r = s.call(req("ai", vec![give_back("a", 400 - used)])).await;
        assert_eq!(code(r.overall_code), Code::Ok);
    }
    // Spent: exactly what they used.
    assert_eq!(left(&mut s, "a").await, 1000 - 120 - 400);
}

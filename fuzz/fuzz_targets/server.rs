//! tollgate-rls's request path: any `RateLimitRequest` (protobuf bytes as gRPC decodes
//! them, a `/json` body, or a sequence built from the rules' own keys so that every rule
//! kind is reached), decided by the service on the memory store on a hand-set clock, over
//! a configuration with every rule kind. Never a panic; every answer is well formed: one
//! status per descriptor, each OK or OVER_LIMIT, the overall code OVER_LIMIT exactly when
//! one is, and only for a request within the core's bounds; or a refusal that names its
//! field; never a store error (memory cannot fail).
#![no_main]

use std::sync::OnceLock;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use prost::Message;
use tollgate_rls::config::Config;
use tollgate_rls::service::{RequestError, Service, Settings};
use tollgate_rls::store::{ManualClock, Memory};

const CONFIG: &str = r#"
domain: fz
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3, name: per_user }
  - key: vip
    rate_limit: { unlimited: true }
  - key: banned
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: path
    value: /a
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces:
        - name: per_user
  - key: canary
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: route
    value: "/s*"
    rate_limit:
      policy: "sliding-window 4/10s"
  - key: org
    rate_limit:
      policy: "gcra 10/s burst 4"
      tenant_policy: "gcra 2/s burst 2"
    descriptors:
      - key: path
        rate_limit:
          policy: "fixed-window 6/min"
          tenant_policy: "fixed-window 2/min"
          tenant_key: org
"#;

const KEYS: [&str; 9] = ["user", "vip", "banned", "path", "canary", "route", "org", "x", ""];
const VALUES: [&str; 8] = ["a", "b", "/a", "/s", "/search", "default", "", "*"];

fn config() -> Config {
    static PARSED: OnceLock<Config> = OnceLock::new();
    PARSED
        .get_or_init(|| Config::from_texts([("fz.yaml", CONFIG)]).expect("the fuzz config loads"))
        .clone()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap())
}

fn text(u: &mut Unstructured, words: &[&str]) -> ArbResult<String> {
    Ok(if u.ratio(7, 8)? { u.choose(words)?.to_string() } else { u.arbitrary()? })
}

/// A request made of the configuration's own keys and values (mostly), any counts.
fn built(u: &mut Unstructured) -> ArbResult<RateLimitRequest> {
    let mut r = RateLimitRequest {
        domain: text(u, &["fz", "other", ""])?,
        hits_addend: if u.ratio(1, 4)? { u.arbitrary()? } else { 0 },
        descriptors: Vec::new(),
    };
    for _ in 0..u.int_in_range(0..=70u8)? {
        let mut d = RateLimitDescriptor::default();
        for _ in 0..u.int_in_range(0..=4u8)? {
            d.entries.push(Entry { key: text(u, &KEYS)?, value: text(u, &VALUES)? });
        }
        if u.ratio(1, 8)? {
            d.hits_addend = Some(UInt64Value { value: u.arbitrary()? });
        }
        if u.ratio(1, 8)? {
            d.limit = Some(RateLimitOverride {
                requests_per_unit: u.arbitrary()?,
                unit: u.int_in_range(-1..=8)?,
            });
        }
        d.is_negative_hits = u.ratio(1, 32)?;
        r.descriptors.push(d);
    }
    Ok(r)
}

fn check(request: &RateLimitRequest, answer: Result<envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse, RequestError>) {
    match answer {
        Ok(r) => {
            assert_eq!(r.statuses.len(), request.descriptors.len());
            assert!(tollgate_rls::bounds::request(request).is_ok(), "decided over a bound");
            let over = r.statuses.iter().filter(|s| s.code == Code::OverLimit as i32).count();
            assert!(r.statuses.iter().all(|s| s.code == Code::Ok as i32 || s.code == Code::OverLimit as i32));
            assert_eq!(r.overall_code == Code::OverLimit as i32, over > 0);
            assert!(r.overall_code == Code::Ok as i32 || over > 0);
        }
        Err(RequestError::Invalid(m)) => {
            let (field, reason) = m.split_once(": ").expect("a refusal names its field");
            assert!(!field.is_empty() && !reason.is_empty(), "{m}");
        }
        Err(e) => panic!("the memory store failed: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let clock = ManualClock::new(19_675 * 86_400 * 1_000_000_000);
    let service = Service::new(config(), Memory::with_clock(clock.clone()), Settings::default());
    let mut requests = Vec::new();
    match mode % 3 {
        0 => match RateLimitRequest::decode(rest) {
            Ok(r) => requests.push(r),
            Err(_) => return,
        },
        1 => {
            let Ok(v) = serde_json::from_slice(rest) else { return };
            match tollgate_rls::http::request_from_json(&v) {
                Ok(r) => requests.push(r),
                Err(m) => {
                    assert!(m.split_once(": ").is_some_and(|(f, r)| !f.is_empty() && !r.is_empty()), "{m}");
                    return;
                }
            }
        }
        _ => {
            let mut u = Unstructured::new(rest);
            while let Ok(r) = built(&mut u) {
                requests.push(r);
                if u.is_empty() {
                    break;
                }
            }
        }
    }
    runtime().block_on(async {
        for (i, r) in requests.iter().enumerate() {
            if i > 0 {
                clock.advance(u64::from(rest.get(i).copied().unwrap_or(0)) * 100_000_000);
            }
            let answer = service.should_rate_limit(r).await;
            check(r, answer);
        }
    });
});

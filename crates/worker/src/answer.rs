//! Answers: the rate-limit fields on every limited response, the 429 problem document,
//! the problem documents of the limiter's own errors, and the isolate's deny cache.

use tollgate::headers::{self, response_headers, Named};
use tollgate::Decision;

use crate::plan::LimitName;

pub use tollgate::headers::QUOTA_EXCEEDED;

/// Each limit's name, policy and decision, as the core's header functions read them.
fn items<'a>(names: &'a [LimitName], each: &'a [Decision]) -> Vec<Named<'a>> {
    names
        .iter()
        .zip(each)
        .map(|(n, d)| Named {
            name: &n.name,
            policy: &n.limit,
            decision: d,
        })
        .collect()
}

/// The `RateLimit-Policy` (every limit), `RateLimit` (the binding ones; on a denial
/// `Retry-After`, `Cache-Control`) fields for these decisions, plus the legacy fields when
/// configured: the core's [`response_headers`].
pub fn headers(
    names: &[LimitName],
    each: &[Decision],
    legacy: bool,
) -> Vec<(&'static str, String)> {
    response_headers(&items(names, each), legacy)
}

/// The `Tollgate-Shadow` value of these decisions: `allowed`, or the limits that denied
/// (the core's [`headers::violated`], written by [`tollgate_http::fields`]).
pub fn shadow(names: &[LimitName], each: &[Decision]) -> String {
    let items = items(names, each);
    let violated = headers::violated(&items);
    if violated.is_empty() {
        tollgate_http::fields::SHADOW_ALLOWED.to_string()
    } else {
        tollgate_http::fields::shadow_denied(&violated)
    }
}

/// The 429 body: `application/problem+json`, type quota-exceeded, with `violated-policies`
/// and the longest wait (the core's [`headers::problem`], as the npm middleware and the
/// tower layer send it); `None` when no limit denied.
pub fn quota_exceeded(names: &[LimitName], each: &[Decision]) -> Option<String> {
    headers::problem(&items(names, each))
}

/// A problem document for every other error the limiter answers (400, 401, 500, 503, ...),
/// the one every front end writes ([`tollgate_http::problem::problem`]).
pub use tollgate_http::problem::problem;

/// The per-isolate deny cache: keys known to be denied until T are rejected locally until
/// T, without a coordinator round trip. The core's ([`tollgate::store::DenyCache`], the
/// Redis stores' too) on the isolate's clock in ms; its keys hold the request's cost, so
/// every entry is for one cost. Bounded.
pub struct DenyCache {
    cache: tollgate::store::DenyCache<String>,
}

impl Default for DenyCache {
    fn default() -> Self {
        DenyCache {
            cache: tollgate::store::DenyCache::new(DENY_CACHE_MAX),
        }
    }
}

/// Entries kept before the half that ends soonest is dropped.
pub const DENY_CACHE_MAX: usize = 50_000;

impl DenyCache {
    /// The cached denial of `key` at `now_ms` (the combined decision and each limit's),
    /// with its durations brought forward to now.
    pub fn get(&mut self, key: &str, now_ms: u64) -> Option<(Decision, Vec<Decision>)> {
        let d = self.cache.get(key, 0, tollgate::millis(now_ms))?;
        Some((d.decision, d.each))
    }

    /// Remembers a denial the coordinator made at `at_ms` (only when it has a wait: a
    /// concurrency denial has none).
    pub fn put(&mut self, key: String, at_ms: u64, decision: &Decision, each: Vec<Decision>) {
        let decided = tollgate::stack::StackDecision {
            decision: *decision,
            each,
        };
        let at = tollgate::millis(at_ms);
        self.cache
            .remember(key, 0, at, &decided, decision.retry_after);
    }

    /// Drops every entry whose key contains `part` (an admin reset).
    pub fn forget(&mut self, part: &str) {
        self.cache.retain(|k| !k.contains(part));
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(allowed: bool, retry_ms: u64, reset_ms: u64) -> Decision {
        Decision {
            allowed,
            limit: 10,
            remaining: 0,
            reset_after: tollgate::millis(reset_ms),
            retry_after: tollgate::millis(retry_ms),
            delay: 0,
        }
    }

    #[test]
    fn deny_cache_counts_down_and_expires() {
        let mut c = DenyCache::default();
        let x = d(false, 1500, 2000);
        c.put("k".into(), 1000, &x, vec![x]);
        let (combined, got) = c.get("k", 1500).unwrap();
        assert_eq!(combined.retry_after_ms(), 1000);
        assert_eq!(got[0].retry_after_ms(), 1000);
        assert_eq!(got[0].reset_after_ms(), 1500);
        assert!(c.get("k", 2500).is_none());
        assert!(c.is_empty());
        c.put("k".into(), 0, &d(true, 0, 0), vec![]);
        assert!(c.is_empty(), "admissions are not cached");
    }

    #[test]
    fn problem_body_names_violated_policies() {
        let limit: tollgate::Policy = "fixed-window 10/min".parse().unwrap();
        let names = [LimitName {
            policy: 0,
            name: "per-ip".into(),
            limit,
            tenant: false,
        }];
        assert_eq!(quota_exceeded(&names, &[d(true, 0, 2500)]), None);
        let body = quota_exceeded(&names, &[d(false, 2500, 2500)]).unwrap();
        // The same bytes the npm middleware sends (crates/wasm/test/express.test.js).
        assert_eq!(
            body,
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit exceeded; retry in 3 s.","violated-policies":["per-ip"]}"#
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["type"], QUOTA_EXCEEDED);
        assert_eq!(v["status"], 429);
        assert_eq!(v["violated-policies"][0], "per-ip");
        assert_eq!(shadow(&names, &[d(true, 0, 2500)]), "allowed");
        assert_eq!(
            shadow(&names, &[d(false, 2500, 2500)]),
            "denied; policies=\"per-ip\""
        );
    }
}

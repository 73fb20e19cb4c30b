//! HTTP response fields for rate-limited APIs.
//!
//! * `RateLimit-Policy` and `RateLimit`, per draft-ietf-httpapi-ratelimit-headers-11: each
//!   a Structured Field List with one Item per policy, the policy's name as a String and its
//!   numbers as Integer parameters (RFC 9651 serialisation, written here: the four fixed
//!   keys and printable-ASCII names need none of a general serialiser; the tests parse every
//!   field back with the `sfv` crate): `RateLimit-Policy: "per-ip";q=100;w=60` and
//!   `RateLimit: "per-ip";r=42;t=18`.
//! * `Retry-After` in whole seconds, rounded up (RFC 9110 delay-seconds; never less than 1
//!   on a denial, so that "0" is never read as "retry immediately").
//! * The legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
//!   (seconds from now, not a timestamp), behind an option.
//!
//! What the numbers mean: `q` is the policy's [`Policy::limit`] (a bucket's capacity, a
//! window's limit) and `w` the time in seconds the policy takes to grant `q` (a window's
//! length; for a bucket, the time to refill it from empty: `capacity * window / limit`),
//! rounded up. `r` is [`Decision::remaining`] and `t` is [`Decision::reset_after`] in
//! seconds, rounded up. A concurrency limit has no window: its items carry `q` and `r` only.
//!
//! ```
//! use tollgate::headers::{rate_limit, rate_limit_policy, retry_after, Named};
//! use tollgate::{decide, Policy};
//! let policy: Policy = "fixed-window 100/min".parse().unwrap();
//! let (decision, _) = decide(&policy, None, 42_000_000_000, 1).unwrap();
//! let items = [Named { name: "per-ip", policy: &policy, decision: &decision }];
//! assert_eq!(rate_limit_policy(&items), r#""per-ip";q=100;w=60"#);
//! assert_eq!(rate_limit(&items), r#""per-ip";r=99;t=18"#);
//! assert_eq!(retry_after(&decision), None);
//! ```

use alloc::string::String;
use alloc::vec::Vec;

use crate::{Decision, Nanos, Policy, Snippet, NANOS_PER_SEC};

/// One policy's part of the response: its public name, the policy and its decision.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    /// The name clients see (printable ASCII; other characters are replaced by `?`).
    pub name: &'a str,
    /// The policy.
    pub policy: &'a Policy,
    /// The policy's decision for this request.
    pub decision: &'a Decision,
}

fn secs_ceil(ns: Nanos) -> u64 {
    ns.div_ceil(NANOS_PER_SEC)
}

/// Structured Field Integers have at most 15 digits.
const MAX_INTEGER: u64 = 999_999_999_999_999;

/// Appends the policy's name as an sf-string: printable ASCII only (others become `?`),
/// `"` and `\` escaped.
fn push_string(out: &mut String, name: &str) {
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

/// Seconds the policy takes to grant its whole quota (`w`), rounded up.
pub fn window_secs(policy: &Policy) -> Option<u64> {
    let quota = policy.quota()?;
    let ns = policy.limit() as u128 * quota.window() as u128 / quota.limit() as u128;
    Some((ns.div_ceil(NANOS_PER_SEC as u128)).min(u64::MAX as u128) as u64)
}

/// One Integer parameter of an Item: its key (lowercase letters, a valid sf-key) and value.
type Param = Option<(&'static str, u64)>;

/// `v` in decimal (no `core::fmt`: the npm package's `.wasm` pays for every formatting path).
fn decimal(v: u64) -> String {
    String::from(Snippet::number(v).as_str())
}

/// A List of one String Item per policy, each with its Integer parameters.
fn list(items: &[Named<'_>], params: fn(&Named<'_>) -> [Param; 2]) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_string(&mut out, item.name);
        for (k, v) in params(item).into_iter().flatten() {
            out.push(';');
            out.push_str(k);
            out.push('=');
            out.push_str(Snippet::number(v.min(MAX_INTEGER)).as_str());
        }
    }
    out
}

/// The `RateLimit-Policy` field value: `"name";q=<quota>;w=<window seconds>` per policy.
pub fn rate_limit_policy(items: &[Named<'_>]) -> String {
    list(items, |n| {
        [
            Some(("q", n.policy.limit())),
            window_secs(n.policy).map(|w| ("w", w)),
        ]
    })
}

/// The `RateLimit` field value: `"name";r=<remaining>;t=<seconds to reset>` per policy.
pub fn rate_limit(items: &[Named<'_>]) -> String {
    list(items, |n| {
        [
            Some(("r", n.decision.remaining)),
            n.policy
                .quota()
                .map(|_| ("t", secs_ceil(n.decision.reset_after))),
        ]
    })
}

/// `Retry-After` in whole seconds, rounded up and at least 1; `None` when allowed.
pub fn retry_after(decision: &Decision) -> Option<u64> {
    (!decision.allowed).then(|| secs_ceil(decision.retry_after).max(1))
}

/// The legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds from now).
pub fn legacy(decision: &Decision) -> [(&'static str, String); 3] {
    [
        ("X-RateLimit-Limit", decimal(decision.limit)),
        ("X-RateLimit-Remaining", decimal(decision.remaining)),
        (
            "X-RateLimit-Reset",
            decimal(secs_ceil(decision.reset_after)),
        ),
    ]
}

/// Every field for a response: `RateLimit-Policy`, `RateLimit`, and when any policy denied,
/// `Retry-After` (the longest wait) and `Cache-Control: no-store`; the legacy fields (of the
/// binding decision: the denying one, or the one with the least remaining) when asked.
pub fn response_headers(items: &[Named<'_>], with_legacy: bool) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(6);
    if items.is_empty() {
        return out;
    }
    out.push(("RateLimit-Policy", rate_limit_policy(items)));
    out.push(("RateLimit", rate_limit(items)));
    let denied = items.iter().filter(|n| !n.decision.allowed);
    if let Some(wait) = denied.filter_map(|n| retry_after(n.decision)).max() {
        out.push(("Retry-After", decimal(wait)));
        out.push(("Cache-Control", String::from("no-store")));
    }
    if with_legacy {
        let each: Vec<Decision> = items.iter().map(|n| *n.decision).collect();
        let all = each.iter().all(|d| d.allowed);
        let binding = crate::stack::combine(&each, all);
        out.extend(legacy(&binding));
    }
    out
}

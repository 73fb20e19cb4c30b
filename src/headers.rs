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

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;

use crate::{Decision, Nanos, Policy, NANOS_PER_SEC};

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

/// A List of one String Item per policy, each with its Integer parameters (keys are
/// lowercase letters, valid sf-keys).
fn list(items: &[Named<'_>], params: impl Fn(&Named<'_>) -> Vec<(&'static str, u64)>) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_string(&mut out, item.name);
        for (k, v) in params(item) {
            // Writing to a String cannot fail.
            let _ = write!(out, ";{k}={}", v.min(MAX_INTEGER));
        }
    }
    out
}

/// The `RateLimit-Policy` field value: `"name";q=<quota>;w=<window seconds>` per policy.
pub fn rate_limit_policy(items: &[Named<'_>]) -> String {
    list(items, |n| {
        let mut p = alloc::vec![("q", n.policy.limit())];
        if let Some(w) = window_secs(n.policy) {
            p.push(("w", w));
        }
        p
    })
}

/// The `RateLimit` field value: `"name";r=<remaining>;t=<seconds to reset>` per policy.
pub fn rate_limit(items: &[Named<'_>]) -> String {
    list(items, |n| {
        let mut p = alloc::vec![("r", n.decision.remaining)];
        if n.policy.quota().is_some() {
            p.push(("t", secs_ceil(n.decision.reset_after)));
        }
        p
    })
}

/// `Retry-After` in whole seconds, rounded up and at least 1; `None` when allowed.
pub fn retry_after(decision: &Decision) -> Option<u64> {
    (!decision.allowed).then(|| secs_ceil(decision.retry_after).max(1))
}

/// The legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds from now).
pub fn legacy(decision: &Decision) -> [(&'static str, String); 3] {
    [
        ("X-RateLimit-Limit", decision.limit.to_string()),
        ("X-RateLimit-Remaining", decision.remaining.to_string()),
        (
            "X-RateLimit-Reset",
            secs_ceil(decision.reset_after).to_string(),
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
        out.push(("Retry-After", wait.to_string()));
        out.push(("Cache-Control", "no-store".to_string()));
    }
    if with_legacy {
        let each: Vec<Decision> = items.iter().map(|n| *n.decision).collect();
        let all = each.iter().all(|d| d.allowed);
        let binding = crate::stack::combine(&each, all);
        out.extend(legacy(&binding));
    }
    out
}

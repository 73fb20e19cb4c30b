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

/// One Integer parameter of an Item: its key (lowercase letters, a valid sf-key) and value.
type Param = Option<(&'static str, u64)>;

/// `v` in decimal.
fn decimal(v: u64) -> String {
    let mut out = String::new();
    push_decimal(&mut out, v);
    out
}

/// Appends `v` in decimal, digit by digit. Not `write!`: a server writes these integers on
/// every response, and the formatting machinery made `RateLimit` the largest of the tower
/// layer's own costs (PERF.md, "Measured reasons in the code").
fn push_decimal(out: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend(digits[start..].iter().map(|&d| d as char));
}

/// A List of one String Item per policy, each with its Integer parameters.
fn list(items: &[Named<'_>], params: fn(&Named<'_>) -> [Param; 2]) -> String {
    let mut out = String::with_capacity(32 * items.len());
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_string(&mut out, item.name);
        for (k, v) in params(item).into_iter().flatten() {
            out.push(';');
            out.push_str(k);
            out.push('=');
            push_decimal(&mut out, v.min(MAX_INTEGER));
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

/// Every field for a response to a request decided by these limits (one item per limit, in
/// stack order; one item for a single policy):
///
/// * `RateLimit-Policy` describes every policy;
/// * `RateLimit` the limit(s) that bind the decision ([`crate::stack::binding`]): when the
///   request was denied, every limit that denied; otherwise the one(s) with the least
///   remaining. Chosen by index, never by comparing numbers, so two limits with the same
///   quota are never confused;
/// * when any limit denied, `Retry-After` (the longest wait) and `Cache-Control: no-store`;
/// * the legacy fields of the combined decision ([`crate::stack::combine`]) when asked.
///
/// A stack of `10/s` and `fixed-window 10/min` whose minute window is spent names the
/// minute window, though both have a quota of 10:
///
/// ```
/// use tollgate::headers::{response_headers, Named};
/// use tollgate::stack::decide_all;
/// use tollgate::{Policy, NANOS_PER_SEC};
/// let (second, minute): (Policy, Policy) = ("10/s".parse().unwrap(), "fixed-window 10/min".parse().unwrap());
/// let (mut a, mut b) = (None, None);
/// for _ in 0..10 {
///     decide_all(&mut [(&second, &mut a), (&minute, &mut b)], 0, 1).unwrap();
/// }
/// let d = decide_all(&mut [(&second, &mut a), (&minute, &mut b)], NANOS_PER_SEC, 1).unwrap();
/// let items = [
///     Named { name: "api.1", policy: &second, decision: &d.each[0] },
///     Named { name: "api.2", policy: &minute, decision: &d.each[1] },
/// ];
/// let fields = response_headers(&items, false);
/// assert_eq!(fields[0], ("RateLimit-Policy", r#""api.1";q=10;w=1, "api.2";q=10;w=60"#.into()));
/// assert_eq!(fields[1], ("RateLimit", r#""api.2";r=0;t=59"#.into()));
/// assert_eq!(fields[2], ("Retry-After", "59".into()));
/// ```
pub fn response_headers(items: &[Named<'_>], with_legacy: bool) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(6);
    if items.is_empty() {
        return out;
    }
    out.push(("RateLimit-Policy", rate_limit_policy(items)));
    out.extend(decision_headers(items, with_legacy));
    out
}

/// The fields of [`response_headers`] that depend on the decision: all but
/// `RateLimit-Policy`, which depends on the limits and their names alone, so that a server
/// answering many requests under the same limits can write it once with
/// [`rate_limit_policy`] and send it with these (the tower layer does: writing it per
/// request was a fifth of the layer's own time, (PERF.md, "Measured reasons in the code")).
///
/// ```
/// use tollgate::headers::{decision_headers, response_headers, Named};
/// use tollgate::{decide, Policy};
/// let policy: Policy = "10/s".parse().unwrap();
/// let (decision, _) = decide(&policy, None, 0, 1).unwrap();
/// let items = [Named { name: "per-ip", policy: &policy, decision: &decision }];
/// assert_eq!(decision_headers(&items, false), response_headers(&items, false)[1..]);
/// ```
pub fn decision_headers(items: &[Named<'_>], with_legacy: bool) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(5);
    if items.is_empty() {
        return out;
    }
    let each = || items.iter().map(|n| *n.decision).collect::<Vec<Decision>>();
    // A single limit binds the decision itself. Not choosing among one spares the copies
    // that choosing makes, three allocations on every response of a single-limit policy
    // (PERF.md, "Measured reasons in the code").
    let rate_limit_value = if items.len() == 1 {
        rate_limit(items)
    } else {
        let binding: Vec<Named<'_>> = crate::stack::binding(&each())
            .into_iter()
            .map(|i| items[i])
            .collect();
        rate_limit(&binding)
    };
    out.push(("RateLimit", rate_limit_value));
    if let Some(wait) = longest_wait(items) {
        out.push(("Retry-After", decimal(wait)));
        out.push(("Cache-Control", String::from("no-store")));
    }
    if with_legacy {
        out.extend(legacy(&crate::stack::combine(&each())));
    }
    out
}

/// The longest `Retry-After` (whole seconds, at least 1) among the limits that denied: a
/// 429's `Retry-After`, its problem document's wait, a gRPC refusal's message. `None` when
/// none denied.
///
/// ```
/// use tollgate::headers::{longest_wait, violated, Named};
/// use tollgate::{decide, Policy};
/// let (minute, hour): (Policy, Policy) =
///     ("fixed-window 1/min".parse().unwrap(), "fixed-window 5/hour".parse().unwrap());
/// let (_, s) = decide(&minute, None, 0, 1).unwrap();
/// let (denied, _) = decide(&minute, s, 0, 1).unwrap();
/// let (admitted, _) = decide(&hour, None, 0, 1).unwrap();
/// let items = [
///     Named { name: "api.1", policy: &minute, decision: &denied },
///     Named { name: "api.2", policy: &hour, decision: &admitted },
/// ];
/// assert_eq!(longest_wait(&items), Some(60));
/// assert_eq!(violated(&items), ["api.1"]);
/// assert_eq!(longest_wait(&items[1..]), None);
/// ```
pub fn longest_wait(items: &[Named<'_>]) -> Option<u64> {
    items.iter().filter_map(|n| retry_after(n.decision)).max()
}

/// The names of the limits that denied, in stack order: a 429's `violated-policies`, a
/// shadow denial's report. Empty when every limit admitted.
pub fn violated<'a>(items: &[Named<'a>]) -> Vec<&'a str> {
    items
        .iter()
        .filter(|n| !n.decision.allowed)
        .map(|n| n.name)
        .collect()
}

/// The name a response gives limit `index` of an entry named `entry` that has `count`
/// limits: the entry's name for a single limit, `<entry>.<index + 1>` for a stack's (the
/// first is `.1`). A fair share's tenant window is [`tenant_name`].
///
/// ```
/// use tollgate::headers::{limit_name, tenant_name};
/// assert_eq!(limit_name("per-ip", 0, 1), "per-ip");
/// assert_eq!(limit_name("api", 1, 2), "api.2");
/// assert_eq!(tenant_name("api"), "api.tenant");
/// ```
pub fn limit_name(entry: &str, index: usize, count: usize) -> String {
    let mut name = String::from(entry);
    if count > 1 {
        name.push('.');
        name.push_str(&decimal(index as u64 + 1));
    }
    name
}

/// The name a response gives a fair share's tenant window: `<entry>.tenant`.
pub fn tenant_name(entry: &str) -> String {
    let mut name = String::from(entry);
    name.push_str(".tenant");
    name
}

/// The problem type of a 429 (draft-ietf-httpapi-ratelimit-headers-11, section 8: the
/// IANA "HTTP Problem Types" registry's `quota-exceeded`).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The body of a 429, an `application/problem+json` document (RFC 9457) of type
/// [`QUOTA_EXCEEDED`]: `title`, `status` 429, `detail` with the wait in whole seconds (the
/// `Retry-After` value), and `violated-policies`, the names of the limits that denied.
///
/// ```
/// use tollgate::headers::quota_exceeded;
/// assert_eq!(
///     quota_exceeded(&["per-ip"], 3),
///     concat!(
///         r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","#,
///         r#""title":"Request cannot be satisfied as assigned quota has been exceeded","#,
///         r#""status":429,"detail":"Rate limit exceeded; retry in 3 s.","#,
///         r#""violated-policies":["per-ip"]}"#
///     )
/// );
/// ```
pub fn quota_exceeded(violated: &[&str], retry_after_secs: u64) -> String {
    let mut out = String::from(r#"{"type":""#);
    out.push_str(QUOTA_EXCEEDED);
    out.push_str(
        r#"","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit exceeded; retry in "#,
    );
    out.push_str(&decimal(retry_after_secs));
    out.push_str(r#" s.","violated-policies":["#);
    for (i, name) in violated.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, name);
    }
    out.push_str("]}");
    out
}

/// [`quota_exceeded`] for a request decided by these limits: the names of the limits that
/// denied and the longest wait. `None` when every limit admitted.
pub fn problem(items: &[Named<'_>]) -> Option<String> {
    let wait = longest_wait(items)?;
    Some(quota_exceeded(&violated(items), wait))
}

/// Appends `text` as a JSON string (RFC 8259): `"` and `\` escaped, control characters as
/// `\u00XX`.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(c as usize) >> 4] as char);
                out.push(HEX[(c as usize) & 15] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

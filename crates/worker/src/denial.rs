//! A denial's answer in the isolate: the 429 (rate-limit fields, `Retry-After`,
//! `Cache-Control: no-store`, the problem body) and the deny cache, which answers a key
//! known to be denied without an object round trip, reusing its rendered 429.

use std::cell::RefCell;
use std::collections::HashMap;

use tollgate::Decision;
use worker::{Headers, Response};

use crate::answer::{self, DenyCache};
use crate::config::Config;
use crate::http::set_all;
use crate::plan::LimitName;
use crate::protocol::Limit;

thread_local! {
    static DENY: RefCell<DenyCache> = RefCell::new(DenyCache::default());
    static RENDERED: RefCell<HashMap<String, Rendered>> = RefCell::new(HashMap::new());
}

/// The cached denial of `cache_key` at `now_ms`, if any (see [`DenyCache::get`]).
pub fn cached(cache_key: &str, now_ms: u64) -> Option<(Decision, Vec<Decision>)> {
    DENY.with(|d| d.borrow_mut().get(cache_key, now_ms))
}

/// Remembers a denial the object made at `at_ms`.
pub fn remember(cache_key: String, at_ms: u64, decision: &Decision, each: Vec<Decision>) {
    DENY.with(|d| d.borrow_mut().put(cache_key, at_ms, decision, each));
}

/// Drops the cached denials of these slots (an admin reset).
pub fn forget(limits: &[Limit]) {
    DENY.with(|d| {
        let mut d = d.borrow_mut();
        for l in limits {
            d.forget(&l.slot);
        }
    });
}

/// Cached denials held.
pub fn entries() -> usize {
    DENY.with(|d| d.borrow().len())
}

/// The 429 of a denial the object just made.
pub fn too_many(cfg: &Config, names: &[LimitName], each: &[Decision]) -> worker::Result<Response> {
    let fields = answer::headers(names, each, cfg.settings.legacy_headers);
    let (body, headers) = render(&fields, names, each, false)?;
    Ok(respond(body, headers))
}

fn respond(body: Vec<u8>, headers: Headers) -> Response {
    worker::ResponseBuilder::new()
        .with_status(429)
        .with_headers(headers)
        .fixed(body)
}

/// The body and every header of a 429 with these rate-limit `fields` (which hold the
/// denial's `Retry-After`, the longest wait of the limits that denied, and `Cache-Control:
/// no-store`: the core's, as the body's wait is).
fn render(
    fields: &[(&'static str, String)],
    names: &[LimitName],
    each: &[Decision],
    from_cache: bool,
) -> worker::Result<(Vec<u8>, Headers)> {
    let body = answer::quota_exceeded(names, each)
        .ok_or_else(|| worker::Error::RustError("a 429 of decisions that all admitted".into()))?
        .into_bytes();
    let h = Headers::new();
    h.set("Content-Type", tollgate_http::problem::CONTENT_TYPE)?;
    set_all(&h, fields)?;
    if from_cache {
        h.set("Tollgate-Deny-Cache", "hit")?;
    }
    Ok((body, h))
}

/// A cached denial's 429 as last rendered, reused while it would render the same (its
/// fields change about once a second, as the wait counts down): a deny-cache hit then
/// formats no body and sets no header one by one.
struct Rendered {
    /// The rate-limit fields it was rendered with (the wait, in `Retry-After`, among them).
    fields: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// Every header of the answer. The runtime copies them into each response.
    headers: Headers,
}

/// Rendered 429s kept before all are dropped (they are rebuilt on the next hit).
const RENDERED_MAX: usize = 4096;

/// The 429 of a deny-cache hit: the same answer as [`too_many`] (with
/// `Tollgate-Deny-Cache: hit`), built from the last rendering of this cache entry when its
/// fields are unchanged.
pub fn cached_too_many(
    cfg: &Config,
    names: &[LimitName],
    each: &[Decision],
    cache_key: String,
) -> worker::Result<Response> {
    let fields = answer::headers(names, each, cfg.settings.legacy_headers);
    let reuse = RENDERED.with(|r| {
        r.borrow()
            .get(&cache_key)
            .filter(|x| x.fields == fields)
            .map(|x| (x.body.clone(), x.headers.clone()))
    });
    let (body, headers) = match reuse {
        Some(hit) => hit,
        None => {
            let (body, headers) = render(&fields, names, each, true)?;
            RENDERED.with(|r| {
                let mut r = r.borrow_mut();
                if r.len() >= RENDERED_MAX {
                    r.clear();
                }
                r.insert(
                    cache_key,
                    Rendered {
                        fields,
                        body: body.clone(),
                        headers: headers.clone(),
                    },
                );
            });
            (body, headers)
        }
    };
    Ok(respond(body, headers))
}

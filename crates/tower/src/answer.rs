//! After the decision: what the layer does with a request it decided (or could not), and
//! its own answers (a 429, a 400, a 503) as problem documents.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use serde_json::json;
use tollgate::headers::{
    decision_headers, longest_wait, problem as quota_problem, violated, Named,
};
use tollgate_http::client::HeaderError;
use tollgate_http::fields::{self as own_fields, Degraded};

use crate::body::{ResponseBody, Slot};
use crate::fields::{add_fields, Fields};
use crate::grpc;
use crate::info::RateLimitInfo;
use crate::key::KeyError;
use crate::settings::OnError;
use crate::shared::Shared;
use crate::store::{Checked, Store};
use crate::target::{Checking, Refusal};

/// Why a store failed, in `Tollgate-Degraded`.
const STORE_ERROR: &str = "store-error";

/// What the layer does after the decision.
pub(crate) enum Answer<ReqB, B> {
    /// Passes the request on (the decision in its extensions), adds these header fields to
    /// the response, and holds its concurrency slots (if any) until the response ends.
    Forward(Request<ReqB>, Fields, Slot),
    /// Answers itself: a 429, or a 503 when the store failed and the layer fails closed.
    Respond(Response<ResponseBody<B>>),
}

/// The layer's answer to a decision (or to the store's failure).
///
/// For a gRPC call (`grpc`), a 429 also carries its message for `grpc-message` (written only
/// then: it costs allocations on the path that answers floods).
pub(crate) fn answer<S: Store, ReqB, B>(
    shared: &Arc<Shared<S>>,
    target: Checking<ReqB>,
    result: Result<Checked, S::Error>,
    grpc: bool,
) -> Answer<ReqB, B> {
    let settings = &shared.settings;
    let entry = &shared.entries[target.entry];
    // A policy of plans reports the request's plan: its limits, names and field.
    #[cfg(feature = "metrics")]
    let metrics = &shared.routes[target.route].metrics;
    let Checking {
        entry: entry_index,
        route: target_route,
        key,
        cost,
        shadow,
        mut parts,
        body,
        plan: plan_ref,
        ..
    } = target;
    let plan = plan_ref
        .as_ref()
        .and_then(|r| entry.plans.as_ref().map(|m| r.info(m)));
    match result {
        Ok(checked) => {
            #[cfg(feature = "metrics")]
            metrics.decision(&checked.decision, shadow, checked.source);
            let names = match plan {
                Some(p) => Arc::clone(&p.names),
                None if checked.each.len() > entry.names.len() => Arc::clone(&entry.with_tenant),
                None => Arc::clone(&entry.names),
            };
            let limits = plan.map_or(entry.store.limits(), |p| &p.limits);
            let mut named = names
                .iter()
                .zip(checked.each.iter())
                .zip(limits.layers().iter().chain(limits.tenant()))
                .map(|((name, decision), policy)| Named {
                    name,
                    policy,
                    decision,
                });
            // A single limit's item stays on the stack: one allocation less per request.
            let one: [Named<'_>; 1];
            let many: Vec<Named<'_>>;
            let items: &[Named<'_>] = match named.next() {
                Some(first) if checked.each.len() == 1 => {
                    one = [first];
                    &one
                }
                first => {
                    many = first.into_iter().chain(named).collect();
                    &many
                }
            };
            let allowed = checked.decision.allowed;
            if shadow {
                let note = if allowed {
                    own_fields::SHADOW_ALLOWED.to_string()
                } else {
                    own_fields::shadow_denied(&violated(items))
                };
                if let Ok(v) = HeaderValue::from_str(&note) {
                    parts.headers.insert(SHADOW, v);
                }
            }
            let fields = if shadow {
                Fields::default()
            } else {
                let policy = match plan {
                    Some(p) => &p.policy_field,
                    None => &entry.policy_fields[usize::from(names.len() > entry.names.len())],
                };
                Fields {
                    policy: Some(policy.clone()),
                    decided: decision_headers(items, settings.legacy),
                }
            };
            let body_429 = (!allowed && !shadow)
                .then(|| quota_problem(items))
                .flatten();
            let message = (body_429.is_some() && grpc).then(|| quota_message(items));
            if let Some(body) = body_429 {
                let mut resp = full(StatusCode::TOO_MANY_REQUESTS, body, message);
                add_fields(&mut resp, fields);
                return Answer::Respond(resp);
            }
            // Admitted (enforced or in shadow mode), so charged: a concurrency limit's
            // slots are taken until the response ends.
            let slot = if allowed && plan.map_or(entry.holds_slots, |p| p.holds_slots) {
                #[cfg(feature = "metrics")]
                metrics.slots_taken(cost);
                shared.slot(entry_index, target_route, key, cost)
            } else {
                Slot::none()
            };
            parts.extensions.insert(RateLimitInfo {
                policy: Arc::clone(&entry.name),
                decision: Some(checked.decision),
                each: checked.each,
                names,
                source: Some(checked.source),
                shadow,
            });
            Answer::Forward(Request::from_parts(parts, body), fields, slot)
        }
        Err(error) => {
            #[cfg(feature = "metrics")]
            metrics.failure(settings.on_error, entry.store.failure(&error));
            match settings.on_error {
                OnError::Open => {
                    if let Ok(v) = HeaderValue::try_from(Degraded::FailOpen.value(STORE_ERROR)) {
                        parts.headers.insert(DEGRADED, v);
                    }
                    parts.extensions.insert(RateLimitInfo {
                        policy: Arc::clone(&entry.name),
                        decision: None,
                        each: Vec::new(),
                        names: Arc::clone(&entry.names),
                        source: None,
                        shadow,
                    });
                    Answer::Forward(
                        Request::from_parts(parts, body),
                        Fields::default(),
                        Slot::none(),
                    )
                }
                OnError::Closed { retry_after_secs } => {
                    let mut resp = problem(
                        503,
                        "store-unavailable",
                        &format!("the rate limiter could not decide ({error}); retry later"),
                        json!({}),
                    );
                    let h = resp.headers_mut();
                    h.insert(http::header::RETRY_AFTER, retry_after_secs.into());
                    if let Ok(v) = HeaderValue::try_from(Degraded::FailClosed.value(STORE_ERROR)) {
                        h.insert(DEGRADED, v);
                    }
                    Answer::Respond(resp)
                }
            }
        }
    }
}

/// `Tollgate-Shadow` and `Tollgate-Degraded` ([`tollgate_http::fields`]), as header names.
const SHADOW: HeaderName = HeaderName::from_static("tollgate-shadow");
const DEGRADED: HeaderName = HeaderName::from_static("tollgate-degraded");

/// A 429's message for a gRPC client: the problem document's `detail` and the limits that
/// denied (the core's longest wait and violated limits, as in the problem document).
fn quota_message(items: &[Named<'_>]) -> String {
    format!(
        "Rate limit exceeded; retry in {} s. Violated policies: {}",
        longest_wait(items).unwrap_or(1),
        violated(items).join(", ")
    )
}

/// The 400 of a request refused before the decision.
pub(crate) fn refused<B>(refusal: Refusal) -> Response<ResponseBody<B>> {
    match refusal {
        Refusal::Path(e) => problem(400, "invalid-path", &e.to_string(), json!({})),
        Refusal::Key(KeyError::Header(e)) => header_problem(&e),
        Refusal::Key(KeyError::OverBound(e)) => {
            let detail = e.to_string();
            full(StatusCode::BAD_REQUEST, e.problem(), Some(detail))
        }
        Refusal::Key(KeyError::Token(e)) => {
            let mut resp = full(StatusCode::UNAUTHORIZED, e.problem(), Some(e.to_string()));
            resp.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static(tollgate_http::jwt::JwtError::WWW_AUTHENTICATE),
            );
            resp
        }
        Refusal::Key(KeyError::Missing) => problem(
            400,
            "missing-key",
            "the request carries no key for this route's rate limit",
            json!({}),
        ),
    }
}

fn header_problem<B>(e: &HeaderError) -> Response<ResponseBody<B>> {
    problem(
        400,
        "invalid-header",
        &e.to_string(),
        json!({ "header": e.header() }),
    )
}

/// One of the layer's own answers: a problem document, and its message for a gRPC client
/// (when there may be one).
fn full<B>(status: StatusCode, body: String, message: Option<String>) -> Response<ResponseBody<B>> {
    let mut resp = Response::new(ResponseBody::own(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(tollgate_http::problem::CONTENT_TYPE),
    );
    if let Some(message) = message {
        resp.extensions_mut().insert(grpc::Message(message));
    }
    resp
}

fn problem<B>(
    status: u16,
    kind: &str,
    detail: &str,
    extra: serde_json::Value,
) -> Response<ResponseBody<B>> {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    full(
        code,
        tollgate_http::problem::problem(status, kind, detail, extra),
        // (A 400 or a 503 is rare: not worth knowing whether the call is gRPC here.)
        Some(detail.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_field_names_are_the_shared_ones() {
        assert!(SHADOW.as_str().eq_ignore_ascii_case(own_fields::SHADOW));
        assert!(DEGRADED.as_str().eq_ignore_ascii_case(own_fields::DEGRADED));
    }
}

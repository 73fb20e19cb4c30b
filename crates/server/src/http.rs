//! The HTTP side: `/json` (envoyproxy/ratelimit's JSON check: a `RateLimitRequest` in the
//! proto3 JSON mapping, answered with the `RateLimitResponse` in the same mapping, 200 when
//! OK and 429 when over the limit), `/healthcheck` and `/metrics`.
//!
//! `/json` reads a body of at most [`JSON_MAX_BODY`] bytes (413 above), and refuses
//! unknown fields by name, as envoyproxy/ratelimit's `protojson.Unmarshal` does: a
//! misspelt `"vaule"` is a 400 naming it, not an entry with an empty value that matches
//! another rule.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{json, Map, Value};

use crate::bounds::{self, JSON_MAX_BODY};
use crate::service::{RequestError, Service};
use crate::store::Store;

/// What the HTTP handlers share.
pub struct HttpState<S> {
    /// The service.
    pub service: Arc<Service<S>>,
    /// Whether the server is healthy (false once it is shutting down).
    pub healthy: Arc<AtomicBool>,
}

impl<S> Clone for HttpState<S> {
    fn clone(&self) -> Self {
        HttpState {
            service: self.service.clone(),
            healthy: self.healthy.clone(),
        }
    }
}

/// The HTTP routes.
pub fn router<S: Store>(state: HttpState<S>) -> Router {
    Router::new()
        .route(
            "/json",
            post(check::<S>).layer(DefaultBodyLimit::max(JSON_MAX_BODY)),
        )
        .route("/healthcheck", get(health::<S>))
        .route("/metrics", get(metrics::<S>))
        .with_state(state)
}

/// 200 `OK`; 500 once shutting down, or while the shared store is down when health
/// follows it (`--unhealthy-when-store-down`, [`crate::metrics::StoreState::serving`]).
async fn health<S: Store>(State(s): State<HttpState<S>>) -> Response {
    if !s.healthy.load(Ordering::Relaxed) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "shutting down").into_response();
    }
    match s.service.metrics.store() {
        Some(store) if !store.serving() => {
            (StatusCode::INTERNAL_SERVER_ERROR, "store down").into_response()
        }
        _ => (StatusCode::OK, "OK").into_response(),
    }
}

async fn metrics<S: Store>(State(s): State<HttpState<S>>) -> Response {
    let mut text = s.service.metrics.render();
    if let Some(memory) = s.service.store().memory_stats() {
        crate::metrics::render_memory(&memory, &mut text);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message).into_response()
}

async fn check<S: Store>(
    State(s): State<HttpState<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let m = format!("body: over {JSON_MAX_BODY} bytes (a request at every bound fits)");
            return (StatusCode::PAYLOAD_TOO_LARGE, m).into_response();
        }
        Err(e) => return (e.status(), format!("body: {}", e.body_text())).into_response(),
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(format!("body: not JSON: {e}")),
    };
    let request = match request_from_json(&value) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    match s.service.should_rate_limit(&request).await {
        Ok(response) => {
            let status = if response.overall_code == Code::OverLimit as i32 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, axum::Json(response_to_json(&response))).into_response()
        }
        Err(RequestError::Invalid(m)) => bad_request(m),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A field by its proto3 JSON name (lowerCamelCase) or its proto name (snake_case), as
/// protobuf's JSON parsers accept both.
fn field<'a>(m: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    m.get(camel)
        .or_else(|| m.get(snake))
        .filter(|v| !v.is_null())
}

/// `Err` naming the first field of `m` (at `path`) that is not one of `known`, as proto3
/// JSON parsers refuse unknown fields unless told to ignore them.
fn only(m: &Map<String, Value>, path: &str, message: &str, known: &[&str]) -> Result<(), String> {
    match m.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => {
            let at = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            Err(format!(
                "{at}: unknown field of {message} (known: {})",
                known.join(", ")
            ))
        }
    }
}

fn string(m: &Map<String, Value>, name: &str, path: &str) -> Result<String, String> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{path}.{name}: expected a string")),
    }
}

/// A proto3 JSON integer: a number or a decimal string.
fn uint(v: &Value, path: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("{path}: expected a non-negative integer"))
}

/// Reads a `RateLimitRequest` in the proto3 JSON mapping.
pub fn request_from_json(v: &Value) -> Result<RateLimitRequest, String> {
    let Value::Object(m) = v else {
        return Err("body: expected a JSON object".into());
    };
    only(
        m,
        "",
        "a RateLimitRequest",
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
    )?;
    let mut request = RateLimitRequest {
        domain: string(m, "domain", "body")?,
        ..Default::default()
    };
    if let Some(h) = field(m, "hitsAddend", "hits_addend") {
        request.hits_addend = u32::try_from(uint(h, "hitsAddend")?)
            .map_err(|_| "hitsAddend: above 4294967295".to_string())?;
    }
    let descriptors = match m.get("descriptors") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(_) => return Err("descriptors: expected a list".into()),
    };
    // The counts are checked before anything is built in proportion to them.
    bounds::descriptors(descriptors.len())?;
    request.descriptors.reserve_exact(descriptors.len());
    for (i, d) in descriptors.iter().enumerate() {
        request.descriptors.push(descriptor_from_json(i, d)?);
    }
    Ok(request)
}

/// Reads descriptor `i` of a request in the proto3 JSON mapping.
fn descriptor_from_json(i: usize, d: &Value) -> Result<RateLimitDescriptor, String> {
    let path = format!("descriptors[{i}]");
    let Value::Object(dm) = d else {
        return Err(format!("{path}: expected an object"));
    };
    only(
        dm,
        &path,
        "a RateLimitDescriptor",
        &[
            "entries",
            "limit",
            "hitsAddend",
            "hits_addend",
            "isNegativeHits",
            "is_negative_hits",
        ],
    )?;
    let mut descriptor = RateLimitDescriptor::default();
    let entries = match dm.get("entries") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(_) => return Err(format!("{path}.entries: expected a list")),
    };
    bounds::entries(i, entries.len())?;
    descriptor.entries.reserve_exact(entries.len());
    for (j, e) in entries.iter().enumerate() {
        let epath = format!("{path}.entries[{j}]");
        let Value::Object(em) = e else {
            return Err(format!("{epath}: expected an object"));
        };
        only(em, &epath, "an Entry", &["key", "value"])?;
        descriptor.entries.push(Entry {
            key: string(em, "key", &epath)?,
            value: string(em, "value", &epath)?,
        });
    }
    if let Some(h) = field(dm, "hitsAddend", "hits_addend") {
        descriptor.hits_addend = Some(UInt64Value {
            value: uint(h, &format!("{path}.hitsAddend"))?,
        });
    }
    if let Some(n) = field(dm, "isNegativeHits", "is_negative_hits") {
        descriptor.is_negative_hits = n
            .as_bool()
            .ok_or_else(|| format!("{path}.isNegativeHits: expected true or false"))?;
    }
    if let Some(l) = field(dm, "limit", "limit") {
        descriptor.limit = Some(override_from_json(&path, l)?);
    }
    Ok(descriptor)
}

/// Reads the `limit` of the descriptor at `path`.
fn override_from_json(path: &str, l: &Value) -> Result<RateLimitOverride, String> {
    let Value::Object(lm) = l else {
        return Err(format!("{path}.limit: expected an object"));
    };
    only(
        lm,
        &format!("{path}.limit"),
        "a RateLimitOverride",
        &["requestsPerUnit", "requests_per_unit", "unit"],
    )?;
    let requests = match field(lm, "requestsPerUnit", "requests_per_unit") {
        Some(r) => u32::try_from(uint(r, &format!("{path}.limit.requestsPerUnit"))?)
            .map_err(|_| format!("{path}.limit.requestsPerUnit: above 4294967295"))?,
        None => 0,
    };
    let unit = match lm.get("unit") {
        Some(Value::String(u)) => PbUnit::from_str_name(u)
            .ok_or_else(|| format!("{path}.limit.unit: unknown unit '{u}'"))?
            as i32,
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0) as i32,
        _ => 0,
    };
    Ok(RateLimitOverride {
        requests_per_unit: requests,
        unit,
    })
}

/// A `RateLimitResponse` in the proto3 JSON mapping (default values left out, as
/// envoyproxy/ratelimit's `/json` writes them).
pub fn response_to_json(r: &RateLimitResponse) -> Value {
    let code = |c: i32| Code::try_from(c).unwrap_or(Code::Unknown).as_str_name();
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code(r.overall_code)));
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut m = Map::new();
            m.insert("code".into(), json!(code(s.code)));
            if let Some(l) = &s.current_limit {
                let mut lm = Map::new();
                if !l.name.is_empty() {
                    lm.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lm.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                let unit = PbUnit::try_from(l.unit).unwrap_or(PbUnit::Unknown);
                if unit != PbUnit::Unknown {
                    lm.insert("unit".into(), json!(unit.as_str_name()));
                }
                m.insert("currentLimit".into(), Value::Object(lm));
            }
            if s.limit_remaining != 0 {
                m.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                let text = if d.nanos == 0 {
                    format!("{}s", d.seconds)
                } else {
                    format!("{}.{:09}s", d.seconds, d.nanos)
                };
                m.insert("durationUntilReset".into(), json!(text));
            }
            Value::Object(m)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

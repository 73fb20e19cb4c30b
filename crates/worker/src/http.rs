//! The HTTP side of the limiter's own answers (JSON, problem documents) and of the APIs'
//! requests (the bearer check, bounded JSON bodies).

use serde::Deserialize;
use serde_json::json;
use worker::{Env, Headers, Request, Response};

use crate::answer;
use crate::env::string_binding;

/// The largest JSON body the check and admin APIs read (a larger one is a 400
/// `bad-request`): room for the bounded fields (a key and a tenant of
/// [`tollgate::store::bounds::MAX_KEY_BYTES`] each, a policy name) many times over.
const MAX_BODY: usize = 16 * 1024;

/// A response with `body` of `content_type`.
pub fn json_response(status: u16, content_type: &str, body: String) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("Content-Type", content_type)?;
    Ok(worker::ResponseBuilder::new()
        .with_status(status)
        .with_headers(headers)
        .fixed(body.into_bytes()))
}

/// `200` with a JSON document.
pub fn json_ok(body: &serde_json::Value) -> worker::Result<Response> {
    json_response(200, "application/json", body.to_string())
}

/// A problem document (RFC 9457) for errors of the limiter itself.
pub fn problem(
    status: u16,
    kind: &str,
    detail: &str,
    extra: serde_json::Value,
) -> worker::Result<Response> {
    let mut resp = json_response(
        status,
        "application/problem+json",
        answer::problem(status, kind, detail, extra),
    )?;
    resp.headers_mut().set("Cache-Control", "no-store")?;
    Ok(resp)
}

/// A body field over one of the core's bounds: the shared 400 (`over-bound`, naming the
/// field, its size and the bound; [`tollgate_http::bounds`]).
pub fn over_bound(e: &tollgate_http::bounds::FieldOverBound) -> worker::Result<Response> {
    let mut resp = json_response(400, tollgate_http::problem::CONTENT_TYPE, e.problem())?;
    resp.headers_mut().set("Cache-Control", "no-store")?;
    Ok(resp)
}

/// An API's error: a problem document with no member beyond the kind (`error`).
pub fn api_error(status: u16, code: &str, detail: &str) -> worker::Result<Response> {
    problem(status, code, detail, json!({}))
}

/// An API's `503 coordinator-unavailable`, with `Retry-After: 1`.
pub fn unavailable(detail: &str) -> worker::Result<Response> {
    let mut resp = api_error(503, "coordinator-unavailable", detail)?;
    resp.headers_mut().set("Retry-After", "1")?;
    Ok(resp)
}

/// Sets every field.
pub fn set_all(headers: &Headers, fields: &[(&'static str, String)]) -> worker::Result<()> {
    for (k, v) in fields {
        headers.set(k, v)?;
    }
    Ok(())
}

/// `None` when the request carries the bearer secret `secret_name`; else the answer: `403`
/// when the secret is not set (the API is off), `401` when it is missing or wrong.
pub fn authorise(req: &Request, env: &Env, secret_name: &str) -> Option<worker::Result<Response>> {
    let Some(secret) = string_binding(env, secret_name) else {
        return Some(problem(
            403,
            "api-disabled",
            &format!("set the {secret_name} secret to enable this API"),
            json!({}),
        ));
    };
    let header = req.headers().get("authorization").ok().flatten();
    if crate::plan::bearer_ok(header.as_deref(), &secret) {
        return None;
    }
    let mut resp = problem(
        401,
        "unauthorized",
        "Authorization: Bearer <secret> is missing or wrong",
        json!({}),
    );
    if let Ok(r) = resp.as_mut() {
        let _ = r.headers_mut().set("WWW-Authenticate", "Bearer");
    }
    Some(resp)
}

/// The request's JSON body, at most [`MAX_BODY`] bytes.
pub async fn read_json<T: for<'de> Deserialize<'de>>(req: &mut Request) -> Result<T, String> {
    let bytes = req.bytes().await.map_err(|e| e.to_string())?;
    if bytes.len() > MAX_BODY {
        return Err(format!("body is {} bytes; at most {MAX_BODY}", bytes.len()));
    }
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

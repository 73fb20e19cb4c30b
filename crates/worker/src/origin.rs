//! Where allowed requests go: the `ORIGIN` var (a base URL), or, when it is unset, a tiny
//! built-in demo origin.

use serde_json::json;
use worker::{Date, Env, Fetch, Headers, Method, Request, RequestInit, Response};

use crate::env::string_binding;

/// Forwards `req` to the origin, unchanged (method, headers, body) but for its path, which
/// is `path` (the normalised path the route was matched on), and adds `fields` to the
/// origin's response.
pub async fn forward(
    mut req: Request,
    env: &Env,
    path: &str,
    fields: &[(&'static str, String)],
) -> worker::Result<Response> {
    match string_binding(env, "ORIGIN") {
        Some(base) => {
            let url = req.url()?;
            let mut target = format!("{}{}", base.trim_end_matches('/'), path);
            if let Some(q) = url.query() {
                target.push('?');
                target.push_str(q);
            }
            let method = req.method();
            let mut init = RequestInit::new();
            init.with_method(method.clone())
                .with_headers(req.headers().clone());
            if !matches!(method, Method::Get | Method::Head) {
                let body = req.bytes().await?;
                init.with_body(Some(js_sys::Uint8Array::from(body.as_slice()).into()));
            }
            let resp = Fetch::Request(Request::new_with_init(&target, &init)?)
                .send()
                .await?;
            if fields.is_empty() {
                return Ok(resp);
            }
            // A fetched response's headers are immutable: copy them.
            let headers = Headers::new();
            for (k, v) in resp.headers().entries() {
                headers.append(&k, &v)?;
            }
            for (k, v) in fields {
                headers.set(k, v)?;
            }
            Ok(resp.with_headers(headers))
        }
        None => demo(req, path, fields),
    }
}

/// The demo origin: `/api/*` echoes the request as JSON, `/health` answers `ok`,
/// `/csp-report` accepts reports; anything else is 404. `fields` are added to its answer (a
/// response built here has mutable headers: no copy).
fn demo(req: Request, path: &str, fields: &[(&'static str, String)]) -> worker::Result<Response> {
    let mut resp = demo_answer(req, path)?;
    let headers = resp.headers_mut();
    for (k, v) in fields {
        headers.set(k, v)?;
    }
    Ok(resp)
}

fn demo_answer(req: Request, path: &str) -> worker::Result<Response> {
    let headers = Headers::new();
    if path == "/health" {
        return Response::ok("ok");
    }
    if path == "/csp-report" {
        return Ok(Response::empty()?.with_status(204));
    }
    let (status, body) = if path.starts_with("/api/") || path.starts_with("/bench/") {
        (
            200,
            json!({
                "origin": "tollgate demo origin",
                "method": req.method().to_string(),
                "path": path,
                "time": Date::now().as_millis(),
            }),
        )
    } else {
        (
            404,
            json!({"origin": "tollgate demo origin", "error": "not found", "path": path}),
        )
    };
    headers.set("Content-Type", "application/json")?;
    Ok(Response::ok(body.to_string())?
        .with_status(status)
        .with_headers(headers))
}

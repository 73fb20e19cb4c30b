//! Problem documents (RFC 9457, `application/problem+json`) for the answers that are not a
//! 429: a refused path or header (400), a limiter that could not decide (503). The 429's
//! own body is the core's `tollgate::headers::quota_exceeded`.

use serde_json::{json, Value};

/// The media type of every problem document.
pub const CONTENT_TYPE: &str = "application/problem+json";

/// The `type` of every problem document here: RFC 9457's `about:blank` (section 4.2.1: the
/// problem has no semantics beyond its status code). tollgate has no public home to name its
/// own problem types by URI, and a made-up URI would be a dead link. So, as section 4.2.1
/// asks, the `title` is the status code's phrase, and the kind (`invalid-header`,
/// `coordinator-unavailable`, ...) is the extension member `error`, which a client can
/// match on. (The 429 has a registered type: the core's `tollgate::headers::QUOTA_EXCEEDED`.)
pub const TYPE: &str = "about:blank";

/// A problem document: `type` [`TYPE`] (`about:blank`), `title` the status phrase
/// ([`status_phrase`]), `status`, `detail`, `error` the kind, and the members of `extra` (an
/// object; anything else is ignored).
///
/// ```
/// use serde_json::json;
/// let body = tollgate_http::problem::problem(400, "invalid-header", "bad", json!({"header": "x-api-key"}));
/// let v: serde_json::Value = serde_json::from_str(&body).unwrap();
/// assert_eq!(v["type"], "about:blank");
/// assert_eq!(v["title"], "Bad Request");
/// assert_eq!(v["error"], "invalid-header");
/// assert_eq!(v["status"], 400);
/// assert_eq!(v["header"], "x-api-key");
/// ```
pub fn problem(status: u16, kind: &str, detail: &str, extra: Value) -> String {
    let mut v = json!({
        "type": TYPE,
        "title": status_phrase(status),
        "status": status,
        "detail": detail,
        "error": kind,
    });
    if let (Some(obj), Value::Object(more)) = (v.as_object_mut(), extra) {
        obj.extend(more);
    }
    v.to_string()
}

/// The reason phrase RFC 9110 (section 15) gives a status code, for the codes a limiter
/// answers with itself; `"Error"` for any other (never reached by tollgate's own answers).
pub fn status_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

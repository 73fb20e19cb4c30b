//! Problem documents (RFC 9457, `application/problem+json`) for the answers that are not a
//! 429: a refused path or header (400), a limiter that could not decide (503). The 429's
//! own body is the core's [`tollgate::headers::quota_exceeded`].

use serde_json::{json, Value};

/// The media type of every problem document.
pub const CONTENT_TYPE: &str = "application/problem+json";

/// A problem document: `type` `https://tollgate.invalid/problems/<kind>`, `title` the kind,
/// `status`, `detail`, and the members of `extra` (an object; anything else is ignored).
///
/// ```
/// use serde_json::json;
/// let body = tollgate_http::problem::problem(400, "invalid-header", "bad", json!({"header": "x-api-key"}));
/// let v: serde_json::Value = serde_json::from_str(&body).unwrap();
/// assert_eq!(v["status"], 400);
/// assert_eq!(v["header"], "x-api-key");
/// ```
pub fn problem(status: u16, kind: &str, detail: &str, extra: Value) -> String {
    let mut v = json!({
        "type": format!("https://tollgate.invalid/problems/{kind}"),
        "title": kind,
        "status": status,
        "detail": detail,
    });
    if let (Some(obj), Value::Object(more)) = (v.as_object_mut(), extra) {
        obj.extend(more);
    }
    v.to_string()
}

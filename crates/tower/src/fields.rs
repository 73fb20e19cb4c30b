//! The header fields the layer adds to a limited response: `RateLimit-Policy` (written once
//! per policy) and the core's fields of the decision.

use http::header::{HeaderName, HeaderValue};
use http::Response;

/// The header fields the layer adds to a response: `RateLimit-Policy` (written once per
/// policy) and the core's fields of the decision, as the core gives them (typed when added,
/// not collected again: one allocation less per request).
#[derive(Default)]
pub(crate) struct Fields {
    pub(crate) policy: Option<HeaderValue>,
    pub(crate) decided: Vec<(&'static str, String)>,
}

/// Looked up by a `HeaderName`, not by its text, which `http` would parse per request.
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

fn header_name(name: &'static str) -> Option<HeaderName> {
    Some(match name {
        "RateLimit-Policy" => RATELIMIT_POLICY,
        "RateLimit" => RATELIMIT,
        "Retry-After" => http::header::RETRY_AFTER,
        "Cache-Control" => http::header::CACHE_CONTROL,
        other => HeaderName::from_bytes(other.as_bytes()).ok()?,
    })
}

/// The core's fields as header names and values.
fn typed(fields: Vec<(&'static str, String)>) -> impl Iterator<Item = (HeaderName, HeaderValue)> {
    fields
        .into_iter()
        // The core writes visible ASCII only; a value that is not is left out, never a 500.
        .filter_map(|(name, value)| Some((header_name(name)?, HeaderValue::try_from(value).ok()?)))
}

/// Adds `fields` to `resp`.
pub(crate) fn add_fields<B>(resp: &mut Response<B>, fields: Fields) {
    let h = resp.headers_mut();
    if let Some(policy) = fields.policy {
        h.insert(RATELIMIT_POLICY, policy);
    }
    for (name, value) in typed(fields.decided) {
        h.insert(name, value);
    }
}

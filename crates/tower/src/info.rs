//! The decision, as the handler sees it.

use std::sync::Arc;

use tollgate::Decision;

use crate::store::Source;

/// The rate limit's decision for this request, in the request's extensions for the
/// handler (`Extension<RateLimitInfo>` in axum).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitInfo {
    /// The policy that decided.
    pub policy: Arc<str>,
    /// The combined decision; `None` when the store failed and the layer failed open.
    pub decision: Option<Decision>,
    /// Each limit's decision, in stack order (empty when the store failed).
    pub each: Vec<Decision>,
    /// Each limit's name, as in the `RateLimit` fields.
    pub names: Arc<[String]>,
    /// Where it was decided (`None` when the store failed).
    pub source: Option<Source>,
    /// Shadow mode: the decision is reported, not enforced (a denied request got through).
    pub shadow: bool,
}

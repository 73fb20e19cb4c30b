//! The response headers and the 429 problem body for a decision of a [`FleetLimits`] (the
//! core's [`tollgate::headers`]), each limit named as the core names them, as the in-memory
//! limiter's ([`crate::limiter`]): what the Express and Hono middleware send for a
//! `RedisLimiter`.

use wasm_bindgen::prelude::*;

use super::FleetLimits;
use crate::http;

#[wasm_bindgen]
impl FleetLimits {
    /// The response headers for a decision of these limits, flattened as `[name, value,
    /// ...]`: `each` holds each limit's decision ([`crate::DECISION_LEN`] numbers per
    /// limit, in slot order; a fair share's tenant window last, when the request had one).
    pub fn headers(&self, name: &str, each: &[f64], legacy: bool) -> Vec<String> {
        let (names, policies, decisions) = http::named(
            name,
            self.limits.policies(),
            self.limits.tenant().is_some(),
            each,
        );
        tollgate::headers::response_headers(&http::items(&names, &policies, &decisions), legacy)
            .into_iter()
            .flat_map(|(k, v)| [k.to_string(), v])
            .collect()
    }

    /// The 429 problem+json body for a decision of these limits (`each` as for
    /// [`FleetLimits::headers`]); `undefined` when every limit admitted.
    #[wasm_bindgen(js_name = quotaExceeded)]
    pub fn quota_exceeded(&self, name: &str, each: &[f64]) -> Option<String> {
        let (names, policies, decisions) = http::named(
            name,
            self.limits.policies(),
            self.limits.tenant().is_some(),
            each,
        );
        tollgate::headers::problem(&http::items(&names, &policies, &decisions))
    }
}

//! The response headers and the 429 problem body for a decision of a [`Core`] (the core's
//! [`tollgate::headers`]), each limit named as the core names them.

use tollgate::{Decision, Policy};
use wasm_bindgen::prelude::*;

use super::Core;
use crate::http;

#[wasm_bindgen]
impl Core {
    /// The response headers for a decision of this limiter, flattened as `[name, value,
    /// ...]`: `each` holds each limit's decision ([`crate::DECISION_LEN`] numbers per limit, in
    /// stack order; a fair share's tenant window last, when the request had one). Limits
    /// are named as [`tollgate::headers::limit_name`] and
    /// [`tollgate::headers::tenant_name`] say; the core chooses the binding one(s).
    pub fn headers(&self, name: &str, each: &[f64], legacy: bool) -> Vec<String> {
        let (names, policies, decisions) = self.named(name, each);
        let items = http::items(&names, &policies, &decisions);
        tollgate::headers::response_headers(&items, legacy)
            .into_iter()
            .flat_map(|(k, v)| [k.to_string(), v])
            .collect()
    }

    /// The 429 problem+json body for a decision of this limiter (`each` as for
    /// [`Core::headers`]); `undefined` when every limit admitted.
    #[wasm_bindgen(js_name = quotaExceeded)]
    pub fn quota_exceeded(&self, name: &str, each: &[f64]) -> Option<String> {
        let (names, policies, decisions) = self.named(name, each);
        tollgate::headers::problem(&http::items(&names, &policies, &decisions))
    }

    /// The first limits of this limiter that `each` has decisions for, with their names.
    fn named(&self, name: &str, each: &[f64]) -> (Vec<String>, Vec<Policy>, Vec<Decision>) {
        http::named(name, self.limiter.policies(), self.fair_share, each)
    }
}

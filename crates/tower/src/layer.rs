//! The layer: a tower [`Layer`] wrapping a service in [`RateLimit`].

use std::sync::Arc;

use tower_layer::Layer;

use crate::service::RateLimit;
use crate::shared::Shared;
use crate::store::Store;

/// A tower layer that rate-limits requests by route with tollgate's policies. Cheap to
/// clone: everything is shared behind an `Arc`. Built with [`RateLimitLayer::memory`],
/// [`crate::Builder::new`] or (feature `redis`) `RateLimitLayer::redis_plans`.
pub struct RateLimitLayer<S> {
    pub(crate) shared: Arc<Shared<S>>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// The store of the policy named `name` (to inspect it), if there is one.
    pub fn store(&self, name: &str) -> Option<&S> {
        self.shared
            .entries
            .iter()
            .find(|e| &*e.name == name)
            .map(|e| &e.store)
    }
}

impl<S, Svc> Layer<Svc> for RateLimitLayer<S> {
    type Service = RateLimit<Svc, S>;

    fn layer(&self, inner: Svc) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}

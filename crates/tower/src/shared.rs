//! What every service of a layer shares behind one `Arc`: the named policies on their
//! stores ([`Entry`]), the routes, the settings.

use std::sync::Arc;

use http::header::HeaderValue;

use crate::body::Slot;
use crate::key::Key;
use crate::plans::{policy_field_of, PlanMeta};
use crate::route::CompiledRoute;
use crate::settings::Settings;
use crate::store::Store;

/// One named policy on its store.
pub(crate) struct Entry<S> {
    pub(crate) name: Arc<str>,
    pub(crate) store: S,
    pub(crate) key: Key,
    /// The names of the layers' limits (`api` or `api.1`, `api.2`, ...).
    pub(crate) names: Arc<[String]>,
    /// The same and, for a fair share, its tenant window's (`api.tenant`) last.
    pub(crate) with_tenant: Arc<[String]>,
    /// Whether a limit is a concurrency limit: an admitted request holds slots until its
    /// response ends.
    pub(crate) holds_slots: bool,
    /// The `RateLimit-Policy` values of `names` and of `with_tenant`: they depend on the
    /// limits alone, so they are written once (per request, writing them was a fifth of
    /// the layer's own time; see the crate's README).
    pub(crate) policy_fields: [HeaderValue; 2],
    /// For a policy of plans ([`crate::Builder::plans`]): how a request's plan is chosen,
    /// and each plan's names and field.
    pub(crate) plans: Option<PlanMeta>,
}

/// The layer's compiled configuration.
pub(crate) struct Shared<S> {
    pub(crate) entries: Vec<Entry<S>>,
    pub(crate) routes: Vec<CompiledRoute>,
    pub(crate) settings: Settings,
}

impl<S: Store> Shared<S> {
    /// The `cost` slots `key` was admitted to by the policy `entry` on `route`, given back
    /// to its store (and to the route's concurrency gauge) when the returned slot is
    /// released or dropped.
    pub(crate) fn slot(
        self: &Arc<Self>,
        entry: usize,
        route: usize,
        key: String,
        cost: u64,
    ) -> Slot {
        let shared = Arc::clone(self);
        Slot::held(move || {
            shared.entries[entry].store.release(&key, cost);
            #[cfg(feature = "metrics")]
            shared.routes[route].metrics.slots_given_back(cost);
            #[cfg(not(feature = "metrics"))]
            let _ = route;
        })
    }
}

/// The `RateLimit-Policy` value of a store's limits (names in the order of its layers, the
/// tenant window last). The field describes the limits, not a decision: the items' decisions
/// are never read, so none is needed.
pub(crate) fn policy_field<S: Store>(store: &S, names: &[String]) -> HeaderValue {
    policy_field_of(store.limits(), names)
}

//! The layer's metrics (feature `metrics`): the core's metric model
//! ([`tollgate::metrics`]) on the [`metrics`](https://docs.rs/metrics) crate's facade, so
//! any exporter installed as the process's recorder reports them (Prometheus with
//! `metrics-exporter-prometheus`, OpenTelemetry, statsd, ...).
//!
//! Per decided request, labelled with the policy and the route (its path pattern as
//! configured; never the key):
//!
//! * `tollgate_decisions_total` by outcome (`admitted`, `denied`, `shadow_denied`) and source
//!   (`store`: decided on the store's states, in memory or on Redis; `deny_cache`;
//!   `fallback`: decided by a declared behaviour because the store failed: the Redis
//!   store's `Fallback`, or the layer's [`OnError`] when the store's check
//!   returned an error);
//! * `tollgate_near_limit_total`: admissions that left less than 20% of the limit;
//! * `tollgate_store_failures_total` by behaviour (`open`, `closed`: the layer's
//!   [`OnError`]) and reason ([`Store::failure`](crate::store::Store::failure)), when a store's check
//!   failed (the Redis store counts the failures its own fallback decided, see
//!   `tollgate_redis`'s metrics);
//! * `tollgate_concurrency_in_use`: slots of a concurrency limit held by this process now.
//!
//! The names are the model's Prometheus forms ([`tollgate::metrics::INSTRUMENTS`]), written
//! by the core's mapping onto the facade ([`tollgate::metrics::facade`], shared with
//! `tollgate-redis` and the core's [`Metered`](tollgate::metrics::Metered) keyed limiter). The
//! series of a route are registered with the recorder installed when the route's first
//! request is decided (the concurrency gauge at its first slot taken; install the recorder
//! before serving); without one they are the
//! facade's no-op handles, and a decision costs an index and a branch.

use tollgate::metrics::facade::PolicySeries;
use tollgate::store::fallback::Behaviour;
use tollgate::store::fallback::Why;
use tollgate::Decision;

use crate::settings::OnError;
use crate::store::Source;

pub use tollgate::metrics::facade::{describe, wait_buckets};

/// The series of one route's policy, registered on first use.
pub(crate) struct RouteMetrics {
    series: PolicySeries,
}

impl RouteMetrics {
    /// The series of `policy` on the route whose path pattern is `route`.
    pub(crate) fn new(policy: &str, route: &str) -> RouteMetrics {
        RouteMetrics {
            series: PolicySeries::new(policy, Some(route)),
        }
    }

    /// Counts a decision made at `source` (`shadow`: the route only reports).
    pub(crate) fn decision(&self, decision: &Decision, shadow: bool, source: Source) {
        let source = match source {
            Source::Memory | Source::Redis => tollgate::metrics::Source::Store,
            Source::DenyCache => tollgate::metrics::Source::DenyCache,
            Source::Fallback => tollgate::metrics::Source::Fallback,
        };
        self.series.decision(decision, shadow, source);
    }

    /// Counts a failed check, after which the layer's `on_error` decided: a store failure
    /// and a decision by the fallback (admitted when open, denied when closed).
    pub(crate) fn failure(&self, on_error: OnError, why: Why) {
        let (behaviour, allowed) = match on_error {
            OnError::Open => (Behaviour::Open, true),
            OnError::Closed { .. } => (Behaviour::Closed, false),
        };
        self.series.failure(behaviour, why);
        let decided = Decision {
            allowed,
            ..Decision::default()
        };
        // (No shadow: a failure is answered as declared on every route, a 503 included.)
        let source = tollgate::metrics::Source::Fallback;
        self.series.decision(&decided, false, source);
    }

    /// `cost` slots taken (an admission of a policy with a concurrency limit).
    pub(crate) fn slots_taken(&self, cost: u64) {
        self.series.slots_taken(cost);
    }

    /// `cost` slots given back.
    pub(crate) fn slots_given_back(&self, cost: u64) {
        self.series.slots_given_back(cost);
    }
}

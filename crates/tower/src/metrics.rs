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
//!   store's `Fallback`, or the layer's [`OnError`](crate::OnError) when the store's check
//!   returned an error);
//! * `tollgate_near_limit_total`: admissions that left less than 20% of the limit;
//! * `tollgate_store_failures_total` by behaviour (`open`, `closed`: the layer's
//!   [`OnError`](crate::OnError)) and reason ([`Store::failure`]), when a store's check
//!   failed (the Redis store counts the failures its own fallback decided, see
//!   `tollgate_redis`'s metrics);
//! * `tollgate_concurrency_in_use`: slots of a concurrency limit held by this process now.
//!
//! The names are the model's Prometheus forms ([`tollgate::metrics::INSTRUMENTS`]), so that
//! `metrics-exporter-prometheus` exposes them as written whatever its naming options. The
//! series of a route are registered with the recorder installed when the route's first
//! request is decided (install the recorder before serving); without one they are the
//! facade's no-op handles, and a decision costs an index and a branch.

use std::sync::OnceLock;

use metrics::{Counter, Gauge, Label, Unit};
use tollgate::metrics::{
    Attribute, Behaviour, Handles, Instrument, Kind, CONCURRENCY_IN_USE, INSTRUMENTS, POLICY, ROUTE,
};
use tollgate::store::fleet::Why;
use tollgate::Decision;

use crate::settings::OnError;
use crate::store::Source;

/// Describes the model's instruments to the installed recorder (`# HELP` lines, units):
/// call it once after installing the recorder.
pub fn describe() {
    for i in INSTRUMENTS {
        let (name, description) = (i.prometheus, i.description);
        match i.kind {
            Kind::Counter => metrics::describe_counter!(name, Unit::Count, description),
            Kind::Gauge => metrics::describe_gauge!(name, Unit::Count, description),
            Kind::Histogram => metrics::describe_histogram!(name, Unit::Seconds, description),
        }
    }
}

/// The upper bounds of the wait histogram's buckets in seconds
/// ([`tollgate::metrics::WAIT_BUCKETS`]), for an exporter's bucket setting.
pub fn wait_buckets() -> [f64; tollgate::metrics::WAIT_BUCKETS.len()] {
    tollgate::metrics::WAIT_BUCKETS.map(|nanos| nanos as f64 / 1e9)
}

/// The series of one route's policy, registered on first use.
pub(crate) struct RouteMetrics {
    policy: String,
    route: String,
    series: OnceLock<Series>,
}

struct Series {
    handles: Handles<Counter>,
    in_use: Gauge,
}

impl RouteMetrics {
    /// The series of `policy` on the route whose path pattern is `route`.
    pub(crate) fn new(policy: &str, route: &str) -> RouteMetrics {
        RouteMetrics {
            policy: policy.to_string(),
            route: route.to_string(),
            series: OnceLock::new(),
        }
    }

    fn series(&self) -> &Series {
        self.series.get_or_init(|| {
            let labels = |attributes: &[(Attribute, &'static str)]| -> Vec<Label> {
                [
                    Label::new(POLICY.label, self.policy.clone()),
                    Label::new(ROUTE.label, self.route.clone()),
                ]
                .into_iter()
                .chain(attributes.iter().map(|(a, v)| Label::new(a.label, *v)))
                .collect()
            };
            Series {
                handles: Handles::new(|i: &Instrument, a| {
                    metrics::counter!(i.prometheus, labels(a))
                }),
                in_use: metrics::gauge!(CONCURRENCY_IN_USE.prometheus, labels(&[])),
            }
        })
    }

    /// Counts a decision made at `source` (`shadow`: the route only reports).
    pub(crate) fn decision(&self, decision: &Decision, shadow: bool, source: Source) {
        let source = match source {
            Source::Memory | Source::Redis => tollgate::metrics::Source::Store,
            Source::DenyCache => tollgate::metrics::Source::DenyCache,
            Source::Fallback => tollgate::metrics::Source::Fallback,
        };
        let (counted, near) = self.series().handles.decision(decision, shadow, source);
        counted.increment(1);
        if let Some(near) = near {
            near.increment(1);
        }
    }

    /// Counts a failed check, after which the layer's `on_error` decided: a store failure
    /// and a decision by the fallback (admitted when open, denied when closed).
    pub(crate) fn failure(&self, on_error: OnError, why: Why) {
        let series = self.series();
        let (behaviour, allowed) = match on_error {
            OnError::Open => (Behaviour::Open, true),
            OnError::Closed { .. } => (Behaviour::Closed, false),
        };
        series.handles.failure(behaviour, why).increment(1);
        let decided = Decision {
            allowed,
            ..Decision::default()
        };
        let source = tollgate::metrics::Source::Fallback;
        // (No shadow: a failure is answered as declared on every route, a 503 included.)
        series
            .handles
            .decision(&decided, false, source)
            .0
            .increment(1);
    }

    /// `cost` slots taken (an admission of a policy with a concurrency limit).
    pub(crate) fn slots_taken(&self, cost: u64) {
        self.series().in_use.increment(cost as f64);
    }

    /// `cost` slots given back.
    pub(crate) fn slots_given_back(&self, cost: u64) {
        self.series().in_use.decrement(cost as f64);
    }
}

//! The limiter's metrics (feature `metrics`): the core's metric model
//! ([`tollgate::metrics`]) on the [`metrics`](https://docs.rs/metrics) crate's facade, so
//! any exporter installed as the process's recorder reports them.
//!
//! Labelled with the policy ([`Options::metrics_policy`](crate::Options::metrics_policy),
//! by default the namespace; never the key):
//!
//! * `tollgate_decisions_total` by outcome and source (`store`: decided on Redis's states;
//!   `deny_cache`; `fallback`: decided by the declared [`Fallback`]),
//!   one per [`RedisLimiter::check`](crate::RedisLimiter::check) and per
//!   [`acquire`](crate::RedisLimiter::acquire) (its last decision; a waiter that gave up
//!   on what its line already knew, without a decision of its own, as `deny_cache`);
//! * `tollgate_near_limit_total`;
//! * `tollgate_store_failures_total` by declared behaviour (`open`, `closed`, `local`) and
//!   reason (`unreachable`, `timeout`, `indeterminate`): one per failed call to Redis (the
//!   decisions made while Redis is marked down, until the next probe, are counted as
//!   decisions by `fallback`, not as failures: no call was made);
//! * `tollgate_wait_duration_seconds` by wait result (`admitted`, `gave_up`): how long
//!   `acquire`'s callers waited.
//!
//! The names are the model's Prometheus forms ([`tollgate::metrics::INSTRUMENTS`]). The
//! series are registered with the recorder installed at the limiter's first decision
//! (install it before); without one they are the facade's no-op handles.

use std::sync::OnceLock;

use metrics::{Counter, Histogram, Label, Unit};
use tollgate::metrics::{
    Attribute, Behaviour, Handles, Instrument, Kind, WaitResult, INSTRUMENTS, POLICY,
    WAIT_DURATION, WAIT_RESULT,
};
use tollgate::{Decision, Nanos};

use crate::{Fallback, Source, Why};

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

/// One limiter's series, registered on first use.
pub(crate) struct Recorded {
    policy: String,
    behaviour: Behaviour,
    series: OnceLock<Series>,
}

struct Series {
    handles: Handles<Counter>,
    waits: [Histogram; WaitResult::ALL.len()],
}

impl Recorded {
    /// The series of the limiter of `policy` whose store failures `fallback` decides.
    pub(crate) fn new(policy: &str, fallback: &Fallback) -> Recorded {
        Recorded {
            policy: policy.to_string(),
            behaviour: match fallback {
                Fallback::Open => Behaviour::Open,
                Fallback::Closed => Behaviour::Closed,
                Fallback::Local { .. } => Behaviour::Local,
            },
            series: OnceLock::new(),
        }
    }

    fn series(&self) -> &Series {
        self.series.get_or_init(|| {
            let labels = |attributes: &[(Attribute, &'static str)]| -> Vec<Label> {
                std::iter::once(Label::new(POLICY.label, self.policy.clone()))
                    .chain(attributes.iter().map(|(a, v)| Label::new(a.label, *v)))
                    .collect()
            };
            Series {
                handles: Handles::new(|i: &Instrument, a| {
                    metrics::counter!(i.prometheus, labels(a))
                }),
                waits: WaitResult::ALL.map(|result| {
                    let attributes = [(WAIT_RESULT, result.as_str())];
                    metrics::histogram!(WAIT_DURATION.prometheus, labels(&attributes))
                }),
            }
        })
    }

    /// Counts a decision made at `source`.
    pub(crate) fn decision(&self, decision: &Decision, source: Source) {
        let source = match source {
            Source::Redis => tollgate::metrics::Source::Store,
            Source::DenyCache => tollgate::metrics::Source::DenyCache,
            Source::Fallback(_) => tollgate::metrics::Source::Fallback,
        };
        let (counted, near) = self.series().handles.decision(decision, false, source);
        counted.increment(1);
        if let Some(near) = near {
            near.increment(1);
        }
    }

    /// Counts a failed call to Redis, after which the declared fallback decides.
    pub(crate) fn failure(&self, why: Why) {
        self.series()
            .handles
            .failure(self.behaviour, why)
            .increment(1);
    }

    /// Counts a wait of `waited` nanoseconds that ended as `result`.
    pub(crate) fn wait(&self, result: WaitResult, waited: Nanos) {
        self.series().waits[result as usize].record(waited as f64 / 1e9);
    }
}

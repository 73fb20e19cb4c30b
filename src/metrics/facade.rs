//! The model on the [`metrics`](https://docs.rs/metrics) crate's facade (feature `metrics-facade`),
//! written once for every Rust runtime that reports through it: [`Metered`](super::Metered)
//! (the in-memory keyed limiter), `tollgate-tower`'s layer and `tollgate-redis`'s limiter.
//!
//! The names are the model's Prometheus forms ([`INSTRUMENTS`]), so that
//! `metrics-exporter-prometheus` exposes them as written whatever its naming options, and
//! every other exporter (OpenTelemetry, statsd, ...) sees the same names and labels. A
//! [`PolicySeries`] registers its series with the recorder installed when it first records
//! on each instrument: install the recorder before the first decision. Without one they are
//! the facade's no-op handles, and recording a decision costs a load, an index and a branch.
//!
//! ```
//! use metrics_util::debugging::DebuggingRecorder;
//! use tollgate::metrics::facade::{describe, wait_buckets, PolicySeries};
//! use tollgate::metrics::{Source, WaitResult};
//! use tollgate::Decision;
//!
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! metrics::with_local_recorder(&recorder, || {
//!     describe();
//!     let series = PolicySeries::new("api", Some("/v1"));
//!     let admitted = Decision { allowed: true, limit: 10, remaining: 1, ..Decision::default() };
//!     series.decision(&admitted, false, Source::Store);
//!     series.wait(WaitResult::Admitted, 30_000_000);
//! });
//! let counted = snapshotter.snapshot().into_vec();
//! // Every decision series of the policy (3 outcomes x 3 sources), near-limit, the 9 failure
//! // series, and the one wait histogram recorded on (the other one is registered with it).
//! assert_eq!(counted.len(), 9 + 1 + 9 + 2);
//! assert_eq!(wait_buckets()[0], 0.005);
//! ```

use alloc::boxed::Box;
use alloc::vec::Vec;
use std::sync::OnceLock;

use ::metrics::{Counter, Gauge, Histogram, Label, Unit};

use super::{
    Attribute, Handles, Instrument, Kind, Source, WaitResult, CONCURRENCY_IN_USE, INSTRUMENTS,
    POLICY, ROUTE, WAIT_BUCKETS, WAIT_DURATION, WAIT_RESULT,
};
use crate::store::fallback::{Behaviour, Why};
use crate::{Decision, Nanos};

/// Describes the model's instruments to the installed recorder (`# HELP` lines, units):
/// call it once after installing the recorder.
pub fn describe() {
    for i in INSTRUMENTS {
        let (name, description) = (i.prometheus, i.description);
        match i.kind {
            Kind::Counter => ::metrics::describe_counter!(name, Unit::Count, description),
            Kind::Gauge => ::metrics::describe_gauge!(name, Unit::Count, description),
            Kind::Histogram => ::metrics::describe_histogram!(name, Unit::Seconds, description),
        }
    }
}

/// The upper bounds of the wait histogram's buckets in seconds ([`WAIT_BUCKETS`]), for an
/// exporter's bucket setting (`metrics-exporter-prometheus`'s `set_buckets_for_metric` with
/// [`WAIT_DURATION`]'s Prometheus name; without it the exporter writes a summary).
pub fn wait_buckets() -> [f64; WAIT_BUCKETS.len()] {
    WAIT_BUCKETS.map(|nanos| nanos as f64 / 1e9)
}

/// The series of one policy (on one route, where the runtime has routes), as the facade's
/// handles: each instrument's series registered with the recorder installed when it is
/// first recorded on, labelled with the policy and the route, then picked per event by the
/// model's rules ([`Handles`]).
///
/// The decision and failure counters are registered together (so a policy's series of
/// every outcome and source show, at zero, from its first decision); the wait histograms at
/// the first wait; the concurrency gauge at the first slot taken.
pub struct PolicySeries {
    policy: Box<str>,
    route: Option<Box<str>>,
    counters: OnceLock<Handles<Counter>>,
    waits: OnceLock<[Histogram; WaitResult::ALL.len()]>,
    in_use: OnceLock<Gauge>,
}

impl PolicySeries {
    /// The series of `policy` (the configuration's name for it: never the policy text, never
    /// a key), on `route` when the runtime has routes (the tower layer's path pattern).
    pub fn new(policy: &str, route: Option<&str>) -> PolicySeries {
        PolicySeries {
            policy: policy.into(),
            route: route.map(Into::into),
            counters: OnceLock::new(),
            waits: OnceLock::new(),
            in_use: OnceLock::new(),
        }
    }

    /// The policy's name.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The route, if any.
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }

    /// The labels of a series: the policy, the route, then `attributes`.
    fn labels(&self, attributes: &[(Attribute, &'static str)]) -> Vec<Label> {
        let policy = Label::new(POLICY.label, alloc::string::String::from(&*self.policy));
        let route = self
            .route
            .as_deref()
            .map(|r| Label::new(ROUTE.label, alloc::string::String::from(r)));
        core::iter::once(policy)
            .chain(route)
            .chain(attributes.iter().map(|(a, v)| Label::new(a.label, *v)))
            .collect()
    }

    #[inline]
    fn counters(&self) -> &Handles<Counter> {
        match self.counters.get() {
            Some(handles) => handles,
            None => self.register_counters(),
        }
    }

    #[cold]
    #[inline(never)]
    fn register_counters(&self) -> &Handles<Counter> {
        self.counters.get_or_init(|| {
            Handles::new(|i: &Instrument, a| ::metrics::counter!(i.prometheus, self.labels(a)))
        })
    }

    fn in_use(&self) -> &Gauge {
        self.in_use
            .get_or_init(|| ::metrics::gauge!(CONCURRENCY_IN_USE.prometheus, self.labels(&[])))
    }

    /// Counts a decision made at `source` (`shadow`: the limit that decided only reports):
    /// its `tollgate_decisions_total` series, and `tollgate_near_limit_total` when it left
    /// less than 20% of the limit ([`near_limit`](super::near_limit)).
    #[inline]
    pub fn decision(&self, decision: &Decision, shadow: bool, source: Source) {
        let (counted, near) = self.counters().decision(decision, shadow, source);
        counted.increment(1);
        if let Some(near) = near {
            near.increment(1);
        }
    }

    /// Counts a failed call to the store, after which `behaviour` decided
    /// (`tollgate_store_failures_total`). The decision the behaviour then made is counted by
    /// [`Self::decision`] with [`Source::Fallback`].
    pub fn failure(&self, behaviour: Behaviour, why: Why) {
        self.counters().failure(behaviour, why).increment(1);
    }

    /// Counts a wait of `waited` nanoseconds that ended as `result`
    /// (`tollgate_wait_duration_seconds`, in seconds).
    pub fn wait(&self, result: WaitResult, waited: Nanos) {
        let waits = self.waits.get_or_init(|| {
            WaitResult::ALL.map(|result| {
                let attributes = [(WAIT_RESULT, result.as_str())];
                ::metrics::histogram!(WAIT_DURATION.prometheus, self.labels(&attributes))
            })
        });
        waits[result as usize].record(waited as f64 / 1e9);
    }

    /// `cost` slots of a concurrency limit taken (`tollgate_concurrency_in_use` up).
    pub fn slots_taken(&self, cost: u64) {
        self.in_use().increment(cost as f64);
    }

    /// `cost` slots given back (`tollgate_concurrency_in_use` down).
    pub fn slots_given_back(&self, cost: u64) {
        self.in_use().decrement(cost as f64);
    }
}

impl core::fmt::Debug for PolicySeries {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PolicySeries")
            .field("policy", &self.policy)
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

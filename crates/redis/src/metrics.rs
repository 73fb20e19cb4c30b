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
//!   `acquire`'s callers waited;
//! * `tollgate_concurrency_in_use`, for limits with a concurrency limit: slots this process
//!   took by admissions (whatever decided them) and has not given back by a
//!   [`release`](crate::RedisLimiter::release) that succeeded (a slot whose release failed
//!   stays counted; in Redis its lease frees it).
//!
//! The names are the model's Prometheus forms ([`tollgate::metrics::INSTRUMENTS`]), written
//! by the core's mapping onto the facade ([`tollgate::metrics::facade`], shared with
//! `tollgate-tower` and the core's [`Metered`](tollgate::metrics::Metered) keyed limiter).
//! The series are registered with the recorder installed at the limiter's first decision
//! (the wait histograms at its first wait; install the recorder before); without one they
//! are the facade's no-op handles.

use tollgate::metrics::facade::PolicySeries;
use tollgate::metrics::WaitResult;
use tollgate::store::fallback::Behaviour;
use tollgate::{Decision, Nanos};

use crate::{Fallback, Source, Why};

pub use tollgate::metrics::facade::{describe, wait_buckets};

/// One limiter's series, registered on first use.
pub(crate) struct Recorded {
    series: PolicySeries,
    behaviour: Behaviour,
    /// Whether admissions take slots (the limits hold a concurrency limit).
    slots: bool,
}

impl Recorded {
    /// The series of the limiter of `policy` whose store failures `fallback` decides;
    /// `slots` when its admissions take slots of a concurrency limit.
    pub(crate) fn new(policy: &str, fallback: &Fallback, slots: bool) -> Recorded {
        Recorded {
            slots,
            series: PolicySeries::new(policy, None),
            behaviour: match fallback {
                Fallback::Open => Behaviour::Open,
                Fallback::Closed => Behaviour::Closed,
                Fallback::Local { .. } => Behaviour::Local,
            },
        }
    }

    /// Counts a decision for a request of `cost` made at `source` (and the slots an
    /// admission took).
    pub(crate) fn decision(&self, decision: &Decision, source: Source, cost: u64) {
        let source = match source {
            Source::Redis => tollgate::metrics::Source::Store,
            Source::DenyCache => tollgate::metrics::Source::DenyCache,
            Source::Fallback(_) => tollgate::metrics::Source::Fallback,
        };
        self.series.decision(decision, false, source);
        if self.slots && decision.allowed {
            self.series.slots_taken(cost);
        }
    }

    /// `cost` slots given back by a release.
    pub(crate) fn released(&self, cost: u64) {
        if self.slots {
            self.series.slots_given_back(cost);
        }
    }

    /// Counts a failed call to Redis, after which the declared fallback decides.
    pub(crate) fn failure(&self, why: Why) {
        self.series.failure(self.behaviour, why);
    }

    /// Counts a wait of `waited` nanoseconds that ended as `result`.
    pub(crate) fn wait(&self, result: WaitResult, waited: Nanos) {
        self.series.wait(result, waited);
    }
}

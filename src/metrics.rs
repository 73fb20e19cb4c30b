//! The metric model: what every runtime counts about its decisions, under which names.
//!
//! An operator asks the same questions of every runtime: which policy denies, how often,
//! is the store healthy, are we deciding on the fallback, how long do waiters wait. So the
//! names, the attributes and the rules that sort a decision (its [`Outcome`], whether it
//! was [near the limit](near_limit)) are written once, here, as plain data; each runtime
//! only hands them to its exporter (the `metrics` crate facade, OpenTelemetry, Prometheus
//! text, the Redis module's `INFO`).
//!
//! With the feature `metrics-facade`, `metrics::facade` is the model on the `metrics` crate's facade
//! (what `tollgate-tower` and `tollgate-redis` record through), and `metrics::Metered` the keyed
//! in-memory limiter recording its decisions there.
//!
//! # The instruments
//!
//! Names and attributes follow the OpenTelemetry conventions ([`INSTRUMENTS`]); the
//! Prometheus form of each is the OpenTelemetry-to-Prometheus mapping: dots become
//! underscores, a counter ends in `_total`, a duration in seconds ends in `_seconds`.
//!
//! | OpenTelemetry | Prometheus | kind | attributes |
//! |---|---|---|---|
//! | `tollgate.decisions` | `tollgate_decisions_total` | counter | policy, route, outcome, source |
//! | `tollgate.near_limit` | `tollgate_near_limit_total` | counter | policy, route |
//! | `tollgate.store.failures` | `tollgate_store_failures_total` | counter | policy, route, behaviour, reason |
//! | `tollgate.wait.duration` | `tollgate_wait_duration_seconds` | histogram (s) | policy, route, wait result |
//! | `tollgate.concurrency.in_use` | `tollgate_concurrency_in_use` | gauge | policy, route |
//!
//! A runtime that knows which series cannot move in its process (no shared store that
//! could fail, no caller that waits) writes only the others with
//! [`render_moving`] and a [`Moving`]; [`render`] writes them all.
//!
//! A key is never an attribute unless an operator opts a policy in ([`KEY`]): a label per
//! key would make one series per client (unbounded cardinality).
//!
//! ```
//! use tollgate::metrics::{Outcome, Source, Tally};
//! use tollgate::{decide, Policy};
//!
//! let policy: Policy = "fixed-window 10/s".parse().unwrap();
//! let mut tally = Tally::default();
//! let mut state = None;
//! for _ in 0..12 {
//!     let (decision, next) = decide(&policy, state, 0, 1).unwrap();
//!     state = next;
//!     tally.decision(&decision, false, Source::Store);
//! }
//! assert_eq!(tally.decisions(Outcome::Admitted, Source::Store), 10);
//! assert_eq!(tally.decisions(Outcome::Denied, Source::Store), 2);
//! // The 9th and 10th admissions left 1 and 0, under 20% of 10.
//! assert_eq!(tally.near_limit(), 2);
//! ```

use crate::store::fallback::{Behaviour, Why};
use crate::{Decision, Nanos};

#[cfg(feature = "metrics-facade")]
pub mod facade;
#[cfg(feature = "metrics-facade")]
mod metered;
mod prometheus;

#[cfg(feature = "metrics-facade")]
pub use metered::Metered;
pub use prometheus::{render, render_moving, Moving, Series};

/// What an instrument measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A count that only grows.
    Counter,
    /// A distribution of durations, in seconds, over [`WAIT_BUCKETS`].
    Histogram,
    /// A value that goes up and down (OpenTelemetry's up-down counter).
    Gauge,
}

/// One instrument of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instrument {
    /// The OpenTelemetry name.
    pub name: &'static str,
    /// The Prometheus name (the OpenTelemetry name mapped: dots to underscores, `_total`
    /// for a counter, `_seconds` for a duration).
    pub prometheus: &'static str,
    /// What it measures.
    pub kind: Kind,
    /// The unit, in UCUM as OpenTelemetry writes it.
    pub unit: &'static str,
    /// What it means, for `# HELP` lines and instrument descriptions.
    pub description: &'static str,
}

/// `tollgate.decisions`: one per decision, by [`Outcome`] and [`Source`].
pub const DECISIONS: Instrument = Instrument {
    name: "tollgate.decisions",
    prometheus: "tollgate_decisions_total",
    kind: Kind::Counter,
    unit: "{decision}",
    description: "Rate-limit decisions, by policy, outcome and where they were made.",
};

/// `tollgate.near_limit`: admissions that left less than a fifth of the limit
/// ([`near_limit`]).
pub const NEAR_LIMIT: Instrument = Instrument {
    name: "tollgate.near_limit",
    prometheus: "tollgate_near_limit_total",
    kind: Kind::Counter,
    unit: "{decision}",
    description: "Admissions that left less than 20% of the limit remaining.",
};

/// `tollgate.store.failures`: calls to a shared store that failed, by the declared
/// [`Behaviour`] that then decided and the [`Why`].
pub const STORE_FAILURES: Instrument = Instrument {
    name: "tollgate.store.failures",
    prometheus: "tollgate_store_failures_total",
    kind: Kind::Counter,
    unit: "{failure}",
    description: "Failed store calls, by the declared behaviour that decided instead and why.",
};

/// `tollgate.wait.duration`: how long callers of `acquire`/`throttle` waited, by
/// [`WaitResult`].
pub const WAIT_DURATION: Instrument = Instrument {
    name: "tollgate.wait.duration",
    prometheus: "tollgate_wait_duration_seconds",
    kind: Kind::Histogram,
    unit: "s",
    description: "Time callers waited for a turn, by whether they were admitted or gave up.",
};

/// `tollgate.concurrency.in_use`: slots of a concurrency limit held now.
pub const CONCURRENCY_IN_USE: Instrument = Instrument {
    name: "tollgate.concurrency.in_use",
    prometheus: "tollgate_concurrency_in_use",
    kind: Kind::Gauge,
    unit: "{request}",
    description: "Requests holding a slot of a concurrency limit.",
};

/// Every instrument of the model, in the order exporters list them.
pub const INSTRUMENTS: [Instrument; 5] = [
    DECISIONS,
    NEAR_LIMIT,
    STORE_FAILURES,
    WAIT_DURATION,
    CONCURRENCY_IN_USE,
];

/// An attribute key: its OpenTelemetry name and its Prometheus label name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attribute {
    /// The OpenTelemetry attribute key.
    pub name: &'static str,
    /// The Prometheus label (dots to underscores).
    pub label: &'static str,
}

/// The policy's name (the configuration's name for it; never the policy text of a key).
pub const POLICY: Attribute = Attribute {
    name: "tollgate.policy",
    label: "tollgate_policy",
};
/// The route, where a front end has routes (the edge, the tower layer).
pub const ROUTE: Attribute = Attribute {
    name: "tollgate.route",
    label: "tollgate_route",
};
/// The decision's [`Outcome`].
pub const OUTCOME: Attribute = Attribute {
    name: "tollgate.outcome",
    label: "tollgate_outcome",
};
/// Where the decision was made ([`Source`]).
pub const SOURCE: Attribute = Attribute {
    name: "tollgate.source",
    label: "tollgate_source",
};
/// The declared [`Behaviour`] on a store failure.
pub const BEHAVIOUR: Attribute = Attribute {
    name: "tollgate.failure.behaviour",
    label: "tollgate_failure_behaviour",
};
/// Why a store call failed ([`Why`]: `unreachable`, `timeout`, `indeterminate`).
pub const REASON: Attribute = Attribute {
    name: "tollgate.failure.reason",
    label: "tollgate_failure_reason",
};
/// Whether a waiter was admitted or gave up ([`WaitResult`]).
pub const WAIT_RESULT: Attribute = Attribute {
    name: "tollgate.wait.result",
    label: "tollgate_wait_result",
};
/// The key: only for a policy an operator opted in (cardinality: one series per key).
pub const KEY: Attribute = Attribute {
    name: "tollgate.key",
    label: "tollgate_key",
};

/// How a decision ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Admitted (and charged).
    Admitted,
    /// Denied.
    Denied,
    /// Denied by a limit in shadow mode: reported, but the request went through.
    ShadowDenied,
}

impl Outcome {
    /// Every outcome, in the order exporters list them.
    pub const ALL: [Outcome; 3] = [Outcome::Admitted, Outcome::Denied, Outcome::ShadowDenied];

    /// The outcome of `decision`; `shadow` when the limit that decided only reports.
    pub const fn of(decision: &Decision, shadow: bool) -> Outcome {
        match (decision.allowed, shadow) {
            (true, _) => Outcome::Admitted,
            (false, false) => Outcome::Denied,
            (false, true) => Outcome::ShadowDenied,
        }
    }

    /// The attribute value: `admitted`, `denied`, `shadow_denied`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Denied => "denied",
            Outcome::ShadowDenied => "shadow_denied",
        }
    }
}

/// Where a decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// By the core on the states in the store (the process's memory, a Durable Object,
    /// Redis).
    Store,
    /// From a remembered denial that still holds (no round trip to the store).
    DenyCache,
    /// By the declared behaviour, because the store failed.
    Fallback,
}

impl Source {
    /// Every source, in the order exporters list them.
    pub const ALL: [Source; 3] = [Source::Store, Source::DenyCache, Source::Fallback];

    /// The attribute value: `store`, `deny_cache`, `fallback`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::Store => "store",
            Source::DenyCache => "deny_cache",
            Source::Fallback => "fallback",
        }
    }
}

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitResult {
    /// The caller got its turn.
    Admitted,
    /// The caller's deadline came first.
    GaveUp,
}

impl WaitResult {
    /// Both results, in the order exporters list them.
    pub const ALL: [WaitResult; 2] = [WaitResult::Admitted, WaitResult::GaveUp];

    /// The attribute value: `admitted`, `gave_up`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaitResult::Admitted => "admitted",
            WaitResult::GaveUp => "gave_up",
        }
    }
}

/// Whether an admission left the key near its limit: less than 20% of the limit remaining
/// (the threshold envoyproxy/ratelimit's `near_limit` uses). A denial is never "near".
///
/// ```
/// use tollgate::{metrics::near_limit, Decision};
/// let after = |remaining| Decision { allowed: true, limit: 10, remaining, ..Decision::default() };
/// assert!(!near_limit(&after(2))); // exactly 20% left
/// assert!(near_limit(&after(1)));
/// ```
pub const fn near_limit(decision: &Decision) -> bool {
    // remaining / limit < 1/5: for a whole `remaining`, the same as under the fifth rounded
    // up, in integers that cannot overflow. Not `remaining as u128 * 5 < limit as u128`:
    // on wasm32 that product is a call to a 128-bit multiply, which made counting cost the
    // npm `check` nearly twice the operators (PERF.md, "Measured reasons in the code").
    decision.allowed && decision.remaining < decision.limit.div_ceil(5)
}

/// The upper bounds of the wait histogram's buckets, in nanoseconds: 5 ms to 60 s, then
/// `+Inf`. Waits are paced by retry times of milliseconds to a window's length.
pub const WAIT_BUCKETS: [Nanos; 12] = [
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    60_000_000_000,
];

/// A histogram of durations over [`WAIT_BUCKETS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last is above every bound.
    pub buckets: [u64; WAIT_BUCKETS.len() + 1],
    /// The sum of the observations, in nanoseconds.
    pub sum: Nanos,
}

impl Histogram {
    /// Counts one observation of `duration`.
    pub fn record(&mut self, duration: Nanos) {
        let bucket = WAIT_BUCKETS
            .iter()
            .position(|&bound| duration <= bound)
            .unwrap_or(WAIT_BUCKETS.len());
        self.buckets[bucket] += 1;
        self.sum = self.sum.saturating_add(duration);
    }

    /// How many observations there were.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Adds `other`'s observations to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
        self.sum = self.sum.saturating_add(other.sum);
    }
}

/// The counts of one policy (on one route), as plain data: what a runtime keeps when its
/// exporter reads a snapshot (the npm package, the edge, the Envoy service) rather than
/// being told each event (the `metrics` crate facade).
///
/// With the `serde` feature a tally serializes as its counts (arrays indexed in the order
/// of [`Outcome::ALL`], [`Source::ALL`], [`Behaviour::ALL`], [`Why::ALL`] and
/// [`WaitResult::ALL`]), so a runtime can send tallies between its processes and keep them
/// (the edge's isolates report theirs to one object that merges and stores them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct Tally {
    decisions: [[u64; Source::ALL.len()]; Outcome::ALL.len()],
    near_limit: u64,
    failures: [[u64; Why::ALL.len()]; Behaviour::ALL.len()],
    waits: [Histogram; WaitResult::ALL.len()],
}

impl Tally {
    /// Counts one decision made at `source`; `shadow` when the limit only reports.
    pub fn decision(&mut self, decision: &Decision, shadow: bool, source: Source) {
        self.decisions[Outcome::of(decision, shadow) as usize][source as usize] += 1;
        self.near_limit += near_limit(decision) as u64;
    }

    /// Counts one failed store call, after which `behaviour` decided.
    pub fn failure(&mut self, behaviour: Behaviour, why: Why) {
        self.failures[behaviour as usize][why as usize] += 1;
    }

    /// Counts one wait of `waited` that ended as `result`.
    pub fn wait(&mut self, result: WaitResult, waited: Nanos) {
        self.waits[result as usize].record(waited);
    }

    /// A tally holding these counts, as read from another one through the getters below
    /// (indices in the order of [`Outcome::ALL`], [`Source::ALL`], [`Behaviour::ALL`],
    /// [`Why::ALL`] and [`WaitResult::ALL`]): for a runtime whose counts reach [`render`] as
    /// plain numbers (the npm package's counts, kept by several wasm instances).
    pub fn from_counts(
        decisions: [[u64; Source::ALL.len()]; Outcome::ALL.len()],
        near_limit: u64,
        failures: [[u64; Why::ALL.len()]; Behaviour::ALL.len()],
        waits: [Histogram; WaitResult::ALL.len()],
    ) -> Tally {
        Tally {
            decisions,
            near_limit,
            failures,
            waits,
        }
    }

    /// Decisions counted with this outcome and source.
    pub fn decisions(&self, outcome: Outcome, source: Source) -> u64 {
        self.decisions[outcome as usize][source as usize]
    }

    /// Admissions that left the key near its limit ([`near_limit`]).
    pub fn near_limit(&self) -> u64 {
        self.near_limit
    }

    /// Failed store calls counted with this behaviour and reason.
    pub fn failures(&self, behaviour: Behaviour, why: Why) -> u64 {
        self.failures[behaviour as usize][why as usize]
    }

    /// The waits that ended as `result`.
    pub fn waits(&self, result: WaitResult) -> &Histogram {
        &self.waits[result as usize]
    }

    /// Adds `other`'s counts to these (counts from several isolates or processes).
    pub fn merge(&mut self, other: &Tally) {
        for (mine, theirs) in self.decisions.iter_mut().zip(&other.decisions) {
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
        self.near_limit += other.near_limit;
        for (mine, theirs) in self.failures.iter_mut().zip(&other.failures) {
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
        for (mine, theirs) in self.waits.iter_mut().zip(&other.waits) {
            mine.merge(theirs);
        }
    }
}

/// One policy's counters as an event exporter's handles (the `metrics` crate's counters,
/// OpenTelemetry's bound instruments): every series registered once, with its attribute
/// values, then picked per event by the same rules as [`Tally`]. What a runtime that is
/// told each event keeps, so that registering (naming, labelling) happens once and not per
/// decision; the runtime adds the policy (and route) to the attributes it is given.
#[derive(Clone, Debug)]
pub struct Handles<T> {
    decisions: [[T; Source::ALL.len()]; Outcome::ALL.len()],
    near_limit: T,
    failures: [[T; Why::ALL.len()]; Behaviour::ALL.len()],
}

impl<T> Handles<T> {
    /// Registers every series of [`DECISIONS`], [`NEAR_LIMIT`] and [`STORE_FAILURES`]:
    /// `register` gets the instrument and the attribute values beyond policy and route, in
    /// the order [`render`] writes them.
    pub fn new(mut register: impl FnMut(&Instrument, &[(Attribute, &'static str)]) -> T) -> Self {
        let decisions = Outcome::ALL.map(|outcome| {
            Source::ALL.map(|source| {
                let attributes = [(OUTCOME, outcome.as_str()), (SOURCE, source.as_str())];
                register(&DECISIONS, &attributes)
            })
        });
        let near_limit = register(&NEAR_LIMIT, &[]);
        let failures = Behaviour::ALL.map(|behaviour| {
            Why::ALL.map(|why| {
                let attributes = [(BEHAVIOUR, behaviour.as_str()), (REASON, why.as_str())];
                register(&STORE_FAILURES, &attributes)
            })
        });
        Handles {
            decisions,
            near_limit,
            failures,
        }
    }

    /// The handles one decision made at `source` counts on (`shadow`: the limit only
    /// reports): its [`DECISIONS`] series, and [`NEAR_LIMIT`] when it was near the limit.
    pub fn decision(&self, decision: &Decision, shadow: bool, source: Source) -> (&T, Option<&T>) {
        let counted = &self.decisions[Outcome::of(decision, shadow) as usize][source as usize];
        (counted, near_limit(decision).then_some(&self.near_limit))
    }

    /// The [`STORE_FAILURES`] series of a failed store call after which `behaviour` decided.
    pub fn failure(&self, behaviour: Behaviour, why: Why) -> &T {
        &self.failures[behaviour as usize][why as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_names_are_the_mapped_opentelemetry_names() {
        for i in INSTRUMENTS {
            let mapped = i.name.replace('.', "_");
            let expected = match (i.kind, i.unit) {
                (Kind::Counter, _) => alloc::format!("{mapped}_total"),
                (Kind::Histogram, "s") => alloc::format!("{mapped}_seconds"),
                _ => mapped,
            };
            assert_eq!(i.prometheus, expected, "{}", i.name);
        }
        for a in [
            POLICY,
            ROUTE,
            OUTCOME,
            SOURCE,
            BEHAVIOUR,
            REASON,
            WAIT_RESULT,
            KEY,
        ] {
            assert_eq!(a.label, a.name.replace('.', "_"));
        }
    }

    #[test]
    fn near_limit_at_the_edges() {
        let d = |allowed, limit, remaining| Decision {
            allowed,
            limit,
            remaining,
            ..Decision::default()
        };
        assert!(!near_limit(&d(true, 5, 1)), "1 of 5 is exactly 20%");
        assert!(near_limit(&d(true, 5, 0)));
        assert!(near_limit(&d(true, 1, 0)));
        assert!(
            !near_limit(&d(false, 10, 0)),
            "a denial is not near, it is over"
        );
        assert!(near_limit(&d(true, u64::MAX, u64::MAX / 5 - 1)));
        assert!(!near_limit(&d(true, u64::MAX, u64::MAX / 5 + 1)));
        // The rule's definition, remaining / limit < 1/5, in exact arithmetic.
        for limit in 0..=60u64 {
            for remaining in 0..=60u64 {
                assert_eq!(
                    near_limit(&d(true, limit, remaining)),
                    (remaining as u128) * 5 < limit as u128,
                    "{remaining} left of {limit}"
                );
            }
        }
    }

    #[test]
    fn histogram_buckets_take_their_upper_bound() {
        let mut h = Histogram::default();
        h.record(0);
        h.record(5_000_000);
        h.record(5_000_001);
        h.record(61_000_000_000);
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[WAIT_BUCKETS.len()], 1);
        assert_eq!(h.count(), 4);
        assert_eq!(h.sum, 61_010_000_001);
    }

    #[test]
    fn tallies_merge_by_adding() {
        let mut a = Tally::default();
        let mut b = Tally::default();
        let denied = Decision {
            allowed: false,
            limit: 1,
            ..Decision::default()
        };
        a.decision(&denied, false, Source::DenyCache);
        b.decision(&denied, true, Source::Store);
        b.failure(Behaviour::Local, Why::Timeout);
        b.wait(WaitResult::GaveUp, 7);
        a.merge(&b);
        assert_eq!(a.decisions(Outcome::Denied, Source::DenyCache), 1);
        assert_eq!(a.decisions(Outcome::ShadowDenied, Source::Store), 1);
        assert_eq!(a.failures(Behaviour::Local, Why::Timeout), 1);
        assert_eq!(a.waits(WaitResult::GaveUp).sum, 7);
    }

    #[test]
    fn handles_pick_the_series_a_tally_counts() {
        use alloc::string::String;
        use alloc::vec::Vec;
        let handles = Handles::new(|instrument, attributes| {
            let mut name = String::from(instrument.prometheus);
            for (attribute, value) in attributes {
                name = alloc::format!("{name},{}={value}", attribute.label);
            }
            name
        });
        let admitted = Decision {
            allowed: true,
            limit: 10,
            remaining: 1,
            ..Decision::default()
        };
        let (counted, near) = handles.decision(&admitted, false, Source::DenyCache);
        assert_eq!(
            counted,
            "tollgate_decisions_total,tollgate_outcome=admitted,tollgate_source=deny_cache"
        );
        assert_eq!(near.map(String::as_str), Some("tollgate_near_limit_total"));
        let denied = Decision {
            allowed: false,
            ..admitted
        };
        let (counted, near) = handles.decision(&denied, true, Source::Fallback);
        assert_eq!(
            counted,
            "tollgate_decisions_total,tollgate_outcome=shadow_denied,tollgate_source=fallback"
        );
        assert_eq!(near, None);
        assert_eq!(
            handles.failure(Behaviour::Local, Why::Timeout),
            "tollgate_store_failures_total,tollgate_failure_behaviour=local,tollgate_failure_reason=timeout"
        );
        let mut all = Vec::new();
        let _ = Handles::new(|i, a| all.push((i.name, a.len())));
        assert_eq!(all.len(), 9 + 1 + 9, "every series once");
    }

    #[test]
    fn a_tally_read_out_through_its_getters_is_rebuilt_by_from_counts() {
        let mut t = Tally::default();
        let d = |allowed, remaining| Decision {
            allowed,
            limit: 10,
            remaining,
            ..Decision::default()
        };
        t.decision(&d(true, 1), false, Source::Fallback);
        t.decision(&d(false, 0), true, Source::Store);
        t.failure(Behaviour::Closed, Why::Indeterminate);
        t.wait(WaitResult::Admitted, 30_000_000);
        let decisions = Outcome::ALL.map(|o| Source::ALL.map(|s| t.decisions(o, s)));
        let failures = Behaviour::ALL.map(|b| Why::ALL.map(|w| t.failures(b, w)));
        let waits = WaitResult::ALL.map(|r| *t.waits(r));
        assert_eq!(
            Tally::from_counts(decisions, t.near_limit(), failures, waits),
            t
        );
    }
}

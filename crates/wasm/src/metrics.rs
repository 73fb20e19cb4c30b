//! The counts of the npm package's limiters, in the core's metric model
//! ([`tollgate::metrics`]): each limiter keeps [`Tally`]s in wasm memory, counted where its
//! decisions are made (no extra crossing per check), and hands them to JavaScript as plain
//! numbers ([`numbers`]). With the `metrics-text` feature (the Node build in `pkg/redis/`,
//! which `tollgate/redis` and `tollgate/metrics` load), `render_metrics` writes any
//! limiters' numbers (from either wasm instance) as Prometheus text with the core's
//! `render`, and `metric_model` gives the OpenTelemetry adapter the core's names. They are
//! left out of the main `.wasm` (browsers, Workers): rendering is kilobytes of it gzipped,
//! over the package's size budget (PERF.md, "Measured reasons in the code").
//!
//! The numbers of one tally, in order ([`COUNTS_LEN`]): the decisions by outcome
//! ([`Outcome::ALL`]) then source ([`Source::ALL`]), the near-limit count, the store
//! failures by behaviour ([`Behaviour::ALL`]) then reason ([`Why::ALL`]), then for each wait
//! result ([`WaitResult::ALL`]) the observations per bucket ([`WAIT_BUCKETS`], then above
//! them; not cumulative) and their sum in nanoseconds.

use std::cell::Cell;

use tollgate::metrics::{Outcome, Source, Tally, WaitResult, WAIT_BUCKETS};
use tollgate::store::fallback::{Behaviour, Why};
use tollgate::Decision;

use crate::now_ns;

const BUCKETS: usize = WAIT_BUCKETS.len() + 1;

/// How many numbers one tally is (see the module docs).
pub const COUNTS_LEN: usize = 9 + 1 + 9 + 2 * (BUCKETS + 1);

/// A tally's numbers (see the module docs).
pub fn numbers(t: &Tally) -> Vec<f64> {
    let mut out = Vec::with_capacity(COUNTS_LEN);
    for outcome in Outcome::ALL {
        out.extend(Source::ALL.map(|s| t.decisions(outcome, s) as f64));
    }
    out.push(t.near_limit() as f64);
    for behaviour in Behaviour::ALL {
        out.extend(Why::ALL.map(|why| t.failures(behaviour, why) as f64));
    }
    for result in WaitResult::ALL {
        let h = t.waits(result);
        out.extend(h.buckets.map(|n| n as f64));
        out.push(h.sum as f64);
    }
    out
}

/// `tollgate.concurrency.in_use` of a limiter whose policies include a concurrency limit:
/// slots taken by admissions and not given back by a release yet (the rule of the core's
/// `Metered` and of `tollgate-redis`), kept by both wasm limiters (`Core`, `FleetLimits`).
pub struct InUse {
    /// Whether admissions take slots.
    slots: bool,
    held: Cell<u64>,
}

impl InUse {
    /// The gauge of a limiter whose admissions take slots (`slots`) or not.
    pub fn new(slots: bool) -> InUse {
        InUse {
            slots,
            held: Cell::new(0),
        }
    }

    /// An admission (`allowed`) of `cost` took slots.
    pub fn decided(&self, allowed: bool, cost: u64) {
        if self.slots && allowed {
            self.held.set(self.held.get() + cost);
        }
    }

    /// `cost` slots were given back.
    pub fn released(&self, cost: u64) {
        self.held.set(self.held.get().saturating_sub(cost));
    }

    /// The slots held now; -1 without a concurrency limit (a number rather than an
    /// `Option` for JavaScript: a smaller main `.wasm`, (PERF.md, "Measured reasons in the code")).
    pub fn get(&self) -> f64 {
        if self.slots {
            self.held.get() as f64
        } else {
            -1.0
        }
    }
}

/// Counts a decision that JavaScript holds (a remembered denial, a fallback's, a Redis
/// module's answer, a waiter's last): the core sorts it by its `allowed`, `limit` and
/// `remaining` ([`Tally::decision`]).
pub fn decision(t: &mut Tally, source: Source, allowed: bool, limit: f64, remaining: f64) {
    let d = Decision {
        allowed,
        limit: limit as u64,
        remaining: remaining as u64,
        ..Decision::default()
    };
    t.decision(&d, false, source);
}

/// Counts a finished wait of `waited_ms`: admitted with the decision's `limit` and
/// `remaining`, or given up (a denial). One decision per call of `acquire`, as `check`.
pub fn wait(
    t: &mut Tally,
    source: Source,
    admitted: bool,
    waited_ms: f64,
    limit: f64,
    remaining: f64,
) {
    decision(t, source, admitted, limit, remaining);
    let result = if admitted {
        WaitResult::Admitted
    } else {
        WaitResult::GaveUp
    };
    t.wait(result, now_ns(waited_ms.max(0.0)));
}

#[cfg(feature = "store")]
/// The source of index `i` in [`Source::ALL`] (store when out of range).
pub fn source(i: u32) -> Source {
    Source::ALL
        .get(i as usize)
        .copied()
        .unwrap_or(Source::Store)
}

/// Prometheus text and the names for exporters (the `metrics-text` feature).
#[cfg(feature = "metrics-text")]
mod text {
    use tollgate::metrics::{
        render, Histogram, Outcome, Series, Source, Tally, WaitResult, BEHAVIOUR, INSTRUMENTS,
        OUTCOME, POLICY, REASON, ROUTE, SOURCE, WAIT_BUCKETS, WAIT_RESULT,
    };
    use tollgate::store::fallback::{Behaviour, Why};
    use tollgate::NANOS_PER_SEC;
    use wasm_bindgen::prelude::*;

    use super::{BUCKETS, COUNTS_LEN};

    /// The tally of [`numbers`]' output (missing numbers count 0).
    fn tally(n: &[f64]) -> Tally {
        let at = |i: usize| n.get(i).copied().unwrap_or(0.0) as u64;
        let grid = |from: usize| [0, 1, 2].map(|r| [0, 1, 2].map(|c| at(from + 3 * r + c)));
        let wait = |from: usize| Histogram {
            buckets: core::array::from_fn(|i| at(from + i)),
            sum: at(from + BUCKETS),
        };
        Tally::from_counts(grid(0), at(9), grid(10), [wait(19), wait(19 + BUCKETS + 1)])
    }

    /// Prometheus text (the core's [`render`]) for the series `policies[i]` on `routes[i]` (""
    /// for none) with the numbers `counts[i * COUNTS_LEN..]` and `inUse[i]` (NaN: the policy
    /// has no concurrency count).
    #[wasm_bindgen(js_name = renderMetrics)]
    pub fn render_metrics(
        policies: Vec<String>,
        routes: Vec<String>,
        counts: &[f64],
        in_use: &[f64],
    ) -> String {
        let tallies: Vec<Tally> = counts.chunks(COUNTS_LEN).map(tally).collect();
        let series: Vec<Series<'_>> = policies
            .iter()
            .zip(&tallies)
            .enumerate()
            .map(|(i, (policy, tally))| Series {
                policy,
                route: routes.get(i).filter(|r| !r.is_empty()).map(String::as_str),
                tally,
                concurrency_in_use: in_use.get(i).filter(|n| !n.is_nan()).map(|n| *n as u64),
            })
            .collect();
        render(&series)
    }

    /// The core's names, for the OpenTelemetry adapter: for each instrument (in
    /// [`INSTRUMENTS`]' order) its name, unit and description; then the attribute keys policy,
    /// route, outcome, source, behaviour, reason, wait result; then the values of the outcomes,
    /// sources, behaviours, reasons and wait results, each in the order of its `ALL`.
    #[wasm_bindgen(js_name = metricModel)]
    pub fn metric_model() -> Vec<String> {
        let mut out: Vec<&str> = Vec::new();
        for i in INSTRUMENTS {
            out.extend([i.name, i.unit, i.description]);
        }
        out.extend(
            [
                POLICY,
                ROUTE,
                OUTCOME,
                SOURCE,
                BEHAVIOUR,
                REASON,
                WAIT_RESULT,
            ]
            .map(|a| a.name),
        );
        out.extend(Outcome::ALL.map(Outcome::as_str));
        out.extend(Source::ALL.map(Source::as_str));
        out.extend(Behaviour::ALL.map(Behaviour::as_str));
        out.extend(Why::ALL.map(Why::as_str));
        out.extend(WaitResult::ALL.map(WaitResult::as_str));
        out.into_iter().map(String::from).collect()
    }

    /// The wait histogram's bucket bounds in seconds ([`WAIT_BUCKETS`]).
    #[wasm_bindgen(js_name = waitBuckets)]
    pub fn wait_buckets() -> Vec<f64> {
        WAIT_BUCKETS
            .iter()
            .map(|&b| b as f64 / NANOS_PER_SEC as f64)
            .collect()
    }
}

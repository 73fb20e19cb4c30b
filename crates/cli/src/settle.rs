//! `tollgate settle`: two ways of charging a cost known only after the response, side by
//! side on a trace whose requests carry an estimate (`cost`) and the cost they turned out
//! to have (`actual`, known `duration_ms` after they start: when an LLM stream ends).
//!
//! * **reserve-then-settle** (the core's [`tollgate::settle`]): a request is decided for its
//!   estimate and, when it ends, settled to its actual cost: the difference given back, or
//!   charged as a debt that later requests wait off.
//! * **charge-after** (Envoy AI Gateway's cost at stream end, Kong AI Rate Limiting's "the
//!   cost is only reflected during the next request"): a request is checked for a cost of
//!   0 and charged its actual cost when it ends, however far past the limit.
//!
//! For each way it counts the requests admitted and denied, the actual cost they spent, and
//! the most spent for one key in any interval as long as the policy's window (by the time
//! the requests started), beside the algorithm's bound for that interval (`compare`'s):
//! what goes past the bound is the overspend. Requests that overlap are where the two
//! differ: charge-after admits every request that starts before the first ends.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::Write;

use serde::Serialize;
use tollgate::settle::{check_reservable, Charge};
use tollgate::{millis, Algorithm, Nanos, Policy, NANOS_PER_MS};

use crate::compare::{bound, peak};
use crate::error::{CliError, Source};
use crate::limiter::PerKey;
use crate::trace::{read_all, time_order, Request, Trace};

/// How a way charges a request when it is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Decide the estimate; settle the actual cost at the end.
    ReserveThenSettle,
    /// Check a cost of 0; charge the actual cost at the end.
    ChargeAfter,
}

impl Way {
    /// Both, in table order.
    pub const ALL: [Way; 2] = [Way::ReserveThenSettle, Way::ChargeAfter];

    /// The row's name.
    pub fn name(self) -> &'static str {
        match self {
            Way::ReserveThenSettle => "reserve-then-settle",
            Way::ChargeAfter => "charge-after",
        }
    }

    /// What is charged when the request is decided.
    fn upfront(self, request: &Request) -> u64 {
        match self {
            Way::ReserveThenSettle => request.cost,
            Way::ChargeAfter => 0,
        }
    }
}

/// One way's results.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Row {
    /// The way's name.
    pub way: &'static str,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
    /// The actual cost of the admitted requests.
    pub spent: u64,
    /// Given back by settles (estimates above the actual cost).
    pub refunded: u64,
    /// Charged by settles past what was charged upfront.
    pub charged_after: u64,
    /// The most actual cost admitted for one key in any interval of the policy's window.
    pub max_in_window: u64,
    /// The key it happened for.
    pub max_window_key: Option<String>,
    /// Where that interval starts, in ms.
    pub max_window_start_ms: Option<u64>,
    /// How far `max_in_window` passes the bound (0 within it; `null` without a bound).
    pub overspend: Option<u64>,
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The policy.
    pub policy: String,
    /// Requests in the trace.
    pub requests: u64,
    /// The sum of the estimates of every request.
    pub estimated: u64,
    /// The sum of the actual costs of every request.
    pub actual: u64,
    /// The interval the peak is measured over (the policy's window), in ms.
    pub window_ms: u64,
    /// The algorithm's bound for that interval (`null` for the sliding window counter).
    pub bound: Option<u64>,
    /// How the bound is computed.
    pub bound_rule: &'static str,
    /// One row per way.
    pub ways: Vec<Row>,
}

/// The admitted requests still running, settled when they end.
struct Running<'a> {
    requests: &'a [Request],
    source: &'a Source,
    /// (end, request index), earliest first (ties in trace order).
    due: BinaryHeap<Reverse<(u64, usize)>>,
    /// What each running request was charged when it was decided.
    charged: HashMap<usize, Charge>,
}

impl Running<'_> {
    fn start(&mut self, i: usize, charge: Charge) {
        let r = &self.requests[i];
        self.charged.insert(i, charge);
        let end = r.time_ms.saturating_add(r.duration_ms.unwrap_or(0));
        self.due.push(Reverse((end, i)));
    }

    /// Settles every request that ended at or before `until`.
    fn settle_until(
        &mut self,
        until: u64,
        limiter: &mut PerKey,
        row: &mut Row,
    ) -> Result<(), CliError> {
        while let Some(&Reverse((end, i))) = self.due.peek() {
            if end > until {
                break;
            }
            self.due.pop();
            let r = &self.requests[i];
            let Some(charge) = self.charged.remove(&i) else {
                continue;
            };
            let actual = r.actual.unwrap_or(r.cost);
            let settled = limiter
                .settle(&r.key, charge, actual, end)
                .map_err(|error| CliError::Settle {
                    source: self.source.clone(),
                    line: r.line,
                    error,
                })?;
            row.refunded += settled.refunded;
            row.charged_after += settled.charged + settled.unpaid;
        }
        Ok(())
    }
}

fn run_one(
    way: Way,
    policy: Policy,
    source: &Source,
    requests: &[Request],
    order: &[usize],
    window: Nanos,
    bound: Option<u64>,
) -> Result<Row, CliError> {
    let mut limiter = PerKey::new(policy);
    let mut running = Running {
        requests,
        source,
        due: BinaryHeap::new(),
        charged: HashMap::new(),
    };
    let mut row = Row {
        way: way.name(),
        admitted: 0,
        denied: 0,
        spent: 0,
        refunded: 0,
        charged_after: 0,
        max_in_window: 0,
        max_window_key: None,
        max_window_start_ms: None,
        overspend: None,
    };
    let mut spent_at: HashMap<&str, Vec<(Nanos, u64)>> = HashMap::new();
    for &i in order {
        let r = &requests[i];
        // A request that ended at this instant settles before one arriving is decided.
        running.settle_until(r.time_ms, &mut limiter, &mut row)?;
        let d = limiter
            .check(&r.key, r.time_ms, way.upfront(r))
            .map_err(|error| CliError::Decide {
                source: source.clone(),
                line: r.line,
                error,
            })?;
        if !d.allowed {
            row.denied += 1;
            continue;
        }
        row.admitted += 1;
        let actual = r.actual.unwrap_or(r.cost);
        row.spent += actual;
        spent_at
            .entry(&r.key)
            .or_default()
            .push((millis(r.time_ms), actual));
        let charge = Charge {
            cost: way.upfront(r),
            at: millis(r.time_ms),
        };
        running.start(i, charge);
    }
    running.settle_until(u64::MAX, &mut limiter, &mut row)?;
    let mut keys: Vec<_> = spent_at.into_iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, mut events) in keys {
        events.sort_by_key(|e| e.0);
        let (n, at) = peak(&events, window);
        if n > row.max_in_window {
            row.max_in_window = n;
            row.max_window_start_ms = at.map(|t| t / NANOS_PER_MS);
            row.max_window_key = Some(key.to_owned());
        }
    }
    row.overspend = bound.map(|b| row.max_in_window.saturating_sub(b));
    Ok(row)
}

/// Runs both ways of [`Way::ALL`] on the trace. Every request needs an `actual`; the policy
/// must be one a reserve can charge and a settle can settle (not a concurrency limit or a
/// leaky queue).
pub fn compare(policy: Policy, trace: Trace, sort: bool) -> Result<Report, CliError> {
    let not_settleable = check_reservable(&policy).err().or_else(|| {
        (policy.algorithm() == Algorithm::Concurrency).then_some(
            tollgate::ReservationError::NotSettleable {
                policy: policy.algorithm(),
            },
        )
    });
    if let Some(e) = not_settleable {
        return Err(CliError::Usage(format!("--policy \"{policy}\": {e}")));
    }
    let (source, requests) = read_all(trace, sort)?;
    if let Some(r) = requests.iter().find(|r| r.actual.is_none()) {
        return Err(CliError::Malformed {
            source,
            line: r.line,
            reason: "no actual cost: `tollgate settle` needs an `actual` column (the cost the \
                     request turned out to have) on every line"
                .into(),
        });
    }
    let order = if sort {
        time_order(&requests)
    } else {
        (0..requests.len()).collect()
    };
    let window = policy.quota().map_or(NANOS_PER_MS * 1000, |q| q.window());
    let (bound, bound_rule) = bound(&policy, window);
    let ways = Way::ALL
        .into_iter()
        .map(|w| run_one(w, policy, &source, &requests, &order, window, bound))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Report {
        policy: policy.to_string(),
        requests: requests.len() as u64,
        estimated: requests.iter().map(|r| r.cost).sum(),
        actual: requests.iter().filter_map(|r| r.actual).sum(),
        window_ms: window / NANOS_PER_MS,
        bound,
        bound_rule,
        ways,
    })
}

/// Prints the report as a table.
pub fn write_table(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} requests, {} estimated, {} actual",
        report.policy, report.requests, report.estimated, report.actual
    )?;
    let bound = match report.bound {
        Some(b) => format!("{b} ({})", report.bound_rule),
        None => format!("- ({})", report.bound_rule),
    };
    writeln!(
        out,
        "most spent for one key in any {} ms, against the bound {bound}",
        report.window_ms
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<20}  {:>8}  {:>8}  {:>12}  {:>10}  {:>13}  {:>12}  {:>10}",
        "way",
        "admitted",
        "denied",
        "spent",
        "refunded",
        "charged after",
        "max in window",
        "overspend"
    )?;
    for row in &report.ways {
        let over = row
            .overspend
            .map_or_else(|| "-".to_owned(), |o| o.to_string());
        writeln!(
            out,
            "{:<20}  {:>8}  {:>8}  {:>12}  {:>10}  {:>13}  {:>12}  {:>10}",
            row.way,
            row.admitted,
            row.denied,
            row.spent,
            row.refunded,
            row.charged_after,
            row.max_in_window,
            over
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "reserve-then-settle: each request decided for its estimate (cost), settled to its actual \
         cost when it ends (time_ms + duration_ms)."
    )?;
    writeln!(
        out,
        "charge-after: each request checked for 0, charged its actual cost when it ends."
    )?;
    Ok(())
}

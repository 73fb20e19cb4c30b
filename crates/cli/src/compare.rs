//! `tollgate compare`: every algorithm on the same trace, side by side (the burst
//! experiment of `tests/burst.rs` as a tool).
//!
//! For each algorithm it counts the admitted and rejected requests, the largest cost admitted
//! for one key in any interval `[t, t + T)` of `--window-ms` (for the leaky queue, on its
//! *output*: departure = arrival + delay, which is what the upstream sees), and the largest
//! queue delay. Next to the measured peak it prints the algorithm's bound for an interval
//! of `T`: fixed window `(ceil(T/W) + 1) * L` (2L for T = W), sliding log `ceil(T/W) * L`,
//! token bucket, GCRA and leaky bucket `B + r*T`, leaky queue output `ceil(r*T)`. The
//! sliding window counter is an approximation with no exact bound: its excess over `L` is
//! its measured error.

use std::collections::HashMap;
use std::io::Write;

use serde::Serialize;
use tollgate::{ceil_millis, millis, Algorithm, Nanos, Policy, NANOS_PER_MS};

use crate::error::{CliError, Source};
use crate::limiter::PerKey;
use crate::trace::{read_all, time_order, Request, Trace};

/// The algorithms compared, in table order: every rate algorithm of the core, in the order of
/// [`Algorithm::ALL`] (concurrency needs request durations and is not a rate).
pub fn algorithms() -> impl Iterator<Item = Algorithm> {
    Algorithm::ALL
        .into_iter()
        .filter(|&a| a != Algorithm::Concurrency)
}

/// What `compare` was asked.
pub struct Options {
    /// `<limit>/<window>`, like `10/s`.
    pub limit: String,
    /// The bucket and queue capacity (default: the limit).
    pub burst: Option<u64>,
    /// The interval length the peak is measured over, in ms.
    pub window_ms: u64,
    /// Sort the trace by time instead of rejecting time going backwards.
    pub sort: bool,
}

/// One algorithm's results.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Row {
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// The full policy it ran (`token-bucket 10/s`).
    pub policy: String,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests rejected.
    pub rejected: u64,
    /// The most cost admitted for one key in any interval of `window_ms` (leaky queue: on
    /// its output).
    pub max_in_window: u64,
    /// Where that interval starts, in ms (rounded down); `null` when nothing was admitted.
    pub max_window_start_ms: Option<u64>,
    /// The key it happened for.
    pub max_window_key: Option<String>,
    /// The algorithm's bound for the same interval (`null` for the sliding window counter).
    pub bound: Option<u64>,
    /// How the bound is computed.
    pub bound_rule: &'static str,
    /// The largest queue delay, in ms (rounded up); zero except for the leaky queue.
    pub max_delay_ms: u64,
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The limit compared.
    pub limit: String,
    /// The bucket capacity given, if any.
    pub burst: Option<u64>,
    /// The interval length.
    pub window_ms: u64,
    /// Requests in the trace.
    pub requests: u64,
    /// Distinct keys in the trace.
    pub keys: u64,
    /// One row per algorithm.
    pub algorithms: Vec<Row>,
}

/// Builds the policy for `algorithm` from `--limit` and `--burst` (the burst applies to
/// the bucket algorithms only).
pub fn policy_for(
    algorithm: Algorithm,
    limit: &str,
    burst: Option<u64>,
) -> Result<Policy, CliError> {
    let text = match burst {
        Some(b) if algorithm.is_bucket() => format!("{} {limit} burst {b}", algorithm.name()),
        _ => format!("{} {limit}", algorithm.name()),
    };
    Ok(text.parse::<Policy>()?)
}

/// The algorithm's bound on the cost admitted for one key in an interval of `t`, and how it
/// is computed (`None` for the sliding window counter, an approximation).
pub fn bound(policy: &Policy, t: Nanos) -> (Option<u64>, &'static str) {
    let Some(q) = policy.quota() else {
        return (None, "-");
    };
    let (l, w, t) = (q.limit() as u128, q.window() as u128, t as u128);
    let one_window = t == w;
    let sat = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
    match policy.algorithm() {
        Algorithm::FixedWindow => (
            Some(sat((t.div_ceil(w) + 1) * l)),
            if one_window { "2L" } else { "(ceil(T/W)+1)*L" },
        ),
        Algorithm::SlidingLog => (
            Some(sat(t.div_ceil(w) * l)),
            if one_window { "L" } else { "ceil(T/W)*L" },
        ),
        // floor(B + r*T): a count of whole units.
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => {
            (Some(sat(policy.limit() as u128 + l * t / w)), "B + r*T")
        }
        Algorithm::LeakyQueue => (Some(sat((l * t).div_ceil(w))), "r*T, output"),
        Algorithm::SlidingWindow => (None, "approximation"),
        Algorithm::Concurrency => (None, "-"),
    }
}

/// The largest total cost within any `[t, t + window)` of sorted `(time, cost)` events, and
/// where it starts.
pub fn peak(events: &[(Nanos, u64)], window: Nanos) -> (u64, Option<Nanos>) {
    let (mut best, mut at) = (0u64, None);
    let (mut end, mut sum) = (0usize, 0u64);
    for (start, &(t0, _)) in events.iter().enumerate() {
        if start > 0 {
            sum -= events[start - 1].1;
        }
        while end < events.len() && events[end].0 < t0.saturating_add(window) {
            sum += events[end].1;
            end += 1;
        }
        if sum > best {
            best = sum;
            at = Some(t0);
        }
    }
    (best, at)
}

fn run_one(
    policy: Policy,
    source: &Source,
    requests: &[Request],
    order: &[usize],
    window: Nanos,
) -> Result<Row, CliError> {
    let mut limiter = PerKey::new(policy);
    let mut admitted_at: HashMap<&str, Vec<(Nanos, u64)>> = HashMap::new();
    let (mut admitted, mut rejected, mut max_delay) = (0u64, 0u64, 0u64);
    for &i in order {
        let r = &requests[i];
        let d = limiter
            .check(&r.key, r.time_ms, r.cost)
            .map_err(|error| CliError::Decide {
                source: source.clone(),
                line: r.line,
                error,
            })?;
        if d.allowed {
            admitted += 1;
            max_delay = max_delay.max(d.delay);
            admitted_at
                .entry(&r.key)
                .or_default()
                .push((millis(r.time_ms).saturating_add(d.delay), r.cost));
        } else {
            rejected += 1;
        }
    }
    let (mut best, mut best_at, mut best_key) = (0, None, None);
    let mut keys: Vec<_> = admitted_at.into_iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, mut events) in keys {
        events.sort_by_key(|e| e.0);
        let (n, at) = peak(&events, window);
        if n > best {
            (best, best_at, best_key) = (n, at, Some(key.to_owned()));
        }
    }
    let (bound, bound_rule) = bound(&policy, window);
    Ok(Row {
        algorithm: policy.algorithm().name(),
        policy: policy.to_string(),
        admitted,
        rejected,
        max_in_window: best,
        max_window_start_ms: best_at.map(|t| t / NANOS_PER_MS),
        max_window_key: best_key,
        bound,
        bound_rule,
        max_delay_ms: ceil_millis(max_delay),
    })
}

/// Runs every algorithm of [`algorithms`] on the trace.
pub fn compare(options: &Options, trace: Trace) -> Result<Report, CliError> {
    let limit = options.limit.trim();
    if limit.is_empty() || !limit.contains('/') || limit.contains(char::is_whitespace) {
        return Err(CliError::Usage(format!(
            "--limit takes <limit>/<window>, like 10/s or 600/10min (got \"{}\")",
            options.limit
        )));
    }
    if options.window_ms == 0 {
        return Err(CliError::Usage("--window-ms must be at least 1".into()));
    }
    let policies = algorithms()
        .map(|a| policy_for(a, limit, options.burst))
        .collect::<Result<Vec<_>, _>>()?;
    let (source, requests) = read_all(trace, options.sort)?;
    let order = if options.sort {
        time_order(&requests)
    } else {
        (0..requests.len()).collect()
    };
    let window = millis(options.window_ms);
    let rows = policies
        .into_iter()
        .map(|p| run_one(p, &source, &requests, &order, window))
        .collect::<Result<Vec<_>, _>>()?;
    let keys = requests
        .iter()
        .map(|r| r.key.as_str())
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    Ok(Report {
        limit: limit.to_owned(),
        burst: options.burst,
        window_ms: options.window_ms,
        requests: requests.len() as u64,
        keys,
        algorithms: rows,
    })
}

/// Prints the report as a table.
pub fn write_table(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let capacity = match report.burst {
        Some(b) => format!("burst {b}"),
        None => "burst = limit".to_owned(),
    };
    writeln!(
        out,
        "limit {}, {capacity}, {} requests, {} key{}, peak over any {} ms",
        report.limit,
        report.requests,
        report.keys,
        if report.keys == 1 { "" } else { "s" },
        report.window_ms
    )?;
    writeln!(out)?;
    let peak_title = format!("max in {} ms", report.window_ms);
    writeln!(
        out,
        "{:<14}  {:>8}  {:>8}  {:>14}  {:>9}  {:<20}  {:>14}",
        "algorithm", "admitted", "rejected", peak_title, "from (ms)", "bound", "max delay (ms)"
    )?;
    for row in &report.algorithms {
        let bound = match row.bound {
            Some(b) => format!("{b} ({})", row.bound_rule),
            None => format!("- ({})", row.bound_rule),
        };
        let from = row
            .max_window_start_ms
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        writeln!(
            out,
            "{:<14}  {:>8}  {:>8}  {:>14}  {:>9}  {:<20}  {:>14}",
            row.algorithm,
            row.admitted,
            row.rejected,
            row.max_in_window,
            from,
            bound,
            row.max_delay_ms
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "max in {} ms: the most cost admitted for one key in any [t, t+{} ms); leaky-queue is \
         measured on its output (arrival + delay).",
        report.window_ms, report.window_ms
    )?;
    writeln!(
        out,
        "sliding-window is an approximation with no exact bound: any excess over the limit is \
         its error."
    )?;
    Ok(())
}

//! `tollgate simulate`: what a policy would have decided for every request of a trace.

use std::io::Write;

use serde::Serialize;
use tollgate::{Algorithm, Decision, Policy};

use crate::error::{CliError, Source};
use crate::limiter::{PerKey, Releases};
use crate::trace::{read_all, time_order, Order, Request, Trace};

/// One output line: the request and the core's decision, durations in whole milliseconds
/// rounded up.
#[derive(Serialize)]
pub struct Outcome<'a> {
    /// When the request arrived.
    pub time_ms: u64,
    /// Its key.
    pub key: &'a str,
    /// Its cost.
    pub cost: u64,
    /// Whether it was admitted.
    pub allowed: bool,
    /// The key's capacity.
    pub limit: u64,
    /// What the key could still spend after this decision.
    pub remaining: u64,
    /// Until the key is back to fresh.
    pub reset_after_ms: u64,
    /// Until this request would be admitted (0 when admitted).
    pub retry_after_ms: u64,
    /// How long the leaky queue holds the request (leaky-queue policies only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

impl<'a> Outcome<'a> {
    fn new(policy: &Policy, request: &'a Request, d: &Decision) -> Outcome<'a> {
        Outcome {
            time_ms: request.time_ms,
            key: &request.key,
            cost: request.cost,
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_after_ms: d.reset_after_ms(),
            retry_after_ms: d.retry_after_ms(),
            delay_ms: (policy.algorithm() == Algorithm::LeakyQueue).then(|| d.delay_ms()),
        }
    }
}

/// Feeds requests to a per-key limiter, releasing concurrency slots when they come due.
struct Simulation {
    limiter: PerKey,
    releases: Releases,
    concurrency: bool,
}

impl Simulation {
    fn new(policy: Policy) -> Simulation {
        Simulation {
            concurrency: policy.algorithm() == Algorithm::Concurrency,
            limiter: PerKey::new(policy),
            releases: Releases::default(),
        }
    }

    fn decide(&mut self, source: &Source, request: &Request) -> Result<Decision, CliError> {
        let fail = |error| CliError::Decide {
            source: source.clone(),
            line: request.line,
            error,
        };
        if self.concurrency {
            if request.duration_ms.is_none() {
                return Err(CliError::Malformed {
                    source: source.clone(),
                    line: request.line,
                    reason: "a concurrency policy needs a duration_ms for every request \
                             (how long it holds its slot)"
                        .into(),
                });
            }
            while let Some((key, cost)) = self.releases.pop_due(request.time_ms) {
                self.limiter.release(&key, cost).map_err(fail)?;
            }
        }
        let decision = self
            .limiter
            .check(&request.key, request.time_ms, request.cost)
            .map_err(fail)?;
        if let (true, true, Some(duration)) =
            (self.concurrency, decision.allowed, request.duration_ms)
        {
            self.releases.schedule(
                request.time_ms.saturating_add(duration),
                &request.key,
                request.cost,
            );
        }
        Ok(decision)
    }
}

/// Writes one JSON object per request to `out`, in input order. Without `sort` the trace
/// streams (one line in memory at a time) and time going backwards is an error; with `sort`
/// the whole trace is read, decided in time order, and printed in input order.
pub fn run(policy: Policy, trace: Trace, sort: bool, out: &mut impl Write) -> Result<(), CliError> {
    let mut sim = Simulation::new(policy);
    if sort {
        let (source, requests) = read_all(trace, true)?;
        let mut decisions = vec![Decision::default(); requests.len()];
        for i in time_order(&requests) {
            decisions[i] = sim.decide(&source, &requests[i])?;
        }
        for (request, d) in requests.iter().zip(&decisions) {
            write_line(out, &Outcome::new(&policy, request, d))?;
        }
    } else {
        let source = trace.source().clone();
        let mut order = Order::default();
        for request in trace {
            let request = request?;
            order.check(&source, &request)?;
            let d = sim.decide(&source, &request)?;
            write_line(out, &Outcome::new(&policy, &request, &d))?;
        }
    }
    out.flush()?;
    Ok(())
}

fn write_line(out: &mut impl Write, outcome: &Outcome<'_>) -> Result<(), CliError> {
    serde_json::to_writer(&mut *out, outcome).map_err(|e| CliError::Write(e.into()))?;
    out.write_all(b"\n")?;
    Ok(())
}

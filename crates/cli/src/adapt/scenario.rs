//! The scenarios of issue 42's "done when", their bounds, and the table of one run.
//!
//! Server: 100 workers, 10 ms per request (constant, or exponential with that mean), so
//! its capacity is 10,000 requests per second and its knee 100 in flight. Every
//! controller starts at a limit of 20, within [5, 1000]; clients time out after 1 s.
//! Figures are measured from `measure_from` on (the warm-up excluded), except where a
//! bound says otherwise.

use std::fmt::Write as _;

use tollgate::adaptive::ParamError;
use tollgate::{Nanos, NANOS_PER_SEC};

use crate::adapt::baselines::{Envoy, Gradient2, Vegas};
use crate::adapt::controller::{Bounds, Controller, Static, Tollgate};
use crate::adapt::sim::{percentile, run, Schedule, Service, Setup, SimError, Tick, TICK};

const SEC: Nanos = NANOS_PER_SEC;
const MS: Nanos = 1_000_000;
/// Every controller's floor, ceiling and start.
pub const BOUNDS: Bounds = Bounds {
    min: 5,
    max: 1000,
    initial: 20,
};
/// The nominal server's workers (and knee).
pub const WORKERS: u32 = 100;
/// The mean service time.
pub const SERVICE: Nanos = 10 * MS;
const TICKS_PER_SEC: usize = (SEC / TICK) as usize;

/// One scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Its name on the command line (`1`, `1x`, `2`, ...).
    pub id: &'static str,
    /// What it is, in words.
    pub title: &'static str,
    /// The simulation.
    pub setup: Setup,
    /// Where the measured part starts.
    pub measure_from: Nanos,
}

fn constant<T>(v: T) -> Schedule<T> {
    vec![(0, v)]
}

/// The scenarios, in order.
pub fn scenarios() -> Vec<Scenario> {
    let capacity = WORKERS as f64 * (SEC / SERVICE) as f64;
    let base = Setup {
        workers: constant(WORKERS),
        rate: constant(2.0 * capacity),
        service: Service::Constant(SERVICE),
        timeout: SEC,
        duration: 60 * SEC,
    };
    vec![
        Scenario {
            id: "1",
            title: "2x capacity offered, 10 ms constant, from a limit of 20",
            setup: base.clone(),
            measure_from: 10 * SEC,
        },
        Scenario {
            id: "1x",
            title: "2x capacity offered, 10 ms exponential, from a limit of 20",
            setup: Setup {
                service: Service::Exponential(SERVICE),
                ..base.clone()
            },
            measure_from: 10 * SEC,
        },
        Scenario {
            id: "2",
            title: "2x offered; the workers halve at 60 s and come back at 90 s",
            setup: Setup {
                workers: vec![(0, WORKERS), (60 * SEC, WORKERS / 2), (90 * SEC, WORKERS)],
                duration: 120 * SEC,
                ..base.clone()
            },
            measure_from: 10 * SEC,
        },
        Scenario {
            id: "3",
            title: "1.2x capacity offered for 10 minutes",
            setup: Setup {
                rate: constant(1.2 * capacity),
                duration: 600 * SEC,
                ..base.clone()
            },
            measure_from: 10 * SEC,
        },
        Scenario {
            id: "4",
            title: "half capacity offered, 10 ms exponential (noisy)",
            setup: Setup {
                rate: constant(0.5 * capacity),
                service: Service::Exponential(SERVICE),
                duration: 120 * SEC,
                ..base.clone()
            },
            measure_from: 10 * SEC,
        },
        Scenario {
            id: "5",
            title: "the server hangs: every answer a timeout (1 s)",
            setup: Setup {
                service: Service::Hang,
                duration: 30 * SEC,
                ..base
            },
            measure_from: 10 * SEC,
        },
    ]
}

/// The controllers of a run, tollgate's first.
pub fn controllers(seed: u64) -> Result<Vec<Box<dyn Controller + Send>>, ParamError> {
    Ok(vec![
        Box::new(Tollgate::new(BOUNDS, seed)?),
        Box::new(Static::new(WORKERS.into())),
        Box::new(Gradient2::new(BOUNDS)),
        Box::new(Vegas::new(BOUNDS, seed)),
        Box::new(Envoy::new(BOUNDS, seed)),
    ])
}

/// One bound and what a controller reached.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// The bound, in words.
    pub bound: String,
    /// What was reached, in words.
    pub reached: String,
    /// Whether the bound holds.
    pub pass: bool,
}

/// One controller's line of the table.
#[derive(Clone, Debug)]
pub struct Line {
    /// The controller.
    pub controller: &'static str,
    /// Answers within the timeout, in percent of the server's capacity over the measured
    /// part (0 when the server never answers).
    pub goodput: f64,
    /// The median latency of the answers (ms).
    pub p50: f64,
    /// The 99th percentile latency of the answers (ms).
    pub p99: f64,
    /// When the scenario's convergence happened (s, see [`Report::converge`]), if it did.
    pub converge: Option<f64>,
    /// Requests shed by the controller, in percent of those offered.
    pub shed: f64,
    /// The mean and the largest limit over the measured part, and the last.
    pub limits: (f64, u64, u64),
    /// The scenario's bounds, checked.
    pub checks: Vec<Check>,
    /// The timeline.
    pub ticks: Vec<Tick>,
}

impl Line {
    /// Whether every bound holds.
    pub fn passes(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

/// One scenario's table.
#[derive(Clone, Debug)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// The 99th percentile latency of the same server unloaded (10% of capacity, no
    /// limit), ms; `None` for a server that never answers.
    pub unloaded_p99: Option<f64>,
    /// What "converge" means here.
    pub converge: &'static str,
    /// One line per controller, tollgate's first.
    pub lines: Vec<Line>,
}

/// The 1-second means of the limit and the 1-second p99s (ms), from `from`.
fn seconds(ticks: &[Tick]) -> Vec<(f64, f64)> {
    ticks
        .chunks(TICKS_PER_SEC)
        .map(|c| {
            let mean = c.iter().map(|t| t.limit as f64).sum::<f64>() / c.len() as f64;
            let mut l: Vec<u32> = c.iter().flat_map(|t| t.latencies.iter().copied()).collect();
            (mean, percentile(&mut l, 99))
        })
        .collect()
}

fn unloaded_p99(service: Service, seed: u64) -> Result<Option<f64>, SimError> {
    if service == Service::Hang {
        return Ok(None);
    }
    let setup = Setup {
        workers: constant(WORKERS),
        rate: constant(0.1 * WORKERS as f64 * (SEC / SERVICE) as f64),
        service,
        timeout: SEC,
        duration: 30 * SEC,
    };
    let ticks = run(&setup, &mut Static::new(u64::MAX), seed)?;
    let mut all: Vec<u32> = ticks.iter().flat_map(|t| t.latencies.clone()).collect();
    Ok(Some(percentile(&mut all, 99)))
}

/// The first second from which `ok` holds for every second up to `until` (an index), if
/// it then holds for at least 5 seconds (a run that only enters the band at its end has
/// not converged).
fn settles(
    secs: &[(f64, f64)],
    start: usize,
    until: usize,
    ok: impl Fn(f64, f64) -> bool,
) -> Option<usize> {
    let until = until.min(secs.len());
    let mut from = None;
    for (i, &(limit, p99)) in secs.iter().enumerate().take(until).skip(start) {
        if ok(limit, p99) {
            from.get_or_insert(i);
        } else {
            from = None;
        }
    }
    from.filter(|&f| f + 5 <= until)
}

fn check(bound: String, reached: String, pass: bool) -> Check {
    Check {
        bound,
        reached,
        pass,
    }
}

/// The bounds of scenario `id` on one controller's timeline; also the convergence time.
fn checks(id: &str, ticks: &[Tick], p99_max: f64, line: &Line) -> (Vec<Check>, Option<f64>) {
    let secs = seconds(ticks);
    let band = |l: f64, _| (90.0..=130.0).contains(&l);
    let from10 = 10;
    match id {
        "1" | "1x" => {
            let converge = settles(&secs, 0, secs.len(), band).map(|s| s as f64 + 1.0);
            (
                vec![
                    check(
                        "mean limit 90-130".into(),
                        format!("{:.0}", line.limits.0),
                        (90.0..=130.0).contains(&line.limits.0),
                    ),
                    check(
                        "goodput >= 90%".into(),
                        format!("{:.1}%", line.goodput),
                        line.goodput >= 90.0,
                    ),
                    check(
                        format!("p99 <= {p99_max:.1} ms"),
                        format!("{:.1} ms", line.p99),
                        line.p99 <= p99_max,
                    ),
                ],
                converge,
            )
        }
        "2" => {
            let (halve, back) = (60, 90);
            let ok = |l: f64, p: f64| l <= 65.0 && p <= p99_max;
            let low = settles(&secs, halve, back, ok);
            let recovered = (back..(back + 10).min(secs.len())).find(|&s| secs[s].0 >= 90.0);
            let floor = BOUNDS.min as u64;
            let mut run = 0usize;
            let mut longest = 0usize;
            for t in &ticks[from10 * TICKS_PER_SEC..] {
                run = if t.limit <= floor { run + 1 } else { 0 };
                longest = longest.max(run);
            }
            (
                vec![
                    check(
                        "limit <= 65 and p99 ok within 5 s of 60 s".into(),
                        low.map_or("never".into(), |s| format!("{} s", s + 1 - halve)),
                        low.is_some_and(|s| s < halve + 5),
                    ),
                    check(
                        "limit >= 90 within 10 s of 90 s".into(),
                        recovered
                            .map_or("not within 10 s".into(), |s| format!("{} s", s + 1 - back)),
                        recovered.is_some(),
                    ),
                    check(
                        "never 5 s at the floor".into(),
                        format!("{:.1} s longest", longest as f64 / TICKS_PER_SEC as f64),
                        longest < 5 * TICKS_PER_SEC,
                    ),
                ],
                low.map(|s| (s + 1 - halve) as f64),
            )
        }
        "3" => (
            vec![check(
                "limit <= 130 throughout".into(),
                format!("max {}", line.limits.1),
                line.limits.1 <= 130,
            )],
            settles(&secs, 0, secs.len(), band).map(|s| s as f64 + 1.0),
        ),
        "4" => (
            vec![check(
                "shed <= 0.1%".into(),
                format!("{:.3}%", line.shed),
                line.shed <= 0.1,
            )],
            None,
        ),
        _ => {
            let floor = BOUNDS.min as u64;
            // The tick from which the limit stays at the floor to the end.
            let reach = match ticks.iter().rposition(|t| t.limit > floor) {
                None => Some(0),
                Some(i) => (i + 1 < ticks.len()).then_some(i + 1),
            };
            (
                vec![check(
                    format!("limit falls to the floor ({floor})"),
                    format!("last {}", line.limits.2),
                    line.limits.2 <= floor,
                )],
                reach.map(|i| (i + 1) as f64 / TICKS_PER_SEC as f64),
            )
        }
    }
}

fn convergence(id: &str) -> &'static str {
    match id {
        "1" | "1x" | "3" => "the second from which the limit stays within 90-130",
        "2" => "seconds after the halving until the limit stays <= 65 with p99 in bound",
        "4" => "-",
        _ => "the second from which the limit stays at its floor",
    }
}

/// Why a scenario cannot run: a controller's parameters or the simulation's setup.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScenarioError {
    /// A controller refused its parameters.
    Controller(ParamError),
    /// The simulator refused the setup.
    Setup(SimError),
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Each names its field already.
            ScenarioError::Controller(e) => e.fmt(f),
            ScenarioError::Setup(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// Runs every controller on `scenario` (one thread each) with `seed`.
pub fn run_scenario(scenario: &Scenario, seed: u64) -> Result<Report, ScenarioError> {
    let unloaded = unloaded_p99(scenario.setup.service, seed).map_err(ScenarioError::Setup)?;
    let p99_max = unloaded.map_or(f64::INFINITY, |p| 1.5 * p);
    let controllers = controllers(seed).map_err(ScenarioError::Controller)?;
    let from = (scenario.measure_from / TICK) as usize;
    let capacity: f64 = {
        let setup = &scenario.setup;
        let per_tick = |t: Nanos| -> f64 {
            let w = setup
                .workers
                .iter()
                .take_while(|(f, _)| *f <= t)
                .last()
                .map_or(0, |x| x.1);
            w as f64 * TICK as f64 / SERVICE as f64
        };
        (from..(setup.duration / TICK) as usize)
            .map(|i| per_tick(i as Nanos * TICK))
            .sum()
    };
    let lines = std::thread::scope(|scope| {
        let handles: Vec<_> = controllers
            .into_iter()
            .map(|mut c| {
                let setup = &scenario.setup;
                scope.spawn(move || (c.name(), run(setup, c.as_mut(), seed)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a simulation thread does not panic"))
            .map(|(name, ticks)| ticks.map(|t| (name, t)))
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ScenarioError::Setup)?;
    let lines = lines
        .into_iter()
        .map(|(name, ticks)| {
            let measured = &ticks[from.min(ticks.len())..];
            let sum = |f: fn(&Tick) -> u64| measured.iter().map(f).sum::<u64>();
            let mut all: Vec<u32> = measured
                .iter()
                .flat_map(|t| t.latencies.iter().copied())
                .collect();
            let mut line = Line {
                controller: name,
                goodput: 100.0 * sum(|t| t.good) as f64 / capacity,
                p50: percentile(&mut all, 50),
                p99: percentile(&mut all, 99),
                converge: None,
                shed: 100.0 * sum(|t| t.shed) as f64 / sum(|t| t.offered).max(1) as f64,
                limits: (
                    sum(|t| t.limit) as f64 / measured.len().max(1) as f64,
                    measured.iter().map(|t| t.limit).max().unwrap_or(0),
                    ticks.last().map_or(0, |t| t.limit),
                ),
                checks: Vec::new(),
                ticks: Vec::new(),
            };
            let (c, converge) = checks(scenario.id, &ticks, p99_max, &line);
            line.checks = c;
            line.converge = converge;
            line.ticks = ticks;
            line
        })
        .collect();
    Ok(Report {
        scenario: scenario.clone(),
        unloaded_p99: unloaded,
        converge: convergence(scenario.id),
        lines,
    })
}

/// The report as a text table.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let s = &report.scenario;
    let _ = writeln!(out, "scenario {}: {}", s.id, s.title);
    if let Some(p) = report.unloaded_p99 {
        let _ = writeln!(
            out,
            "  unloaded p99 {p:.1} ms; converge = {}",
            report.converge
        );
    } else {
        let _ = writeln!(out, "  converge = {}", report.converge);
    }
    let _ = writeln!(
        out,
        "  {:<10} {:>8} {:>7} {:>7} {:>9} {:>7} {:>11} {:>6}  bounds",
        "controller", "goodput", "p50 ms", "p99 ms", "converge", "shed", "limit mean", "max"
    );
    for l in &report.lines {
        let bounds: Vec<String> = l
            .checks
            .iter()
            .map(|c| {
                format!(
                    "{} {}: {}",
                    if c.pass { "ok" } else { "FAIL" },
                    c.bound,
                    c.reached
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "  {:<10} {:>7.1}% {:>7.1} {:>7.1} {:>9} {:>6.2}% {:>11.1} {:>6}  {}",
            l.controller,
            l.goodput,
            l.p50,
            l.p99,
            l.converge.map_or("-".into(), |c| format!("{c:.1} s")),
            l.shed,
            l.limits.0,
            l.limits.1,
            bounds.join("; ")
        );
    }
    out
}

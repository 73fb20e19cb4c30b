//! The adaptive limiter (issue 42) through the component, against the core itself: every
//! scenario drives the component's `adaptive-limiter` and the native core's gradient
//! controller with the same requests, and fails on the first admission, limit, admitting
//! count, in-flight count or no-load latency that differs.
//!
//! The component draws each release's re-measurement jitter from the seed the host gives
//! it; the native run passes 0. Those values only schedule the clock-driven re-measurement
//! after one has happened (or after a light window), at least 3/4 of `probe-interval` later
//! (22.5 s with the default 30 s). Every scenario stays below that much virtual time, which
//! `run` checks, so the trajectories must be identical, re-measurements from the floor
//! included.

use tollgate::adaptive::gradient::{self, Gradient, GradientParams, GradientState};
use tollgate::adaptive::Outcome;
use tollgate::Nanos;
use wasmtime::component::ResourceAny;
use wasmtime::Result;

use crate::exports::tollgate::limiter::adaptive::{AdaptiveParams, Outcome as WitOutcome};
use crate::{fail, Host};

const MS: Nanos = 1_000_000;
/// The seed both sides take (the first re-measurement's jitter).
const SEED: u64 = 0x5eed;
/// The earliest a clock-driven re-measurement can be due after the last was scheduled:
/// 3/4 of the default `probe-interval`.
const QUIET: Nanos = 22_500 * MS;

/// A server of `workers` workers at 10 ms a request: beyond them, requests queue.
fn knee(workers: u64) -> impl Fn(u64) -> Nanos {
    move |n| 10 * MS * n.max(workers) / workers
}

/// One phase of a scenario: `rounds` of filling the limit, then releasing every admitted
/// request `latency(admitted)` later with `outcome`.
struct Phase {
    rounds: usize,
    latency: Box<dyn Fn(u64) -> Nanos>,
    outcome: Outcome,
}

fn phase(rounds: usize, latency: impl Fn(u64) -> Nanos + 'static, outcome: Outcome) -> Phase {
    Phase {
        rounds,
        latency: Box::new(latency),
        outcome,
    }
}

/// The scenarios of the core's gradient tests and doc example, and the npm tests'.
fn scenarios() -> Vec<(&'static str, u32, Vec<Phase>)> {
    use Outcome::*;
    vec![
        (
            "knee, capacity halved, capacity back",
            20,
            vec![
                phase(400, knee(100), Success),
                phase(400, knee(50), Success),
                phase(400, knee(100), Success),
            ],
        ),
        (
            "every answer a timeout",
            100,
            vec![phase(12, |_| 1000 * MS, Timeout)],
        ),
        ("overload answers", 50, vec![phase(300, |_| MS, Overload)]),
        (
            "latency 2.5 times as high",
            100,
            vec![
                phase(30, |_| 10 * MS, Success),
                phase(10, |_| 25 * MS, Success),
            ],
        ),
        (
            "a slower version: down to the floor, re-measured, back up",
            100,
            vec![
                phase(20, |_| 10 * MS, Success),
                phase(200, |_| 40 * MS, Success),
            ],
        ),
    ]
}

/// Runs every scenario on both sides; returns the number of steps compared and of rounds
/// that re-measured the no-load latency (at least one, or the claim above is not tested).
pub fn compare(host: &mut Host) -> Result<(usize, usize)> {
    let (mut steps, mut probing) = (0, 0);
    for (name, initial, phases) in scenarios() {
        let (s, p) =
            run(host, initial, &phases).map_err(|e| fail(format!("adaptive, {name}: {e}")))?;
        steps += s;
        probing += p;
    }
    if probing == 0 {
        return Err(fail(
            "adaptive: no scenario re-measured the no-load latency".into(),
        ));
    }
    Ok((steps, probing))
}

/// One scenario on both sides: the steps compared and the rounds that re-measured.
fn run(host: &mut Host, initial: u32, phases: &[Phase]) -> Result<(usize, usize)> {
    let params = GradientParams {
        initial_limit: initial,
        ..GradientParams::default()
    };
    let g = Gradient::new(params).map_err(|e| fail(e.to_string()))?;
    let mut native = GradientState::new(&g, 0, SEED);
    let api = host.limiter.tollgate_limiter_adaptive().adaptive_limiter();
    let wit_params = AdaptiveParams {
        initial_limit: Some(initial),
        seed: Some(SEED),
        min_limit: None,
        max_limit: None,
        window_ns: None,
        min_samples: None,
        percentile: None,
        tolerance: None,
        probe_interval_ns: None,
    };
    let l: ResourceAny = api
        .call_create(&mut host.store, wit_params, 0)?
        .map_err(|e| fail(e.message))?;
    let mut now: Nanos = 0;
    let mut steps = 0;
    let mut probing = 0;
    for p in phases {
        let outcome = match p.outcome {
            Outcome::Success => WitOutcome::Success,
            Outcome::Overload => WitOutcome::Overload,
            Outcome::Timeout => WitOutcome::Timeout,
        };
        for _ in 0..p.rounds {
            let mut permits = Vec::new();
            loop {
                let theirs = api.call_acquire(&mut host.store, l, now)?;
                let ours = gradient::acquire(&g, &mut native, now).allowed;
                if theirs.is_some() != ours {
                    return Err(fail(format!(
                        "t={now}: admitted {theirs:?}, the core {ours}"
                    )));
                }
                steps += 1;
                match theirs {
                    Some(permit) => permits.push(permit),
                    None => break,
                }
            }
            let end = now + (p.latency)(permits.len() as u64);
            for permit in permits {
                api.call_release(&mut host.store, l, permit, end, outcome)?
                    .map_err(|e| fail(format!("release refused: {e:?}")))?;
                gradient::release(&g, &mut native, end, now, p.outcome, 0);
                let theirs = [
                    api.call_limit(&mut host.store, l)?,
                    api.call_admitting(&mut host.store, l)?,
                    api.call_in_flight(&mut host.store, l)?,
                    api.call_no_load_ns(&mut host.store, l)?,
                ];
                let ours = [
                    native.limit(),
                    native.admitting(&g),
                    native.in_flight(),
                    native.no_load(),
                ];
                if theirs != ours {
                    return Err(fail(format!(
                        "t={end}: limit, admitting, in flight, no-load {theirs:?}, the core {ours:?}"
                    )));
                }
                steps += 1;
            }
            now = end;
            probing += usize::from(native.probing());
        }
    }
    if now >= QUIET {
        return Err(fail(format!(
            "the scenario ran {now} ns, past the {QUIET} ns within which the jitter cannot matter"
        )));
    }
    l.resource_drop(&mut host.store)?;
    Ok((steps, probing))
}

//! The gradient controller: a concurrency limit that follows the latency the upstream
//! shows, for a server (or a proxy) that sheds load before it queues.
//!
//! **The rule.** Completed requests are collected in windows. A window lasts at least
//! `window` and closes once it has `min(min_samples, limit)` samples; after a cut, the
//! requests admitted before it are not samples (they were admitted under the higher limit,
//! and counting them would cut twice for one cause). When it closes, its `percentile`-th
//! latency and its median (timeouts and overload answers rank above every latency) are
//! each compared with the same statistic measured without load, and `ratio` is the
//! tighter of `tolerance * no_load / latency` for the two (the percentile sees a queue
//! that only some requests wait in, as when constant-time workers finish in lockstep; the
//! median sees one that a wide service-time spread hides from the percentile):
//!
//! * `ratio` below 1 and the limit used (the peak in flight during the window reached
//!   90% of the limit), or below 1/2 whatever the use: `limit *= ratio`, at most halving
//!   it;
//! * `ratio` above 1, no congestion sample in the window, and the limit near use (the
//!   peak reached 3/4 of it): `limit *= min(ratio, 17/16)`, growth of at most 1/16 per
//!   window, which leaves the limit a third above the usual peak, out of reach of
//!   ordinary noise;
//! * otherwise the limit stays.
//!
//! The limit is kept within `[min_limit, max_limit]`. At equilibrium under overload the
//! upstream's queue holds about `tolerance - 1` of its capacity (15% by default): enough to
//! keep every worker busy, not enough to slow every request down.
//!
//! **The no-load latency** (percentile and median) is measured by the first window after
//! the first (the first window's early completions are the short requests). It follows, a quarter of the
//! way per window, the percentile of any window whose peak in flight stayed below 3/4 of
//! the limit (such a window saw the upstream as a probe would). And it is re-measured
//! every `probe_interval` without such a window (jittered by ±25% from a random value the
//! caller passes, so that processes started together do not probe together): for two
//! windows requests are admitted up to 3/4 of the limit; the first lets the requests
//! admitted before drain, the percentile of the second, if it has no congestion sample,
//! moves the no-load latency half way to it, up or down. A probe that finds it an eighth
//! lower or more is followed by another within eight windows' time: the first
//! measurement was taken above the knee (a start at a limit the upstream cannot take),
//! and each probe, at 3/4 of a limit that has since followed, sees less of the queue. A
//! limit that has sat at its floor for five windows probes at once (the upstream may
//! simply have become slower, and the floor would otherwise never be left).
//!
//! **Edge cases, and the failures of older controllers they answer.**
//! * Timeouts and overload answers are congestion, not fast samples (a dropped request
//!   reports a tiny latency, and a controller that believes it grows: Netflix
//!   concurrency-limits #176). Any of them in a window forbids growth; more of them than
//!   the percentile leaves room for make `p` infinite and the limit halves.
//! * Every answer a timeout (the upstream hangs): each window halves the limit down to its
//!   floor (a controller that reads the timeout as a latency sees it stop rising and grows
//!   to its maximum: #134, #137).
//! * Growth only when the limit is used: a limit far above the traffic is not measured by
//!   it, and growing it would leave nothing to stop the next burst. Growth is also capped
//!   below `target` rather than adding a fixed queue allowance each window, which is what
//!   lets a gradient creep upward under modest overload.
//! * The re-measurement lowers the limit by a quarter for two windows, not to a floor
//!   of a few requests (which sheds real traffic in bursts and, set high, never recovers:
//!   Envoy #18152, #38338). Under overload the limit sits within `tolerance` of the
//!   knee, so 3/4 of it is below the knee, which is what a no-load measurement needs;
//!   under light load the light windows measure and no probe happens.
//! * Time going backwards: a request that seems to have started after `now` has latency 0.
//!
//! **Pros:** needs no knowledge of the upstream's capacity; settles just above the knee
//! (the upstream busy, its queue short); follows capacity both ways within seconds.
//! **Cons:** needs traffic to learn (a window needs samples); reacts in windows, so a
//! sudden collapse costs at least one window of slow requests; a start above the knee
//! takes queueing for the no-load latency until the first probe; a service whose latency
//! does not grow with load (it fails fast instead) is seen only through its overload
//! answers; the limit is per process.
//!
//! ```
//! use tollgate::adaptive::gradient::{self, Gradient, GradientParams, GradientState};
//! use tollgate::adaptive::Outcome;
//! let ms = 1_000_000;
//! // A server with 100 workers, 10 ms per request, and more traffic than it can take.
//! let g = Gradient::new(GradientParams { initial_limit: 20, ..GradientParams::default() }).unwrap();
//! let mut s = GradientState::new(&g, 0, 0);
//! let mut now = 0;
//! for _ in 0..400 { // 400 rounds of 10 ms: fill every slot, then all complete
//!     let mut admitted = 0;
//!     while gradient::acquire(&g, &mut s, now).allowed {
//!         admitted += 1;
//!     }
//!     // Up to 100 in flight take 10 ms; beyond, the queue makes it 10 ms per 100.
//!     let latency = 10 * ms * admitted.max(100) / 100;
//!     for _ in 0..admitted {
//!         gradient::release(&g, &mut s, now + latency, now, Outcome::Success, 0);
//!     }
//!     now += latency;
//! }
//! // The limit grew from 20 to the knee, and stopped within the tolerance above it.
//! assert!((100..=125).contains(&s.limit()), "{}", s.limit());
//! ```

use crate::adaptive::window::Window;
use crate::adaptive::{bounded, limits_bounded, take, Outcome, Param, ParamError, ONE};
use crate::{Decision, Nanos, NANOS_PER_MS, NANOS_PER_SEC};

/// The gradient controller's parameters, as given (see [`Gradient::new`] for the bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GradientParams {
    /// The floor: the limit never goes below it. Default 5.
    pub min_limit: u32,
    /// The ceiling. Default 1000.
    pub max_limit: u32,
    /// The limit before any sample. Default 20: start low, growth is quick.
    pub initial_limit: u32,
    /// The shortest window, in ns. Default 100 ms.
    pub window: Nanos,
    /// The samples a window needs before it closes (or the limit, if lower). Default 100.
    pub min_samples: u32,
    /// The latency percentile compared with the no-load latency (the median is compared
    /// too). Default 90.
    pub percentile: u8,
    /// The latency still counted as unloaded, in percent of the no-load latency. Default
    /// 115: the controller settles where the upstream is 15% slower than unloaded.
    pub tolerance: u32,
    /// The mean time between re-measurements of the no-load latency, in ns. Default 30 s.
    pub probe_interval: Nanos,
}

impl Default for GradientParams {
    fn default() -> GradientParams {
        GradientParams {
            min_limit: 5,
            max_limit: 1000,
            initial_limit: 20,
            window: 100 * NANOS_PER_MS,
            min_samples: 100,
            percentile: 90,
            tolerance: 115,
            probe_interval: 30 * NANOS_PER_SEC,
        }
    }
}

/// A validated gradient controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gradient {
    params: GradientParams,
}

/// The largest limit a controller accepts.
pub const MAX_LIMIT: u32 = 1_000_000;

impl Gradient {
    /// Checks the parameters: `1 <= min_limit <= max_limit <= 1_000_000`, `initial_limit`
    /// between them, `window` from 1 ms to 60 s, `min_samples` from 1 to 65535,
    /// `percentile` from 1 to 99, `tolerance` from 101 to 1000 (%), `probe_interval` from
    /// 1 s to 1 h.
    pub fn new(params: GradientParams) -> Result<Gradient, ParamError> {
        let p = params;
        limits_bounded(p.min_limit, p.max_limit, p.initial_limit)?;
        bounded(Param::Window, p.window, NANOS_PER_MS, 60 * NANOS_PER_SEC)?;
        bounded(
            Param::MinSamples,
            p.min_samples.into(),
            1,
            Window::CAPACITY.into(),
        )?;
        bounded(Param::Percentile, p.percentile.into(), 1, 99)?;
        bounded(Param::Tolerance, p.tolerance.into(), 101, 1000)?;
        bounded(
            Param::ProbeInterval,
            p.probe_interval,
            NANOS_PER_SEC,
            3600 * NANOS_PER_SEC,
        )?;
        Ok(Gradient { params })
    }

    /// The parameters.
    pub const fn params(&self) -> &GradientParams {
        &self.params
    }
}

/// A gradient controller's state: plain data, one per process and route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GradientState {
    /// The limit in 1/1024ths.
    limit: u64,
    in_flight: u64,
    /// The most in flight since the window opened.
    peak: u64,
    opened: Nanos,
    /// Samples of requests started before this instant are ignored: they were admitted
    /// under a limit that has since been lowered.
    ignore_before: Nanos,
    /// Whether this window's percentile may measure the no-load latency: not the first
    /// window (its early completions are the short requests), not one after a cut (it
    /// ignores the longer requests).
    measurable: bool,
    window: Window,
    /// The no-load latency (the percentile); 0 until measured.
    no_load: Nanos,
    /// The no-load median.
    no_load_median: Nanos,
    next_probe: Nanos,
    probe: Probe,
    /// Windows closed in a row with the limit at its floor.
    at_floor: u32,
}

impl GradientState {
    /// A fresh state at `now`, at the initial limit. `random` (any value, drawn by the
    /// caller) jitters the first re-measurement.
    pub fn new(g: &Gradient, now: Nanos, random: u64) -> GradientState {
        GradientState {
            limit: g.params.initial_limit as u64 * ONE,
            in_flight: 0,
            peak: 0,
            opened: now,
            ignore_before: now,
            measurable: false,
            window: Window::default(),
            no_load: 0,
            no_load_median: 0,
            next_probe: next_probe(g, now, random),
            probe: Probe::Off,
            at_floor: 0,
        }
    }

    /// The limit now (during a re-measurement, requests are admitted up to 3/4 of
    /// it: [`GradientState::admitting`]).
    pub const fn limit(&self) -> u64 {
        self.limit / ONE
    }

    /// How many requests may be in flight now.
    pub fn admitting(&self, g: &Gradient) -> u64 {
        if self.probe != Probe::Off {
            (self.limit() * 3 / 4).max(g.params.min_limit.into())
        } else {
            self.limit()
        }
    }

    /// Requests admitted and not yet released.
    pub const fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// The no-load latency (the percentile) as last measured (0 before the first).
    pub const fn no_load(&self) -> Nanos {
        self.no_load
    }

    /// Whether the current window re-measures the no-load latency.
    pub fn probing(&self) -> bool {
        self.probe != Probe::Off
    }
}

/// Where a re-measurement of the no-load latency stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Probe {
    Off,
    /// The first window at 3/4 of the limit: the requests admitted before drain.
    Settling,
    /// The second: its percentile is the measurement.
    Measuring,
}

/// The next re-measurement: `probe_interval` from `now`, jittered by ±25%.
fn next_probe(g: &Gradient, now: Nanos, random: u64) -> Nanos {
    let interval = g.params.probe_interval;
    let spread = interval / 2;
    now.saturating_add(interval - spread / 2 + random % (spread + 1))
}

/// Admits one request if fewer than [`GradientState::admitting`] are in flight.
pub fn acquire(g: &Gradient, state: &mut GradientState, _now: Nanos) -> Decision {
    let decision = take(state.admitting(g), &mut state.in_flight);
    state.peak = state.peak.max(state.in_flight);
    decision
}

/// Releases one request admitted by [`acquire`], which started at `started` and ended at
/// `now` with `outcome`, and moves the limit when the window closes. `random` (any value,
/// drawn by the caller) jitters the next re-measurement if one ends here.
pub fn release(
    g: &Gradient,
    state: &mut GradientState,
    now: Nanos,
    started: Nanos,
    outcome: Outcome,
    random: u64,
) {
    state.in_flight = state.in_flight.saturating_sub(1);
    if started >= state.ignore_before {
        let latency = (!outcome.is_congestion()).then(|| now.saturating_sub(started));
        state.window.record(latency);
    }
    let p = &g.params;
    let needed = state.limit().min(p.min_samples.into()).max(1);
    let long_enough = now.saturating_sub(state.opened) >= p.window;
    if (long_enough && state.window.count() >= needed) || state.window.is_full() {
        close_window(g, state, now, random);
    }
}

/// Ends the window: moves the limit (or the no-load latency) and opens the next window.
fn close_window(g: &Gradient, state: &mut GradientState, now: Nanos, random: u64) {
    let p = &g.params;
    let w = state.window;
    let latency = w.percentile(p.percentile);
    let median = w.percentile(50);
    // A no-load measurement needs a window without congestion whose samples are not
    // filtered.
    let clean = (state.measurable && w.congested() == 0)
        .then_some(latency.zip(median))
        .flatten()
        .map(|(l, m)| (l.max(1), m.max(1)));
    let before = state.limit;
    match state.probe {
        Probe::Settling => state.probe = Probe::Measuring,
        Probe::Measuring => {
            state.probe = Probe::Off;
            state.next_probe = next_probe(g, now, random);
            if let Some((l, m)) = clean {
                // A no-load latency first measured above the knee (a start at a limit
                // the upstream cannot take) holds queueing: a probe that finds it an
                // eighth lower or more probes again after eight windows' time, once the
                // limit has followed, instead of a whole interval later.
                if l < state.no_load - state.no_load / 8 {
                    state.next_probe = now.saturating_add(p.window.saturating_mul(8));
                }
                // Half the way: one window's percentile is noisy, and another probe
                // follows soon when the limit sits at its floor.
                state.no_load = (state.no_load + l) / 2;
                state.no_load_median = (state.no_load_median + m) / 2;
            }
        }
        Probe::Off if state.no_load == 0 => {
            // A full window measures; a window of congestion cuts even before that.
            if let Some((l, m)) = clean {
                state.no_load = l;
                state.no_load_median = m;
            } else if latency.is_none() {
                state.limit = next_limit(g, state, None, None, true);
            }
        }
        Probe::Off => {
            // A window whose peak stayed below 3/4 of the limit saw the upstream as a
            // probe would: its percentile is a no-load sample (followed a quarter of the
            // way, either direction, so that one window's noise moves little).
            let light = state.peak * 4 < state.limit() * 3;
            if let (Some((l, m)), true) = (clean, light) {
                state.no_load = (state.no_load * 3 + l) / 4;
                state.no_load_median = (state.no_load_median * 3 + m) / 4;
                // A measurement as good as a probe's: no need to probe soon.
                state.next_probe = next_probe(g, now, random);
            }
            state.limit = next_limit(g, state, latency, median, w.congested() > 0);
        }
    }
    let min = p.min_limit as u64 * ONE;
    state.at_floor = if state.limit <= min {
        state.at_floor + 1
    } else {
        0
    };
    let due = now >= state.next_probe || state.at_floor >= 5;
    if state.probe == Probe::Off && due && state.no_load > 0 {
        state.probe = Probe::Settling;
        state.at_floor = 0;
    }
    // After a cut, the requests admitted under the higher limit still come back slow:
    // counting them would cut again for the same cause.
    state.measurable = state.limit >= before;
    if state.limit < before {
        state.ignore_before = now;
    }
    state.opened = now;
    state.peak = state.in_flight;
    state.window = Window::default();
}

/// `tolerance * no_load / latency` in 1/1024ths, between 1/2 and 17/16 (`None`:
/// congestion beyond the percentile, 1/2).
fn ratio(tolerance: u32, no_load: Nanos, latency: Option<Nanos>) -> u64 {
    match latency {
        None => ONE / 2,
        Some(l) => {
            let target = no_load as u128 * tolerance as u128 / 100;
            let r = target * ONE as u128 / l.max(1) as u128;
            r.clamp(ONE as u128 / 2, ONE as u128 * 17 / 16) as u64
        }
    }
}

/// The limit after a window whose percentile is `latency` and median `median` (`None`:
/// congestion).
fn next_limit(
    g: &Gradient,
    state: &GradientState,
    latency: Option<Nanos>,
    median: Option<Nanos>,
    congested: bool,
) -> u64 {
    let p = &g.params;
    let limit = state.limit;
    // The peak reached 90% of the limit: the limit shaped the traffic.
    let used = state.peak * 10 >= state.limit() * 9;
    // The peak reached 3/4 of the limit: the traffic comes near it, so the limit may grow
    // (and sits a third above the usual peak, out of reach of ordinary noise).
    let near = state.peak * 4 >= state.limit() * 3;
    // The tighter of the two: the percentile sees a queue that only some requests wait
    // in, the median one that a wide service-time spread hides from the percentile.
    let ratio = ratio(p.tolerance, state.no_load, latency).min(ratio(
        p.tolerance,
        state.no_load_median,
        median,
    ));
    let severe = ratio < ONE / 2 + 1;
    let lower = ratio < ONE && (used || severe);
    let raise = ratio > ONE && near && !congested;
    let next = if lower || raise {
        limit * ratio / ONE
    } else {
        limit
    };
    next.clamp(p.min_limit as u64 * ONE, p.max_limit as u64 * ONE)
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    const MS: Nanos = NANOS_PER_MS;

    fn params() -> GradientParams {
        GradientParams {
            initial_limit: 100,
            ..GradientParams::default()
        }
    }

    /// Runs `rounds` of: fill every slot, then complete all after `latency(admitted)` with
    /// `outcome`. Returns the limit after each round.
    fn rounds(
        g: &Gradient,
        s: &mut GradientState,
        now: &mut Nanos,
        rounds: usize,
        latency: impl Fn(u64) -> Nanos,
        outcome: Outcome,
    ) -> std::vec::Vec<u64> {
        let mut limits = std::vec::Vec::new();
        for _ in 0..rounds {
            let mut admitted = 0;
            while acquire(g, s, *now).allowed {
                admitted += 1;
            }
            let l = latency(admitted);
            for _ in 0..admitted {
                release(g, s, *now + l, *now, outcome, 7);
            }
            *now += l;
            limits.push(s.limit());
        }
        limits
    }

    #[test]
    fn each_bad_parameter_is_named() {
        let cases = [
            (
                GradientParams {
                    min_limit: 0,
                    ..params()
                },
                Param::MinLimit,
            ),
            (
                GradientParams {
                    max_limit: 4,
                    ..params()
                },
                Param::MaxLimit,
            ),
            (
                GradientParams {
                    initial_limit: 1001,
                    ..params()
                },
                Param::InitialLimit,
            ),
            (
                GradientParams {
                    window: 0,
                    ..params()
                },
                Param::Window,
            ),
            (
                GradientParams {
                    min_samples: 0,
                    ..params()
                },
                Param::MinSamples,
            ),
            (
                GradientParams {
                    percentile: 0,
                    ..params()
                },
                Param::Percentile,
            ),
            (
                GradientParams {
                    tolerance: 100,
                    ..params()
                },
                Param::Tolerance,
            ),
            (
                GradientParams {
                    probe_interval: MS,
                    ..params()
                },
                Param::ProbeInterval,
            ),
        ];
        for (p, param) in cases {
            assert_eq!(Gradient::new(p).unwrap_err().param, param);
        }
        assert!(Gradient::new(GradientParams::default()).is_ok());
    }

    #[test]
    fn every_answer_a_timeout_drives_the_limit_to_its_floor() {
        let g = Gradient::new(params()).unwrap();
        let mut s = GradientState::new(&g, 0, 0);
        let mut now = 0;
        let limits = rounds(&g, &mut s, &mut now, 12, |_| 1000 * MS, Outcome::Timeout);
        assert_eq!(limits.last(), Some(&5));
        assert!(limits.windows(2).all(|w| w[1] <= w[0]), "{limits:?}");
    }

    #[test]
    fn latency_above_the_tolerance_with_the_limit_used_lowers_it() {
        let g = Gradient::new(params()).unwrap();
        let mut s = GradientState::new(&g, 0, 0);
        let mut now = 0;
        rounds(&g, &mut s, &mut now, 30, |_| 10 * MS, Outcome::Success);
        assert!(s.limit() > 100, "{}", s.limit()); // used and fast: grown...
                                                   // ... then the upstream is 2.5 times as slow: lowered, halved at most per window.
        let mut limits = std::vec![s.limit()];
        limits.extend(rounds(
            &g,
            &mut s,
            &mut now,
            10,
            |_| 25 * MS,
            Outcome::Success,
        ));
        assert!(limits.last() < limits.first(), "{limits:?}");
        assert!(limits.windows(2).all(|w| w[1] >= w[0] / 2), "{limits:?}");
    }

    #[test]
    fn an_unused_limit_neither_grows_nor_shrinks() {
        let g = Gradient::new(params()).unwrap();
        let mut s = GradientState::new(&g, 0, 0);
        let mut now: Nanos = 0;
        // 60 of 100 slots used, latencies noisy (8 to 14 ms) for 10 s.
        for round in 0..1000u64 {
            for _ in 0..60 {
                assert!(acquire(&g, &mut s, now).allowed);
            }
            let l = (8 + round * 5 % 7) * MS;
            for _ in 0..60 {
                release(&g, &mut s, now + l, now, Outcome::Success, 0);
            }
            now += l;
        }
        assert_eq!(s.limit(), 100);
    }

    #[test]
    fn an_overload_answer_forbids_growth() {
        let g = Gradient::new(params()).unwrap();
        let mut s = GradientState::new(&g, 0, 0);
        let mut now = 0;
        rounds(&g, &mut s, &mut now, 20, |_| 10 * MS, Outcome::Success);
        let before = s.limit();
        for _ in 0..50 {
            let mut admitted = 0;
            while acquire(&g, &mut s, now).allowed {
                admitted += 1;
            }
            release(&g, &mut s, now + MS, now, Outcome::Overload, 0);
            for _ in 1..admitted {
                release(&g, &mut s, now + 10 * MS, now, Outcome::Success, 0);
            }
            now += 10 * MS;
        }
        assert_eq!(s.limit(), before);
    }

    #[test]
    fn a_limit_stuck_at_its_floor_remeasures_and_leaves_it() {
        let g = Gradient::new(params()).unwrap();
        let mut s = GradientState::new(&g, 0, 0);
        let mut now = 0;
        rounds(&g, &mut s, &mut now, 20, |_| 10 * MS, Outcome::Success);
        // A new version: 40 ms per request whatever the load.
        let limits = rounds(&g, &mut s, &mut now, 200, |_| 40 * MS, Outcome::Success);
        assert!(limits.contains(&5), "{limits:?}");
        // Re-measured (halfway per probe), the no-load latency reaches 40 ms and growth
        // resumes.
        assert!(*limits.last().unwrap() >= 20, "{limits:?}");
    }

    #[test]
    fn the_remeasurement_admits_three_quarters_of_the_limit_for_one_window() {
        let g = Gradient::new(params()).unwrap();
        let mut s = GradientState::new(&g, 0, 0);
        let mut now = 0;
        let knee = |n: u64| 10 * MS * n.max(100) / 100;
        rounds(&g, &mut s, &mut now, 100, knee, Outcome::Success);
        let mut probes = 0;
        while now < 40 * NANOS_PER_SEC {
            rounds(&g, &mut s, &mut now, 1, knee, Outcome::Success);
            if s.probing() {
                probes += 1;
                assert_eq!(s.admitting(&g), s.limit() * 3 / 4);
            }
        }
        assert!(probes >= 1);
        assert!(s.no_load() < 11 * MS, "{}", s.no_load());
    }

    #[test]
    fn a_no_load_latency_first_measured_above_the_knee_is_remeasured_within_seconds() {
        let g = Gradient::new(params()).unwrap();
        let mut s = GradientState::new(&g, 0, 0);
        let mut now = 0;
        // The upstream's knee is 40 in flight, the controller starts at 100: the first
        // measurement reads 25 ms (100 queued on 40 workers) as the no-load latency.
        let knee = |n: u64| 10 * MS * n.max(40) / 40;
        while s.no_load() == 0 {
            rounds(&g, &mut s, &mut now, 1, knee, Outcome::Success);
        }
        let first = s.no_load();
        assert!(first > 20 * MS, "{first}");
        // The first probe (22.5 s at this seed) finds it lower; once a probe finds it an
        // eighth lower, the next follows within eight windows, not an interval (30 s)
        // later, and the limit follows each step down.
        while now < 60 * NANOS_PER_SEC {
            rounds(&g, &mut s, &mut now, 1, knee, Outcome::Success);
        }
        assert!(s.no_load() < first * 3 / 4, "{} after {first}", s.no_load());
        assert!(s.limit() < 70, "{}", s.limit());
    }

    #[test]
    fn the_jitter_spreads_probes_over_half_the_interval() {
        let g = Gradient::new(params()).unwrap();
        let early = GradientState::new(&g, 0, 0).next_probe;
        let late = GradientState::new(&g, 0, u64::MAX).next_probe;
        assert_eq!(early, 22_500 * MS);
        assert!(late > early && late <= 37_500 * MS, "{late}");
    }
}

//! The baselines, written from their published descriptions (not from their code), with
//! their published defaults, for comparison only: Netflix concurrency-limits' Gradient2
//! and Vegas, and Envoy's adaptive concurrency gradient controller. They use floating
//! point, as their descriptions do; tollgate's own controller is the core's.
//!
//! Every sample a baseline sees carries the latency the caller measured (the timeout for
//! a timed-out request, the time to the refusal for an overload answer) and whether it
//! was dropped; what each one does with a drop is its own rule.

use tollgate::adaptive::Outcome;
use tollgate::Nanos;

use crate::controller::{Bounds, Controller};
use crate::rng::Rng;

/// Concurrency-limits' exponential average: the plain mean of the first `warmup`
/// samples, then `value += (sample - value) * 2 / (window + 1)`.
struct ExpAvg {
    value: f64,
    count: u32,
    warmup: u32,
    factor: f64,
}

impl ExpAvg {
    fn new(window: u32, warmup: u32) -> ExpAvg {
        ExpAvg {
            value: 0.0,
            count: 0,
            warmup,
            factor: 2.0 / (window as f64 + 1.0),
        }
    }
    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.value += (sample - self.value) / self.count as f64;
        } else {
            self.value += (sample - self.value) * self.factor;
        }
        self.value
    }
}

/// Netflix Gradient2: per sample, `gradient = clamp(tolerance * long / short, 0.5, 1)`
/// where `short` is the sample's latency and `long` an exponential average of them over
/// 600 samples (pulled down 5% whenever it is more than twice `short`); when at least
/// half the limit is in flight, `new = limit * gradient + queue` (queue = 4), smoothed:
/// `limit = 0.8 * limit + 0.2 * new`. Drops are not a signal (the rule has no input for
/// them). Defaults: tolerance 1.5, smoothing 0.2.
pub struct Gradient2 {
    b: Bounds,
    limit: f64,
    long: ExpAvg,
    in_flight: u64,
}

impl Gradient2 {
    /// Gradient2 with its defaults and the run's bounds.
    pub fn new(b: Bounds) -> Gradient2 {
        Gradient2 {
            b,
            limit: b.initial as f64,
            long: ExpAvg::new(600, 10),
            in_flight: 0,
        }
    }
}

impl Controller for Gradient2 {
    fn name(&self) -> &'static str {
        "gradient2"
    }
    fn limit(&self) -> u64 {
        self.limit as u64
    }
    fn acquire(&mut self, _now: Nanos) -> bool {
        let allowed = (self.in_flight as f64) < self.limit.floor();
        self.in_flight += allowed as u64;
        allowed
    }
    fn release(&mut self, now: Nanos, started: Nanos, _outcome: Outcome, _random: u64) {
        let in_flight = self.in_flight;
        self.in_flight = self.in_flight.saturating_sub(1);
        let short = now.saturating_sub(started).max(1) as f64;
        let mut long = self.long.add(short);
        if long / short > 2.0 {
            long *= 0.95;
            self.long.value = long;
        }
        if (in_flight as f64) < self.limit / 2.0 {
            return;
        }
        let gradient = (1.5 * long / short).clamp(0.5, 1.0);
        let new = self.limit * gradient + 4.0;
        let new = self.limit * 0.8 + new * 0.2;
        self.limit = new.clamp(self.b.min as f64, self.b.max as f64);
    }
}

/// Netflix Vegas: the no-load latency is the lowest sample seen (reset to the current
/// sample every `30 * limit * jitter` samples, jitter in [0.5, 1)); per sample, the
/// queue estimate is `ceil(limit * (1 - no_load / latency))`; a drop takes `log10(limit)`
/// off; otherwise, when at least half the limit is in flight, a queue of at most
/// `log10(limit)` adds `6 log10(limit)`, below `3 log10(limit)` adds `log10(limit)`, above
/// `6 log10(limit)` takes `log10(limit)` off (log10 at least 1).
pub struct Vegas {
    b: Bounds,
    limit: f64,
    no_load: f64,
    probe_count: u64,
    probe_jitter: f64,
    in_flight: u64,
    rng: Rng,
}

impl Vegas {
    /// Vegas with its defaults and the run's bounds.
    pub fn new(b: Bounds, seed: u64) -> Vegas {
        let mut rng = Rng::new(seed);
        Vegas {
            b,
            limit: b.initial as f64,
            no_load: 0.0,
            probe_count: 0,
            probe_jitter: 0.5 + rng.unit() / 2.0,
            in_flight: 0,
            rng,
        }
    }
}

impl Controller for Vegas {
    fn name(&self) -> &'static str {
        "vegas"
    }
    fn limit(&self) -> u64 {
        self.limit as u64
    }
    fn acquire(&mut self, _now: Nanos) -> bool {
        let allowed = (self.in_flight as f64) < self.limit.floor();
        self.in_flight += allowed as u64;
        allowed
    }
    fn release(&mut self, now: Nanos, started: Nanos, outcome: Outcome, _random: u64) {
        let in_flight = self.in_flight;
        self.in_flight = self.in_flight.saturating_sub(1);
        let rtt = now.saturating_sub(started).max(1) as f64;
        self.probe_count += 1;
        if self.probe_jitter * 30.0 * self.limit <= self.probe_count as f64 {
            self.probe_count = 0;
            self.probe_jitter = 0.5 + self.rng.unit() / 2.0;
            self.no_load = rtt;
            return;
        }
        if self.no_load == 0.0 || rtt < self.no_load {
            self.no_load = rtt;
            return;
        }
        let log = self.limit.log10().floor().max(1.0);
        let queue = (self.limit * (1.0 - self.no_load / rtt)).ceil();
        let new = if outcome.is_congestion() {
            self.limit - log
        } else if (in_flight as f64) * 2.0 < self.limit {
            return;
        } else if queue <= log {
            self.limit + 6.0 * log
        } else if queue < 3.0 * log {
            self.limit + log
        } else if queue > 6.0 * log {
            self.limit - log
        } else {
            return;
        };
        self.limit = new.clamp(self.b.min as f64, self.b.max as f64);
    }
}

/// Envoy's gradient controller: every 100 ms, `sample` is the 50th percentile of the
/// latencies of that interval and `gradient = clamp((min_rtt + buffer) / sample, 0.5,
/// 2)` with `buffer = 25%` of `min_rtt`; `new = limit * gradient`, `limit = new +
/// sqrt(new)`. `min_rtt` is measured at the start and every 60 s (jittered by up to 15%)
/// by holding the limit at `min_concurrency` (3) until 50 requests have completed, their
/// 50th percentile being the new `min_rtt`; also when the limit has been at its floor for
/// five intervals. After a measurement the limit goes back to its value before (our
/// reading: the documentation does not say). Timeouts and overload answers are samples
/// like any other, at the latency seen.
pub struct Envoy {
    b: Bounds,
    limit: f64,
    min_rtt: f64,
    measuring: bool,
    samples: Vec<f64>,
    interval_start: Nanos,
    next_measure: Nanos,
    at_floor: u32,
    in_flight: u64,
    rng: Rng,
}

const ENVOY_INTERVAL: Nanos = 100_000_000;
const ENVOY_MIN_RTT_INTERVAL: Nanos = 60_000_000_000;
const ENVOY_MIN_CONCURRENCY: u64 = 3;
const ENVOY_MIN_RTT_REQUESTS: usize = 50;

impl Envoy {
    /// Envoy's controller with its documented defaults (min_concurrency 3, 50 requests
    /// per measurement, buffer 25%, p50) and the run's bounds; the limit starts at the
    /// run's initial limit once the first measurement is done.
    pub fn new(b: Bounds, seed: u64) -> Envoy {
        Envoy {
            b,
            limit: b.initial as f64,
            min_rtt: 0.0,
            measuring: true,
            samples: Vec::new(),
            interval_start: 0,
            next_measure: 0,
            at_floor: 0,
            in_flight: 0,
            rng: Rng::new(seed),
        }
    }

    fn median(samples: &mut [f64]) -> f64 {
        let mid = samples.len() / 2;
        *samples.select_nth_unstable_by(mid, f64::total_cmp).1
    }
}

impl Controller for Envoy {
    fn name(&self) -> &'static str {
        "envoy"
    }
    fn limit(&self) -> u64 {
        if self.measuring {
            ENVOY_MIN_CONCURRENCY
        } else {
            self.limit as u64
        }
    }
    fn acquire(&mut self, _now: Nanos) -> bool {
        let allowed = self.in_flight < self.limit();
        self.in_flight += allowed as u64;
        allowed
    }
    fn release(&mut self, now: Nanos, started: Nanos, _outcome: Outcome, _random: u64) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.samples.push(now.saturating_sub(started).max(1) as f64);
        if self.measuring {
            if self.samples.len() >= ENVOY_MIN_RTT_REQUESTS {
                self.min_rtt = Envoy::median(&mut self.samples);
                self.samples.clear();
                self.measuring = false;
                self.interval_start = now;
                let jitter = (ENVOY_MIN_RTT_INTERVAL as f64 * 0.15 * self.rng.unit()) as Nanos;
                self.next_measure = now + ENVOY_MIN_RTT_INTERVAL + jitter;
            }
            return;
        }
        if now < self.interval_start + ENVOY_INTERVAL {
            return;
        }
        let sample = Envoy::median(&mut self.samples);
        self.samples.clear();
        self.interval_start = now;
        let gradient = (self.min_rtt * 1.25 / sample).clamp(0.5, 2.0);
        let new = self.limit * gradient;
        self.limit = (new + new.sqrt()).clamp(self.b.min as f64, self.b.max as f64);
        self.at_floor = if self.limit <= self.b.min as f64 {
            self.at_floor + 1
        } else {
            0
        };
        if now >= self.next_measure || self.at_floor >= 5 {
            self.measuring = true;
            self.at_floor = 0;
        }
    }
}

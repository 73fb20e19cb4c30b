//! The simulated server and its clients, in virtual time: open-loop Poisson arrivals, a
//! concurrency controller in front of a server of `workers` workers with a FIFO queue, a
//! service-time distribution, and client timeouts. Nothing reads a clock; a seed decides
//! every draw.
//!
//! A request the controller admits goes to the server's queue. The client waits up to
//! the timeout: an answer in time is a success (its latency, arrival to answer, is
//! reported to the controller and counted in goodput); otherwise the controller hears a
//! timeout at the deadline, and the server, which does not know, still serves the request
//! when its turn comes (wasted work, as in a real server).
//!
//! [`Sim`] steps the model one [`TICK`] at a time; the workers and the offered rate it
//! runs with can change between ticks (the demo page's sliders). [`run`] steps it through a
//! [`Setup`]'s schedules (the CLI's scenarios).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use tollgate::adaptive::Outcome;
use tollgate::{Nanos, NANOS_PER_MS, NANOS_PER_SEC};

use crate::controller::Controller;
use crate::rng::Rng;

/// How long the server takes per request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Service {
    /// Always this long (ns).
    Constant(Nanos),
    /// Exponentially distributed with this mean (ns).
    Exponential(Nanos),
    /// Never answers.
    Hang,
}

/// A value that changes at given instants: `(from, value)` pairs in time order, the
/// first from 0. [`run`] reads it at the start of each [`TICK`], so a change takes effect at
/// the first tick that starts at or after its instant.
pub type Schedule<T> = Vec<(Nanos, T)>;

/// What one simulation runs.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Workers over time.
    pub workers: Schedule<u32>,
    /// Offered requests per second over time.
    pub rate: Schedule<f64>,
    /// The service time.
    pub service: Service,
    /// The client's timeout (ns).
    pub timeout: Nanos,
    /// How long to run.
    pub duration: Nanos,
}

/// The length of one timeline step.
pub const TICK: Nanos = 100 * NANOS_PER_MS;

/// What happened during one [`TICK`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tick {
    /// The limit at the end of the tick.
    pub limit: u64,
    /// Admitted requests the controller has not heard the end of, at the end of the tick.
    pub in_flight: u64,
    /// Requests waiting in the server's queue for a worker, at the end of the tick.
    pub queue: u64,
    /// Requests offered.
    pub offered: u64,
    /// Requests shed by the controller.
    pub shed: u64,
    /// Answers within the timeout.
    pub good: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// The latencies of the answers, in µs.
    pub latencies: Vec<u32>,
}

/// A simulation input the model cannot run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SimError {
    /// The offered rate (requests per second) is not a positive finite number: arrivals
    /// would never come (0), or come all at once (NaN, infinite).
    Rate(f64),
    /// A schedule has no value (a [`Setup`]'s `workers` or `rate`, named here).
    EmptySchedule(&'static str),
}

impl core::fmt::Display for SimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SimError::Rate(r) => write!(f, "rate: {r} requests/s is not a positive finite number"),
            SimError::EmptySchedule(field) => write!(f, "{field}: the schedule has no value"),
        }
    }
}

impl std::error::Error for SimError {}

fn check_rate(rate: f64) -> Result<f64, SimError> {
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(SimError::Rate(rate))
    }
}

/// The `pct`th percentile of `values` (µs, reordered in place), in ms; 0 for none.
pub fn percentile(values: &mut [u32], pct: usize) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let i = ((values.len() * pct).div_ceil(100)).clamp(1, values.len()) - 1;
    *values.select_nth_unstable(i).1 as f64 / 1000.0
}

/// A request the client still waits for.
struct Waiting {
    arrived: Nanos,
    done: bool,
}

/// The simulated server and its clients, stepped one [`TICK`] at a time.
pub struct Sim {
    rng: Rng,
    service: Service,
    timeout: Nanos,
    workers: u32,
    rate: f64,
    /// The current tick's start (the previous tick's end).
    now: Nanos,
    tick_end: Nanos,
    /// The client's side: admitted requests in admission order (so in deadline order),
    /// numbered from `first`.
    waiting: VecDeque<Waiting>,
    first: u64,
    /// Admitted requests whose end the controller has not heard.
    in_flight: u64,
    /// The server's side: the queue of request numbers, the busy workers, and when each
    /// request in service finishes.
    queue: VecDeque<u64>,
    busy: u32,
    finishing: BinaryHeap<Reverse<(Nanos, u64)>>,
    /// The next arrival, ns (fractional: the gaps are drawn as real numbers).
    next_arrival: f64,
}

impl Sim {
    /// A server of `workers` workers taking `service` per request, whose clients give up
    /// after `timeout` (ns) and arrive at `rate` per second; `seed` decides arrivals and
    /// service times. The first arrival is at 0.
    pub fn new(
        service: Service,
        timeout: Nanos,
        workers: u32,
        rate: f64,
        seed: u64,
    ) -> Result<Sim, SimError> {
        Ok(Sim {
            rng: Rng::new(seed),
            service,
            timeout,
            workers,
            rate: check_rate(rate)?,
            now: 0,
            tick_end: TICK,
            waiting: VecDeque::new(),
            first: 0,
            in_flight: 0,
            queue: VecDeque::new(),
            busy: 0,
            finishing: BinaryHeap::new(),
            next_arrival: 0.0,
        })
    }

    /// The virtual time: the start of the next tick [`Sim::step`] runs.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// The workers, from the next tick on. Fewer than are busy: the busy ones finish
    /// their requests, and no new request is taken until fewer are busy.
    pub fn set_workers(&mut self, workers: u32) {
        self.workers = workers;
    }

    /// The workers the next tick runs with.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The offered rate (requests per second), from the next tick on (the arrival already
    /// drawn still comes when drawn). A rate that is not a positive finite number is an
    /// error, and the rate stays as it was.
    pub fn set_rate(&mut self, rate: f64) -> Result<(), SimError> {
        self.rate = check_rate(rate)?;
        Ok(())
    }

    /// The offered rate the next tick runs with (requests per second).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Free workers take the queue's head.
    fn dispatch(&mut self) {
        while self.busy < self.workers {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            let service = match self.service {
                Service::Constant(t) => t,
                Service::Exponential(mean) => self.rng.exponential(mean as f64) as Nanos,
                Service::Hang => continue,
            };
            self.busy += 1;
            self.finishing
                .push(Reverse((self.now.saturating_add(service.max(1)), id)));
        }
    }

    /// Runs one [`TICK`]: every arrival, answer and timeout up to its end, in time order (at
    /// the same instant: the tick's end first, then a timeout, an answer, an arrival).
    pub fn step(&mut self, controller: &mut dyn Controller) -> Tick {
        // The workers may have changed since the last tick.
        self.dispatch();
        let mut tick = Tick::default();
        loop {
            let arrival = self.next_arrival as Nanos;
            let completion = self
                .finishing
                .peek()
                .map_or(Nanos::MAX, |Reverse((t, _))| *t);
            let deadline = self
                .waiting
                .front()
                .map_or(Nanos::MAX, |w| w.arrived.saturating_add(self.timeout));
            self.now = arrival.min(completion).min(deadline).min(self.tick_end);
            let now = self.now;
            if now == self.tick_end {
                tick.limit = controller.limit();
                tick.in_flight = self.in_flight;
                tick.queue = self.queue.len() as u64;
                self.tick_end += TICK;
                return tick;
            } else if now == deadline {
                let w = self
                    .waiting
                    .pop_front()
                    .expect("a deadline belongs to a waiter");
                self.first += 1;
                self.in_flight -= 1;
                tick.timeouts += 1;
                controller.release(now, w.arrived, Outcome::Timeout, self.rng.next_u64());
            } else if now == completion {
                let Reverse((_, id)) = self.finishing.pop().expect("peeked");
                self.busy -= 1;
                if let Some(w) = id
                    .checked_sub(self.first)
                    .and_then(|i| self.waiting.get_mut(i as usize))
                {
                    w.done = true;
                    let arrived = w.arrived;
                    let latency = now - arrived;
                    self.in_flight -= 1;
                    tick.good += 1;
                    tick.latencies
                        .push((latency / 1000).min(u32::MAX as u64) as u32);
                    controller.release(now, arrived, Outcome::Success, self.rng.next_u64());
                }
            } else {
                tick.offered += 1;
                self.next_arrival += self.rng.exponential(NANOS_PER_SEC as f64 / self.rate);
                if controller.acquire(now) {
                    self.queue.push_back(self.first + self.waiting.len() as u64);
                    self.waiting.push_back(Waiting {
                        arrived: now,
                        done: false,
                    });
                    self.in_flight += 1;
                } else {
                    tick.shed += 1;
                }
            }
            // Answered requests leave the client's line once they reach its front.
            while self.waiting.front().is_some_and(|w| w.done) {
                self.waiting.pop_front();
                self.first += 1;
            }
            self.dispatch();
        }
    }
}

fn at<T: Copy>(schedule: &Schedule<T>, now: Nanos, field: &'static str) -> Result<T, SimError> {
    schedule
        .iter()
        .take_while(|(from, _)| *from <= now)
        .last()
        .or(schedule.first())
        .map(|(_, v)| *v)
        .ok_or(SimError::EmptySchedule(field))
}

/// Runs `setup` with `controller`; `seed` decides arrivals and service times. One [`Tick`]
/// per whole tick before `setup.duration`.
pub fn run(
    setup: &Setup,
    controller: &mut dyn Controller,
    seed: u64,
) -> Result<Vec<Tick>, SimError> {
    let mut sim = Sim::new(
        setup.service,
        setup.timeout,
        at(&setup.workers, 0, "workers")?,
        at(&setup.rate, 0, "rate")?,
        seed,
    )?;
    let mut ticks = Vec::new();
    while sim.now() + TICK < setup.duration {
        sim.set_workers(at(&setup.workers, sim.now(), "workers")?);
        sim.set_rate(at(&setup.rate, sim.now(), "rate")?)?;
        ticks.push(sim.step(controller));
    }
    Ok(ticks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Bounds, Static, Tollgate};

    const MS: Nanos = NANOS_PER_MS;
    const SEC: Nanos = NANOS_PER_SEC;

    #[test]
    fn a_rate_that_is_not_a_positive_finite_number_is_refused_and_the_rate_stays() {
        assert_eq!(
            Sim::new(Service::Constant(10 * MS), SEC, 1, 0.0, 1).err(),
            Some(SimError::Rate(0.0))
        );
        let mut sim = Sim::new(Service::Constant(10 * MS), SEC, 1, 50.0, 1).unwrap();
        for bad in [0.0, -1.0, f64::INFINITY] {
            assert_eq!(sim.set_rate(bad), Err(SimError::Rate(bad)));
        }
        assert!(matches!(sim.set_rate(f64::NAN), Err(SimError::Rate(r)) if r.is_nan()));
        assert_eq!(sim.rate(), 50.0);
        assert_eq!(sim.set_rate(70.0), Ok(()));
        assert_eq!(sim.rate(), 70.0);
    }

    #[test]
    fn an_empty_schedule_is_named() {
        let setup = Setup {
            workers: vec![],
            rate: vec![(0, 10.0)],
            service: Service::Constant(10 * MS),
            timeout: SEC,
            duration: SEC,
        };
        let err = run(&setup, &mut Static::new(1), 1).unwrap_err();
        assert_eq!(err, SimError::EmptySchedule("workers"));
        assert_eq!(err.to_string(), "workers: the schedule has no value");
    }

    #[test]
    fn halving_the_workers_below_the_load_makes_the_queue_grow_from_the_next_tick() {
        // 8,000 requests/s: 80% of 100 workers at 10 ms, 160% of 50.
        let mut sim = Sim::new(Service::Constant(10 * MS), 10 * SEC, 100, 8000.0, 3).unwrap();
        let mut unlimited = Static::new(u64::MAX);
        let before: Vec<Tick> = (0..20).map(|_| sim.step(&mut unlimited)).collect();
        assert!(before.iter().all(|t| t.queue < 100), "{before:?}");
        sim.set_workers(50);
        assert_eq!(sim.workers(), 50);
        let after: Vec<Tick> = (0..10).map(|_| sim.step(&mut unlimited)).collect();
        assert!(after.windows(2).all(|w| w[1].queue > w[0].queue));
        assert!(after[9].queue > 2000, "{}", after[9].queue);
        // 50 workers answer at most 50 per 10 ms.
        assert!(after[1..].iter().all(|t| t.good <= 500 + 50));
    }

    #[test]
    fn every_admitted_request_is_in_flight_until_answered_or_timed_out() {
        for service in [Service::Exponential(10 * MS), Service::Hang] {
            let mut sim = Sim::new(service, SEC, 100, 20_000.0, 5).unwrap();
            let bounds = Bounds {
                min: 5,
                max: 1000,
                initial: 20,
            };
            let mut tollgate = Tollgate::new(bounds, 5).unwrap();
            let (mut admitted, mut ended) = (0, 0);
            for _ in 0..50 {
                let t = sim.step(&mut tollgate);
                admitted += t.offered - t.shed;
                ended += t.good + t.timeouts;
                assert_eq!(t.in_flight, admitted - ended, "{service:?}");
            }
        }
    }
}

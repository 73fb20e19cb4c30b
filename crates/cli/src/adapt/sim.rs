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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use tollgate::adaptive::Outcome;
use tollgate::{Nanos, NANOS_PER_MS, NANOS_PER_SEC};

use crate::adapt::controller::Controller;
use crate::adapt::rng::Rng;

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
/// first from 0.
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
    /// The client's timeout.
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

fn at<T: Copy>(schedule: &Schedule<T>, now: Nanos) -> T {
    schedule
        .iter()
        .take_while(|(from, _)| *from <= now)
        .last()
        .or(schedule.first())
        .map(|(_, v)| *v)
        .expect("a schedule has at least one value")
}

/// A request the client still waits for.
struct Waiting {
    arrived: Nanos,
    done: bool,
}

/// Runs `setup` with `controller`; `seed` decides arrivals and service times.
pub fn run(setup: &Setup, controller: &mut dyn Controller, seed: u64) -> Vec<Tick> {
    let mut rng = Rng::new(seed);
    let mut ticks: Vec<Tick> = Vec::new();
    let mut tick = Tick::default();
    let mut tick_end = TICK;
    // The client's side: admitted requests in admission order (so in deadline order),
    // numbered from `first`.
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    let mut first: u64 = 0;
    // The server's side.
    let mut queue: VecDeque<u64> = VecDeque::new();
    let mut busy: u32 = 0;
    let mut finishing: BinaryHeap<Reverse<(Nanos, u64)>> = BinaryHeap::new();
    let mut next_arrival = 0.0f64;
    let mut now: Nanos;
    loop {
        let rate = at(&setup.rate, next_arrival as Nanos);
        let arrival = next_arrival as Nanos;
        let completion = finishing.peek().map_or(Nanos::MAX, |Reverse((t, _))| *t);
        let deadline = waiting
            .front()
            .map_or(Nanos::MAX, |w| w.arrived + setup.timeout);
        now = arrival.min(completion).min(deadline).min(tick_end);
        if now >= setup.duration {
            break;
        }
        if now == tick_end {
            tick.limit = controller.limit();
            ticks.push(std::mem::take(&mut tick));
            tick_end += TICK;
        } else if now == deadline {
            let w = waiting.pop_front().expect("a deadline belongs to a waiter");
            first += 1;
            tick.timeouts += 1;
            controller.release(now, w.arrived, Outcome::Timeout, rng.next_u64());
        } else if now == completion {
            let Reverse((_, id)) = finishing.pop().expect("peeked");
            busy -= 1;
            if let Some(w) = id
                .checked_sub(first)
                .and_then(|i| waiting.get_mut(i as usize))
            {
                w.done = true;
                let latency = now - w.arrived;
                tick.good += 1;
                tick.latencies
                    .push((latency / 1000).min(u32::MAX as u64) as u32);
                controller.release(now, w.arrived, Outcome::Success, rng.next_u64());
            }
        } else {
            tick.offered += 1;
            next_arrival += rng.exponential(NANOS_PER_SEC as f64 / rate);
            if controller.acquire(now) {
                queue.push_back(first + waiting.len() as u64);
                waiting.push_back(Waiting {
                    arrived: now,
                    done: false,
                });
            } else {
                tick.shed += 1;
            }
        }
        // Answered requests leave the client's line once they reach its front.
        while waiting.front().is_some_and(|w| w.done) {
            waiting.pop_front();
            first += 1;
        }
        // Free workers take the queue's head.
        let workers = at(&setup.workers, now);
        while busy < workers {
            let Some(id) = queue.pop_front() else { break };
            let service = match setup.service {
                Service::Constant(t) => t,
                Service::Exponential(mean) => rng.exponential(mean as f64) as Nanos,
                Service::Hang => continue,
            };
            busy += 1;
            finishing.push(Reverse((now + service.max(1), id)));
        }
    }
    ticks
}

//! One route's adaptive limit: the core's gradient controller behind a lock, its queue if
//! it has one, and the permit an admitted request holds until its response has ended.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use spin::mutex::SpinMutex;
use tollgate::adaptive::gradient::{self, Gradient, GradientState};
use tollgate::adaptive::Outcome;
use tollgate::clock::{Clock, MonotonicClock};
use tollgate::Nanos;
use tollgate_http::route::PathMatch;

use super::queue::{Entered, Queue};

/// What the lock guards: the controller's state and the random source that jitters its
/// re-measurements of the no-load latency.
struct Guarded {
    state: GradientState,
    random: u64,
}

/// One route's controller. The lock is the spin lock the core's keyed limiter (the
/// in-memory store) uses: every critical section is a few arithmetic steps, never I/O.
pub(crate) struct RouteLimit {
    pub(crate) pattern: String,
    pub(crate) methods: Vec<String>,
    pub(crate) path: PathMatch,
    gradient: Gradient,
    clock: Arc<MonotonicClock>,
    guarded: SpinMutex<Guarded>,
    /// Where requests wait for a slot (`None`: a request the limit has no room for is shed
    /// at once).
    pub(crate) queue: Option<Queue>,
}

/// What a request arriving on a route gets.
pub(crate) enum Admission {
    /// A slot now.
    Now(Permit),
    /// A place in the route's queue: the waiter resolves to a slot.
    Wait(Waiter),
    /// No slot and no place: the limit is full and the queue too (or there is none).
    Shed,
}

impl RouteLimit {
    pub(crate) fn new(
        pattern: String,
        methods: Vec<String>,
        path: PathMatch,
        gradient: Gradient,
        clock: Arc<MonotonicClock>,
        queue: Option<Queue>,
    ) -> RouteLimit {
        // Seeded per process (and per route), so that processes started together do not
        // re-measure together: the point of the core's jitter.
        let random = RandomState::new().hash_one(&pattern) | 1;
        let state = GradientState::new(&gradient, clock.now(), random);
        RouteLimit {
            pattern,
            methods,
            path,
            gradient,
            clock,
            guarded: SpinMutex::new(Guarded { state, random }),
            queue,
        }
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> u64 {
        self.guarded.lock().state.limit()
    }

    /// Requests admitted and not yet released.
    pub(crate) fn in_flight(&self) -> u64 {
        self.guarded.lock().state.in_flight()
    }

    /// How long a request may wait in the route's queue (zero without one).
    pub(crate) fn queue_deadline(&self) -> std::time::Duration {
        self.queue
            .as_ref()
            .map_or(Default::default(), |q| q.deadline)
    }

    /// The requests waiting now in the route's queue (0 without one).
    pub(crate) fn waiting(&self) -> usize {
        self.queue.as_ref().map_or(0, Queue::len)
    }

    /// A request arrives: a slot if the limit has room (and, with a queue, nobody waits
    /// before it), else a place in the queue if it has one free, else shed.
    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        let Some(queue) = &self.queue else {
            return self.acquire().map_or(Admission::Shed, Admission::Now);
        };
        match queue.enter(|| self.acquire()) {
            Entered::Now(permit) => Admission::Now(permit),
            Entered::Queued(ticket) => Admission::Wait(Waiter {
                route: Arc::clone(self),
                ticket: Some(ticket),
            }),
            Entered::Full => Admission::Shed,
        }
    }

    /// Admits one request if the limit has room: its permit, or `None`. The permit's
    /// latency starts now: a queued request's wait is not service time, and counting it
    /// would make the controller cut the limit for a queue the layer itself keeps.
    fn acquire(self: &Arc<Self>) -> Option<Permit> {
        let now = self.clock.now();
        let allowed =
            gradient::acquire(&self.gradient, &mut self.guarded.lock().state, now).allowed;
        allowed.then(|| Permit {
            limit: Some(Arc::clone(self)),
            started: now,
        })
    }

    fn release(&self, started: Nanos, outcome: Outcome) {
        let now = self.clock.now();
        let mut g = self.guarded.lock();
        // xorshift64: a fresh value for each release's possible re-measurement jitter.
        g.random ^= g.random << 13;
        g.random ^= g.random >> 7;
        g.random ^= g.random << 17;
        let random = g.random;
        gradient::release(&self.gradient, &mut g.state, now, started, outcome, random);
        drop(g);
        if let Some(queue) = &self.queue {
            queue.wake_first();
        }
    }
}

/// A request waiting in its route's queue: resolves to its permit when its turn comes and
/// the limit has room. Dropped before (the deadline passed, the client went away), it
/// leaves the queue; it never held a slot, so none is given back and the controller hears
/// nothing of it (a request the layer refused is not an outcome of the service's).
pub(crate) struct Waiter {
    route: Arc<RouteLimit>,
    /// `None` once admitted.
    ticket: Option<u64>,
}

impl Future for Waiter {
    type Output = Permit;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let ticket = self.ticket.expect("Waiter polled after its admission");
        let route = &self.route;
        let Some(queue) = &route.queue else {
            unreachable!("a waiter is only made by a route with a queue")
        };
        let permit = std::task::ready!(queue.poll_turn(ticket, cx, || route.acquire()));
        self.ticket = None;
        Poll::Ready(permit)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let (Some(ticket), Some(queue)) = (self.ticket, &self.route.queue) {
            queue.leave(ticket);
        }
    }
}

/// An admitted request's slot, reported to the controller exactly once: by
/// [`Permit::finish`] with how the request ended, or, when dropped unfinished (the
/// response body cut off, the client gone, the inner future cancelled or unwound), as a
/// [`Outcome::Timeout`]: the caller gave up, and the real latency is unknown.
pub(crate) struct Permit {
    limit: Option<Arc<RouteLimit>>,
    started: Nanos,
}

impl Permit {
    /// Reports the request's end now, with `outcome` (once; later calls and the drop do
    /// nothing).
    pub(crate) fn finish(&mut self, outcome: Outcome) {
        if let Some(limit) = self.limit.take() {
            limit.release(self.started, outcome);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.finish(Outcome::Timeout);
    }
}

/// How a response's status counts: a 5xx (the upstream failing or refusing) and a 429
/// (refused for load) are overload, not latency samples; anything else is a sample.
pub(crate) fn outcome_of(status: http::StatusCode) -> Outcome {
    if status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS {
        Outcome::Overload
    } else {
        Outcome::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;
    use std::task::Waker;
    use std::time::Duration;
    use tollgate::adaptive::gradient::GradientParams;

    fn route(initial: u32) -> Arc<RouteLimit> {
        with_queue(initial, None)
    }

    fn with_queue(initial: u32, queue: Option<Queue>) -> Arc<RouteLimit> {
        let params = GradientParams {
            min_limit: 1,
            initial_limit: initial,
            ..GradientParams::default()
        };
        on(params, queue)
    }

    fn on(params: GradientParams, queue: Option<Queue>) -> Arc<RouteLimit> {
        let clock = Arc::new(MonotonicClock::default());
        Arc::new(RouteLimit::new(
            "/".into(),
            Vec::new(),
            PathMatch::parse("/").unwrap(),
            Gradient::new(params).unwrap(),
            clock,
            queue,
        ))
    }

    fn queue(max_waiting: usize) -> Option<Queue> {
        Some(Queue::new(max_waiting, Duration::from_secs(1)))
    }

    fn now(a: Admission) -> Permit {
        match a {
            Admission::Now(p) => p,
            _ => panic!("not admitted at once"),
        }
    }

    fn wait(a: Admission) -> Waiter {
        match a {
            Admission::Wait(w) => w,
            _ => panic!("not queued"),
        }
    }

    /// Polls a waiter once: its permit if its turn has come and the limit has room.
    fn turn(w: &mut Waiter) -> Option<Permit> {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(w).poll(&mut cx) {
            Poll::Ready(p) => Some(p),
            Poll::Pending => None,
        }
    }

    #[test]
    fn queued_requests_are_admitted_first_come_first_served() {
        let r = with_queue(1, queue(3));
        let mut p = now(r.admit());
        let (mut first, mut second) = (wait(r.admit()), wait(r.admit()));
        assert_eq!(r.waiting(), 2);
        assert!(turn(&mut first).is_none(), "the limit is full");
        p.finish(Outcome::Success);
        assert!(turn(&mut second).is_none(), "not its turn: the first waits");
        let mut admitted = turn(&mut first).expect("the first's turn, and a free slot");
        assert_eq!((r.waiting(), r.in_flight()), (1, 1));
        admitted.finish(Outcome::Success);
        let _admitted = turn(&mut second).expect("the second's turn");
        assert_eq!((r.waiting(), r.in_flight()), (0, 1));
    }

    #[test]
    fn a_waiters_latency_starts_at_its_admission_not_its_arrival() {
        let r = with_queue(1, queue(1));
        let mut p = now(r.admit());
        let mut w = wait(r.admit());
        // The clock moves on while it waits (the sleep only makes the instants differ).
        std::thread::sleep(Duration::from_millis(2));
        let before_admission = r.clock.now();
        p.finish(Outcome::Success);
        let admitted = turn(&mut w).expect("its turn");
        assert!(admitted.started >= before_admission);
    }

    #[test]
    fn a_newcomer_queues_behind_a_waiter_even_when_a_slot_is_free() {
        let r = with_queue(1, queue(3));
        let mut p = now(r.admit());
        let mut first = wait(r.admit());
        p.finish(Outcome::Success);
        let mut newcomer = wait(r.admit());
        assert!(turn(&mut newcomer).is_none());
        assert!(turn(&mut first).is_some());
    }

    #[test]
    fn a_full_queue_sheds_and_holds_no_more_than_max_waiting() {
        let r = with_queue(1, queue(2));
        let _p = now(r.admit());
        let _waiters = (wait(r.admit()), wait(r.admit()));
        assert!(matches!(r.admit(), Admission::Shed));
        assert_eq!((r.waiting(), r.in_flight()), (2, 1));
    }

    #[test]
    fn without_a_queue_a_full_limit_sheds() {
        let r = route(1);
        let _p = now(r.admit());
        assert!(matches!(r.admit(), Admission::Shed));
        assert_eq!(r.waiting(), 0);
    }

    #[test]
    fn a_waiter_that_leaves_frees_its_place_and_holds_no_slot() {
        let r = with_queue(1, queue(1));
        let mut p = now(r.admit());
        let mut w = wait(r.admit());
        assert!(turn(&mut w).is_none());
        drop(w);
        assert_eq!((r.waiting(), r.in_flight()), (0, 1));
        let mut next = wait(r.admit());
        p.finish(Outcome::Success);
        let _admitted = turn(&mut next).expect("the next one's turn");
        assert_eq!(r.in_flight(), 1);
    }

    #[test]
    fn the_first_waiter_leaving_passes_the_turn_to_the_next() {
        let r = with_queue(1, queue(2));
        let mut p = now(r.admit());
        let (first, mut second) = (wait(r.admit()), wait(r.admit()));
        assert!(turn(&mut second).is_none());
        p.finish(Outcome::Success);
        drop(first);
        let _admitted = turn(&mut second).expect("the second's turn");
        assert_eq!((r.waiting(), r.in_flight()), (0, 1));
    }

    #[test]
    fn a_waiter_is_admitted_only_once_in_flight_falls_below_a_shrunk_limit() {
        // Windows of 1 ms that close on 2 samples: two overload answers halve the limit.
        let params = GradientParams {
            min_limit: 1,
            initial_limit: 8,
            window: 1_000_000,
            min_samples: 2,
            ..GradientParams::default()
        };
        let r = on(params, queue(1));
        let mut permits: Vec<Permit> = (0..8).map(|_| now(r.admit())).collect();
        let mut w = wait(r.admit());
        // The window must have lasted its 1 ms before it may close (not a timing assertion:
        // a longer sleep changes nothing).
        std::thread::sleep(Duration::from_millis(2));
        for mut p in permits.drain(..2) {
            p.finish(Outcome::Overload);
        }
        let limit = r.limit();
        assert!(
            limit < 6,
            "two overload answers cut the limit of 8: {limit}"
        );
        while r.in_flight() > limit {
            assert!(turn(&mut w).is_none(), "{} in flight", r.in_flight());
            permits.pop().unwrap().finish(Outcome::Success);
        }
        assert!(turn(&mut w).is_none(), "as many in flight as the limit");
        permits.pop().unwrap().finish(Outcome::Success);
        assert!(turn(&mut w).is_some(), "one below the limit");
    }

    #[test]
    fn a_full_limit_sheds_and_a_finished_permit_frees_its_slot() {
        let r = route(1);
        let mut first = r.acquire().expect("a free slot");
        assert!(r.acquire().is_none());
        first.finish(Outcome::Success);
        assert_eq!(r.in_flight(), 0);
        assert!(r.acquire().is_some());
    }

    #[test]
    fn a_dropped_permit_frees_its_slot_once() {
        let r = route(2);
        let mut p = r.acquire().unwrap();
        let _other = r.acquire().unwrap();
        p.finish(Outcome::Success);
        drop(p);
        assert_eq!(r.in_flight(), 1);
    }

    #[test]
    fn server_errors_and_429_are_overload_other_answers_are_samples() {
        assert_eq!(
            outcome_of(StatusCode::SERVICE_UNAVAILABLE),
            Outcome::Overload
        );
        assert_eq!(
            outcome_of(StatusCode::INTERNAL_SERVER_ERROR),
            Outcome::Overload
        );
        assert_eq!(outcome_of(StatusCode::TOO_MANY_REQUESTS), Outcome::Overload);
        assert_eq!(outcome_of(StatusCode::NOT_FOUND), Outcome::Success);
        assert_eq!(outcome_of(StatusCode::OK), Outcome::Success);
    }
}

//! One route's adaptive limit: the core's gradient controller behind a lock, and the
//! permit an admitted request holds until its response has ended.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use spin::mutex::SpinMutex;
use tollgate::adaptive::gradient::{self, Gradient, GradientState};
use tollgate::adaptive::Outcome;
use tollgate::clock::{Clock, MonotonicClock};
use tollgate::Nanos;
use tollgate_http::route::PathMatch;

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
}

impl RouteLimit {
    pub(crate) fn new(
        pattern: String,
        methods: Vec<String>,
        path: PathMatch,
        gradient: Gradient,
        clock: Arc<MonotonicClock>,
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

    /// Admits one request if the limit has room: its permit, or `None` (shed).
    pub(crate) fn acquire(self: &Arc<Self>) -> Option<Permit> {
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
    use tollgate::adaptive::gradient::GradientParams;

    fn route(initial: u32) -> Arc<RouteLimit> {
        let g = Gradient::new(GradientParams {
            min_limit: 1,
            initial_limit: initial,
            ..GradientParams::default()
        })
        .unwrap();
        let clock = Arc::new(MonotonicClock::default());
        Arc::new(RouteLimit::new(
            "/".into(),
            Vec::new(),
            PathMatch::parse("/").unwrap(),
            g,
            clock,
        ))
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

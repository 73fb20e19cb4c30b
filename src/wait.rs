//! The waiting rule: what a caller that is willing to wait up to a deadline does with a
//! decision. Every waiting API (the keyed limiter's `acquire`, the npm package's `acquire`
//! and `throttle`, the fleet stores) asks [`step`] after each decision, so they all wait,
//! give up and charge the same way.
//!
//! The rule, for a request that has already waited `waited` and may wait `max_wait` in all
//! (its deadline):
//!
//! * **Admitted**: proceed, after the decision's `delay` (zero but for the leaky-bucket
//!   queue, a shaper: the request holds a place in the queue and leaves after `delay`).
//!   The delay counts against the deadline: the request proceeds at `waited + delay`, which
//!   must be at most `max_wait`. When it is not, the answer is [`Step::GiveUp`] with
//!   `retry_after = delay`, and **the caller must not keep the charge** (decide on a copy of
//!   the state and commit only on [`Step::Go`]: the keyed limiter does). No later admission
//!   can help: the queue's tail only moves later, so a request admitted later leaves no
//!   earlier.
//! * **Denied with a retry time within the deadline** (`waited + retry_after <= max_wait`):
//!   sleep [`Step::Wait`] — `retry_after`, plus the caller's jitter, but never past the
//!   deadline — then decide again. Nothing was charged.
//! * **Denied with a retry time beyond the deadline**: give up now ([`Step::GiveUp`]), rather
//!   than sleep to the deadline and fail then. The retry time is the soonest the request
//!   could be admitted if nothing else arrives, so waiting can only make it later.
//! * **Denied without a retry time** (`retry_after == 0` on a denial: a concurrency limit,
//!   whose slots free when a holder releases them, which no clock can predict): give up now,
//!   with `retry_after` 0.
//!
//! A cost above the policy's capacity never gets here: [`crate::decide()`] reports it as
//! [`crate::DecideError::CostExceedsCapacity`], because no wait would ever admit it.
//!
//! A deadline that has passed (`waited > max_wait`) gives up whatever the decision says,
//! so a caller can ask the rule about a decision it will not commit.
//!
//! **Jitter** spreads waiters of different processes that were denied at the same instant,
//! so that they do not all come back at once. It is a value the caller draws (the core never
//! reads randomness) and is added to the wait, but never pushes it past the deadline: jitter
//! never turns a wait that fits into a give-up. Waiters of one process need none: they are
//! served one at a time, in arrival order.
//!
//! ```
//! use tollgate::wait::{step, Step};
//! use tollgate::{decide, Policy, NANOS_PER_MS};
//!
//! let policy: Policy = "gcra 10/s burst 1".parse().unwrap(); // one every 100 ms
//! let (_, state) = decide(&policy, None, 0, 1).unwrap(); // the burst is spent at t = 0
//! let (denied, _) = decide(&policy, state, 30 * NANOS_PER_MS, 1).unwrap();
//! assert_eq!(denied.retry_after, 70 * NANOS_PER_MS);
//! let ms = |n| n * NANOS_PER_MS;
//! // Waited 30 ms of at most 500: sleep the 70 ms to the retry time, then decide again.
//! assert_eq!(step(&denied, ms(30), ms(500), 0), Step::Wait(ms(70)));
//! // With 5 ms of jitter the caller drew: 75 ms.
//! assert_eq!(step(&denied, ms(30), ms(500), ms(5)), Step::Wait(ms(75)));
//! // Jitter never sleeps past the deadline: 20 ms drawn, 90 ms of budget left.
//! assert_eq!(step(&denied, ms(30), ms(120), ms(20)), Step::Wait(ms(90)));
//! // A deadline of 50 ms cannot be met (30 + 70 > 50): give up now, not at 50 ms.
//! assert_eq!(step(&denied, ms(30), ms(50), 0), Step::GiveUp { retry_after: ms(70) });
//!
//! // The leaky queue admits with a delay, which counts against the deadline.
//! let queue: Policy = "leaky-queue 10/s burst 5".parse().unwrap();
//! let (admitted, _) = decide(&queue, None, 0, 1).unwrap();
//! assert_eq!(admitted.delay, ms(100));
//! assert_eq!(step(&admitted, 0, ms(100), 0), Step::Go { delay: ms(100) });
//! // With 80 ms to go it would leave 20 ms late: give up (and do not keep the charge).
//! assert_eq!(step(&admitted, ms(20), ms(100), 0), Step::GiveUp { retry_after: ms(100) });
//! ```

use crate::{Decision, Nanos};

/// What a waiting caller does next, by [`step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Admitted (keep the charge); proceed after `delay`, the leaky queue's wait (zero for
    /// every other algorithm).
    Go {
        /// See [`Decision::delay`].
        delay: Nanos,
    },
    /// Denied, nothing charged: sleep this long, then decide again.
    Wait(Nanos),
    /// Stop waiting: the request cannot proceed by the deadline. Nothing is charged (a
    /// caller holding an admitted decision must not commit it). `retry_after` is how long
    /// from now the request could be admitted (for an admitted leaky-queue request: when it
    /// would leave the queue); 0 when no clock can say (a full concurrency limit).
    GiveUp {
        /// The soonest the request could be admitted (or leave the queue), from now.
        retry_after: Nanos,
    },
}

/// The waiting rule (see the [module docs](self)): after `decision`, having waited `waited`
/// of at most `max_wait`, with `jitter` the caller drew (0 for none).
///
/// Arithmetic saturates: `max_wait = u64::MAX` waits as long as it takes.
pub const fn step(decision: &Decision, waited: Nanos, max_wait: Nanos, jitter: Nanos) -> Step {
    if waited > max_wait {
        let retry_after = if decision.allowed {
            decision.delay
        } else {
            decision.retry_after
        };
        return Step::GiveUp { retry_after };
    }
    let budget = max_wait - waited;
    if decision.allowed {
        return if decision.delay <= budget {
            Step::Go {
                delay: decision.delay,
            }
        } else {
            Step::GiveUp {
                retry_after: decision.delay,
            }
        };
    }
    let retry_after = decision.retry_after;
    if retry_after == 0 || retry_after > budget {
        return Step::GiveUp { retry_after };
    }
    let wait = retry_after.saturating_add(jitter);
    Step::Wait(if wait < budget { wait } else { budget })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry_after: Nanos) -> Decision {
        Decision {
            allowed: false,
            retry_after,
            ..Decision::default()
        }
    }

    fn admitted(delay: Nanos) -> Decision {
        Decision {
            allowed: true,
            delay,
            ..Decision::default()
        }
    }

    #[test]
    fn a_retry_at_the_deadline_waits_and_one_past_it_gives_up() {
        assert_eq!(step(&denied(100), 0, 100, 0), Step::Wait(100));
        assert_eq!(
            step(&denied(101), 0, 100, 0),
            Step::GiveUp { retry_after: 101 }
        );
        assert_eq!(step(&denied(40), 60, 100, 0), Step::Wait(40));
        assert_eq!(
            step(&denied(41), 60, 100, 0),
            Step::GiveUp { retry_after: 41 }
        );
    }

    #[test]
    fn jitter_is_added_but_never_past_the_deadline() {
        assert_eq!(step(&denied(10), 0, 100, 5), Step::Wait(15));
        assert_eq!(step(&denied(10), 0, 100, 500), Step::Wait(100));
        assert_eq!(
            step(&denied(10), 0, u64::MAX, u64::MAX),
            Step::Wait(u64::MAX)
        );
    }

    #[test]
    fn admitted_requests_go_if_their_delay_fits() {
        assert_eq!(step(&admitted(0), 100, 100, 0), Step::Go { delay: 0 });
        assert_eq!(step(&admitted(30), 70, 100, 0), Step::Go { delay: 30 });
        assert_eq!(
            step(&admitted(31), 70, 100, 0),
            Step::GiveUp { retry_after: 31 }
        );
    }

    #[test]
    fn a_passed_deadline_always_gives_up() {
        assert_eq!(
            step(&admitted(0), 101, 100, 0),
            Step::GiveUp { retry_after: 0 }
        );
        assert_eq!(
            step(&denied(5), 101, 100, 0),
            Step::GiveUp { retry_after: 5 }
        );
    }

    #[test]
    fn a_denial_without_a_retry_time_gives_up_at_once() {
        assert_eq!(
            step(&denied(0), 0, u64::MAX, 0),
            Step::GiveUp { retry_after: 0 }
        );
    }

    #[test]
    fn no_deadline_waits_as_long_as_it_takes() {
        assert_eq!(
            step(&denied(u64::MAX), 0, u64::MAX, 0),
            Step::Wait(u64::MAX)
        );
        assert_eq!(
            step(&admitted(u64::MAX), 0, u64::MAX, 0),
            Step::Go { delay: u64::MAX }
        );
    }
}

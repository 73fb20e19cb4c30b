//! The waiting rule: what a caller that is willing to wait up to a deadline does with a
//! decision. Every waiting API (the keyed limiter's `acquire`, the npm package's `acquire`
//! and `throttle`, the fleet stores on Redis, the Redis module's `MAXDELAY`) follows it, so
//! they all wait, give up and charge the same way. With the `acquire` feature, [`wait_in_line`]
//! runs the whole wait (the line of waiters of a key, the sleeps, the give-up) for any way of
//! deciding: the keyed limiter and the Redis limiter both wait through it.
//!
//! The rule, for a request that has already waited `waited` and may wait `max_wait` in all
//! (its deadline), so has [`left`] `max_wait - waited`:
//!
//! * **Admitted**: proceed, after the decision's `delay` (zero but for the leaky-bucket
//!   queue, a shaper: the request holds a place in the queue and leaves after `delay`).
//!   The delay counts against the deadline: the request proceeds at `waited + delay`, which
//!   must be at most `max_wait`. When it is not, the answer is [`Step::GiveUp`] with
//!   `retry_after = delay`, and **the caller must not keep the charge**: whoever commits a
//!   waiter's decision commits it only when [`keeps`] says so, given the time left *when the
//!   decision was asked for* (the keyed limiter decides on a copy; a Redis round is sent the
//!   time left, as the module's `MAXDELAY`). [`step`] answers [`Step::Go`] exactly when
//!   [`keeps`] kept an admission, so a charged decision is never followed by a timeout, and
//!   a timeout never leaves a charge. No later admission can help: the queue's tail only
//!   moves later, so a request admitted later leaves no earlier.
//! * **Denied with a retry time within the deadline** (`waited + retry_after <= max_wait`):
//!   sleep [`Step::Wait`] — `retry_after`, plus the caller's jitter (see below) — then decide
//!   again. Nothing was charged.
//! * **Denied with a retry time beyond the deadline**: give up now ([`Step::GiveUp`]), rather
//!   than sleep to the deadline and fail then. The retry time is the soonest the request
//!   could be admitted if nothing else arrives, so waiting can only make it later.
//! * **Denied without a retry time** (`retry_after == 0` on a denial: a concurrency limit,
//!   whose slots free when a holder releases them, which no clock can predict): give up now,
//!   with `retry_after` 0.
//! * **A deadline that has passed** (`waited > max_wait`: a timer that fired late) gives up
//!   whatever the decision says, and nothing may be committed for it ([`left`] is `None`):
//!   ask the key without charging, and report its retry time ([`retry_time`]).
//!
//! A cost above the policy's capacity never gets here: [`crate::decide()`] reports it as
//! [`crate::DecideError::CostExceedsCapacity`], because no wait would ever admit it.
//!
//! **A waiter behind others** (of the same key, in the same process) does not decide until
//! it is the head of its line; first it asks the key without charging: if the key alone
//! already makes it miss its deadline ([`step`] gives up), the line ahead can only make it
//! later, so it gives up at once with the key's retry time. Otherwise it waits for its turn
//! until its deadline, and then times out with the key's retry time (asked again, without
//! charging; 0 only for a full concurrency limit).
//!
//! **Jitter** spreads waiters of different processes that were denied at the same instant,
//! so that they do not all come back at once. It is a value the caller draws (the core never
//! reads randomness) and is added to the wait, but it spends at most half of the slack
//! between the retry time and the deadline: timers fire late (1-45 ms on a loaded machine),
//! and a wake moved onto the deadline would miss it, so jitter never turns a wait that fits
//! into a give-up. (A wake at the retry time itself can only be late by more than the whole
//! slack; with jitter, by more than half of it.) Waiters of one process need none: they are
//! served one at a time, in arrival order.
//!
//! ```
//! use tollgate::wait::{keeps, left, step, Step};
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
//! // Jitter spends at most half the slack: 90 ms left, the retry in 70, 20 drawn: 80 ms.
//! assert_eq!(step(&denied, ms(30), ms(120), ms(20)), Step::Wait(ms(80)));
//! // A deadline of 50 ms cannot be met (30 + 70 > 50): give up now, not at 50 ms.
//! assert_eq!(step(&denied, ms(30), ms(50), 0), Step::GiveUp { retry_after: ms(70) });
//!
//! // The leaky queue admits with a delay, which counts against the deadline.
//! let queue: Policy = "leaky-queue 10/s burst 5".parse().unwrap();
//! let (admitted, _) = decide(&queue, None, 0, 1).unwrap();
//! assert_eq!(admitted.delay, ms(100));
//! assert_eq!(step(&admitted, 0, ms(100), 0), Step::Go { delay: ms(100) });
//! assert!(keeps(&admitted, left(0, ms(100))));
//! // With 80 ms to go it would leave 20 ms late: give up, and the charge is not kept.
//! assert_eq!(step(&admitted, ms(20), ms(100), 0), Step::GiveUp { retry_after: ms(100) });
//! assert!(!keeps(&admitted, left(ms(20), ms(100))));
//! // A timer that fired 1 ms after the deadline: nothing is kept, whatever the key says.
//! assert_eq!(left(ms(101), ms(100)), None);
//! assert!(!keeps(&admitted, None));
//! ```

use crate::{Decision, Nanos};

#[cfg(feature = "acquire")]
mod line;
#[cfg(feature = "acquire")]
pub use self::line::{wait_in_line, Ask, Lines, Turn};

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

/// The time a waiter has left before its deadline, having waited `waited` of at most
/// `max_wait`: `None` once the deadline has passed (nothing may be committed for it then).
pub const fn left(waited: Nanos, max_wait: Nanos) -> Option<Nanos> {
    max_wait.checked_sub(waited)
}

/// Whether a decision made for a waiter with `left` time before its deadline (see [`left`];
/// `None`: passed) may be committed: a denial charges nothing, so it always may; an
/// admission only when its queue `delay` fits in the time left. The one test every store
/// applies before it keeps a waiter's charge (the keyed limiter, a Redis round, the module's
/// `MAXDELAY`), and the one [`step`] answers [`Step::Go`] by.
pub const fn keeps(decision: &Decision, left: Option<Nanos>) -> bool {
    if !decision.allowed {
        return true;
    }
    match left {
        Some(left) => decision.delay <= left,
        None => false,
    }
}

/// The retry time a timeout reports for `decision` (made without charging): for a denial
/// its `retry_after` (0 for a full concurrency limit), for an admission its queue `delay`
/// (0 but for the leaky queue: the key would admit now).
pub const fn retry_time(decision: &Decision) -> Nanos {
    if decision.allowed {
        decision.delay
    } else {
        decision.retry_after
    }
}

/// The waiting rule (see the [module docs](self)): after `decision`, having waited `waited`
/// of at most `max_wait`, with `jitter` the caller drew (0 for none).
///
/// Arithmetic saturates: `max_wait = u64::MAX` waits as long as it takes.
pub const fn step(decision: &Decision, waited: Nanos, max_wait: Nanos, jitter: Nanos) -> Step {
    let Some(budget) = left(waited, max_wait) else {
        return Step::GiveUp {
            retry_after: retry_time(decision),
        };
    };
    if decision.allowed {
        return if keeps(decision, Some(budget)) {
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
    // Jitter spends at most half the slack: the other half is left for a late timer.
    let half_slack = (budget - retry_after) / 2;
    let jitter = if jitter < half_slack {
        jitter
    } else {
        half_slack
    };
    Step::Wait(retry_after + jitter)
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
    fn jitter_is_added_but_spends_at_most_half_the_slack() {
        assert_eq!(step(&denied(10), 0, 100, 5), Step::Wait(15));
        // 90 of slack: at most 45 of jitter, the rest left for a late timer.
        assert_eq!(step(&denied(10), 0, 100, 500), Step::Wait(55));
        assert_eq!(step(&denied(100), 0, 100, 500), Step::Wait(100));
        assert_eq!(
            step(&denied(10), 0, u64::MAX, u64::MAX),
            Step::Wait(10 + (u64::MAX - 10) / 2)
        );
    }

    #[test]
    fn the_issue_repro_a_wait_that_fits_stays_clear_of_the_deadline() {
        // Retry in 1,949 ms, deadline 2,500 ms, 60 s of jitter drawn: the wake leaves
        // 275 ms for a late timer, where clamping to the deadline left none.
        let ms = |n| n * crate::NANOS_PER_MS;
        let Step::Wait(sleep) = step(&denied(ms(1_949)), 0, ms(2_500), ms(60_000)) else {
            panic!("a retry within the deadline waits")
        };
        assert!(
            sleep >= ms(1_949) && ms(2_500) - sleep >= ms(275),
            "{sleep}"
        );
    }

    #[test]
    fn keeps_is_step_going() {
        for d in [
            admitted(0),
            admitted(30),
            admitted(31),
            denied(5),
            denied(0),
        ] {
            for waited in [0, 69, 70, 71, 100, 101] {
                let go = matches!(step(&d, waited, 100, 7), Step::Go { .. });
                assert_eq!(
                    go,
                    d.allowed && keeps(&d, left(waited, 100)),
                    "{d:?} {waited}"
                );
            }
        }
        assert!(keeps(&denied(5), None), "a denial charges nothing");
        assert!(
            !keeps(&admitted(0), None),
            "a passed deadline keeps no admission"
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

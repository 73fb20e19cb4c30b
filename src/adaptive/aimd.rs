//! AIMD: additive increase, multiplicative decrease, driven by explicit overload signals,
//! for a client of someone else's limit (an API that answers 429 or 503, an upstream that
//! times out).
//!
//! **The rule** (TCP's congestion window, counted in requests):
//! * a success while the limit is used (at least half of it in flight): `limit += 1 /
//!   limit`, so one full limit's worth of successes adds one;
//! * an [`Outcome::Overload`] or [`Outcome::Timeout`]: `limit *= backoff / 100`, once per
//!   episode: a signal from a request that started before the last decrease does not cut
//!   again (the requests in flight when the upstream said "too much" all come back with
//!   the same news, and one cut is the answer to it);
//! * the limit stays within `[min_limit, max_limit]`.
//!
//! Latency is not a signal here: a client does not know the upstream's no-load latency,
//! and the upstream says when it is overloaded. Use [`crate::backoff`] to retry the
//! refused requests.
//!
//! **Pros:** the simplest controller; converges to a fair share among clients of one
//! upstream (each backs off by the same factor). **Cons:** needs the upstream to say
//! "overloaded" (a server that just slows down is seen only through timeouts); probes by
//! growing until it is refused, so a few requests per episode are refused by design.
//!
//! ```
//! use tollgate::adaptive::aimd::{self, Aimd, AimdParams, AimdState};
//! use tollgate::adaptive::Outcome;
//! let a = Aimd::new(AimdParams { initial_limit: 10, ..AimdParams::default() }).unwrap();
//! let mut s = AimdState::new(&a);
//! // Two rounds of ten in flight, all succeeding: each success that ends while at least
//! // half the limit is in flight (six, then five of ten) adds 1/limit: 10 -> 10.6 -> 11.06.
//! for round in 0..2 {
//!     while aimd::acquire(&a, &mut s, round).allowed {}
//!     for _ in 0..10 {
//!         aimd::release(&a, &mut s, round + 1, round, Outcome::Success);
//!     }
//! }
//! assert_eq!(s.limit(), 11);
//! // The upstream answers 429 to two requests admitted at t = 10: one cut, to 90%.
//! for _ in 0..2 {
//!     assert!(aimd::acquire(&a, &mut s, 10).allowed);
//! }
//! aimd::release(&a, &mut s, 20, 10, Outcome::Overload);
//! aimd::release(&a, &mut s, 21, 10, Outcome::Overload);
//! assert_eq!(s.limit(), 9); // 11.06 * 0.9 = 9.96
//! ```

use crate::adaptive::{bounded, limits_bounded, take, Outcome, Param, ParamError, ONE};
use crate::{Decision, Nanos};

/// AIMD's parameters, as given (see [`Aimd::new`] for the bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AimdParams {
    /// The floor. Default 1.
    pub min_limit: u32,
    /// The ceiling. Default 1000.
    pub max_limit: u32,
    /// The limit before any answer. Default 10.
    pub initial_limit: u32,
    /// The share of the limit kept on an overload signal, in percent. Default 90.
    pub backoff: u32,
}

impl Default for AimdParams {
    fn default() -> AimdParams {
        AimdParams {
            min_limit: 1,
            max_limit: 1000,
            initial_limit: 10,
            backoff: 90,
        }
    }
}

/// A validated AIMD controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Aimd {
    params: AimdParams,
}

impl Aimd {
    /// Checks the parameters: `1 <= min_limit <= max_limit <= 1_000_000`, `initial_limit`
    /// between them, `backoff` from 10 to 99 (%).
    pub fn new(params: AimdParams) -> Result<Aimd, ParamError> {
        let p = params;
        limits_bounded(p.min_limit, p.max_limit, p.initial_limit)?;
        bounded(Param::Backoff, p.backoff.into(), 10, 99)?;
        Ok(Aimd { params })
    }

    /// The parameters.
    pub const fn params(&self) -> &AimdParams {
        &self.params
    }
}

/// An AIMD controller's state: plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AimdState {
    /// The limit in 1/1024ths.
    limit: u64,
    in_flight: u64,
    /// The instant of the last decrease; signals from requests started before it are
    /// part of the episode it answered.
    cut: Option<Nanos>,
}

impl AimdState {
    /// A fresh state at the initial limit.
    pub fn new(a: &Aimd) -> AimdState {
        AimdState {
            limit: a.params.initial_limit as u64 * ONE,
            in_flight: 0,
            cut: None,
        }
    }

    /// The limit now.
    pub const fn limit(&self) -> u64 {
        self.limit / ONE
    }

    /// Requests admitted and not yet released.
    pub const fn in_flight(&self) -> u64 {
        self.in_flight
    }
}

/// Admits one request if fewer than the limit are in flight.
pub fn acquire(_a: &Aimd, state: &mut AimdState, _now: Nanos) -> Decision {
    take(state.limit(), &mut state.in_flight)
}

/// Releases one request admitted by [`acquire`] that started at `started` and ended at
/// `now` with `outcome`.
pub fn release(a: &Aimd, state: &mut AimdState, now: Nanos, started: Nanos, outcome: Outcome) {
    let used = state.in_flight * 2 >= state.limit();
    state.in_flight = state.in_flight.saturating_sub(1);
    let p = &a.params;
    let limit = if outcome.is_congestion() {
        if state.cut.is_some_and(|cut| started < cut) {
            return;
        }
        state.cut = Some(now);
        state.limit * p.backoff as u64 / 100
    } else if used {
        state.limit + ONE * ONE / state.limit.max(1)
    } else {
        return;
    };
    state.limit = limit.clamp(p.min_limit as u64 * ONE, p.max_limit as u64 * ONE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_outside_ten_to_ninety_nine_percent_is_named() {
        for backoff in [9, 100] {
            let p = AimdParams {
                backoff,
                ..AimdParams::default()
            };
            assert_eq!(Aimd::new(p).unwrap_err().param, Param::Backoff);
        }
        let p = AimdParams {
            min_limit: 20,
            ..AimdParams::default()
        };
        assert_eq!(Aimd::new(p).unwrap_err().param, Param::InitialLimit);
    }

    #[test]
    fn an_idle_limit_does_not_grow() {
        let a = Aimd::new(AimdParams::default()).unwrap();
        let mut s = AimdState::new(&a);
        for t in 0..1000 {
            assert!(acquire(&a, &mut s, t).allowed);
            release(&a, &mut s, t + 1, t, Outcome::Success);
        }
        assert_eq!(s.limit(), 10);
    }

    #[test]
    fn a_timeout_after_the_last_cut_cuts_again_down_to_the_floor() {
        let a = Aimd::new(AimdParams {
            backoff: 50,
            ..AimdParams::default()
        })
        .unwrap();
        let mut s = AimdState::new(&a);
        let mut limits = [0; 5];
        for (t, limit) in limits.iter_mut().enumerate() {
            let t = t as u64 * 10;
            assert!(acquire(&a, &mut s, t).allowed);
            release(&a, &mut s, t + 5, t, Outcome::Timeout);
            *limit = s.limit();
        }
        assert_eq!(limits, [5, 2, 1, 1, 1]);
    }

    #[test]
    fn a_full_limit_of_successes_adds_about_one() {
        let a = Aimd::new(AimdParams {
            initial_limit: 100,
            ..AimdParams::default()
        })
        .unwrap();
        let mut s = AimdState::new(&a);
        for _ in 0..100 {
            assert!(acquire(&a, &mut s, 0).allowed);
        }
        for _ in 0..100 {
            release(&a, &mut s, 1, 0, Outcome::Success);
        }
        // Only the first half count: the limit is used while at least half is in flight.
        assert_eq!(s.limit, 100 * ONE + 51 * (ONE * ONE / (100 * ONE)));
    }
}

//! Reserve an estimate, settle the real cost: for limits on a cost known only after the
//! response (tokens of an LLM call, bytes streamed, rows exported) or on the response itself
//! (count only failed logins, give back requests the server failed).
//!
//! * **Reserve** is a decision that charges an estimate (all or nothing over a stack, as a
//!   check is), and when admitted returns a [`Reservation`]: what was charged, to which
//!   limits, at which instant, and what identifies it. A denied reserve is a denial (a
//!   value) and no reservation.
//! * **Settle** gives back `estimate - actual`, or charges `actual - estimate`, by the rule
//!   of each algorithm (in its own module, next to its `decide`; [`settle()`] dispatches):
//!   * a **refund** never makes a state fuller than fresh, never gives capacity the
//!     reservation did not take, goes to the window the reservation was charged in, and is
//!     nothing once that window no longer counts (the buckets have no window: a refund
//!     always counts, capped at full);
//!   * an **overage** is never lost: by default ([`Overage::Debt`]) it is charged in full,
//!     past the limit if need be, and later requests wait until the debt is paid off (the
//!     decisions' `retry_after` says when); [`Overage::UpToLimit`] charges only what
//!     remains below the limit and reports the rest as [`Settled::unpaid`]. A debt is never
//!     charged deeper than [`crate::MAX_COUNT`] past the limit (the rest reported unpaid),
//!     so every product of a count and a time stays within 128 bits.
//! * **Once**: a reservation settled twice charges once. In Rust, settling takes the
//!   [`Reservation`] by value (it is not `Clone`); a settle refused gives it back
//!   ([`Refused`]), to be settled as it should be. A store shared by processes keeps
//!   idempotency by [`Reservation::id`]: it records the ids it has settled (for as long as
//!   a reservation may live: the longest window of its limits) and answers a second settle
//!   of one with the first's outcome, charging nothing; a client retry and a process
//!   restart then settle once.
//! * A reservation never settled stays charged at its estimate (nothing times out into a
//!   refund: a crashed holder cannot give back what it may have spent).
//! * A reservation of another key, policy or limiter is refused with
//!   [`ReservationError::Foreign`]; an actual above [`crate::MAX_COUNT`] with
//!   [`ReservationError::ActualTooLarge`]. (A negative or fractional cost cannot be written
//!   in Rust; the bindings refuse it.)
//! * A concurrency limit reserves as it acquires, and refuses a settle (its slots are given
//!   back by `release`); a leaky queue, a shaper, refuses the reserve (the algorithms'
//!   modules say why). Both with [`ReservationError::NotSettleable`].
//!
//! ```
//! use tollgate::settle::{settle, Charge, Overage};
//! use tollgate::{decide_in_place, Policy};
//! let policy: Policy = "fixed-window 100/min".parse().unwrap();
//! let mut state = None;
//! // Reserve 40 at t = 1 s.
//! let d = decide_in_place(&policy, &mut state, 1_000_000_000, 40).unwrap();
//! assert_eq!(d.remaining, 60);
//! let charge = Charge { cost: 40, at: 1_000_000_000 };
//! // The response cost 25: 15 come back.
//! let done = settle(&policy, &mut state, charge, 25, 2_000_000_000, Overage::Debt).unwrap();
//! assert_eq!(done.refunded, 15);
//! assert_eq!(decide_in_place(&policy, &mut state, 2_000_000_000, 0).unwrap().remaining, 75);
//! ```

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

#[cfg(feature = "alloc")]
use crate::algorithms::sliding_log;
use crate::algorithms::{fixed_window, gcra, leaky_bucket, sliding_window, token_bucket};
pub use crate::charge::{Charge, Overage, Settled};
use crate::{Nanos, Policy, ReservationError, State, MAX_COUNT};

/// Whether a reserve may charge `policy`: every algorithm but the leaky queue (a shaper,
/// [`ReservationError::NotSettleable`]). A concurrency limit reserves (it acquires) but
/// refuses the settle.
pub fn check_reservable(policy: &Policy) -> Result<(), ReservationError> {
    match policy {
        Policy::LeakyQueue(_) => Err(ReservationError::NotSettleable {
            policy: policy.algorithm(),
        }),
        _ => Ok(()),
    }
}

/// Settles one limit's charge: `charge.cost` was reserved, `actual` was spent, at `now`.
/// `state` is updated in place (`None` when the key is fresh); on an error it is left
/// untouched.
///
/// Errors: [`ReservationError::ActualTooLarge`] (above [`crate::MAX_COUNT`]),
/// [`ReservationError::NotSettleable`] (a concurrency limit or a leaky queue), and
/// [`ReservationError::Decide`] with [`crate::DecideError::StateMismatch`] for a state of
/// another algorithm.
pub fn settle(
    policy: &Policy,
    state: &mut Option<State>,
    charge: Charge,
    actual: u64,
    now: Nanos,
    overage: Overage,
) -> Result<Settled, ReservationError> {
    if actual > MAX_COUNT {
        return Err(ReservationError::ActualTooLarge {
            actual,
            max: MAX_COUNT,
        });
    }
    /// Runs `$settle` on the state variant `$v` (a `Copy` state).
    macro_rules! arm {
        ($v:ident, |$cur:ident| $settle:expr) => {{
            let $cur = match state {
                None => None,
                Some(State::$v(s)) => Some(*s),
                Some(other) => return Err(mismatch(policy, other)),
            };
            let (settled, next) = $settle;
            *state = next.map(State::$v);
            Ok(settled)
        }};
    }
    match policy {
        Policy::TokenBucket(b) => arm!(TokenBucket, |cur| {
            token_bucket::settle(b, cur, charge, actual, now, overage)
        }),
        Policy::Gcra(b) => arm!(Gcra, |cur| gcra::settle(
            b, cur, charge, actual, now, overage
        )),
        Policy::LeakyBucket(b) => arm!(LeakyBucket, |cur| {
            leaky_bucket::settle(b, cur, charge, actual, now, overage)
        }),
        Policy::FixedWindow(q) => arm!(FixedWindow, |cur| {
            fixed_window::settle(q, cur, charge, actual, now, overage)
        }),
        Policy::SlidingWindow(q) => arm!(SlidingWindow, |cur| {
            sliding_window::settle(q, cur, charge, actual, now, overage)
        }),
        #[cfg(feature = "alloc")]
        Policy::SlidingLog(q) => {
            // Not `Copy` (a list of instants): moved out and back.
            let cur = match state.take() {
                None => None,
                Some(State::SlidingLog(s)) => Some(s),
                Some(other) => {
                    let err = mismatch(policy, &other);
                    *state = Some(other);
                    return Err(err);
                }
            };
            let (settled, next) = sliding_log::settle(q, cur, charge, actual, now, overage);
            *state = next.map(State::SlidingLog);
            Ok(settled)
        }
        #[cfg(not(feature = "alloc"))]
        Policy::SlidingLog(_) => Err(crate::DecideError::SlidingLogNeedsAlloc.into()),
        Policy::Concurrency(_) | Policy::LeakyQueue(_) => Err(ReservationError::NotSettleable {
            policy: policy.algorithm(),
        }),
    }
}

/// [`crate::DecideError::StateMismatch`] as a reservation error (the cold path).
#[cold]
fn mismatch(policy: &Policy, state: &State) -> ReservationError {
    ReservationError::Decide(crate::DecideError::StateMismatch {
        policy: policy.algorithm(),
        state: state.algorithm(),
    })
}

/// A stable fingerprint of a list of policies (FNV-1a over each one's algorithm, limit,
/// rate and window): the same in every process and runtime for the same configuration, so
/// that a fleet store can tell a reservation made under other policies
/// ([`Reservation::policies`]).
///
/// ```
/// use tollgate::settle::fingerprint;
/// let a = ["10/s".parse().unwrap(), "fixed-window 100/min".parse().unwrap()];
/// let b = ["10/s".parse().unwrap(), "fixed-window 101/min".parse().unwrap()];
/// assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
/// assert_ne!(fingerprint(&a), fingerprint(&b));
/// ```
pub fn fingerprint(policies: &[Policy]) -> u64 {
    let mut h = FNV_OFFSET;
    for p in policies {
        let (rate, window) = p.quota().map_or((0, 0), |q| (q.limit(), q.window()));
        for word in [p.algorithm() as u64, p.limit(), rate, window] {
            h = fnv1a(h, &word.to_le_bytes());
        }
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a's step over `bytes`, from the hash `h` so far.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a of `bytes`: a hash that is the same in every process and runtime, which a fleet
/// store's reservations carry for their key ([`Reservation::key`]) and their limiter
/// ([`Reservation::limiter`], the hash of the key layout's base of the empty key), so that
/// a reservation made by one process (Rust or Node) is settled by another, or by the same
/// one after a restart.
///
/// ```
/// use tollgate::settle::stable_hash;
/// assert_eq!(stable_hash(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(stable_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
/// ```
pub fn stable_hash(bytes: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, bytes)
}

/// An admitted reserve: what it charged, when, and what identifies it. Plain data (six
/// numbers); settled (consumed) once. A reservation never settled stays charged at its
/// estimate.
#[derive(Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Reservation {
    /// Unique among the reservations of one limiter: what a fleet store keeps idempotency
    /// by (see the module docs).
    pub id: u64,
    /// The limiter that made it: an in-memory limiter's own number (two limiters of the
    /// same policies keep different counters).
    pub limiter: u64,
    /// The [`fingerprint`] of the limiter's policies.
    pub policies: u64,
    /// The key's hash, by the limiter's hasher (a settle of another key is refused; two
    /// keys of one hash, one chance in 2^64, would not be told apart).
    pub key: u64,
    /// The estimate charged to every limit.
    pub estimate: u64,
    /// The reserve's `now`: it names the window (or log entry) a refund goes to. (Where
    /// time had gone back behind a key's stored window or newest log entry, the charge
    /// counted there instead, and the refund finds another window: it is nothing, never
    /// capacity the reservation did not take.)
    pub at: Nanos,
}

impl Reservation {
    /// What it charged each limit, and when.
    pub const fn charge(&self) -> Charge {
        Charge {
            cost: self.estimate,
            at: self.at,
        }
    }
}

/// A settle refused: why, and the reservation back, still charged at its estimate, to be
/// settled as it should be (on its own key, with an actual within the bound) or dropped.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Refused {
    /// Why nothing was settled.
    pub error: ReservationError,
    /// The reservation, unsettled.
    pub reservation: Reservation,
}

impl core::fmt::Display for Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "reservation {} not settled: {}",
            self.reservation.id, self.error
        )
    }
}

impl core::error::Error for Refused {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The outcome of settling a reservation: what every limit did, combined.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Settlement {
    /// The least any limit gave back (each limit's own rule may give back less: a window
    /// that passed gives back nothing).
    pub refunded: u64,
    /// The least any limit charged beyond the estimate.
    pub charged: u64,
    /// The most any limit left unpaid.
    pub unpaid: u64,
    /// Each limit's settle, in stack order, for a stack (empty for one limit).
    pub each: Vec<Settled>,
}

#[cfg(feature = "alloc")]
impl Settlement {
    /// Combines each limit's settle (in stack order); `each` is kept only for more than one.
    pub fn of(each: &[Settled]) -> Settlement {
        let least = |f: fn(&Settled) -> u64| each.iter().map(f).min().unwrap_or(0);
        Settlement {
            refunded: least(|s| s.refunded),
            charged: least(|s| s.charged),
            unpaid: each.iter().map(|s| s.unpaid).max().unwrap_or(0),
            each: if each.len() > 1 {
                each.to_vec()
            } else {
                Vec::new()
            },
        }
    }
}

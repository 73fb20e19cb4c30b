//! # tollgate
//!
//! One rate-limiting core, compiled into every place a request can be checked: a Rust
//! program, a JavaScript app (npm, via wasm-bindgen), a WebAssembly component host, and the
//! CDN edge (a Cloudflare Worker with Durable Objects).
//!
//! The core is `#![no_std]`; its decisions never read a clock (the callers' clocks are in
//! `clock`, with `std`), never panic on any input, and never allocate on the decision path
//! of the fixed-size algorithms.
//!
//! * **Time is an argument.** Every decision takes `now` ([`Nanos`] since any fixed epoch)
//!   from the caller; the caller that owns the counters owns the clock. Time that goes
//!   backwards never over-admits (see each algorithm for the exact rule).
//! * **Integer arithmetic, no drift.** Rates are kept as exact fractions (`limit` per
//!   `window`), so every platform computes the same decision bit for bit.
//! * **State is plain data.** [`decide()`] is a pure function of the policy, the stored state,
//!   the time and the cost; a state equal to "fresh" comes back as `None`, so stores only hold
//!   keys that are actually limited.
//! * **Denial is a value.** [`Decision`] says `allowed`, `limit`, `remaining`, `reset_after`
//!   and `retry_after`; errors are only for impossible requests and invalid policies.
//!
//! ```
//! use tollgate::{decide, Policy, NANOS_PER_SEC};
//!
//! let policy: Policy = "10/s burst 20".parse().unwrap();
//! let mut state = None;
//! let mut admitted = 0;
//! for _ in 0..25 {
//!     let (decision, next) = decide(&policy, state, 0, 1).unwrap();
//!     state = next;
//!     admitted += decision.allowed as u32;
//! }
//! assert_eq!(admitted, 20); // the burst
//! // 100 ms later one token has been refilled (10 per second).
//! let (decision, _) = decide(&policy, state, NANOS_PER_SEC / 10, 1).unwrap();
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 0);
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod adaptive;
pub mod algorithms;
pub mod backoff;
#[cfg(feature = "alloc")]
pub mod carry;
mod charge;
#[cfg(feature = "std")]
pub mod clock;
mod decide;
mod decision;
mod error;
#[cfg(feature = "alloc")]
pub mod fair_share;
#[cfg(feature = "headers")]
pub mod headers;
pub mod ip;
#[cfg(feature = "std")]
pub mod keyed;
mod math;
#[cfg(feature = "alloc")]
pub mod metrics;
#[cfg(feature = "alloc")]
pub mod plans;
mod policy;
pub mod settle;
#[cfg(feature = "alloc")]
pub mod stack;
#[cfg(feature = "alloc")]
pub mod store;
mod text;
pub mod wait;

pub use decide::{admit, decide, decide_in_place, release, State, Verdict};
pub use decision::{Decision, MillisDecision};
pub use error::{DecideError, Field, Identity, PolicyError, ReservationError, Rule};
pub use policy::{Algorithm, Bucket, Policy, Quota, MAX_COUNT, MAX_WINDOW, MIN_WINDOW};
pub use settle::{Overage, Settled};
pub use text::Snippet;

/// A point in time or a duration, in nanoseconds. The epoch is the caller's choice (Unix
/// time, process start, ...) but must stay the same for one key.
pub type Nanos = u64;

/// Nanoseconds in one millisecond.
pub const NANOS_PER_MS: Nanos = 1_000_000;
/// Nanoseconds in one second.
pub const NANOS_PER_SEC: Nanos = 1_000_000_000;

/// Converts nanoseconds to whole milliseconds, rounding up, so that a caller told to wait
/// `n` ms never comes back too early. This is the conversion every binding uses.
pub const fn ceil_millis(ns: Nanos) -> u64 {
    // Zero is the common case (`retry_after` and `delay` of an admitted request): no division.
    if ns == 0 {
        0
    } else {
        ns.div_ceil(NANOS_PER_MS)
    }
}

/// The README's Rust examples, compiled and run as doctests.
#[cfg(all(doctest, feature = "std"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Converts whole milliseconds to nanoseconds, saturating at `u64::MAX`.
///
/// ```
/// use tollgate::{millis, NANOS_PER_MS};
/// assert_eq!(millis(1_700_000_000_000), 1_700_000_000_000 * NANOS_PER_MS);
/// let last = u64::MAX / NANOS_PER_MS; // about the year 2554
/// assert_eq!(millis(last), last * NANOS_PER_MS);
/// assert_eq!(millis(last + 1), u64::MAX);
/// ```
pub const fn millis(ms: u64) -> Nanos {
    // A comparison with a constant rather than `saturating_mul`, whose overflow check is a
    // 128-bit multiplication (a libcall on wasm32), paid on every binding's every check.
    if ms <= u64::MAX / NANOS_PER_MS {
        ms * NANOS_PER_MS
    } else {
        u64::MAX
    }
}

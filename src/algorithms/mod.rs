//! One module per algorithm, each holding only its maths: a plain-data state and a pure
//! `decide` function. Reading and writing the state is the store's job ([`crate::decide()`]
//! dispatches on the policy; [`crate::keyed`] and the edge worker store the result).
//!
//! Every `decide` here assumes `cost <= capacity` (checked by [`crate::decide()`]) and treats
//! a cost of zero as a query: allowed, nothing charged, the current `remaining` reported.
//!
//! | algorithm | state | pros | cons |
//! |---|---|---|---|
//! | [`token_bucket`] | credit + last refill | separate burst and rate; smooth | two fields |
//! | [`gcra`] | one timestamp | same decisions as the token bucket in one value | less intuitive |
//! | [`sliding_window`] | prev, cur, window | two counters, no boundary burst | approximate (assumes an even spread) |
//! | [`fixed_window`] | count, window | simplest; memory independent of the limit | up to 2x the limit around a boundary |
//! | [`sliding_log`] | admitted timestamps | exact | memory grows with the limit |
//! | [`leaky_bucket`] | level + last leak | the token bucket's mirror (same admissions) | two fields |
//! | [`leaky_queue`] | last departure | smooth output, bursts wait instead of failing | adds latency (up to capacity/rate) |
//! | [`concurrency`] | in flight | protects a slow upstream (Little's law) | needs a release per acquire |

pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod leaky_queue;
#[cfg(feature = "alloc")]
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

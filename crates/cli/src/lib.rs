//! The `tollgate` command-line tool: for the people who choose and tune limits.
//!
//! * `simulate`: the decision of a policy for every request of a trace.
//! * `compare`: every algorithm on the same trace, with the largest burst each let through.
//! * `replay`: a policy over an nginx/Apache access log, keyed as the edge would key it.
//! * `check-config`: an edge worker config, validated by the worker's own code (`tollgate-config`).
//!
//! Every decision is made by the core crate ([`tollgate::decide`] and
//! [`tollgate::keyed::KeyedLimiter`]); this crate only reads inputs and reports.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod accesslog;
pub mod compare;
pub mod error;
pub mod input;
pub mod key;
pub mod limiter;
pub mod progress;
pub mod replay;
pub mod simulate;
pub mod trace;

pub use error::{CliError, Source};

#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod accesslog;
pub mod adapt;
pub mod compare;
pub mod error;
pub mod input;
pub mod inspect;
pub mod key;
pub mod limiter;
pub mod progress;
pub mod replay;
pub mod rls;
pub mod settle;
pub mod simulate;
pub mod trace;

pub use error::{CliError, Source};

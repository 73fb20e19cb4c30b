#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod body;
mod config;
mod grpc;
mod service;
pub mod store;

pub use body::ResponseBody;
pub use config::{Builder, ConfigError, Extractor, Key, MissingKey, OnError, ProxyHeader, Route};
pub use service::{RateLimit, RateLimitInfo, RateLimitLayer, ResponseFuture};
pub use store::{Checked, Clock, ManualClock, Memory, MonotonicClock, Source, Store};

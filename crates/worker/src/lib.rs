#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

pub mod answer;
pub mod config;
pub mod counters;
pub mod in_use;
pub mod jwt;
pub mod keying;
pub mod lease;
pub mod plan;
pub mod protocol;
pub mod report;
pub mod series;
pub mod table;

/// Route matching and path normalisation: the rules every front end shares
/// ([`tollgate_http::route`]).
pub use tollgate_http::route;

#[cfg(target_arch = "wasm32")]
mod admin;
#[cfg(target_arch = "wasm32")]
mod admit;
#[cfg(target_arch = "wasm32")]
mod check_api;
#[cfg(target_arch = "wasm32")]
mod denial;
#[cfg(target_arch = "wasm32")]
mod env;
#[cfg(target_arch = "wasm32")]
mod fetch;
#[cfg(target_arch = "wasm32")]
mod http;
#[cfg(target_arch = "wasm32")]
mod jwt_edge;
#[cfg(target_arch = "wasm32")]
mod object;
#[cfg(target_arch = "wasm32")]
mod origin;
#[cfg(target_arch = "wasm32")]
mod rpc;
#[cfg(target_arch = "wasm32")]
mod settling;
#[cfg(target_arch = "wasm32")]
mod sql_store;
#[cfg(target_arch = "wasm32")]
mod stats;

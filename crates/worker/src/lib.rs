//! # tollgate-worker: tollgate at the edge
//!
//! A Cloudflare Worker (workers-rs) in front of an origin. Each request is routed by the
//! config to its policies, keyed by the connecting IP and/or a hashed API key, and decided
//! by a Durable Object with the core's algorithms; allowed requests go to the origin with
//! `RateLimit` fields, denied ones get a 429 problem document. See `README.md` for the
//! operator's guide.
//!
//! Layering (as in workers-rs examples): the plain modules hold every rule and are tested
//! with `cargo test` on the host:
//! * [`config`]: the document and its validation ([`tollgate_config`], shared with the CLI);
//! * [`plan`]: a request's limits, slots (storage keys), object and deny-cache key, from its
//!   route and identity ([`keying`], [`route`]) or from the APIs' policy and key;
//! * [`protocol`]: what the isolate asks an object (one variant per operation) and what it
//!   answers;
//! * [`table`]: what an object does with a request, by the core's store contract, with
//!   [`lease`]s and deadlines;
//! * [`answer`]: the rate-limit fields, the 429 body, the deny cache; [`counters`]: stats.
//!
//! The rest (wasm32 only) is glue between them and the runtime, none importing another's
//! caller: `fetch` (the handler: the APIs by path, else plan -> object call -> answer),
//! `check_api`, `admin`, `stats`, `denial` (429s and the deny cache), `admit` (holds and
//! releases), `origin`, `rpc` (calls to objects), `http`, `env`, and the Durable Object
//! (`object`, over its SQLite storage `sql_store`).
#![deny(unsafe_code)]

pub mod answer;
pub mod config;
pub mod counters;
pub mod keying;
pub mod lease;
pub mod plan;
pub mod protocol;
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
mod object;
#[cfg(target_arch = "wasm32")]
mod origin;
#[cfg(target_arch = "wasm32")]
mod rpc;
#[cfg(target_arch = "wasm32")]
mod sql_store;
#[cfg(target_arch = "wasm32")]
mod stats;

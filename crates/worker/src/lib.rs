//! # tollgate-worker: tollgate at the edge
//!
//! A Cloudflare Worker (workers-rs) in front of an origin. Each request is routed by the
//! config to its policies, keyed by the connecting IP and/or a hashed API key, and decided
//! by a Durable Object with the core's algorithms; allowed requests go to the origin with
//! `RateLimit` fields, denied ones get a 429 problem document. See `README.md` for the
//! operator's guide.
//!
//! Layering (as in workers-rs examples): the plain modules ([`config`], [`route`],
//! [`keying`], [`lease`], [`table`], [`answer`]) hold every rule and are tested with `cargo test` on
//! the host; the fetch handler and the Durable Object (`edge`, `object`, wasm32 only) are
//! glue between them and the runtime.

pub mod answer;
pub mod config;
pub mod keying;
pub mod lease;
pub mod table;

/// Route matching and path normalisation: the rules every front end shares
/// ([`tollgate_http::route`]).
pub use tollgate_http::route;

#[cfg(target_arch = "wasm32")]
mod admit;
#[cfg(target_arch = "wasm32")]
mod edge;
#[cfg(target_arch = "wasm32")]
mod object;
#[cfg(target_arch = "wasm32")]
mod origin;

//! # tollgate-http
//!
//! The HTTP rules every tollgate front end shares, as plain functions with no runtime in
//! them: the Cloudflare Worker (`crates/worker`) and the tower layer (`crates/tower`) call
//! the same code, so a path, an address or an API key is read the same way at the edge and
//! in a Rust server. Builds for `wasm32-unknown-unknown` as well as the host.
//!
//! * [`route`]: path normalisation (as origins route) and route matching by method and path.
//! * [`client`]: client keys: the peer or, through trusted proxies only, the forwarding
//!   header read from the right; IP groups (IPv6 by prefix, IPv4-mapped as IPv4); hashed
//!   API keys; header value checks.
//! * [`key`]: key names (`ip:unknown`, `global`, `key:<hash>`, ...), one spelling for both
//!   front ends.
//! * [`fields`]: the front ends' own header fields (`Tollgate-Degraded`, `Tollgate-Shadow`).
//! * [`problem`]: the problem documents of a 400 or a 503 (the 429's body is the core's).
//! * [`config`]: the shape of a refused configuration (the field and the reason), one for
//!   the edge's config document and the tower layer's builder.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod config;
pub mod fields;
pub mod key;
pub mod problem;
pub mod route;

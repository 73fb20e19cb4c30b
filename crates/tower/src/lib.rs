//! # tollgate-tower
//!
//! tollgate as a [tower](https://docs.rs/tower) layer, for axum, hyper and tonic: per-route
//! policies in tollgate's grammar (single policies, all-or-nothing stacks, fair share), on
//! the in-memory store or the Redis fleet store, with the answers of tollgate's edge.
//!
//! * **Routes** by method and path, matched by the same code as the edge worker
//!   ([`tollgate_http::route`]): per-route policy, cost, exemption, shadow mode.
//! * **Keys**: the peer address (axum's `ConnectInfo<SocketAddr>`, or a `SocketAddr`
//!   request extension); `X-Forwarded-For` / `Forwarded` only when the peer is a trusted
//!   proxy, read from the right ([`tollgate_http::client::client_ip`]); IPv6 grouped by
//!   prefix (default /64), IPv4-mapped as IPv4; an API key header hashed with SHA-256; a
//!   tenant header for a fair share; or your own extractor. A request without a key gets
//!   what you declared ([`MissingKey`]), never a 500.
//! * **Answers**: draft-11 `RateLimit` and `RateLimit-Policy` on every limited response; a
//!   429 with `Retry-After`, `Cache-Control: no-store` and the core's problem+json body; a
//!   bad header or path is a 400 naming it; a store failure gets [`OnError`]. The decision
//!   is in the request's extensions ([`RateLimitInfo`]). A gRPC call (`content-type:
//!   application/grpc...`) is refused the way gRPC clients read: a Trailers-Only response
//!   with `grpc-status` 8 (`RESOURCE_EXHAUSTED`) and `grpc-message`, with the same fields.
//! * **Concurrency limits**: an admitted request holds its slots until its response body
//!   has ended or was dropped ([`ResponseBody`]): a streaming response keeps them, and
//!   every other ending (the client gone, an error, a cancelled future, a panic) gives
//!   them back, once.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::num::NonZeroUsize;
//! use axum::{routing::get, Router};
//! use tollgate_tower::{Key, RateLimitLayer, Route};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let limit = RateLimitLayer::memory(NonZeroUsize::new(100_000).unwrap())
//!     .policy("per-ip", "10/s burst 20", Key::Ip)
//!     .route(Route::new("/health").exempt())
//!     .route(Route::new("/").policy("per-ip"))
//!     .build()?;
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(limit);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// One concept a file, layered with no import circle; each imports only those above it:
//   store, settings, route, body, fields   (leaves)
//   info      the decision in the request's extensions (store)
//   grpc      the layer's own answers to gRPC calls (body)
//   key       what a request is counted under (settings)
//   shared    the compiled configuration: entries on stores, routes, settings, slots
//   target    before the decision: route, key, tenant, cost (shared, key)
//   answer    after the decision: forward, or answer 429/400/503 (target, shared, grpc)
//   future    the response future (body, fields, grpc)
//   service   `RateLimit`: target, decide, answer (future, answer, target)
//   layer     `RateLimitLayer` (service, shared)
//   builder   checks a configuration and builds the layer (layer, shared, route, key)
mod answer;
mod body;
mod builder;
mod fields;
mod future;
mod grpc;
mod info;
mod key;
mod layer;
mod route;
mod service;
mod settings;
mod shared;
pub mod store;
mod target;

pub use body::ResponseBody;
pub use builder::Builder;
pub use future::ResponseFuture;
pub use info::RateLimitInfo;
pub use key::{Extractor, Key};
pub use layer::RateLimitLayer;
pub use route::Route;
pub use service::RateLimit;
pub use settings::{MissingKey, OnError, ProxyHeader};
pub use store::{Checked, Clock, ManualClock, Memory, MonotonicClock, Source, Store};
/// A configuration the layer refuses, naming the field (`policies.api.limit`,
/// `routes[1].path`, `trusted_proxies[0]`) and the reason: the shape the edge's config
/// errors have too ([`tollgate_http::config`]).
pub use tollgate_http::config::ConfigError;

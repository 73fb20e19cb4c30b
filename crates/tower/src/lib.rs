#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// One concept a file, layered with no import circle; each imports only those above it:
//   store, settings, route, body, fields   (leaves)
//   info      the decision in the request's extensions (store)
//   grpc      the layer's own answers to gRPC calls (body)
//   key       what a request is counted under (settings)
//   plans     a policy of plans: a request's plan and key, each plan's fields (key)
//   shared    the compiled configuration: entries on stores, routes, settings, slots
//   target    before the decision: route, key, tenant, cost (shared, key)
//   answer    after the decision: forward, or answer 429/400/503 (target, shared, grpc)
//   future    the response future (body, fields, grpc)
//   settle    a route that reserves, then settles after the response (answer, future)
//   service   `RateLimit`: target, decide, answer (future, answer, target)
//   layer     `RateLimitLayer` (service, shared)
//   builder   checks a configuration and builds the layer (layer, shared, route, key)
//   metrics   (feature `metrics`) the core's metric model on the `metrics` facade (store,
//             settings); route and answer hold and feed it
//   adaptive  a layer of its own: adaptive concurrency per route (the core's gradient
//             controller; its responses use body's ResponseBody and Slot);
//             adaptive/queue a route's waiting requests (leaf), adaptive/limit one
//             route's controller, queue and permit (queue)
mod adaptive;
mod aimd;
mod answer;
mod body;
mod builder;
mod fields;
mod future;
mod grpc;
mod info;
#[cfg(feature = "jwt")]
pub mod jwt;
mod key;
mod layer;
#[cfg(feature = "metrics")]
pub mod metrics;
mod plans;
mod route;
mod service;
mod settings;
mod settle;
mod shared;
pub mod store;
mod target;

pub use adaptive::{
    Adaptive, AdaptiveBuilder, AdaptiveFuture, AdaptiveLayer, MAX_QUEUE_DEADLINE, MAX_WAITING,
};
pub use aimd::{AimdLimit, AimdLimitLayer, BoxError, LimitFull};
pub use body::ResponseBody;
pub use builder::{Builder, MAX_OVERRIDES};
pub use future::ResponseFuture;
pub use info::RateLimitInfo;
pub use key::{Extractor, Key};
pub use layer::RateLimitLayer;
pub use plans::{PlanChoice, PlanChooser};
pub use route::Route;
pub use service::RateLimit;
pub use settings::{MissingKey, OnError, ProxyHeader};
pub use settle::ActualCost;
#[cfg(feature = "redis")]
pub use store::RedisPlanStore;
pub use store::{
    Checked, Clock, ManualClock, Memory, MonotonicClock, PlanChecked, Reserved, Source, Store,
};
/// A configuration the layer refuses, naming the field (`policies.api.limit`,
/// `routes[1].path`, `trusted_proxies[0]`) and the reason: the shape the edge's config
/// errors have too ([`tollgate_http::config`]).
pub use tollgate_http::config::ConfigError;

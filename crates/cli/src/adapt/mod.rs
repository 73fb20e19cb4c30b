//! `tollgate adapt simulate`: the adaptive concurrency simulator of issue 42. A server of
//! N workers with a FIFO queue, open-loop arrivals, virtual time and a seed; tollgate's
//! gradient controller (the core's) against a static limit and Netflix's Gradient2 and
//! Vegas and Envoy's gradient controller written from their published descriptions; one
//! table per scenario, and an SVG of the limit and the latency over time.

pub mod baselines;
pub mod controller;
pub mod plot;
pub mod rng;
pub mod scenario;
pub mod sim;

//! `tollgate adapt simulate`: the adaptive concurrency simulator of issue 42. A server of
//! N workers with a FIFO queue, open-loop arrivals, virtual time and a seed; tollgate's
//! gradient controller (the core's) against a static limit and Netflix's Gradient2 and
//! Vegas and Envoy's gradient controller written from their published descriptions; one
//! table per scenario, and an SVG of the limit and the latency over time.
//!
//! The model (the server, the controllers, the baselines, the random numbers) is the
//! `tollgate-adapt-sim` crate's, shared with the demo page's build of the npm package;
//! the scenarios, their bounds, the table and the plot are the CLI's.

pub use tollgate_adapt_sim::{baselines, controller, rng, sim};
pub mod plot;
pub mod scenario;

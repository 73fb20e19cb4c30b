//! # tollgate-adapt-sim
//!
//! The adaptive concurrency simulator of issue 42, one model with two users: the CLI's
//! `tollgate adapt simulate` (its scenarios, bounds, table and plot live in the CLI) and the
//! demo page, where the same simulation runs in the browser (crates/wasm, feature
//! `adapt-sim`, class `Simulation`).
//!
//! A server of N workers with a FIFO queue, open-loop arrivals, virtual time and a seed
//! ([`sim`]); tollgate's gradient controller (the core's, adapted) and a static limit behind
//! one interface ([`controller`]); Netflix's Gradient2 and Vegas and Envoy's gradient
//! controller written from their published descriptions ([`baselines`]); the seeded random
//! numbers every draw comes from ([`rng`]).
//!
//! ```
//! use tollgate_adapt_sim::controller::{Bounds, Tollgate};
//! use tollgate_adapt_sim::sim::{Service, Sim, TICK};
//!
//! // 100 workers at 10 ms each serve 10,000 requests a second; offer twice that.
//! let mut sim = Sim::new(Service::Constant(10_000_000), 1_000_000_000, 100, 20_000.0, 1).unwrap();
//! let mut controller = Tollgate::new(Bounds { min: 5, max: 1000, initial: 20 }, 1).unwrap();
//! let ticks: Vec<_> = (0..200).map(|_| sim.step(&mut controller)).collect();
//! assert_eq!(sim.now(), 200 * TICK);
//! // After 20 simulated seconds the limit has left its start of 20 for the server's knee
//! // (100 in flight), and the excess is shed rather than queued.
//! let last = ticks.last().unwrap();
//! assert!((90..=130).contains(&last.limit), "{}", last.limit);
//! assert!(last.shed > 0);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod baselines;
pub mod controller;
pub mod rng;
pub mod sim;

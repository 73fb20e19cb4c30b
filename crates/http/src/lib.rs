#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bounds;
pub mod client;
pub mod config;
pub mod fields;
pub mod jwt;
pub mod key;
pub mod problem;
pub mod route;
pub mod settle;

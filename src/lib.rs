//! phasescope: a transparent profiling reverse proxy.
//!
//! The modules follow the data path: a [`relay`] listener accepts a client, its connection
//! task frames requests and responses with [`http1`], relays the bytes unchanged, takes the
//! instants of each exchange with [`clock`], and hands completed exchanges to the tap's
//! [`recorder`], which feeds [`metrics`] and the logs.

pub mod accesslog;
pub mod admin;
pub mod app;
pub mod bench;
pub mod cli;
pub mod clock;
pub mod config;
pub mod correlate;
pub mod demo;
pub mod findings;
pub mod http1;
pub mod logging;
pub mod metrics;
pub mod phase;
pub mod probe;
pub mod recorder;
pub mod relay;
pub mod report;
pub mod resp;
pub mod rng;
pub mod routes;
pub mod snapshot;
pub mod stalls;
pub mod stats;
mod sync;
pub mod units;
pub mod upstream;

//! Reading the numbers in: snapshots from a running proxy's admin server or a saved file
//! ([`snapshots`], over the small HTTP client of [`http`]), or the phase histograms from a
//! Prometheus server ([`prometheus`]: classic buckets, else [`prometheus_native`]'s native
//! histograms, both read through [`prometheus_answer`]); either way merged into one
//! [`dataset::Dataset`] that every report format is made from.

pub mod dataset;
pub mod http;
pub mod prometheus;
pub mod prometheus_answer;
pub mod prometheus_failures;
pub mod prometheus_native;
pub mod prometheus_process;
pub mod prometheus_traffic;
pub mod snapshots;

pub use snapshots::Source;

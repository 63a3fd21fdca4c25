//! The metrics registry: route rules, the per-worker recorder, HDR snapshots.

pub mod routes;

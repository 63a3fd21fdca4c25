//! The metrics registry: the per-worker recorder, HDR snapshots.
//!
//! The relay resolves each request's route with the tap's
//! [`RouteTable`](crate::routes::RouteTable) and hands every
//! completed exchange to the tap's [`TapMetrics`] (a [`Recorder`](crate::recorder::Recorder)).
//! Recording touches only the calling thread's shard; the [`Registry`] adds the shards up
//! when the admin server asks for `/metrics` or `/api/snapshot`. docs/metrics.md has the
//! metric contract, the bucket layout and its error bound, and the snapshot schema, whose
//! types are [`crate::snapshot`]'s: this module builds them from its shards.

pub mod buckets;
mod counters;
pub mod exemplar;
pub mod exposition;
pub mod finding;
mod hdr;
mod heads;
pub mod labels;
pub mod native;
pub mod openmetrics;
mod own;
mod proto;
mod registry;
pub mod route_cpu;
mod shard;
mod snapshot;
mod tap;
mod upstream;

pub use buckets::Buckets;
pub use finding::Board;
pub use hdr::{HIGHEST_NS, LOWEST_NS, SIGNIFICANT_FIGURES};
pub use registry::{HistoryTotals, Registry};
pub use tap::TapMetrics;

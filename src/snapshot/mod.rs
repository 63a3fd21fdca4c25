//! The snapshot: the whole JSON contract of `/api/snapshot` and of the files readers load
//! (docs/metrics.md), the window arithmetic over it, and what every reader makes of a
//! window per request.
//!
//! It lies below both its producers and its readers, and imports neither: the metrics
//! build a [`Snapshot`] from their shards and the upstream's watcher fills its
//! [`UpstreamSnapshot`] (the building code stays with each), while report, compare,
//! findings, bench, probe, demo and the admin server read one without knowing the
//! registry or the profiler. One concept per file:
//!
//! - [`document`]: the document itself ([`Snapshot`]), its header and format, reading a
//!   file;
//! - [`tap`]: a tap's part ([`TapSnapshot`]): series per phase and route, errors, failed
//!   exchanges, request heads, totals;
//! - [`series`]: one series ([`SeriesSnapshot`]) and the HDR layout it was recorded with;
//! - [`upstream`]: the upstream process's part ([`UpstreamSnapshot`]), its profile as one
//!   optional group ([`ProfileSnapshot`]), and how two windows of it merge and subtract;
//! - [`stacks`]: the call stacks, frames and top functions, and the one way stacks add up;
//! - [`slices`]: the window in slices of CPU and exchanges per route;
//! - [`proxy`]: the proxy's own process and the machine ([`ProxySnapshot`]);
//! - [`finding`]: a finding as the snapshot carries it;
//! - [`traffic`]: of a process's watched time, the reads that held traffic, and its
//!   figures over them (what per-request and per-core figures are read over);
//! - `window`: the window between two snapshots ([`Snapshot::since`]), and several
//!   merged into one ([`Snapshot::merged`]);
//! - [`coverage`]: how much of the upstream's CPU its samples cover, and the sampler's
//!   own cost;
//! - [`components`]: how readers label and group the components samples fall in;
//! - [`work`]: a component's own work, its callbacks into other code left out;
//! - [`summary`], [`hot`], [`route_cpu`]: the per-request analysis readers share (CPU per
//!   request and the what-if, the hot path, CPU per route by a non-negative least-squares
//!   fit over the slices).

pub mod components;
pub mod coverage;
pub mod document;
pub mod finding;
pub mod hot;
mod nnls;
pub mod proxy;
pub mod route_cpu;
pub mod series;
pub mod slices;
pub mod stacks;
pub mod summary;
pub mod tap;
pub mod traffic;
pub mod upstream;
mod window;
pub mod work;

pub use document::{PhaseStyle, Snapshot, FORMAT, FORMAT_VERSION};
pub use finding::{Evidence, Finding, Impact, Severity};
pub use proxy::{ProxySnapshot, Stalls};
pub use series::{HdrLayout, SeriesSnapshot, HIGHEST_NS, LOWEST_NS, SIGNIFICANT_FIGURES};
pub use slices::{RouteSlices, Slice};
pub use stacks::{
    keep_top_functions, sort_functions, Frame, FrameKind, FunctionSnapshot, Stack, Stacks,
    MAX_STACKS, OTHER_STACKS, THREAD_ROOTS, TOP_FUNCTIONS, TRUNCATED,
};
pub use tap::{Correlations, PhaseSeries, RequestHeads, TapSnapshot, TapTotals};
pub use traffic::Traffic;
pub use upstream::{ProfileSnapshot, SymbolSnapshot, UpstreamSnapshot, DEFAULT_FREQUENCY_HZ};

//! Reading the numbers back: `phasescope report`, `snapshot` and `compare`.
//!
//! A report is built in three steps that each format and source share: load snapshots
//! ([`source`]) or Prometheus buckets ([`prometheus`]) into a merged [`dataset::Dataset`],
//! turn it into rows and headlines ([`rows::Report`]), print it ([`table`], [`svg`]).
//! The upstream's call stacks, when sampled, are written as folded stacks, a flame graph
//! or a pprof profile ([`stacks`], [`pprof`]).
//! `compare` ([`compare`]) reads snapshot files and decides, per phase, whether B differs
//! from A by more than the noise; docs/compare.md states the method.

mod args;
pub mod backend_split;
pub mod bootstrap;
pub mod commands;
pub mod compare;
mod compare_cpu;
pub mod compare_findings;
pub mod compare_functions;
mod compare_route_cpu;
pub mod compare_table;
pub mod dataset;
pub mod diff_stacks;
pub mod failures;
pub mod file;
pub mod findings;
pub mod flame_colours;
pub mod headline;
pub mod http;
pub mod inside;
pub mod multiplicity;
pub mod own;
mod paired;
pub mod pprof;
mod pprof_proto;
pub mod prometheus;
pub mod prometheus_native;
pub mod rows;
pub mod selection;
pub mod snapshot_cmd;
pub mod source;
pub mod stacks;
pub mod svg;
mod svg_inside;
pub mod table;
pub use crate::units;
pub mod verdict;

pub use args::{CompareArgs, ReportArgs, SnapshotArgs};
pub use compare::{compare, Comparison, Direction, Options as CompareOptions, Statistic};
pub use dataset::Dataset;
pub use rows::Report;
pub use source::Source;
pub use table::Format;
pub use verdict::Outcome;

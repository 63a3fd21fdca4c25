//! Reading the numbers back: `phasescope report`, `snapshot` and `compare`.
//!
//! A report is built in three steps that each format and source share: load snapshots
//! or Prometheus buckets ([`source`]) into a merged [`source::dataset::Dataset`], turn it
//! into rows and headlines ([`render::rows::Report`]), print it ([`render`]). The
//! upstream's call stacks, when sampled, are written as folded stacks, a flame graph or a
//! pprof profile ([`export`]). `compare` ([`compare`]) reads snapshot files and decides,
//! per phase, whether B differs from A by more than the noise: the arithmetic is
//! [`crate::stats`]'s, the rows and their words are [`compare`]'s; docs/compare.md states
//! the method. The subcommands themselves are [`commands`] (with their flags in `args`),
//! and every output file is written by [`file`].

mod args;
pub mod commands;
pub mod compare;
pub mod export;
pub mod file;
pub mod profile_cmd;
pub mod render;
pub mod snapshot_cmd;
pub mod source;

pub use crate::stats::{Direction, Outcome, Statistic};
pub use args::{CompareArgs, ProfileArgs, ReportArgs, SnapshotArgs};
pub use compare::{compare, Comparison, Options as CompareOptions};
pub use render::rows::Report;
pub use render::table::Format;
pub use source::dataset::Dataset;
pub use source::Source;
// The paths the integration tests reach: the Prometheus client and the flame graphs'
// colours.
pub use export::flame_colours;
pub use source::{http, prometheus};

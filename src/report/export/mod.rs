//! The upstream's sampled call stacks written out for other tools: folded stacks and a
//! flame graph ([`stacks`], in the colours of [`flame_colours`]), a pprof profile
//! ([`pprof`], encoded by [`pprof_proto`]), and `compare`'s and `bench`'s two sides at
//! once ([`diff_stacks`]: a differential flame graph, each side's folded stacks and
//! pprof). Each export reads the snapshots' stacks and writes through
//! [`crate::report::file`].

pub mod diff_colours;
pub mod diff_stacks;
pub mod flame_colours;
pub mod pprof;
mod pprof_proto;
pub mod stacks;

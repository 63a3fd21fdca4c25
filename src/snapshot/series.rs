//! One series of a snapshot (a tap's phase on one route, over the window) and the HDR
//! layout its histogram pairs were recorded with.
//!
//! The layout lives here, not in the metrics that record with it, because it is part of
//! the contract: a reader merges the `histogram` pairs of several snapshots into an HDR
//! histogram of the `hdr` layout the snapshot names, and compares it with
//! [`HdrLayout::CURRENT`] without knowing how the shards keep their copies. The metrics'
//! HDR copies take their bounds from these constants.

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Values are kept to two significant figures: a reported percentile is at most 1/128
/// (0.79 %) above the exact one.
pub const SIGNIFICANT_FIGURES: u8 = 2;
/// The smallest distinguishable value, in nanoseconds.
pub const LOWEST_NS: u64 = 1;
/// Longer values are recorded as this (one hour, in ns); `max` stays exact.
pub const HIGHEST_NS: u64 = 3_600_000_000_000;

/// The snapshot's `hdr`: how the `histogram` pairs were recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HdrLayout {
    pub significant_figures: u8,
    pub lowest_ns: u64,
    pub highest_ns: u64,
}

impl HdrLayout {
    /// The layout this build records with.
    pub const CURRENT: HdrLayout = HdrLayout {
        significant_figures: SIGNIFICANT_FIGURES,
        lowest_ns: LOWEST_NS,
        highest_ns: HIGHEST_NS,
    };

    /// An empty histogram of this layout, to merge series into.
    pub fn empty_histogram(&self) -> anyhow::Result<Histogram<u64>> {
        Histogram::new_with_bounds(self.lowest_ns, self.highest_ns, self.significant_figures)
            .with_context(|| format!("an HDR histogram with layout {self:?}"))
    }
}

/// One (tap, phase, route) series since `since`. All durations in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesSnapshot {
    pub count: u64,
    /// Exact sum.
    pub sum: f64,
    /// Exact mean (sum / count).
    pub mean: f64,
    /// Exact minimum.
    pub min: f64,
    /// Percentiles from the HDR histogram: the top of the bucket holding the value at rank
    /// ⌈q·count⌉, at most 1/128 above it, clamped to [min, max].
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    /// Exact maximum.
    pub max: f64,
    /// `[value_ns, count]` pairs, ascending: every recorded HDR bucket, named by the highest
    /// value it holds. Record each pair into a histogram of the same `hdr` layout to
    /// merge snapshots (see [`SeriesSnapshot::add_to`]).
    pub histogram: Vec<[u64; 2]>,
}

impl SeriesSnapshot {
    /// Records this series' histogram into `into` (made with [`HdrLayout::empty_histogram`]
    /// from the snapshot's `hdr` layout), e.g. to merge runs before taking percentiles.
    pub fn add_to(&self, into: &mut Histogram<u64>) -> anyhow::Result<()> {
        for &[value, count] in &self.histogram {
            into.record_n(value, count)
                .with_context(|| format!("recording {count} × {value} ns"))?;
        }
        Ok(())
    }
}

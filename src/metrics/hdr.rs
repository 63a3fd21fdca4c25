//! The exact-percentile copy of each series, behind `/api/snapshot` and the reports.
//!
//! There is one HDR histogram per (tap, route, phase) for the whole process, not one per
//! worker thread: at two significant figures a histogram spanning 1 ns … 1 h is ~37 KB,
//! and a copy per thread would multiply that by the core count. Workers instead buffer a
//! few values per series in their own shard and add them here in batches (see
//! `shard::SeriesShard`), so this lock is taken once per batch, rarely contended, and the
//! snapshot drains the buffers first so nothing recorded before it is missing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use hdrhistogram::Histogram;

use crate::metrics::lock;
use crate::phase::Phase;
use crate::recorder::RouteId;

/// Values are kept to two significant figures: a reported percentile is at most 1/128
/// (0.79 %) above the exact one.
pub const SIGNIFICANT_FIGURES: u8 = 2;
/// The smallest distinguishable value, in nanoseconds.
pub const LOWEST_NS: u64 = 1;
/// Longer values are recorded as this (one hour, in ns); `max` stays exact.
pub const HIGHEST_NS: u64 = 3_600_000_000_000;

/// One series since the last reset: the histogram plus the exact sum, min and max, which
/// the histogram only knows to its precision.
#[derive(Debug, Clone)]
pub struct HdrSeries {
    pub hist: Histogram<u64>,
    pub sum_ns: u128,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl HdrSeries {
    fn new(template: &Histogram<u64>) -> Self {
        Self {
            hist: template.clone(),
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    pub fn record(&mut self, values: &[u64]) {
        for &v in values {
            self.hist.saturating_record(v);
            self.sum_ns += u128::from(v);
            self.min_ns = self.min_ns.min(v);
            self.max_ns = self.max_ns.max(v);
        }
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn reset(&mut self) {
        self.hist.reset();
        self.sum_ns = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
    }
}

pub type HdrCell = Mutex<HdrSeries>;

/// Every HDR series of one tap, created on first use.
#[derive(Debug)]
pub struct HdrStore {
    template: Histogram<u64>,
    cells: Mutex<HashMap<(RouteId, Phase), Arc<HdrCell>>>,
}

impl HdrStore {
    pub fn new() -> anyhow::Result<Self> {
        let template = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_FIGURES)
            .context("creating the HDR histogram layout")?;
        Ok(Self {
            template,
            cells: Mutex::new(HashMap::new()),
        })
    }

    /// The series of (route, phase), created empty if new. Called once per series per
    /// worker thread, not per observation.
    pub fn cell(&self, route: RouteId, phase: Phase) -> Arc<HdrCell> {
        lock(&self.cells)
            .entry((route, phase))
            .or_insert_with(|| Arc::new(Mutex::new(HdrSeries::new(&self.template))))
            .clone()
    }

    /// Every series that exists, for a snapshot or a reset to walk without holding the map.
    pub fn cells(&self) -> Vec<((RouteId, Phase), Arc<HdrCell>)> {
        lock(&self.cells)
            .iter()
            .map(|(k, v)| (*k, Arc::clone(v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_keep_exact_sum_min_max_and_reset_to_empty() {
        let store = HdrStore::new().unwrap();
        let cell = store.cell(RouteId(1), Phase::Parse);
        assert!(Arc::ptr_eq(&cell, &store.cell(RouteId(1), Phase::Parse)));
        let mut s = lock(&cell);
        s.record(&[300, 1_000, 0, HIGHEST_NS * 2]);
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum_ns, 1_300 + u128::from(HIGHEST_NS) * 2);
        assert_eq!(s.min_ns, 0);
        assert_eq!(s.max_ns, HIGHEST_NS * 2);
        let p50 = s.hist.value_at_quantile(0.5);
        assert!((300..=303).contains(&p50), "{p50}");
        s.reset();
        assert_eq!(s.count(), 0);
        assert_eq!(s.sum_ns, 0);
        drop(s);
        assert_eq!(store.cells().len(), 1);
    }
}

//! The exact-percentile copy of each series, behind `/api/snapshot`, the reports and the
//! native histograms.
//!
//! Every worker thread keeps its own HDR copy per (tap, route, phase) in its shard (see
//! `shard::SeriesShard`), the bare counts of a histogram ([`HdrCounts`]), recorded with no
//! lock but the shard's own, and never emptied: a snapshot adds the threads' copies up,
//! and a reset only takes a copy of that sum (the tap's baseline) to subtract from later
//! ones. One shared histogram per series, fed in batches from every thread, measured
//! 0.61 µs per exchange with two workers (its counts moving between the cores' caches)
//! against 0.05 µs with one. The price is memory:
//! at two significant figures a histogram spanning 1 ns … 1 h is ~37 KB, per series and
//! thread.

use anyhow::Context;
use hdrhistogram::Histogram;

/// The layout is the snapshot's (`hdr`, [`crate::snapshot::HdrLayout::CURRENT`]): readers
/// merge the histogram pairs in it, so the copies here are made with its bounds.
pub use crate::snapshot::{HIGHEST_NS, LOWEST_NS, SIGNIFICANT_FIGURES};

/// An empty histogram of the layout above, to clone per series.
pub fn template() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_FIGURES)
        .context("creating the HDR histogram layout")
}

/// The layout [`template`] makes, as hdrhistogram derives it: 2 significant figures keep
/// 2 × 10² values at unit resolution, so each power of two above 256 ns is cut into
/// 2^(8-1) = 128 sub-buckets; the unit is `LOWEST_NS` = 1 ns = 2^0.
const UNIT_MAGNITUDE: u32 = 0;
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 7;
const SUB_BUCKET_HALF: usize = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (1 << (SUB_BUCKET_HALF_MAGNITUDE + 1)) - 1;
const LEADING_ZERO_COUNT_BASE: u32 = 64 - UNIT_MAGNITUDE - SUB_BUCKET_HALF_MAGNITUDE - 1;
// The constants follow the figures above (a test holds them to hdrhistogram itself).
const _: () = assert!(SIGNIFICANT_FIGURES == 2 && LOWEST_NS == 1 << UNIT_MAGNITUDE);

/// The index of the HDR bucket of `ns`, as hdrhistogram computes it (past the end of the
/// counts for a value past the histogram's range).
#[inline]
pub fn index_of(ns: u64) -> usize {
    let bucket = LEADING_ZERO_COUNT_BASE - (ns | SUB_BUCKET_MASK).leading_zeros();
    let sub = (ns >> (bucket + UNIT_MAGNITUDE)) as usize;
    ((bucket as usize + 1) << SUB_BUCKET_HALF_MAGNITUDE) + sub - SUB_BUCKET_HALF
}

/// The lowest value of the HDR bucket at `index`, as hdrhistogram computes it.
pub fn value_of(index: usize) -> u64 {
    let bucket = (index >> SUB_BUCKET_HALF_MAGNITUDE).saturating_sub(1);
    let mut sub = (index & (SUB_BUCKET_HALF - 1)) + SUB_BUCKET_HALF;
    if index < SUB_BUCKET_HALF {
        sub -= SUB_BUCKET_HALF;
    }
    (sub as u64) << (bucket as u32 + UNIT_MAGNITUDE)
}

/// One thread's HDR copy of a series: the counts of a [`template`] histogram, recorded as
/// a plain array. `Histogram::saturating_record` also keeps its total, minimum and
/// maximum up to date on every value, and costs ~60 instructions per value measured
/// (a tenth of an exchange's recording); here a value is an index and an increment. The
/// histogram is built from the counts when a scrape or snapshot asks for it
/// ([`HdrCounts::add_to`]), and is equal to the one recorded value by value.
pub struct HdrCounts {
    counts: Box<[u64]>,
    /// Where a value past the histogram's range goes (`saturating_record` clamps it to
    /// the highest trackable value).
    clamp: usize,
}

impl HdrCounts {
    /// Empty counts in the layout of `template` (made by [`template`]).
    pub fn new(template: &Histogram<u64>) -> Self {
        let len = template.distinct_values();
        Self {
            counts: vec![0; len].into_boxed_slice(),
            clamp: index_of(template.high()).min(len.saturating_sub(1)),
        }
    }

    /// Counts one value whose [`index_of`] is `i`, as `Histogram::saturating_record` would.
    #[inline]
    pub fn record_at(&mut self, i: usize) {
        let i = if i < self.counts.len() { i } else { self.clamp };
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
    }

    /// Records these counts into `into`, a histogram of the same layout.
    pub fn add_to(&self, into: &mut Histogram<u64>) {
        for (i, &n) in self.counts.iter().enumerate() {
            if n != 0 {
                into.saturating_record_n(value_of(i), n);
            }
        }
    }

    /// The counts as a histogram (a copy of `template` with them recorded).
    pub fn to_histogram(&self, template: &Histogram<u64>) -> Histogram<u64> {
        let mut h = template.clone();
        self.add_to(&mut h);
        h
    }
}

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
    pub fn count(&self) -> u64 {
        self.hist.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values at and around every HDR bucket edge, far past the range, and a spread.
    fn probes() -> Vec<u64> {
        let mut v = vec![0, 1, 2, 127, 128, 255, 256, 257, HIGHEST_NS, HIGHEST_NS + 1];
        v.extend([u64::MAX, u64::MAX - 1, 1 << 63, HIGHEST_NS * 3]);
        for k in 0..64 {
            let p = 1u64 << k;
            v.extend([p - 1, p, p + 1, p + p / 3, p + p / 2 + 7]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x >> (x % 50));
        }
        v
    }

    #[test]
    fn the_index_is_hdrhistograms_own() {
        let t = template().unwrap();
        for i in 0..t.distinct_values() {
            let v = value_of(i);
            assert_eq!(index_of(v), i, "index {i}");
            assert_eq!(t.lowest_equivalent(v), v, "index {i}");
        }
        for v in probes().into_iter().filter(|&v| v <= HIGHEST_NS) {
            assert_eq!(value_of(index_of(v)), t.lowest_equivalent(v), "{v}");
        }
    }

    #[test]
    fn counts_make_the_histogram_that_recording_each_value_makes() {
        let t = template().unwrap();
        let mut direct = t.clone();
        let mut counts = HdrCounts::new(&t);
        for v in probes() {
            direct.saturating_record(v);
            counts.record_at(index_of(v));
        }
        let built = counts.to_histogram(&t);
        assert_eq!(built, direct);
        assert_eq!(
            (built.len(), built.max(), built.min_nz()),
            (direct.len(), direct.max(), direct.min_nz())
        );
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                built.value_at_quantile(q),
                direct.value_at_quantile(q),
                "{q}"
            );
        }
        let recorded = |h: &Histogram<u64>| {
            h.iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect::<Vec<_>>()
        };
        assert_eq!(recorded(&built), recorded(&direct));
        // Adding counts into a histogram that has some already is recording them there.
        let mut twice = direct.clone();
        counts.add_to(&mut twice);
        let mut direct_twice = direct.clone();
        direct_twice.add(&direct).unwrap();
        assert_eq!(twice, direct_twice);
    }
}

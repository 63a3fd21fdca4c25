//! One worker thread's share of a tap's metrics.
//!
//! Two threads incrementing one shared counter fight over its cache line (~200 ns per
//! observation on a shared prometheus Histogram, measured). Each thread therefore counts
//! into its own shard, plain integers behind a mutex that only its owner takes on the hot
//! path: an uncontended lock is one compare-and-swap on a line the owner already holds.
//! A scrape takes each shard's lock once per route, for the few microseconds it needs to
//! add that route's counts (and HDR copies) up, and formats outside every lock.

use hdrhistogram::Histogram;

use crate::metrics::labels::{METHODS, STATUS_CLASSES};
use crate::phase::Phase;
use crate::recorder::{ErrorKind, RouteId};

/// Keeps each thread's shard on cache lines of its own (adjacent-line prefetch included),
/// whatever the allocator puts next to it.
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

#[derive(Default)]
pub struct ThreadShard {
    /// Indexed by route id; a slot is filled the first time this thread sees the route.
    pub routes: Vec<Option<Box<RouteShard>>>,
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Indexed by `side_index`.
    pub opened: [u64; 2],
    pub closed: [u64; 2],
    /// Indexed by `direction_index`.
    pub bytes: [u64; 2],
    /// Messages that answered no request (pub/sub, MONITOR, RESP3 pushes).
    pub pushed: u64,
    /// Correlated requests: [matched, unmatched].
    pub correlations: [u64; 2],
}

impl ThreadShard {
    /// The shard of one route, created on the thread's first exchange on it.
    #[inline]
    pub fn route(&mut self, route: RouteId) -> &mut RouteShard {
        let i = usize::from(route.0);
        if i >= self.routes.len() {
            self.routes.resize_with(i + 1, || None);
        }
        self.routes[i].get_or_insert_with(|| Box::new(RouteShard::new()))
    }
}

pub struct RouteShard {
    /// `requests[method][status_class]`, indexes from `labels`.
    pub requests: [[u64; STATUS_CLASSES.len()]; METHODS.len()],
    /// Indexed by `Phase::index`.
    pub phases: [Option<Box<SeriesShard>>; Phase::COUNT],
}

impl RouteShard {
    fn new() -> Self {
        Self {
            requests: [[0; STATUS_CLASSES.len()]; METHODS.len()],
            phases: Default::default(),
        }
    }
}

/// One (route, phase) series on one thread.
pub struct SeriesShard {
    /// Per-bucket (not cumulative) counts, the last one being `+Inf`.
    pub buckets: Box<[u64]>,
    /// Since the process started, like the buckets.
    pub sum_ns: u128,
    /// This thread's HDR copy, since the process started (a reset subtracts a baseline
    /// instead of emptying it, so that the native histograms derived from it only grow).
    pub hdr: Histogram<u64>,
    /// Exact extremes since the last reset (`u64::MAX` and 0 when none).
    pub min_ns: u64,
    pub max_ns: u64,
}

impl SeriesShard {
    pub fn new(slots: usize, hdr: &Histogram<u64>) -> Self {
        Self {
            buckets: vec![0; slots].into_boxed_slice(),
            sum_ns: 0,
            hdr: hdr.clone(),
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    #[inline]
    pub fn observe(&mut self, bucket: usize, ns: u64) {
        self.buckets[bucket] += 1;
        self.sum_ns += u128::from(ns);
        self.hdr.saturating_record(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Starts a new window for the exact minimum and maximum (a reset).
    pub fn restart_extremes(&mut self) {
        self.min_ns = u64::MAX;
        self.max_ns = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::hdr::{template, HIGHEST_NS};

    #[test]
    fn a_series_records_buckets_hdr_and_extremes_and_restarts_its_extremes() {
        let template = template().unwrap();
        let mut shard = ThreadShard::default();
        let route = shard.route(RouteId(3));
        let series = route.phases[Phase::Total.index()]
            .get_or_insert_with(|| Box::new(SeriesShard::new(4, &template)));
        for ns in [300, 1_000, 0, HIGHEST_NS * 2] {
            series.observe(1, ns);
        }
        assert_eq!(series.buckets[1], 4);
        assert_eq!(series.hdr.len(), 4);
        assert_eq!(series.sum_ns, 1_300 + u128::from(HIGHEST_NS) * 2);
        assert_eq!((series.min_ns, series.max_ns), (0, HIGHEST_NS * 2));
        let p50 = series.hdr.value_at_quantile(0.5);
        assert!((300..=303).contains(&p50), "{p50}");

        series.restart_extremes();
        assert_eq!((series.min_ns, series.max_ns), (u64::MAX, 0));
        assert_eq!(series.hdr.len(), 4, "the HDR copy is never emptied");
        series.observe(0, 7);
        assert_eq!((series.min_ns, series.max_ns), (7, 7));
        assert_eq!(shard.routes.len(), 4);
    }
}

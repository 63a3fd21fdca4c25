//! One worker thread's share of a tap's metrics.
//!
//! Two threads incrementing one shared counter fight over its cache line (~200 ns per
//! observation on a shared prometheus Histogram, measured). Each thread therefore counts
//! into its own shard, plain integers behind a mutex that only its owner takes on the hot
//! path: an uncontended lock is one compare-and-swap on a line the owner already holds.
//! A scrape takes each shard's lock for the few microseconds it needs to add the counts up,
//! and formats outside every lock.

use std::sync::Arc;

use crate::metrics::hdr::HdrCell;
use crate::metrics::labels::{METHODS, STATUS_CLASSES};
use crate::metrics::lock;
use crate::phase::Phase;
use crate::recorder::{ErrorKind, RouteId};

/// Values buffered per series before they go into the shared HDR histogram in one batch.
pub const PENDING: usize = 32;

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
    pub heads: HeadShapes,
}

/// Buckets of [`HeadShapes`]: powers of two, the last open-ended.
pub const HEAD_BUCKETS: usize = 24;

/// The shape of the request heads a tap read: how many, their summed bytes and fields, and
/// both distributions in power-of-two buckets (`[i]` holds values up to 2^i). Plain
/// counters: recording is a few additions, no allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadShapes {
    pub count: u64,
    pub bytes: u64,
    pub fields: u64,
    pub bytes_buckets: [u64; HEAD_BUCKETS],
    pub fields_buckets: [u64; HEAD_BUCKETS],
}

impl HeadShapes {
    #[inline]
    pub fn record(&mut self, bytes: usize, fields: usize) {
        self.count += 1;
        self.bytes += bytes as u64;
        self.fields += fields as u64;
        self.bytes_buckets[Self::bucket(bytes)] += 1;
        self.fields_buckets[Self::bucket(fields)] += 1;
    }

    /// The bucket of `n`: the smallest i with n ≤ 2^i, at most the last.
    #[inline]
    pub fn bucket(n: usize) -> usize {
        let i = if n <= 1 {
            0
        } else {
            (usize::BITS - (n - 1).leading_zeros()) as usize
        };
        i.min(HEAD_BUCKETS - 1)
    }

    pub fn add(&mut self, other: &HeadShapes) {
        self.count += other.count;
        self.bytes += other.bytes;
        self.fields += other.fields;
        for (a, b) in self.bytes_buckets.iter_mut().zip(&other.bytes_buckets) {
            *a += b;
        }
        for (a, b) in self.fields_buckets.iter_mut().zip(&other.fields_buckets) {
            *a += b;
        }
    }

    /// What was recorded since `earlier` (an older reading of the same counters).
    pub fn since(&self, earlier: &HeadShapes) -> HeadShapes {
        let mut out = *self;
        out.count = out.count.saturating_sub(earlier.count);
        out.bytes = out.bytes.saturating_sub(earlier.bytes);
        out.fields = out.fields.saturating_sub(earlier.fields);
        for (a, b) in out.bytes_buckets.iter_mut().zip(&earlier.bytes_buckets) {
            *a = a.saturating_sub(*b);
        }
        for (a, b) in out.fields_buckets.iter_mut().zip(&earlier.fields_buckets) {
            *a = a.saturating_sub(*b);
        }
        out
    }
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

    /// Moves every buffered HDR value into the shared histograms.
    pub fn flush_pending(&mut self) {
        self.series_mut().for_each(SeriesShard::flush);
    }

    /// Drops every buffered HDR value (a reset happened).
    pub fn discard_pending(&mut self) {
        self.series_mut().for_each(|s| s.pending_len = 0);
    }

    fn series_mut(&mut self) -> impl Iterator<Item = &mut SeriesShard> {
        self.routes
            .iter_mut()
            .flatten()
            .flat_map(|r| r.phases.iter_mut().flatten())
            .map(|b| &mut **b)
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
    pub sum_ns: u128,
    pending: [u64; PENDING],
    pending_len: usize,
    hdr: Arc<HdrCell>,
}

impl SeriesShard {
    pub fn new(slots: usize, hdr: Arc<HdrCell>) -> Self {
        Self {
            buckets: vec![0; slots].into_boxed_slice(),
            sum_ns: 0,
            pending: [0; PENDING],
            pending_len: 0,
            hdr,
        }
    }

    #[inline]
    pub fn observe(&mut self, bucket: usize, ns: u64) {
        self.buckets[bucket] += 1;
        self.sum_ns += u128::from(ns);
        self.pending[self.pending_len] = ns;
        self.pending_len += 1;
        if self.pending_len == PENDING {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        if self.pending_len > 0 {
            lock(&self.hdr).record(&self.pending[..self.pending_len]);
            self.pending_len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::hdr::HdrStore;

    #[test]
    fn hdr_values_arrive_in_batches_and_on_flush() {
        let store = HdrStore::new().unwrap();
        let mut shard = ThreadShard::default();
        let cell = store.cell(RouteId(3), Phase::Total);
        let route = shard.route(RouteId(3));
        let series = route.phases[Phase::Total.index()]
            .get_or_insert_with(|| Box::new(SeriesShard::new(4, Arc::clone(&cell))));
        for i in 0..PENDING as u64 + 1 {
            series.observe(1, i);
        }
        assert_eq!(series.buckets[1], PENDING as u64 + 1);
        assert_eq!(lock(&cell).count(), PENDING as u64, "one full batch");
        shard.flush_pending();
        assert_eq!(lock(&cell).count(), PENDING as u64 + 1);

        let series = shard.route(RouteId(3)).phases[Phase::Total.index()]
            .as_mut()
            .unwrap();
        series.observe(0, 7);
        shard.discard_pending();
        shard.flush_pending();
        assert_eq!(lock(&cell).count(), PENDING as u64 + 1, "discarded");
        assert_eq!(shard.routes.len(), 4);
    }
}

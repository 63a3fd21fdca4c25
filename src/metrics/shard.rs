//! One worker thread's share of a tap's metrics.
//!
//! Two threads incrementing one shared counter fight over its cache line (~200 ns per
//! observation on a shared prometheus Histogram, measured). Each thread therefore counts
//! into its own shard, plain integers behind a mutex that only its owner takes on the hot
//! path: an uncontended lock is one compare-and-swap on a line the owner already holds.
//! A scrape takes each shard's lock once per route, for the few microseconds it needs to
//! add that route's counts (and HDR copies) up, and formats outside every lock.

use hdrhistogram::Histogram;

use crate::metrics::counters::Counters;
use crate::metrics::exemplar::Exemplar;
use crate::metrics::hdr::HdrCounts;
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
    /// Everything but the routes' requests and phases.
    pub counters: Counters,
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
    /// Indexed by `Phase::index`: the exchanges that were answered.
    pub phases: [Option<Box<SeriesShard>>; Phase::COUNT],
    /// The failed exchanges' phases (`ExchangeRecord::failure`), by [`ErrorKind::ALL`]
    /// position then `Phase::index`; allocated at the route's first failure on this
    /// thread, so a route that never fails pays one pointer.
    pub failed: Option<Box<FailedSeries>>,
    /// The server's own error answers (an HTTP 5xx it sent, not one the proxy made), by
    /// status: their phases kept apart from the successes' so that a fast error cannot
    /// lower a success's mean. At most [`MAX_SERVER_STATUSES`] statuses have their own
    /// series per route and thread; later ones share [`OTHER_SERVER_STATUS`]. Allocated
    /// at the route's first error answer on this thread.
    pub server: Option<Box<ServerSeries>>,
}

/// Distinct error statuses one route keeps apart on one thread: each costs a set of
/// series (an HDR copy per phase), so a server answering every 5xx in turn cannot grow
/// the shard past this.
pub const MAX_SERVER_STATUSES: usize = 4;
/// The status the statuses past [`MAX_SERVER_STATUSES`] are counted under (label `5xx`).
pub const OTHER_SERVER_STATUS: u16 = 0;

/// A route's error answers on one thread: per status, per phase.
pub type ServerSeries = Vec<(u16, Box<[Option<Box<SeriesShard>>; Phase::COUNT]>)>;

/// A route's failed exchanges on one thread: per kind, per phase.
pub type FailedSeries = [[Option<Box<SeriesShard>>; Phase::COUNT]; ErrorKind::ALL.len()];

impl RouteShard {
    fn new() -> Self {
        Self {
            requests: [[0; STATUS_CLASSES.len()]; METHODS.len()],
            phases: Default::default(),
            failed: None,
            server: None,
        }
    }

    /// The phase series of the server's error answers with `status`, or of the statuses
    /// past the bound together.
    #[inline]
    pub fn server_series(&mut self, status: u16) -> &mut [Option<Box<SeriesShard>>; Phase::COUNT] {
        let server = self.server.get_or_insert_with(Default::default);
        let i = match server.iter().position(|(s, _)| *s == status) {
            Some(i) => i,
            None if server.len() < MAX_SERVER_STATUSES => {
                server.push((status, Default::default()));
                server.len() - 1
            }
            None => match server.iter().position(|(s, _)| *s == OTHER_SERVER_STATUS) {
                Some(i) => i,
                None => {
                    server.push((OTHER_SERVER_STATUS, Default::default()));
                    server.len() - 1
                }
            },
        };
        &mut server[i].1
    }

    /// The phase series of the exchanges answered (`None`), or of those that failed with
    /// `kind`.
    #[inline]
    pub fn series_of(
        &mut self,
        failure: Option<ErrorKind>,
    ) -> &mut [Option<Box<SeriesShard>>; Phase::COUNT] {
        match failure {
            None => &mut self.phases,
            Some(kind) => {
                let failed = self.failed.get_or_insert_with(Default::default);
                // ALL lists every kind, so the fallback is never taken.
                let i = ErrorKind::ALL.iter().position(|&k| k == kind).unwrap_or(0);
                &mut failed[i]
            }
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
    pub hdr: HdrCounts,
    /// Exact extremes since the last reset (`u64::MAX` and 0 when none).
    pub min_ns: u64,
    pub max_ns: u64,
    /// For a series with exemplars (`total`): one slot per bucket, the last slow exchange
    /// counted in it, overwritten in place.
    pub exemplars: Option<Box<[Exemplar]>>,
}

impl SeriesShard {
    /// A series of `slots` buckets; with `exemplars`, a slot per bucket for them.
    pub fn new(slots: usize, hdr: &Histogram<u64>, exemplars: bool) -> Self {
        Self {
            buckets: vec![0; slots].into_boxed_slice(),
            sum_ns: 0,
            hdr: HdrCounts::new(hdr),
            min_ns: u64::MAX,
            max_ns: 0,
            exemplars: exemplars.then(|| vec![Exemplar::default(); slots].into_boxed_slice()),
        }
    }

    /// Makes `exemplar` the one of `bucket`, if this series keeps exemplars.
    #[inline]
    pub fn keep_exemplar(&mut self, bucket: usize, exemplar: Exemplar) {
        if let Some(slot) = self
            .exemplars
            .as_mut()
            .and_then(|slots| slots.get_mut(bucket))
        {
            *slot = exemplar;
        }
    }

    /// Counts `ns`, whose bucket is `bucket` and HDR index (`hdr::index_of`) `hdr`.
    #[inline]
    pub fn observe(&mut self, bucket: usize, hdr: usize, ns: u64) {
        if let Some(n) = self.buckets.get_mut(bucket) {
            *n += 1;
        }
        self.sum_ns += u128::from(ns);
        self.hdr.record_at(hdr);
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
    use crate::metrics::hdr::{index_of, template, HIGHEST_NS};

    #[test]
    fn a_series_records_buckets_hdr_and_extremes_and_restarts_its_extremes() {
        let template = template().unwrap();
        let mut shard = ThreadShard::default();
        let route = shard.route(RouteId(3));
        let series = route.phases[Phase::Total.index()]
            .get_or_insert_with(|| Box::new(SeriesShard::new(4, &template, false)));
        for ns in [300, 1_000, 0, HIGHEST_NS * 2] {
            series.observe(1, index_of(ns), ns);
        }
        assert_eq!(series.buckets[1], 4);
        assert_eq!(series.hdr.to_histogram(&template).len(), 4);
        assert_eq!(series.sum_ns, 1_300 + u128::from(HIGHEST_NS) * 2);
        assert_eq!((series.min_ns, series.max_ns), (0, HIGHEST_NS * 2));
        let p50 = series.hdr.to_histogram(&template).value_at_quantile(0.5);
        assert!((300..=303).contains(&p50), "{p50}");

        series.restart_extremes();
        assert_eq!((series.min_ns, series.max_ns), (u64::MAX, 0));
        assert_eq!(
            series.hdr.to_histogram(&template).len(),
            4,
            "the HDR copy is never emptied"
        );
        series.observe(0, index_of(7), 7);
        assert_eq!((series.min_ns, series.max_ns), (7, 7));
        series.keep_exemplar(1, Exemplar::default());
        assert!(
            series.exemplars.is_none(),
            "a series without exemplar slots"
        );
        assert_eq!(shard.routes.len(), 4);
    }

    #[test]
    fn an_exemplar_overwrites_its_buckets_slot_and_only_that_one() {
        use crate::recorder::ExchangeId;
        let template = template().unwrap();
        let mut series = SeriesShard::new(3, &template, true);
        let ex = |id, ns| Exemplar {
            id: ExchangeId(id),
            ns,
            unix_ms: 1,
        };
        series.keep_exemplar(2, ex(7, 70));
        series.keep_exemplar(2, ex(8, 80));
        series.keep_exemplar(9, ex(9, 90));
        let slots = series.exemplars.as_deref().unwrap();
        assert_eq!(
            slots,
            &[Exemplar::default(), Exemplar::default(), ex(8, 80)]
        );
    }
}

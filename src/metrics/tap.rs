//! The recorder of one tap: what the relay calls on every exchange.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use thread_local::ThreadLocal;

use crate::config::{Protocol, TapConfig};
use crate::metrics::buckets::Buckets;
use crate::metrics::hdr::{HdrSeries, HdrStore};
use crate::metrics::labels::{method_index, status_class_index, METHODS, STATUS_CLASSES};
use crate::metrics::lock;
use crate::metrics::routes::RouteTable;
use crate::metrics::shard::{CachePadded, HeadShapes, SeriesShard, ThreadShard};
use crate::phase::Phase;
use crate::recorder::{Direction, ErrorKind, ExchangeRecord, Recorder, RouteId, Side};

/// The metrics of one tap, sharded per worker thread. Create it with
/// [`Registry::tap`](crate::metrics::Registry::tap); hand it to the relay as its
/// [`Recorder`].
pub struct TapMetrics {
    name: String,
    protocol: Protocol,
    routes: Arc<RouteTable>,
    buckets: Arc<Buckets>,
    shards: ThreadLocal<CachePadded<Mutex<ThreadShard>>>,
    hdr: HdrStore,
}

/// A tap's counts added up over all threads at one scrape.
#[derive(Debug, Default)]
pub(crate) struct TapCounts {
    /// (route, phase) → per-bucket counts and the sum in ns.
    pub series: HashMap<(RouteId, Phase), (Vec<u64>, u128)>,
    pub requests: HashMap<RouteId, [[u64; STATUS_CLASSES.len()]; METHODS.len()]>,
    pub errors: [u64; ErrorKind::ALL.len()],
    pub opened: [u64; 2],
    pub closed: [u64; 2],
    pub bytes: [u64; 2],
    pub pushed: u64,
    /// [matched, unmatched]
    pub correlations: [u64; 2],
    pub heads: HeadShapes,
}

pub(crate) const SIDES: [Side; 2] = [Side::Client, Side::Upstream];
pub(crate) const DIRECTIONS: [Direction; 2] = [Direction::Request, Direction::Response];

fn side_index(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Upstream => 1,
    }
}

fn direction_index(direction: Direction) -> usize {
    match direction {
        Direction::Request => 0,
        Direction::Response => 1,
    }
}

fn error_index(kind: ErrorKind) -> usize {
    // ALL lists every variant, so the fallback is never taken.
    ErrorKind::ALL.iter().position(|&k| k == kind).unwrap_or(0)
}

impl TapMetrics {
    pub(crate) fn new(
        tap: &TapConfig,
        routes: Arc<RouteTable>,
        buckets: Arc<Buckets>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            name: tap.name.clone(),
            protocol: tap.protocol,
            routes,
            buckets,
            shards: ThreadLocal::new(),
            hdr: HdrStore::new()?,
        })
    }

    /// The `tap` label.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The route table whose ids this tap's exchanges carry.
    pub fn routes(&self) -> &Arc<RouteTable> {
        &self.routes
    }

    #[inline]
    fn shard(&self) -> MutexGuard<'_, ThreadShard> {
        lock(
            &self
                .shards
                .get_or(|| CachePadded(Mutex::new(ThreadShard::default())))
                .0,
        )
    }

    /// Adds up every thread's counts. Holds one shard lock at a time, briefly.
    pub(crate) fn collect(&self) -> TapCounts {
        let mut acc = TapCounts::default();
        for shard in self.shards.iter() {
            let shard = lock(&shard.0);
            for (r, route) in shard.routes.iter().enumerate() {
                let Some(route) = route else { continue };
                // Route ids are u16, so r fits.
                let id = RouteId(r as u16);
                let req = acc
                    .requests
                    .entry(id)
                    .or_insert([[0; STATUS_CLASSES.len()]; METHODS.len()]);
                for (acc_row, row) in req.iter_mut().zip(&route.requests) {
                    for (a, n) in acc_row.iter_mut().zip(row) {
                        *a += n;
                    }
                }
                for (phase, series) in Phase::ALL.iter().zip(&route.phases) {
                    let Some(series) = series else { continue };
                    let (buckets, sum) = acc
                        .series
                        .entry((id, *phase))
                        .or_insert_with(|| (vec![0; series.buckets.len()], 0));
                    for (a, n) in buckets.iter_mut().zip(series.buckets.iter()) {
                        *a += n;
                    }
                    *sum += series.sum_ns;
                }
            }
            add(&mut acc.errors, &shard.errors);
            add(&mut acc.opened, &shard.opened);
            add(&mut acc.closed, &shard.closed);
            add(&mut acc.bytes, &shard.bytes);
            acc.pushed += shard.pushed;
            add(&mut acc.correlations, &shard.correlations);
            acc.heads.add(&shard.heads);
        }
        acc
    }

    /// Moves every thread's buffered HDR values into the shared histograms.
    pub(crate) fn drain_pending(&self) {
        for shard in self.shards.iter() {
            lock(&shard.0).flush_pending();
        }
    }

    /// Copies of every HDR series (call [`drain_pending`](Self::drain_pending) first). Each
    /// series is locked only for its copy; the statistics are computed outside.
    pub(crate) fn hdr_series(&self) -> Vec<(RouteId, Phase, HdrSeries)> {
        self.hdr
            .cells()
            .into_iter()
            .map(|((route, phase), cell)| (route, phase, lock(&cell).clone()))
            .collect()
    }

    /// Empties the HDR copies. An exchange recorded while this runs may land on either side.
    pub(crate) fn reset_hdr(&self) {
        for shard in self.shards.iter() {
            lock(&shard.0).discard_pending();
        }
        for (_, cell) in self.hdr.cells() {
            lock(&cell).reset();
        }
    }
}

fn add<const N: usize>(acc: &mut [u64; N], v: &[u64; N]) {
    for (a, n) in acc.iter_mut().zip(v) {
        *a += n;
    }
}

impl Recorder for TapMetrics {
    fn exchange(&self, record: &ExchangeRecord<'_>) {
        let method = method_index(self.protocol, record.method);
        let status = status_class_index(record.status);
        // An id from another table would grow the shard without bound: fold it.
        let route = if usize::from(record.route.0) < self.routes.capacity() {
            record.route
        } else {
            RouteId(0)
        };
        let mut shard = self.shard();
        let rs = shard.route(route);
        rs.requests[method][status] += 1;
        for (phase, ns) in record.phases.iter() {
            let series = rs.phases[phase.index()].get_or_insert_with(|| {
                Box::new(SeriesShard::new(
                    self.buckets.slots(),
                    self.hdr.cell(route, phase),
                ))
            });
            series.observe(self.buckets.index(ns), ns);
        }
    }

    fn error(&self, kind: ErrorKind) {
        self.shard().errors[error_index(kind)] += 1;
    }

    fn connection_opened(&self, side: Side) {
        self.shard().opened[side_index(side)] += 1;
    }

    fn connection_closed(&self, side: Side) {
        self.shard().closed[side_index(side)] += 1;
    }

    fn bytes(&self, direction: Direction, n: u64) {
        self.shard().bytes[direction_index(direction)] += n;
    }

    fn pushed(&self, n: u64) {
        self.shard().pushed += n;
    }

    fn correlated(&self, matched: bool) {
        self.shard().correlations[usize::from(!matched)] += 1;
    }

    fn request_head(&self, bytes: usize, fields: usize) {
        self.shard().heads.record(bytes, fields);
    }

    /// Every count is visible to a scrape as soon as it is recorded; this only moves the
    /// buffered HDR values so that the shared histograms are complete on their own.
    fn flush(&self) {
        self.drain_pending();
    }
}

impl std::fmt::Debug for TapMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapMetrics")
            .field("name", &self.name)
            .field("protocol", &self.protocol)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

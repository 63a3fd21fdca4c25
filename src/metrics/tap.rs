//! The recorder of one tap: what the relay calls on every exchange.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use hdrhistogram::Histogram;
use thread_local::ThreadLocal;

use crate::config::{Protocol, TapConfig};
use crate::metrics::buckets::Buckets;
use crate::metrics::counters::Counters;
use crate::metrics::exemplar::{self, Exemplar};
use crate::metrics::hdr::{self, HdrSeries};
use crate::metrics::labels::{method_index, status_class_index, METHODS, STATUS_CLASSES};
use crate::metrics::shard::{CachePadded, SeriesShard, ThreadShard};
use crate::phase::Phase;
use crate::recorder::{Direction, ErrorKind, Event, ExchangeRecord, HeadShape, Recorder, RouteId};
use crate::routes::RouteTable;
use crate::sync::lock;

/// The metrics of one tap, sharded per worker thread. Create it with
/// [`Registry::tap`](crate::metrics::Registry::tap); hand it to the relay as its
/// [`Recorder`].
pub struct TapMetrics {
    name: String,
    protocol: Protocol,
    /// The `host:port` the tap forwards to, as configured.
    upstream: String,
    routes: Arc<RouteTable>,
    buckets: Arc<Buckets>,
    shards: ThreadLocal<CachePadded<Mutex<ThreadShard>>>,
    /// The empty HDR histogram each new series clones.
    hdr_template: Histogram<u64>,
    /// What the HDR copies held at the last reset, subtracted from every snapshot.
    baseline: Mutex<HashMap<(RouteId, Phase), Baseline>>,
    /// The same for the failed exchanges' series.
    failed_baseline: Mutex<HashMap<FailedKey, Baseline>>,
    /// A `total` at least this long is slow: it becomes its bucket's exemplar.
    exemplar_min_ns: u64,
}

/// One series' HDR histogram and sum as they were at the last reset.
#[derive(Debug)]
struct Baseline {
    hist: Histogram<u64>,
    sum_ns: u128,
}

/// What [`TapMetrics::collect`] copies besides the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collect {
    /// Counters and classic buckets only (the text exposition).
    Counts,
    /// Also the HDR copies, added up over the threads (snapshots, native histograms).
    WithHdr,
    /// As `WithHdr`, and start a new window for each thread's exact min and max, in the
    /// same lock that copies its histograms (a reset).
    Reset,
    /// Counts, and the HDR copies of the answered exchanges' `total` only: the live
    /// page's history each second (every series' copies, at 256 routes, took the
    /// proxy's RSS 60 to 190 MB past its stated ceiling).
    TotalHdr,
}

/// One (route, phase) series added up over the threads.
#[derive(Debug)]
pub(crate) struct SeriesCounts {
    /// Per-bucket (not cumulative) counts, the last one `+Inf`.
    pub buckets: Vec<u64>,
    /// Since the process started.
    pub sum_ns: u128,
    /// The merged HDR copies since the process started, with `Collect::WithHdr`.
    pub hdr: Option<Histogram<u64>>,
    /// Exact extremes since the last reset.
    pub min_ns: u64,
    pub max_ns: u64,
    /// Per bucket, the most recent slow exchange of any thread (empty slots where none;
    /// no slot at all for a series without exemplars).
    pub exemplars: Vec<Exemplar>,
}

/// A window's series: the answered exchanges', the failed ones'.
pub(crate) type WindowSeries = (
    Vec<(RouteId, Phase, HdrSeries)>,
    Vec<(FailedKey, HdrSeries)>,
);

/// A series kept apart from the answered exchanges': its route, why (the proxy's
/// failure, or the server's error answer), the phase.
pub(crate) type FailedKey = (RouteId, Apart, Phase);

/// Why an exchange's phases are kept apart from the successes'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Apart {
    /// It failed: the proxy answered it itself (a 502, a 504, a 400) or cut it short.
    Failed(ErrorKind),
    /// The server answered it with an error of its own: an HTTP 5xx it sent (status;
    /// [`OTHER_SERVER_STATUS`](crate::metrics::shard::OTHER_SERVER_STATUS) for the
    /// statuses past the bound).
    Server(u16),
}

/// Whether an exchange the proxy did not fail is the server's error answer: an HTTP
/// status of 500–599 it sent itself (the proxy's own 502 and 504 carry a failure), or a
/// RESP error reply.
#[inline]
pub(crate) fn is_server_error(record: &ExchangeRecord<'_>) -> bool {
    record.failure.is_none() && (record.error_reply || (500..=599).contains(&record.status))
}

/// The status a RESP error reply is counted under (label `error`): no HTTP status is 1.
pub(crate) const RESP_ERROR_STATUS: u16 = 1;

/// A tap's counts added up over all threads at one scrape.
#[derive(Debug, Default)]
pub(crate) struct TapCounts {
    /// The answered exchanges' series: what the exposition's histograms hold.
    pub series: HashMap<(RouteId, Phase), SeriesCounts>,
    /// The failed exchanges' series (the snapshot's `failed`) and the server's error
    /// answers' (its `server_errors`), kept apart.
    pub failed: HashMap<FailedKey, SeriesCounts>,
    pub requests: HashMap<RouteId, [[u64; STATUS_CLASSES.len()]; METHODS.len()]>,
    pub counters: Counters,
}

impl TapMetrics {
    pub(crate) fn new(
        tap: &TapConfig,
        routes: Arc<RouteTable>,
        buckets: Arc<Buckets>,
        exemplar_min_ns: u64,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            name: tap.name.clone(),
            protocol: tap.protocol,
            upstream: tap.upstream.clone(),
            routes,
            buckets,
            shards: ThreadLocal::new(),
            hdr_template: hdr::template()?,
            baseline: Mutex::new(HashMap::new()),
            failed_baseline: Mutex::new(HashMap::new()),
            exemplar_min_ns,
        })
    }

    /// The `tap` label.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The `host:port` the tap forwards to, as configured.
    pub fn upstream_address(&self) -> &str {
        &self.upstream
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

    /// Adds up every thread's counts. Takes each thread's lock once per route, so that a
    /// worker waits at most for one route's copy, never for a whole scrape.
    pub(crate) fn collect(&self, what: Collect) -> TapCounts {
        let mut acc = TapCounts::default();
        for shard in self.shards.iter() {
            let routes = {
                let shard = lock(&shard.0);
                acc.counters.add(&shard.counters);
                shard.routes.len()
            };
            for r in 0..routes {
                let mut shard = lock(&shard.0);
                let Some(Some(route)) = shard.routes.get_mut(r) else {
                    continue;
                };
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
                for (phase, series) in Phase::ALL.iter().zip(route.phases.iter()) {
                    if let Some(series) = series {
                        let what = match what {
                            Collect::TotalHdr if *phase == Phase::Total => Collect::WithHdr,
                            Collect::TotalHdr => Collect::Counts,
                            other => other,
                        };
                        self.fold(acc.series.entry((id, *phase)), series, what);
                    }
                }
                for (kind, phases) in ErrorKind::ALL
                    .iter()
                    .zip(route.failed.iter().flat_map(|f| f.iter()))
                {
                    for (phase, series) in Phase::ALL.iter().zip(phases) {
                        if let Some(series) = series {
                            let key = (id, Apart::Failed(*kind), *phase);
                            self.fold(acc.failed.entry(key), series, what);
                        }
                    }
                }
                for (status, phases) in route.server.iter().flat_map(|s| s.iter()) {
                    for (phase, series) in Phase::ALL.iter().zip(phases.iter()) {
                        if let Some(series) = series {
                            let key = (id, Apart::Server(*status), *phase);
                            self.fold(acc.failed.entry(key), series, what);
                        }
                    }
                }
                if what == Collect::Reset {
                    route
                        .phases
                        .iter_mut()
                        .chain(route.failed.iter_mut().flat_map(|f| f.iter_mut().flatten()))
                        .chain(
                            route
                                .server
                                .iter_mut()
                                .flat_map(|s| s.iter_mut().flat_map(|(_, p)| p.iter_mut())),
                        )
                        .flatten()
                        .for_each(|s| s.restart_extremes());
                }
            }
        }
        acc
    }

    /// Adds one thread's copy of a series to the sum over the threads.
    fn fold<K>(
        &self,
        entry: std::collections::hash_map::Entry<'_, K, SeriesCounts>,
        series: &SeriesShard,
        what: Collect,
    ) {
        let s = entry.or_insert_with(|| SeriesCounts {
            buckets: vec![0; series.buckets.len()],
            sum_ns: 0,
            hdr: None,
            min_ns: u64::MAX,
            max_ns: 0,
            exemplars: Vec::new(),
        });
        for (a, n) in s.buckets.iter_mut().zip(series.buckets.iter()) {
            *a += n;
        }
        s.sum_ns += series.sum_ns;
        s.min_ns = s.min_ns.min(series.min_ns);
        s.max_ns = s.max_ns.max(series.max_ns);
        if let Some(slots) = &series.exemplars {
            exemplar::merge_latest(&mut s.exemplars, slots);
        }
        if matches!(what, Collect::WithHdr | Collect::Reset) {
            match &mut s.hdr {
                None => s.hdr = Some(series.hdr.to_histogram(&self.hdr_template)),
                Some(h) => series.hdr.add_to(h),
            }
        }
    }

    /// Every series since the last reset, from counts collected `WithHdr`: the merged HDR
    /// copies minus the baseline the reset took.
    pub(crate) fn hdr_series(&self, counts: &TapCounts) -> Vec<(RouteId, Phase, HdrSeries)> {
        since_baseline(&counts.series, &lock(&self.baseline))
            .into_iter()
            .map(|((route, phase), s)| (route, phase, s))
            .collect()
    }

    /// The failed exchanges' series since the last reset, as [`hdr_series`](Self::hdr_series).
    pub(crate) fn failed_series(&self, counts: &TapCounts) -> Vec<(FailedKey, HdrSeries)> {
        since_baseline(&counts.failed, &lock(&self.failed_baseline))
    }

    /// Starts a new snapshot window: what the HDR copies hold now becomes the baseline. An
    /// exchange recorded while this runs may land on either side.
    pub(crate) fn reset_hdr(&self) {
        let counts = self.collect(Collect::Reset);
        self.rebaseline(&counts);
    }

    /// Where a window ends: the counts since the last reset, collected
    /// [`Collect::Reset`], to be made the window's series and the next window's baseline
    /// by [`cut_series`](Self::cut_series). An exchange recorded between the two is in
    /// the next window, never lost between a snapshot's collect and a reset's.
    pub(crate) fn cut_counts(&self) -> TapCounts {
        self.collect(Collect::Reset)
    }

    /// The window that `counts` (from [`cut_counts`](Self::cut_counts)) closed, answered
    /// and failed, and the next one begun from them.
    pub(crate) fn cut_series(&self, counts: &TapCounts) -> WindowSeries {
        let series = (self.hdr_series(counts), self.failed_series(counts));
        self.rebaseline(counts);
        series
    }

    fn rebaseline(&self, counts: &TapCounts) {
        rebaseline(&counts.series, &mut lock(&self.baseline));
        rebaseline(&counts.failed, &mut lock(&self.failed_baseline));
    }
}

/// Each series of `series` minus its baseline: the window since the last reset.
fn since_baseline<K: Copy + Eq + std::hash::Hash>(
    series: &HashMap<K, SeriesCounts>,
    baseline: &HashMap<K, Baseline>,
) -> Vec<(K, HdrSeries)> {
    let mut out = Vec::with_capacity(series.len());
    for (&key, s) in series {
        let Some(hist) = &s.hdr else { continue };
        let mut hist = hist.clone();
        let mut sum_ns = s.sum_ns;
        if let Some(b) = baseline.get(&key) {
            if let Err(e) = hist.subtract(&b.hist) {
                // Copies only grow, so the baseline is always below them.
                tracing::error!(error = %e, "subtracting the reset baseline failed");
            }
            sum_ns = sum_ns.saturating_sub(b.sum_ns);
        }
        out.push((
            key,
            HdrSeries {
                hist,
                sum_ns,
                min_ns: s.min_ns,
                max_ns: s.max_ns,
            },
        ));
    }
    out
}

/// Makes what `series` holds now the baseline of the next window.
fn rebaseline<K: Copy + Eq + std::hash::Hash>(
    series: &HashMap<K, SeriesCounts>,
    baseline: &mut HashMap<K, Baseline>,
) {
    for (&key, s) in series {
        if let Some(hist) = &s.hdr {
            baseline.insert(
                key,
                Baseline {
                    hist: hist.clone(),
                    sum_ns: s.sum_ns,
                },
            );
        }
    }
}

impl TapMetrics {
    /// Counts an exchange in this thread's shard, whose lock the caller holds.
    fn exchange_in(&self, shard: &mut ThreadShard, record: &ExchangeRecord<'_>) {
        let method = method_index(self.protocol, record.method);
        let status = status_class_index(record.status);
        // An id from another table would grow the shard without bound: fold it.
        let route = if usize::from(record.route.0) < self.routes.capacity() {
            record.route
        } else {
            RouteId(0)
        };
        let rs = shard.route(route);
        rs.requests[method][status] += 1;
        let server_error = is_server_error(record);
        let phases = if server_error {
            rs.server_series(if record.error_reply {
                RESP_ERROR_STATUS
            } else {
                record.status
            })
        } else {
            rs.series_of(record.failure)
        };
        // Exemplars lead to slow successes: the histograms they sit on hold nothing else.
        let answered = record.failure.is_none() && !server_error;
        for (phase, ns) in record.phases.iter() {
            let series = phases[phase.index()].get_or_insert_with(|| {
                Box::new(SeriesShard::new(
                    self.buckets.slots(),
                    &self.hdr_template,
                    phase == Phase::Total && answered,
                ))
            });
            // The HDR index is worked out once, for the HDR copy and to find the bucket.
            let hdr = hdr::index_of(ns);
            let bucket = self.buckets.index_by_hdr(hdr, ns);
            series.observe(bucket, hdr, ns);
            if phase == Phase::Total && ns >= self.exemplar_min_ns && record.id.0 != 0 {
                series.keep_exemplar(
                    bucket,
                    Exemplar {
                        id: record.id,
                        ns,
                        unix_ms: exemplar::coarse_unix_ms(),
                    },
                );
            }
        }
    }
}

impl Recorder for TapMetrics {
    fn exchange(&self, record: &ExchangeRecord<'_>) {
        self.exchange_in(&mut self.shard(), record);
    }

    /// One shard lock for the bytes, the head and the exchange, instead of one each.
    fn exchange_relayed(&self, record: &ExchangeRecord<'_>, head: Option<HeadShape>) {
        let mut shard = self.shard();
        let counters = &mut shard.counters;
        counters.record(Event::Bytes(Direction::Request, record.request_bytes));
        counters.record(Event::Bytes(Direction::Response, record.response_bytes));
        if let Some(head) = head {
            counters.record(Event::RequestHead(head));
        }
        self.exchange_in(&mut shard, record);
    }

    fn event(&self, event: Event) {
        self.shard().counters.record(event);
    }
}

/// What the upstream's slices read at each cut: every route's exchanges, one shard lock
/// per thread for a few additions (off the data path, four times a second).
impl crate::upstream::slices::RouteCounts for TapMetrics {
    fn exchanges(&self, into: &mut Vec<u64>) {
        into.clear();
        for shard in self.shards.iter() {
            let shard = lock(&shard.0);
            if into.len() < shard.routes.len() {
                into.resize(shard.routes.len(), 0);
            }
            for (n, route) in into.iter_mut().zip(&shard.routes) {
                if let Some(route) = route {
                    *n += route.requests.iter().flatten().sum::<u64>();
                }
            }
        }
    }

    fn route_name(&self, index: usize) -> String {
        // Route ids are u16, so an index of theirs fits.
        self.routes
            .name(RouteId(u16::try_from(index).unwrap_or(u16::MAX)))
            .to_owned()
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

//! The process-wide metrics registry: every tap's recorder, the exposition, snapshots.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{ensure, Context};

use crate::config::{MetricsConfig, TapConfig};
use crate::metrics::buckets::Buckets;
use crate::metrics::counters::Counters;
use crate::metrics::exposition;
use crate::metrics::finding::Board;
use crate::metrics::snapshot::{self, TapInput};
use crate::metrics::tap::{Collect, TapCounts, TapMetrics};
use crate::phase::Phase;
use crate::recorder::{Discard, Recorder};
use crate::routes::RouteTable;
use crate::snapshot::Snapshot;
use crate::sync::lock;
use crate::upstream::{Own, Upstream};

/// One tap's figures for the live page's history ([`Registry::history_totals`]),
/// cumulative since the proxy started.
#[derive(Debug, Clone, Default)]
pub struct HistoryTotals {
    pub tap: String,
    pub requests: u64,
    pub errors: u64,
    pub answered: u64,
    /// Phase → seconds summed over the answered exchanges, every route.
    pub sums: std::collections::BTreeMap<String, f64>,
    /// `total`'s histogram over every route: nanoseconds → count.
    pub total: std::collections::BTreeMap<u64, u64>,
}

/// One per process. The relay records through the [`TapMetrics`] it hands out; the admin
/// server reads through [`encode_prometheus`](Self::encode_prometheus),
/// [`snapshot`](Self::snapshot) and [`reset`](Self::reset), which never block recording
/// for longer than it takes to add up one thread's counts.
pub struct Registry {
    enabled: bool,
    buckets: Arc<Buckets>,
    taps: RwLock<Vec<Arc<TapMetrics>>>,
    /// Tap names front to back (`Config::taps_front_to_back`), for the snapshot's
    /// `position`; taps not named here follow in the order they were registered.
    front_to_back: RwLock<Vec<String>>,
    /// Each correlated HTTP tap and the RESP tap behind it, for the snapshot's `backend`.
    backends: RwLock<Vec<(String, String)>>,
    /// Each tap's counters at the last reset, so that the snapshot can give its window's
    /// errors and head shapes beside the counters since start. Taken under `since`'s lock.
    counter_baseline: Mutex<Vec<(String, Counters)>>,
    /// Taps that watch their upstream's process.
    upstreams: RwLock<Vec<Arc<Upstream>>>,
    /// The proxy's own process, once [`watch_own`](Self::watch_own) started reading it.
    own: RwLock<Option<Arc<Own>>>,
    /// The findings active now, for the `phasescope_finding` gauge.
    findings: Board,
    /// Each route's CPU per request at the last evaluation, for its gauges.
    route_cpu: super::route_cpu::Board,
    /// A `total` at least this long (ns) is an exemplar: `[log] slow_threshold`.
    exemplar_min_ns: AtomicU64,
    /// Start of the window the HDR copies cover. Also serializes snapshot and reset, so
    /// that a snapshot never sees half a reset.
    since: Mutex<SystemTime>,
}

impl Registry {
    pub fn new(config: &MetricsConfig) -> anyhow::Result<Arc<Self>> {
        let buckets = Buckets::from_config(&config.buckets).context("metrics.buckets")?;
        Ok(Arc::new(Self {
            enabled: config.enabled,
            buckets: Arc::new(buckets),
            taps: RwLock::new(Vec::new()),
            front_to_back: RwLock::new(Vec::new()),
            backends: RwLock::new(Vec::new()),
            counter_baseline: Mutex::new(Vec::new()),
            upstreams: RwLock::new(Vec::new()),
            own: RwLock::new(None),
            findings: Board::default(),
            route_cpu: super::route_cpu::Board::default(),
            exemplar_min_ns: AtomicU64::new(duration_ns(
                crate::config::LogConfig::default().slow_threshold,
            )),
            since: Mutex::new(SystemTime::now()),
        }))
    }

    /// The total from which an exchange is slow and becomes its bucket's exemplar (the
    /// slow log's threshold, so that the slow log has every exemplar's line). For the taps
    /// registered after the call.
    pub fn set_exemplar_threshold(&self, threshold: Duration) {
        self.exemplar_min_ns
            .store(duration_ns(threshold), Ordering::Relaxed);
    }

    /// False under `--no-metrics`: the exposition then has only build_info.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// The order readers show the taps in, front to back.
    /// The `[[correlate]]` pairs, HTTP tap then RESP tap: the snapshot names each HTTP
    /// tap's `backend`.
    pub fn set_backends(&self, pairs: Vec<(String, String)>) {
        *self
            .backends
            .write()
            .unwrap_or_else(PoisonError::into_inner) = pairs;
    }

    pub fn set_front_to_back(&self, names: Vec<String>) {
        *self
            .front_to_back
            .write()
            .unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// Registers a tap and returns its recorder. `routes` must be the table whose ids the
    /// relay puts in this tap's [`ExchangeRecord`](crate::recorder::ExchangeRecord)s.
    pub fn tap(&self, tap: &TapConfig, routes: Arc<RouteTable>) -> anyhow::Result<Arc<TapMetrics>> {
        let mut taps = self.taps.write().unwrap_or_else(PoisonError::into_inner);
        ensure!(
            taps.iter().all(|t| t.name() != tap.name),
            "two taps are named {:?}: the tap label must be unique",
            tap.name
        );
        let metrics = Arc::new(
            TapMetrics::new(
                tap,
                routes,
                Arc::clone(&self.buckets),
                self.exemplar_min_ns.load(Ordering::Relaxed),
            )
            .with_context(|| format!("tap {:?}", tap.name))?,
        );
        taps.push(Arc::clone(&metrics));
        for u in self.upstreams().iter().filter(|u| u.tap() == tap.name) {
            u.count_routes(metrics.clone());
        }
        // The proxy's own traffic is every tap's.
        if let Some(own) = self.own() {
            own.count_traffic(metrics.clone());
        }
        Ok(metrics)
    }

    /// What the relay should record into for `tap`: its [`TapMetrics`], or [`Discard`]
    /// under `--no-metrics`.
    pub fn recorder(
        &self,
        tap: &TapConfig,
        routes: Arc<RouteTable>,
    ) -> anyhow::Result<Arc<dyn Recorder>> {
        if !self.enabled {
            return Ok(Arc::new(Discard));
        }
        Ok(self.tap(tap, routes)?)
    }

    fn taps(&self) -> Vec<Arc<TapMetrics>> {
        self.taps
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The Prometheus text exposition (format 0.0.4). Adds the shards up one at a time,
    /// then formats with no lock held.
    pub fn encode_prometheus(&self) -> String {
        let taps = self.enabled_taps();
        let mut out = exposition::encode(&collect(&taps, Collect::Counts), &self.buckets);
        if self.enabled {
            out.push_str(&super::upstream::encode(&self.upstreams()));
            out.push_str(&super::upstream::text(&super::own::families(
                self.own().as_deref(),
            )));
            out.push_str(&super::upstream::text(&self.findings.families()));
            out.push_str(&super::upstream::text(&self.route_cpu.families()));
        }
        out
    }

    /// The findings board the `phasescope_finding` gauge is read from.
    pub fn findings(&self) -> &Board {
        &self.findings
    }

    /// The board the CPU per route gauges are read from.
    pub fn route_cpu(&self) -> &super::route_cpu::Board {
        &self.route_cpu
    }

    /// The exposition in `format`: text as [`encode_prometheus`](Self::encode_prometheus),
    /// or the protobuf one with native histograms (derived from the HDR copies, which are
    /// added up too).
    pub fn encode(&self, format: exposition::Format) -> Vec<u8> {
        match format {
            exposition::Format::Text => self.encode_prometheus().into_bytes(),
            exposition::Format::OpenMetrics => exposition::encode_openmetrics(
                &collect(&self.enabled_taps(), Collect::Counts),
                &self.buckets,
                self.scrape_time_families(),
            )
            .into_bytes(),
            exposition::Format::Protobuf => exposition::encode_protobuf(
                &collect(&self.enabled_taps(), Collect::WithHdr),
                &self.buckets,
                self.scrape_time_families(),
            ),
        }
    }

    /// The families read at scrape time (the upstream processes', the findings'), for
    /// the expositions that take them as data rather than text.
    fn scrape_time_families(&self) -> Vec<prometheus::proto::MetricFamily> {
        if !self.enabled {
            return Vec::new();
        }
        let mut families = super::upstream::families(&self.upstreams());
        families.extend(super::own::families(self.own().as_deref()));
        families.extend(self.findings.families());
        families.extend(self.route_cpu.families());
        families
    }

    /// Every tap, or none under `--no-metrics`.
    fn enabled_taps(&self) -> Vec<Arc<TapMetrics>> {
        if self.enabled {
            self.taps()
        } else {
            Vec::new()
        }
    }

    /// Registers the accounting of `tap`'s upstream process, for `/metrics` and snapshots.
    pub fn upstream(&self, tap: &TapConfig) -> Arc<Upstream> {
        let u = Upstream::new(&tap.name, tap.process.interval);
        // The slices of CPU per route count the tap's exchanges.
        if let Some(t) = self.taps().into_iter().find(|t| t.name() == tap.name) {
            u.count_routes(t);
        }
        self.upstreams
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&u));
        u
    }

    /// Starts reading the proxy's own process and the machine's CPUs, for `/metrics` and
    /// the snapshot's `proxy` (nothing under `--no-metrics`).
    pub fn watch_own(&self) -> anyhow::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let own = Own::start()?;
        // Taps registered before: their exchanges are the proxy's traffic too.
        for t in self.taps() {
            own.count_traffic(t);
        }
        *self.own.write().unwrap_or_else(PoisonError::into_inner) = Some(own);
        Ok(())
    }

    fn own(&self) -> Option<Arc<Own>> {
        self.own
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.upstreams
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Asks every tap that samples on demand (`profile = "on-demand"`) for `seconds` of
    /// sampling; the names of those that do.
    pub fn profile_for(&self, seconds: std::time::Duration) -> Vec<String> {
        self.upstreams()
            .iter()
            .filter(|u| u.profile_for(seconds))
            .map(|u| u.tap().to_owned())
            .collect()
    }

    /// Ends what was asked of every tap's on-demand sampling: no perf event stays open
    /// past each watcher's next turn.
    pub fn stop_profiling(&self) {
        for u in self.upstreams() {
            u.stop_profiling();
        }
    }

    /// The taps that sample on demand whose samplers run now.
    pub fn sampling_now(&self) -> Vec<String> {
        self.upstreams()
            .iter()
            .filter(|u| u.sampling_now())
            .map(|u| u.tap().to_owned())
            .collect()
    }

    /// Exact percentiles of every series since the last reset, with the histograms.
    pub fn snapshot(&self) -> Snapshot {
        self.take(false).0
    }

    /// The snapshot since the last reset, and a reset on the very counts it was made of:
    /// consecutive windows of a duet bench, in
    /// which every exchange and every CPU second of the upstream falls in exactly one
    /// window. A `snapshot` then a `reset` lost what was recorded between them: on a
    /// loaded machine, up to half of a 250 ms window's exchanges, and another share of
    /// the upstream's CPU, which biased its CPU per request.
    pub fn cut(&self) -> Snapshot {
        self.take(true).0
    }

    /// [`cut`](Self::cut), with the start of the window it begins: what `POST
    /// /api/reset` answers. Two resetters at once each get the window their own cut
    /// ended, so every exchange is in exactly one of the windows handed back (a snapshot
    /// then a reset, as `phasescope snapshot --reset` did, lost 7 % of the exchanges of
    /// two such loops to no window).
    pub fn cut_window(&self) -> (Snapshot, SystemTime) {
        self.take(true)
    }

    /// The snapshot, cut or not, and the `since` of the window that follows it.
    fn take(&self, cut: bool) -> (Snapshot, SystemTime) {
        let mut since = lock(&self.since);
        let taps = if self.enabled {
            self.taps()
        } else {
            Vec::new()
        };
        let order = self
            .front_to_back
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let baseline = lock(&self.counter_baseline).clone();
        let mut next_baseline = Vec::new();
        let upstreams = self.upstreams();
        // Every tap's counts first, the window's end, so that it ends at about one moment
        // for all of them; then the slower work of making them series (tens of ms in a
        // debug build): done tap by tap in between, one tap's window ran on that much
        // longer than the next one's, which an interleaved bench, whose side changes at
        // the cut, took for its other side's traffic.
        let counted: Vec<TapCounts> = taps
            .iter()
            .map(|t| {
                if cut {
                    t.cut_counts()
                } else {
                    t.collect(Collect::WithHdr)
                }
            })
            .collect();
        let inputs = taps
            .iter()
            .zip(counted)
            .enumerate()
            .map(|(registered, (t, counts))| {
                let (series, failed) = if cut {
                    next_baseline.push((t.name().to_owned(), counts.counters));
                    t.cut_series(&counts)
                } else {
                    (t.hdr_series(&counts), t.failed_series(&counts))
                };
                let at_reset = baseline
                    .iter()
                    .find(|(name, _)| name == t.name())
                    .map_or_else(Counters::default, |(_, c)| *c);
                let window = counts.counters.since(&at_reset);
                let position = order
                    .iter()
                    .position(|name| name == t.name())
                    .unwrap_or(order.len() + registered);
                TapInput {
                    tap: t,
                    position: u32::try_from(position).unwrap_or(u32::MAX),
                    window,
                    series,
                    failed,
                    counts,
                    upstream: upstreams.iter().find(|u| u.tap() == t.name()).map(|u| {
                        if cut {
                            u.cut()
                        } else {
                            u.snapshot()
                        }
                    }),
                }
            })
            .collect();
        let proxy = self.own().map(|o| if cut { o.cut() } else { o.snapshot() });
        let at = *since;
        if cut {
            *lock(&self.counter_baseline) = next_baseline;
            *since = SystemTime::now();
        }
        let next = *since;
        drop(since);
        let mut out = snapshot::build(inputs, at, self.enabled, proxy);
        for (http, resp) in self
            .backends
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            if out.taps.contains_key(resp) {
                if let Some(t) = out.taps.get_mut(http) {
                    t.backend = Some(resp.clone());
                }
            }
        }
        (out, next)
    }

    /// What the live page's history takes each second, cumulative since the proxy
    /// started: per tap, its exchanges, errors, answered exchanges, each phase's sum over
    /// the answered ones (seconds) and `total`'s histogram over every route (nanoseconds
    /// → count); with the start of the current window. Only `total`'s HDR copies are
    /// merged, not every series' as a snapshot does.
    pub fn history_totals(&self) -> (SystemTime, Vec<HistoryTotals>) {
        let since = *lock(&self.since);
        let taps = if self.enabled {
            self.taps()
        } else {
            Vec::new()
        };
        let totals = taps
            .iter()
            .map(|t| {
                let counts = t.collect(Collect::TotalHdr);
                let mut sums: std::collections::BTreeMap<String, f64> = Default::default();
                let mut total: std::collections::BTreeMap<u64, u64> = Default::default();
                for ((_, phase), s) in &counts.series {
                    *sums.entry(phase.name().to_owned()).or_default() += s.sum_ns as f64 / 1e9;
                    if let Some(h) = s.hdr.as_ref().filter(|_| *phase == Phase::Total) {
                        for v in h.iter_recorded() {
                            *total.entry(v.value_iterated_to()).or_default() += v.count_at_value();
                        }
                    }
                }
                HistoryTotals {
                    tap: t.name().to_owned(),
                    requests: counts.requests.values().flatten().flatten().sum(),
                    errors: counts.counters.errors.iter().sum(),
                    answered: total.values().sum(),
                    sums,
                    total,
                }
            })
            .collect();
        (since, totals)
    }

    /// Empties the HDR copies behind [`snapshot`](Self::snapshot). The Prometheus counters
    /// and histograms stay monotonic, as Prometheus expects.
    pub fn reset(&self) -> SystemTime {
        let mut since = lock(&self.since);
        let mut baseline = Vec::new();
        for t in self.taps() {
            t.reset_hdr();
            let counts = t.collect(Collect::Counts);
            baseline.push((t.name().to_owned(), counts.counters));
        }
        *lock(&self.counter_baseline) = baseline;
        for u in self.upstreams() {
            u.reset();
        }
        if let Some(o) = self.own() {
            o.reset();
        }
        *since = SystemTime::now();
        *since
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn collect(taps: &[Arc<TapMetrics>], what: Collect) -> Vec<(&TapMetrics, TapCounts)> {
    taps.iter().map(|t| (&**t, t.collect(what))).collect()
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("enabled", &self.enabled)
            .field("buckets", &self.buckets.bounds_ns().len())
            .field("taps", &self.taps().len())
            .finish()
    }
}

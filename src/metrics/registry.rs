//! The process-wide metrics registry: every tap's recorder, the exposition, snapshots.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::SystemTime;

use anyhow::{ensure, Context};

use crate::config::{MetricsConfig, TapConfig};
use crate::metrics::buckets::Buckets;
use crate::metrics::exposition;
use crate::metrics::lock;
use crate::metrics::routes::RouteTable;
use crate::metrics::snapshot::{self, Snapshot, TapInput};
use crate::metrics::tap::TapMetrics;
use crate::recorder::{Discard, Recorder};
use crate::upstream::Upstream;

/// One per process. The relay records through the [`TapMetrics`] it hands out; the admin
/// server reads through [`encode_prometheus`](Self::encode_prometheus),
/// [`snapshot`](Self::snapshot) and [`reset`](Self::reset), which never block recording
/// for longer than it takes to add up one thread's counts.
pub struct Registry {
    enabled: bool,
    buckets: Arc<Buckets>,
    taps: RwLock<Vec<Arc<TapMetrics>>>,
    /// Taps that watch their upstream's process.
    upstreams: RwLock<Vec<Arc<Upstream>>>,
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
            upstreams: RwLock::new(Vec::new()),
            since: Mutex::new(SystemTime::now()),
        }))
    }

    /// False under `--no-metrics`: the exposition then has only build_info.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn buckets(&self) -> &Buckets {
        &self.buckets
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
            TapMetrics::new(tap, routes, Arc::clone(&self.buckets))
                .with_context(|| format!("tap {:?}", tap.name))?,
        );
        taps.push(Arc::clone(&metrics));
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
        let taps = if self.enabled {
            self.taps()
        } else {
            Vec::new()
        };
        let counts: Vec<_> = taps.iter().map(|t| (&**t, t.collect())).collect();
        let mut out = exposition::encode(&counts, &self.buckets);
        if self.enabled {
            out.push_str(&crate::upstream::encode_prometheus(&self.upstreams()));
        }
        out
    }

    /// Registers the accounting of `tap`'s upstream process, for `/metrics` and snapshots.
    pub fn upstream(&self, tap: &TapConfig) -> Arc<Upstream> {
        let u = Upstream::new(&tap.name, tap.process.interval);
        self.upstreams
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&u));
        u
    }

    fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.upstreams
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Exact percentiles of every series since the last reset, with the histograms.
    pub fn snapshot(&self) -> Snapshot {
        let since = lock(&self.since);
        let taps = if self.enabled {
            self.taps()
        } else {
            Vec::new()
        };
        let upstreams = self.upstreams();
        let inputs = taps
            .iter()
            .map(|t| {
                t.drain_pending();
                TapInput {
                    tap: t,
                    counts: t.collect(),
                    series: t.hdr_series(),
                    upstream: upstreams
                        .iter()
                        .find(|u| u.tap() == t.name())
                        .map(|u| u.snapshot()),
                }
            })
            .collect();
        let at = *since;
        drop(since);
        snapshot::build(inputs, at, self.enabled)
    }

    /// Empties the HDR copies behind [`snapshot`](Self::snapshot). The Prometheus counters
    /// and histograms stay monotonic, as Prometheus expects.
    pub fn reset(&self) -> SystemTime {
        let mut since = lock(&self.since);
        for t in self.taps() {
            t.reset_hdr();
        }
        for u in self.upstreams() {
            u.reset();
        }
        *since = SystemTime::now();
        *since
    }
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

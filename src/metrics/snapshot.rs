//! `/api/snapshot`: exact percentiles per tap, phase and route, in a form reports can merge.
//!
//! The JSON schema is a contract with the report and compare commands; docs/metrics.md
//! describes every field. Durations are seconds (Prometheus base units) except the
//! histogram pairs, which are integer nanoseconds so that merging is exact.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{ensure, Context};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::counters::{self, Counters, Family};
use crate::metrics::hdr::{HdrSeries, HIGHEST_NS, LOWEST_NS, SIGNIFICANT_FIGURES};
use crate::metrics::heads::HeadShapes;
use crate::metrics::tap::{TapCounts, TapMetrics};

/// The `format` field: what this document is.
pub const FORMAT: &str = "phasescope-snapshot";
/// The `format_version` field. Bumped on any change a reader must know about.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: String,
    pub format_version: u32,
    /// The phasescope version that took it.
    pub version: String,
    /// `tsc` or `os`: what the timings were read from.
    pub clock: String,
    /// When it was taken, RFC 3339 UTC, and the same as seconds since the Unix epoch.
    pub taken_at: String,
    pub taken_at_unix: f64,
    /// Start of the window the series cover: the last reset, or the process start.
    pub since: String,
    pub since_unix: f64,
    /// False under `--no-metrics`: then nothing was recorded.
    pub metrics_enabled: bool,
    /// How the `histogram` pairs were recorded.
    pub hdr: HdrLayout,
    /// Every phase name, in the order readers show them (`Phase::ALL`): JSON objects
    /// have no order, and the live page lists phases in this one instead of keeping its
    /// own copy. Empty in snapshots of older builds.
    #[serde(default)]
    pub phase_order: Vec<String>,
    /// How to draw each phase, keyed by its name: the one colour table of
    /// `Phase::style`, so that the live page draws with the colours the SVG and the
    /// dashboard use. Empty in snapshots of older builds.
    #[serde(default)]
    pub phase_styles: BTreeMap<String, PhaseStyle>,
    /// Keyed by the `tap` label.
    pub taps: BTreeMap<String, TapSnapshot>,
    /// What the rules of docs/findings.md find in this window, most severe first. The
    /// admin server fills it in; absent when nothing was found and in older snapshots
    /// (readers diagnose the snapshot again rather than trust it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<super::finding::Finding>,
    /// The proxy's own process and the machine over the same window (docs/metrics.md);
    /// absent under `--no-metrics` and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<crate::upstream::ProxySnapshot>,
}

/// One phase's entry of [`Snapshot::phase_styles`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseStyle {
    /// `#rrggbb`.
    pub colour: String,
    pub label: String,
    /// The phase it is drawn inside, if any.
    pub parent: Option<String>,
    /// Its place in the stacked bar from the left, if it is stacked.
    pub stack: Option<u8>,
    /// Its place from the bottom in the live page's stack of the phases that add up to
    /// `total`, if it is in it. Absent in snapshots of older builds, as are the two below.
    #[serde(default)]
    pub sum_stack: Option<u8>,
    /// What it measures, in a line.
    #[serde(default)]
    pub description: String,
    /// What a table of phases says beside its name (`in client_recv`), if anything.
    #[serde(default)]
    pub note: Option<String>,
}

impl PhaseStyle {
    fn of(p: crate::phase::Phase) -> PhaseStyle {
        let st = p.style();
        PhaseStyle {
            colour: st.colour.to_owned(),
            label: st.label.to_owned(),
            parent: st.parent.map(|q| q.name().to_owned()),
            stack: st.stack,
            sum_stack: st.sum_stack,
            description: st.description.to_owned(),
            note: st.note.map(str::to_owned),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HdrLayout {
    pub significant_figures: u8,
    pub lowest_ns: u64,
    pub highest_ns: u64,
}

impl HdrLayout {
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

/// phase name → route label → series.
pub type PhaseSeries = BTreeMap<String, BTreeMap<String, SeriesSnapshot>>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapSnapshot {
    /// `http` or `resp`.
    pub protocol: String,
    /// Front to back from 0: the taps clients reach first, each followed by the taps behind
    /// it (a correlated RESP tap after its HTTP tap), config order otherwise. Readers show
    /// taps in this order. Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// The `host:port` the tap forwards to, as configured (the report names it when the
    /// upstream fails). Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_address: Option<String>,
    /// phase name → route label → series, of the exchanges answered. A series appears
    /// once it has an observation since `since`.
    pub phases: PhaseSeries,
    /// `kind` label → errors since `since`, the window the series cover (`totals.errors`
    /// counts since the process started). Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// The exchanges that failed since `since` (the proxy answered them itself, a 502, a
    /// 504, a 400, or cut them short): `kind` label → phase name → route label → series.
    /// Their phases are kept out of `phases`, which holds the answered exchanges only.
    /// Absent when none failed, and in snapshots of older builds (whose `phases` held
    /// both).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<String, PhaseSeries>,
    /// Client connections the client ended between exchanges since `since`: normal ends,
    /// not errors. Absent in snapshots of older builds.
    #[serde(default)]
    pub client_closes: u64,
    /// Failed upstream connects since `since` by reason (`refused`, `timeout`, `other`):
    /// what `errors.upstream_connect` was. Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connect_failures: BTreeMap<String, u64>,
    /// HTTP taps: the shape of the request heads read since `since`, the probe's own
    /// requests left out. Absent for RESP taps and in snapshots of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_heads: Option<RequestHeads>,
    /// Counters since the process started; a reset does not touch them.
    pub totals: TapTotals,
    /// The upstream's process, when the tap watches one: CPU and scheduling since `since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<crate::upstream::UpstreamSnapshot>,
    /// An HTTP tap of a `[[correlate]]`: the RESP tap between its upstream and Redis, whose
    /// watched process (Redis) splits the `backend` part of the Webdis split into Redis's
    /// CPU, its wait for one and the rest (docs/webdis.md). Absent otherwise and in older
    /// snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
}

/// The request heads of a window: their number, mean size and field count, and both
/// distributions as `[upper_bound, count]` pairs of power-of-two buckets (non-empty ones
/// only; the last bucket also holds everything above it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeads {
    pub count: u64,
    /// Mean head size in bytes, request line through the empty line.
    pub mean_bytes: f64,
    /// Mean number of header fields.
    pub mean_fields: f64,
    pub bytes: Vec<[u64; 2]>,
    pub fields: Vec<[u64; 2]>,
}

impl RequestHeads {
    fn from_shapes(h: &HeadShapes) -> Self {
        let mean = |sum: u64| {
            if h.count == 0 {
                0.0
            } else {
                sum as f64 / h.count as f64
            }
        };
        let pairs = |buckets: &[u64]| {
            buckets
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(i, &n)| [1u64 << i, n])
                .collect()
        };
        Self {
            count: h.count,
            mean_bytes: mean(h.bytes),
            mean_fields: mean(h.fields),
            bytes: pairs(&h.bytes_buckets),
            fields: pairs(&h.fields_buckets),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapTotals {
    /// Exchanges recorded (all routes, methods and statuses).
    pub requests: u64,
    /// `kind` label → count; every kind is present.
    pub errors: BTreeMap<String, u64>,
    /// `side` → connections open now.
    pub connections_open: BTreeMap<String, u64>,
    /// `side` → connections opened.
    pub connections: BTreeMap<String, u64>,
    /// `direction` → bytes relayed.
    pub bytes: BTreeMap<String, u64>,
    /// Messages that answered no request (pub/sub, MONITOR, RESP3 pushes).
    #[serde(default)]
    pub pushed: u64,
    /// Client connections the client ended between exchanges (normal ends).
    #[serde(default)]
    pub client_closes: u64,
    /// For a correlated HTTP tap: requests that found their backend command, and not.
    #[serde(default)]
    pub correlations: Correlations,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correlations {
    pub matched: u64,
    pub unmatched: u64,
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
    fn from_series(s: &HdrSeries) -> Self {
        let count = s.count();
        // The histogram names a value by the top of its bucket, which can lie past the
        // exact extremes; no quantile can, so clamp.
        let (lo, hi) = if count == 0 {
            (0, 0)
        } else {
            (s.min_ns, s.max_ns)
        };
        let q = |quantile: f64| s.hist.value_at_quantile(quantile).clamp(lo, hi) as f64 / 1e9;
        let sum = s.sum_ns as f64 / 1e9;
        Self {
            count,
            sum,
            mean: if count == 0 { 0.0 } else { sum / count as f64 },
            min: if count == 0 {
                0.0
            } else {
                s.min_ns as f64 / 1e9
            },
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: s.max_ns as f64 / 1e9,
            histogram: s
                .hist
                .iter_recorded()
                .map(|v| [v.value_iterated_to(), v.count_at_value()])
                .collect(),
        }
    }

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

impl Snapshot {
    /// Reads a snapshot file's contents, refusing other documents and newer formats.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let s: Snapshot = serde_json::from_str(text).context("not a phasescope snapshot")?;
        ensure!(
            s.format == FORMAT,
            "format is {:?}, not {FORMAT:?}",
            s.format
        );
        ensure!(
            s.format_version <= FORMAT_VERSION,
            "snapshot format {} is newer than this build reads ({FORMAT_VERSION})",
            s.format_version
        );
        Ok(s)
    }
}

pub(crate) struct TapInput<'a> {
    pub tap: &'a TapMetrics,
    pub position: u32,
    /// The counters since the last reset: the window's errors and request heads.
    pub window: Counters,
    pub counts: TapCounts,
    pub series: Vec<(crate::recorder::RouteId, crate::phase::Phase, HdrSeries)>,
    pub failed: Vec<(crate::metrics::tap::FailedKey, HdrSeries)>,
    pub upstream: Option<crate::upstream::UpstreamSnapshot>,
}

pub(crate) fn build(
    taps: Vec<TapInput<'_>>,
    since: SystemTime,
    enabled: bool,
    proxy: Option<crate::upstream::ProxySnapshot>,
) -> Snapshot {
    let now = SystemTime::now();
    let mut out = BTreeMap::new();
    for mut input in taps {
        let upstream = input.upstream.take();
        let routes = input.tap.routes();
        let mut phases: BTreeMap<String, BTreeMap<String, SeriesSnapshot>> = BTreeMap::new();
        for (route, phase, series) in &input.series {
            if series.count() == 0 {
                continue;
            }
            phases.entry(phase.name().to_owned()).or_default().insert(
                routes.name(*route).to_owned(),
                SeriesSnapshot::from_series(series),
            );
        }
        let mut failed: BTreeMap<String, PhaseSeries> = BTreeMap::new();
        for ((route, kind, phase), series) in &input.failed {
            if series.count() == 0 {
                continue;
            }
            failed
                .entry(kind.name().to_owned())
                .or_default()
                .entry(phase.name().to_owned())
                .or_default()
                .insert(
                    routes.name(*route).to_owned(),
                    SeriesSnapshot::from_series(series),
                );
        }
        let c = &input.counts.counters;
        let totals = TapTotals {
            requests: input.counts.requests.values().flatten().flatten().sum(),
            errors: by_label(&counters::ERRORS, c),
            connections_open: by_label(&counters::CONNECTIONS, c),
            connections: by_label(&counters::CONNECTIONS_TOTAL, c),
            bytes: by_label(&counters::BYTES, c),
            pushed: counters::PUSHED.value(c, ""),
            client_closes: counters::CLIENT_CLOSES.value(c, ""),
            correlations: Correlations {
                matched: counters::CORRELATIONS.value(c, "matched"),
                unmatched: counters::CORRELATIONS.value(c, "unmatched"),
            },
        };
        let protocol = input.tap.protocol();
        out.insert(
            input.tap.name().to_owned(),
            TapSnapshot {
                protocol: protocol.as_str().to_owned(),
                position: Some(input.position),
                upstream_address: Some(input.tap.upstream_address().to_owned()),
                errors: by_label(&counters::ERRORS, &input.window),
                failed,
                client_closes: counters::CLIENT_CLOSES.value(&input.window, ""),
                connect_failures: by_label(&counters::CONNECT_FAILURES, &input.window),
                request_heads: protocol
                    .has_request_heads()
                    .then(|| RequestHeads::from_shapes(&input.window.heads)),
                phases,
                totals,
                upstream,
                backend: None,
            },
        );
    }
    Snapshot {
        format: FORMAT.to_owned(),
        format_version: FORMAT_VERSION,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        clock: crate::clock::source().to_owned(),
        taken_at: humantime::format_rfc3339_millis(now).to_string(),
        taken_at_unix: unix_seconds(now),
        since: humantime::format_rfc3339_millis(since).to_string(),
        since_unix: unix_seconds(since),
        metrics_enabled: enabled,
        hdr: HdrLayout::CURRENT,
        phase_order: crate::phase::Phase::ALL
            .iter()
            .map(|p| p.name().to_owned())
            .collect(),
        phase_styles: crate::phase::Phase::ALL
            .iter()
            .map(|&p| (p.name().to_owned(), PhaseStyle::of(p)))
            .collect(),
        taps: out,
        findings: Vec::new(),
        proxy,
    }
}

/// A family's counts by label value, as the snapshot's totals write them: the same
/// values as the exposition's samples.
fn by_label(family: &Family, counters: &Counters) -> BTreeMap<String, u64> {
    (family.samples)(counters)
        .into_iter()
        .map(|(value, n)| (value.to_owned(), n))
        .collect()
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

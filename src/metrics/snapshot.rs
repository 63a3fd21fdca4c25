//! Building `/api/snapshot` from the shards: the registry hands over each tap's counts
//! and HDR copies, and this module writes them as the snapshot's contract
//! ([`crate::snapshot`]) says, with the same values as the exposition's samples.
//!
//! The contract's types lie in `snapshot`, below the metrics, so that readers need not
//! know the registry; the conversions from the shards' own types (`HdrSeries`,
//! `Counters` through `FAMILIES`, `HeadShapes`) stay here, beside those types.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::metrics::counters::{self, Counters, Family};
use crate::metrics::hdr::HdrSeries;
use crate::metrics::heads::HeadShapes;
use crate::metrics::tap::{Apart, TapCounts, TapMetrics};
use crate::snapshot::{
    Correlations, HdrLayout, PhaseSeries, PhaseStyle, ProxySnapshot, RequestHeads, SeriesSnapshot,
    Snapshot, TapSnapshot, TapTotals, UpstreamSnapshot, FORMAT, FORMAT_VERSION,
};

pub(crate) struct TapInput<'a> {
    pub tap: &'a TapMetrics,
    pub position: u32,
    /// The counters since the last reset: the window's errors and request heads.
    pub window: Counters,
    pub counts: TapCounts,
    pub series: Vec<(crate::recorder::RouteId, crate::phase::Phase, HdrSeries)>,
    pub failed: Vec<(crate::metrics::tap::FailedKey, HdrSeries)>,
    pub upstream: Option<UpstreamSnapshot>,
}

pub(crate) fn build(
    taps: Vec<TapInput<'_>>,
    since: SystemTime,
    enabled: bool,
    proxy: Option<ProxySnapshot>,
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
            phases
                .entry(phase.name().to_owned())
                .or_default()
                .insert(routes.name(*route).to_owned(), series_snapshot(series));
        }
        let mut failed: BTreeMap<String, PhaseSeries> = BTreeMap::new();
        let mut server_errors: BTreeMap<String, PhaseSeries> = BTreeMap::new();
        for ((route, apart, phase), series) in &input.failed {
            if series.count() == 0 {
                continue;
            }
            let (map, key) = match apart {
                Apart::Failed(kind) => (&mut failed, kind.name().to_owned()),
                Apart::Server(status) => (&mut server_errors, server_status_label(*status)),
            };
            map.entry(key)
                .or_default()
                .entry(phase.name().to_owned())
                .or_default()
                .insert(routes.name(*route).to_owned(), series_snapshot(series));
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
                server_errors,
                client_closes: counters::CLIENT_CLOSES.value(&input.window, ""),
                connect_failures: by_label(&counters::CONNECT_FAILURES, &input.window),
                request_heads: protocol
                    .has_request_heads()
                    .then(|| request_heads(&input.window.heads)),
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
            .map(|&p| (p.name().to_owned(), phase_style(p)))
            .collect(),
        taps: out,
        findings: Vec::new(),
        proxy,
    }
}

/// The `status` a server's error answers are counted under: the status (`503`), or
/// `5xx` for the statuses past the bound of a route's own
/// ([`MAX_SERVER_STATUSES`](crate::metrics::shard::MAX_SERVER_STATUSES)).
pub(crate) fn server_status_label(status: u16) -> String {
    if status == crate::metrics::shard::OTHER_SERVER_STATUS {
        "5xx".to_owned()
    } else if status == crate::metrics::tap::RESP_ERROR_STATUS {
        "error".to_owned()
    } else {
        status.to_string()
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

/// A shard's series as the snapshot writes it: exact count, sum and extremes, the
/// percentiles and the histogram pairs read off its HDR copy.
fn series_snapshot(s: &HdrSeries) -> SeriesSnapshot {
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
    SeriesSnapshot {
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

/// The window's request heads as the snapshot writes them.
fn request_heads(h: &HeadShapes) -> RequestHeads {
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
    RequestHeads {
        count: h.count,
        mean_bytes: mean(h.bytes),
        mean_fields: mean(h.fields),
        bytes: pairs(&h.bytes_buckets),
        fields: pairs(&h.fields_buckets),
    }
}

/// A phase's entry of the snapshot's `phase_styles`, from the one table of
/// [`Phase::style`](crate::phase::Phase::style).
fn phase_style(p: crate::phase::Phase) -> PhaseStyle {
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

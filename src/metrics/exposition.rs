//! The Prometheus text exposition, built from counts already added up (no lock held).
//!
//! The counts live in per-thread shards rather than in prometheus crate collectors, so the
//! families are assembled here as the crate's plain data model and written by its
//! `TextEncoder`. Names and labels are the contract in DESIGN.md "Metrics contract".

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::TextEncoder;

use crate::metrics::buckets::Buckets;
use crate::metrics::labels::{METHODS, STATUS_CLASSES};
use crate::metrics::tap::{TapCounts, TapMetrics, DIRECTIONS, SIDES};
use crate::recorder::ErrorKind;

pub const PHASE_DURATION: &str = "phasescope_phase_duration_seconds";
pub const REQUESTS: &str = "phasescope_requests_total";
pub const ERRORS: &str = "phasescope_errors_total";
pub const CONNECTIONS: &str = "phasescope_connections";
pub const CONNECTIONS_TOTAL: &str = "phasescope_connections_total";
pub const BYTES: &str = "phasescope_bytes_total";
pub const BUILD_INFO: &str = "phasescope_build_info";
pub const PUSHED: &str = "phasescope_pushed_messages_total";
pub const CORRELATIONS: &str = "phasescope_correlations_total";

/// `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition of `taps` (each with its counts); with `taps` empty, only build_info.
pub(crate) fn encode(taps: &[(&TapMetrics, TapCounts)], buckets: &Buckets) -> String {
    let mut families = Vec::with_capacity(7);
    let mut push = |name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>| {
        if !metrics.is_empty() {
            let mut f = MetricFamily::default();
            f.set_name(name.to_owned());
            f.set_help(help.to_owned());
            f.set_field_type(kind);
            f.set_metric(metrics);
            families.push(f);
        }
    };

    push(
        PHASE_DURATION,
        "Time spent in each phase of an exchange (docs/phases.md).",
        MetricType::HISTOGRAM,
        phase_histograms(taps, buckets),
    );
    push(
        REQUESTS,
        "Exchanges completed, by route, method and status class.",
        MetricType::COUNTER,
        requests(taps),
    );
    push(
        ERRORS,
        "Failed exchanges and connections, by kind.",
        MetricType::COUNTER,
        per_tap(taps, MetricType::COUNTER, |c| {
            ErrorKind::ALL
                .iter()
                .zip(c.errors)
                .map(|(k, n)| (("kind", k.name()), n as f64))
                .collect()
        }),
    );
    push(
        CONNECTIONS,
        "Connections open now, by side.",
        MetricType::GAUGE,
        per_tap(taps, MetricType::GAUGE, |c| {
            // Opens and closes are read from each shard at slightly different moments, so
            // a close can be seen before its open: never show a negative count.
            SIDES
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    (
                        ("side", s.name()),
                        c.opened[i].saturating_sub(c.closed[i]) as f64,
                    )
                })
                .collect()
        }),
    );
    push(
        CONNECTIONS_TOTAL,
        "Connections opened, by side.",
        MetricType::COUNTER,
        per_tap(taps, MetricType::COUNTER, |c| {
            SIDES
                .iter()
                .zip(c.opened)
                .map(|(s, n)| (("side", s.name()), n as f64))
                .collect()
        }),
    );
    push(
        BYTES,
        "Bytes relayed, by direction (request: client to upstream).",
        MetricType::COUNTER,
        per_tap(taps, MetricType::COUNTER, |c| {
            DIRECTIONS
                .iter()
                .zip(c.bytes)
                .map(|(d, n)| (("direction", d.name()), n as f64))
                .collect()
        }),
    );
    push(
        PUSHED,
        "Messages that answered no request: pub/sub messages, MONITOR lines, RESP3 pushes.",
        MetricType::COUNTER,
        taps.iter()
            .map(|(tap, c)| sample(MetricType::COUNTER, &[("tap", tap.name())], c.pushed as f64))
            .collect(),
    );
    push(
        CORRELATIONS,
        "Correlated HTTP requests that found (matched) or did not find (unmatched) their backend command.",
        MetricType::COUNTER,
        per_tap(taps, MetricType::COUNTER, |c| {
            vec![
                (("result", "matched"), c.correlations[0] as f64),
                (("result", "unmatched"), c.correlations[1] as f64),
            ]
        }),
    );
    push(
        BUILD_INFO,
        "Always 1; the labels say which build runs and on which clock (tsc or os).",
        MetricType::GAUGE,
        vec![sample(
            MetricType::GAUGE,
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("clock", crate::clock::source()),
            ],
            1.0,
        )],
    );

    let mut out = String::new();
    if let Err(e) = TextEncoder::new().encode_utf8(&families, &mut out) {
        // Only possible for an empty family, which `push` never adds.
        tracing::error!(error = %e, "encoding the Prometheus exposition failed");
    }
    out
}

fn phase_histograms(taps: &[(&TapMetrics, TapCounts)], buckets: &Buckets) -> Vec<Metric> {
    let mut out = Vec::new();
    for (tap, counts) in taps {
        let routes = tap.routes();
        let mut series: Vec<_> = counts.series.iter().collect();
        series.sort_by(|a, b| (a.0 .1, routes.name(a.0 .0)).cmp(&(b.0 .1, routes.name(b.0 .0))));
        for ((route, phase), (counts, sum_ns)) in series {
            let mut cumulative = 0u64;
            let bucket_list = buckets
                .bounds_seconds()
                .iter()
                .zip(counts.iter())
                .map(|(&le, &n)| {
                    cumulative += n;
                    let mut b = Bucket::default();
                    b.set_upper_bound(le);
                    b.set_cumulative_count(cumulative);
                    b
                })
                .collect();
            let mut h = Histogram::default();
            h.set_bucket(bucket_list);
            h.set_sample_count(counts.iter().sum());
            h.set_sample_sum(*sum_ns as f64 / 1e9);
            let mut m = Metric::from_label(labels(&[
                ("tap", tap.name()),
                ("phase", phase.name()),
                ("route", routes.name(*route)),
            ]));
            m.set_histogram(h);
            out.push(m);
        }
    }
    out
}

fn requests(taps: &[(&TapMetrics, TapCounts)]) -> Vec<Metric> {
    let mut out = Vec::new();
    for (tap, counts) in taps {
        let routes = tap.routes();
        let mut by_route: Vec<_> = counts.requests.iter().collect();
        by_route.sort_by_key(|(id, _)| routes.name(**id));
        for (route, table) in by_route {
            for (method, row) in METHODS.iter().zip(table) {
                for (class, &n) in STATUS_CLASSES.iter().zip(row) {
                    if n > 0 {
                        out.push(sample(
                            MetricType::COUNTER,
                            &[
                                ("tap", tap.name()),
                                ("route", routes.name(*route)),
                                ("method", method),
                                ("status_class", class),
                            ],
                            n as f64,
                        ));
                    }
                }
            }
        }
    }
    out
}

type Sample<'a> = ((&'static str, &'a str), f64);

/// One metric per (tap, value of one more label), all pre-registered so that a series
/// exists at 0 before its first event.
fn per_tap(
    taps: &[(&TapMetrics, TapCounts)],
    kind: MetricType,
    values: impl Fn(&TapCounts) -> Vec<Sample<'static>>,
) -> Vec<Metric> {
    let mut out = Vec::new();
    for (tap, counts) in taps {
        for ((name, value), n) in values(counts) {
            out.push(sample(kind, &[("tap", tap.name()), (name, value)], n));
        }
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name((*k).to_owned());
            l.set_value((*v).to_owned());
            l
        })
        .collect()
}

pub(crate) fn sample(kind: MetricType, pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut m = Metric::from_label(labels(pairs));
    if kind == MetricType::COUNTER {
        let mut c = Counter::default();
        c.set_value(value);
        m.set_counter(c);
    } else {
        let mut g = Gauge::default();
        g.set_value(value);
        m.set_gauge(g);
    }
    m
}

//! The Prometheus expositions, built from counts already added up (no lock held).
//!
//! The counts live in per-thread shards rather than in prometheus crate collectors, so the
//! families are assembled here as the crate's plain data model and written by its
//! `TextEncoder`. A scraper that asks for protobuf (content negotiation on `Accept`, see
//! [`negotiate`]) gets the same families as `io.prometheus.client` messages instead, each
//! phase histogram with its native buckets as well as its classic ones. Names and labels
//! are the contract in docs/metrics.md.

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::TextEncoder;

use crate::metrics::buckets::Buckets;
use crate::metrics::counters::{self, Family, FAMILIES};
use crate::metrics::exemplar::Exemplar;
use crate::metrics::labels::{METHODS, STATUS_CLASSES};
use crate::metrics::native::{self, NativeBuckets};
use crate::metrics::openmetrics;
use crate::metrics::proto;
use crate::metrics::tap::{Apart, SeriesCounts, TapCounts, TapMetrics};
use crate::phase::Phase;
use crate::recorder::RouteId;

pub const PHASE_DURATION: &str = "phasescope_phase_duration_seconds";
pub const REQUESTS: &str = "phasescope_requests_total";
pub const SERVER_ERRORS: &str = "phasescope_server_errors_total";
pub const ERRORS: &str = counters::ERRORS.name;
pub const CONNECTIONS: &str = counters::CONNECTIONS.name;
pub const CONNECTIONS_TOTAL: &str = counters::CONNECTIONS_TOTAL.name;
pub const BYTES: &str = counters::BYTES.name;
pub const BUILD_INFO: &str = "phasescope_build_info";
pub const PUSHED: &str = counters::PUSHED.name;
pub const CLIENT_CLOSES: &str = counters::CLIENT_CLOSES.name;
pub const CONNECT_FAILURES: &str = counters::CONNECT_FAILURES.name;
pub const CORRELATIONS: &str = counters::CORRELATIONS.name;

/// `Content-Type` of the text exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of the protobuf exposition: length-delimited `MetricFamily` messages.
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The three expositions `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Text 0.0.4, classic buckets: every scraper reads it.
    Text,
    /// OpenMetrics 1.0 text: the same families, with exemplars on the slow buckets of
    /// `total`. What Prometheus asks for first when its native histograms are off.
    OpenMetrics,
    /// Delimited protobuf, classic and native buckets: what Prometheus asks for when its
    /// native histograms are on.
    Protobuf,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => CONTENT_TYPE,
            Format::OpenMetrics => openmetrics::CONTENT_TYPE,
            Format::Protobuf => PROTOBUF_CONTENT_TYPE,
        }
    }
}

/// Chooses the exposition for an `Accept` header: the one listed at the highest quality
/// (`q`), among protobuf (`application/vnd.google.protobuf` with
/// `proto=io.prometheus.client.MetricFamily` and `encoding=delimited`), OpenMetrics
/// (`application/openmetrics-text`, version 1.0.0, 0.0.1 or none) and text (`text/*`,
/// `*/*`); a tie goes to the one named more exactly (protobuf, then OpenMetrics). Text
/// for no header, or one that does not parse.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let (mut protobuf_q, mut openmetrics_q, mut text_q) = (0.0f32, 0.0f32, 0.0f32);
    for range in accept.split(',') {
        let Ok(m) = range.trim().parse::<mime::Mime>() else {
            continue;
        };
        let q = m
            .get_param("q")
            .and_then(|q| q.as_str().parse::<f32>().ok())
            .unwrap_or(1.0);
        let is = |name: &str, value: &str| {
            m.get_param(name)
                .is_some_and(|v| v.as_str().eq_ignore_ascii_case(value))
        };
        if m.type_() == mime::APPLICATION
            && m.subtype() == "vnd.google.protobuf"
            && is("proto", "io.prometheus.client.MetricFamily")
            && is("encoding", "delimited")
        {
            protobuf_q = protobuf_q.max(q);
        } else if m.type_() == mime::APPLICATION && m.subtype() == "openmetrics-text" {
            if m.get_param("version").is_none() || is("version", "1.0.0") || is("version", "0.0.1")
            {
                openmetrics_q = openmetrics_q.max(q);
            }
        } else if m.type_() == mime::TEXT || m.type_() == mime::STAR {
            text_q = text_q.max(q);
        }
    }
    if protobuf_q > 0.0 && protobuf_q >= openmetrics_q && protobuf_q >= text_q {
        Format::Protobuf
    } else if openmetrics_q > 0.0 && openmetrics_q >= text_q {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// The text exposition of `taps` (each with its counts); with `taps` empty, only build_info.
pub(crate) fn encode(taps: &[(&TapMetrics, TapCounts)], buckets: &Buckets) -> String {
    let mut out = String::new();
    if let Err(e) = TextEncoder::new().encode_utf8(&families(taps, buckets), &mut out) {
        // Only possible for an empty family, which `families` never adds.
        tracing::error!(error = %e, "encoding the Prometheus exposition failed");
    }
    out
}

/// The OpenMetrics exposition: the families of [`encode`] followed by `extra` (as for
/// [`encode_protobuf`]), the slow buckets of `total` with their exemplars.
pub(crate) fn encode_openmetrics(
    taps: &[(&TapMetrics, TapCounts)],
    buckets: &Buckets,
    extra: Vec<MetricFamily>,
) -> String {
    // In the order phase_histograms() emits the series.
    let exemplars: Vec<&[Exemplar]> = phase_series(taps)
        .into_iter()
        .map(|(_, _, _, s)| s.exemplars.as_slice())
        .collect();
    let families: Vec<MetricFamily> = families(taps, buckets).into_iter().chain(extra).collect();
    openmetrics::encode(&families, |name, i| {
        if name == PHASE_DURATION {
            exemplars.get(i).copied().unwrap_or_default()
        } else {
            &[]
        }
    })
}

/// The protobuf exposition: the families of [`encode`], each phase histogram with its
/// native buckets too (`taps` collected with their HDR copies), as length-delimited
/// `io.prometheus.client.MetricFamily` messages, followed by `extra` (counters and gauges
/// read at scrape time, such as the upstream process's).
pub(crate) fn encode_protobuf(
    taps: &[(&TapMetrics, TapCounts)],
    buckets: &Buckets,
    extra: Vec<MetricFamily>,
) -> Vec<u8> {
    use prost::Message;
    // In the order phase_histograms() emits the series.
    let mut natives = phase_series(taps)
        .into_iter()
        .map(|(_, _, _, s)| s.hdr.as_ref().map(native::from_hdr).unwrap_or_default());
    let mut out = Vec::new();
    for f in families(taps, buckets).into_iter().chain(extra) {
        let family = proto::MetricFamily {
            name: Some(f.name().to_owned()),
            help: Some(f.help().to_owned()),
            r#type: Some(match f.get_field_type() {
                MetricType::COUNTER => proto::MetricType::Counter,
                MetricType::GAUGE => proto::MetricType::Gauge,
                MetricType::HISTOGRAM => proto::MetricType::Histogram,
                MetricType::SUMMARY => proto::MetricType::Summary,
                MetricType::UNTYPED => proto::MetricType::Untyped,
            } as i32),
            metric: f
                .get_metric()
                .iter()
                .map(|m| {
                    let mut pm = proto::Metric {
                        label: m
                            .get_label()
                            .iter()
                            .map(|l| proto::LabelPair {
                                name: Some(l.name().to_owned()),
                                value: Some(l.value().to_owned()),
                            })
                            .collect(),
                        ..Default::default()
                    };
                    match f.get_field_type() {
                        MetricType::COUNTER => {
                            pm.counter = Some(proto::Counter {
                                value: Some(m.get_counter().get_value()),
                            });
                        }
                        MetricType::HISTOGRAM => {
                            let native = natives.next().unwrap_or_default();
                            pm.histogram = Some(histogram_message(m.get_histogram(), native));
                        }
                        _ => {
                            pm.gauge = Some(proto::Gauge {
                                value: Some(m.get_gauge().get_value()),
                            });
                        }
                    }
                    pm
                })
                .collect(),
        };
        if let Err(e) = family.encode_length_delimited(&mut out) {
            // A Vec grows as needed, so encoding cannot run out of room.
            tracing::error!(error = %e, "encoding the protobuf exposition failed");
        }
    }
    out
}

fn histogram_message(h: &Histogram, native: NativeBuckets) -> proto::Histogram {
    proto::Histogram {
        sample_count: Some(h.get_sample_count()),
        sample_sum: Some(h.get_sample_sum()),
        bucket: h
            .get_bucket()
            .iter()
            .map(|b| proto::Bucket {
                cumulative_count: Some(b.cumulative_count()),
                upper_bound: Some(b.upper_bound()),
            })
            .collect(),
        schema: Some(native::SCHEMA),
        zero_threshold: Some(native::ZERO_THRESHOLD),
        zero_count: Some(native.zero_count),
        positive_span: native
            .spans
            .iter()
            .map(|&(offset, length)| proto::BucketSpan {
                offset: Some(offset),
                length: Some(length),
            })
            .collect(),
        positive_delta: native.deltas,
    }
}

/// Every family of the exposition, in order; a family with no metric is left out.
fn families(taps: &[(&TapMetrics, TapCounts)], buckets: &Buckets) -> Vec<MetricFamily> {
    let mut families = Vec::with_capacity(7);
    let mut push = |name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>| {
        families.extend(family(name, help, kind, metrics));
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
        SERVER_ERRORS,
        "The server's own error answers (an HTTP 5xx it sent, not one the proxy made), by route and status.",
        MetricType::COUNTER,
        server_errors(taps),
    );
    for f in &FAMILIES {
        push(f.name, f.help, f.kind, counter_samples(taps, f));
    }
    push(
        BUILD_INFO,
        "Always 1; the labels say which build runs and on which clock (tsc or os).",
        MetricType::GAUGE,
        build_info(),
    );
    families
}

/// The one sample of `phasescope_build_info`: which build runs, on which clock.
fn build_info() -> Vec<Metric> {
    vec![sample(
        MetricType::GAUGE,
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("clock", crate::clock::source()),
        ],
        1.0,
    )]
}

/// Every phase series of every tap, in exposition order: by tap, then phase, then route.
fn phase_series<'a>(
    taps: &'a [(&'a TapMetrics, TapCounts)],
) -> Vec<(&'a TapMetrics, RouteId, Phase, &'a SeriesCounts)> {
    let mut out = Vec::new();
    for (tap, counts) in taps {
        let routes = tap.routes();
        let mut series: Vec<_> = counts.series.iter().collect();
        series.sort_by(|a, b| (a.0 .1, routes.name(a.0 .0)).cmp(&(b.0 .1, routes.name(b.0 .0))));
        out.extend(series.into_iter().map(|(&(r, p), s)| (*tap, r, p, s)));
    }
    out
}

fn phase_histograms(taps: &[(&TapMetrics, TapCounts)], buckets: &Buckets) -> Vec<Metric> {
    let mut out = Vec::new();
    for (tap, route, phase, series) in phase_series(taps) {
        let routes = tap.routes();
        {
            let counts = &series.buckets;
            let sum_ns = &series.sum_ns;
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
                ("route", routes.name(route)),
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

/// The server's error answers per (tap, route, status): the count of each status's
/// `total` series, since start as every counter.
fn server_errors(taps: &[(&TapMetrics, TapCounts)]) -> Vec<Metric> {
    let mut out = Vec::new();
    for (tap, counts) in taps {
        let routes = tap.routes();
        let mut rows: Vec<(&str, String, u64)> = counts
            .failed
            .iter()
            .filter_map(|(&(route, apart, phase), s)| match apart {
                Apart::Server(status) if phase == Phase::Total => Some((
                    routes.name(route),
                    crate::metrics::snapshot::server_status_label(status),
                    s.buckets.iter().sum(),
                )),
                _ => None,
            })
            .collect();
        rows.sort();
        for (route, status, n) in rows {
            out.push(sample(
                MetricType::COUNTER,
                &[
                    ("tap", tap.name()),
                    ("route", route),
                    ("status", status.as_str()),
                ],
                n as f64,
            ));
        }
    }
    out
}

/// One family's metrics: one per (tap, value of its label), all written whatever their
/// count, so that a series exists at 0 before its first event.
fn counter_samples(taps: &[(&TapMetrics, TapCounts)], f: &Family) -> Vec<Metric> {
    let mut out = Vec::new();
    for (tap, counts) in taps {
        for (value, n) in (f.samples)(&counts.counters) {
            let metric = match f.label {
                Some(label) => sample(f.kind, &[("tap", tap.name()), (label, value)], n as f64),
                None => sample(f.kind, &[("tap", tap.name())], n as f64),
            };
            out.push(metric);
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

/// One family, or none when it has no metric (the text encoder refuses empty families).
pub(crate) fn family(
    name: &str,
    help: &str,
    kind: MetricType,
    metrics: Vec<Metric>,
) -> Option<MetricFamily> {
    if metrics.is_empty() {
        return None;
    }
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(kind);
    f.set_metric(metrics);
    Some(f)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What Prometheus 2.42 sends: without native histograms, and with
    /// `--enable-feature=native-histograms`.
    const PROMETHEUS_CLASSIC: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS_NATIVE: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    #[test]
    fn protobuf_only_for_a_scraper_that_prefers_it() {
        assert_eq!(negotiate(Some(PROMETHEUS_NATIVE)), Format::Protobuf);
        assert_eq!(negotiate(Some(PROMETHEUS_CLASSIC)), Format::OpenMetrics);
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("")), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(negotiate(Some("garbage;;;,,")), Format::Text);
        assert_eq!(
            negotiate(Some(
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            )),
            Format::Protobuf
        );
        // Another message, another encoding, or refused outright: not what is served.
        for accept in [
            "application/vnd.google.protobuf;proto=other.Message;encoding=delimited",
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text",
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0",
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.2,text/plain;q=0.9",
        ] {
            assert_eq!(negotiate(Some(accept)), Format::Text, "{accept}");
        }
        assert_eq!(Format::Text.content_type(), CONTENT_TYPE);
        assert!(Format::OpenMetrics
            .content_type()
            .parse::<mime::Mime>()
            .is_ok());
    }

    #[test]
    fn openmetrics_only_for_a_scraper_that_ranks_it_first_among_what_is_served() {
        for accept in [
            "application/openmetrics-text",
            "application/openmetrics-text;version=0.0.1",
            "application/openmetrics-text; version=1.0.0; charset=utf-8,text/plain;q=0.9",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4",
        ] {
            assert_eq!(negotiate(Some(accept)), Format::OpenMetrics, "{accept}");
        }
        for accept in [
            "text/plain;version=0.0.4",
            "application/openmetrics-text;version=2.0.0,text/plain;q=0.5",
            "application/openmetrics-text;q=0.4,text/plain;q=0.5",
            "application/openmetrics-text;q=0",
            "*/*",
        ] {
            assert_eq!(negotiate(Some(accept)), Format::Text, "{accept}");
        }
        assert!(Format::Protobuf
            .content_type()
            .parse::<mime::Mime>()
            .is_ok());
    }
}

//! The OpenMetrics 1.0 text exposition, with exemplars on the slow buckets.
//!
//! The same families as the text 0.0.4 exposition (the prometheus crate's data model, as
//! `exposition::families` builds them), written as OpenMetrics asks: a counter's family
//! is named without its `_total` suffix, which its samples keep; the `le` bounds are the
//! ones the 0.0.4 text writes, so a Prometheus that switches between the two keeps the
//! same series; the exposition ends with `# EOF`. A bucket with an exemplar carries it
//! after its value: `… 17 # {exchange_id="0001000000000a2f"} 0.1523 1738324800.123`.

use std::collections::HashSet;
use std::fmt::Write as _;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use crate::metrics::exemplar::Exemplar;

/// `Content-Type` of this exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exemplars of one histogram metric: bucket index → exemplar (the last index is
/// `+Inf`); empty for a metric without.
pub type Exemplars<'a> = &'a [Exemplar];

/// Writes `families`; `exemplars(family, metric)` gives the exemplars of a histogram
/// metric by its family's name and its index in the family.
pub fn encode<'a>(
    families: &[MetricFamily],
    exemplars: impl Fn(&str, usize) -> Exemplars<'a>,
) -> String {
    let names: HashSet<&str> = families.iter().map(|f| f.name()).collect();
    let mut out = String::with_capacity(64 * 1024);
    for f in families {
        let name = f.name();
        let (family, kind) = match f.get_field_type() {
            // A counter's family drops `_total`, unless another family already has that
            // name (`phasescope_connections` is a gauge beside `_connections_total`):
            // then it stays whole, typed `unknown`, so its series keep their name.
            MetricType::COUNTER => match name.strip_suffix("_total") {
                Some(base) if !names.contains(base) => (base, "counter"),
                _ => (name, "unknown"),
            },
            MetricType::GAUGE => (name, "gauge"),
            MetricType::HISTOGRAM => (name, "histogram"),
            MetricType::SUMMARY => (name, "summary"),
            MetricType::UNTYPED => (name, "unknown"),
        };
        if !f.help().is_empty() {
            let _ = writeln!(out, "# HELP {family} {}", escape(f.help()));
        }
        let _ = writeln!(out, "# TYPE {family} {kind}");
        for (i, m) in f.get_metric().iter().enumerate() {
            match f.get_field_type() {
                MetricType::COUNTER => sample(
                    &mut out,
                    name,
                    m.get_label(),
                    None,
                    m.get_counter().get_value(),
                ),
                MetricType::HISTOGRAM => histogram(&mut out, name, m, exemplars(name, i)),
                MetricType::SUMMARY => {}
                _ => sample(
                    &mut out,
                    name,
                    m.get_label(),
                    None,
                    m.get_gauge().get_value(),
                ),
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

fn histogram(out: &mut String, name: &str, m: &Metric, exemplars: Exemplars<'_>) {
    let h = m.get_histogram();
    let bucket = format!("{name}_bucket");
    let mut inf_seen = false;
    let mut last = 0;
    for (i, b) in h.get_bucket().iter().enumerate() {
        let le = b.upper_bound();
        inf_seen |= le.is_infinite() && le.is_sign_positive();
        // The bound as the 0.0.4 text writes it (Rust's shortest form), so both
        // expositions give the same `le` series.
        let le = if inf_seen {
            "+Inf".to_owned()
        } else {
            le.to_string()
        };
        sample(
            out,
            &bucket,
            m.get_label(),
            Some(&le),
            b.cumulative_count() as f64,
        );
        exemplar(out, exemplars.get(i));
        last = i + 1;
    }
    if !inf_seen {
        sample(
            out,
            &bucket,
            m.get_label(),
            Some("+Inf"),
            h.get_sample_count() as f64,
        );
        exemplar(out, exemplars.get(last));
    }
    sample(
        out,
        &format!("{name}_sum"),
        m.get_label(),
        None,
        h.get_sample_sum(),
    );
    sample(
        out,
        &format!("{name}_count"),
        m.get_label(),
        None,
        h.get_sample_count() as f64,
    );
}

/// A sample line, without its end when an exemplar may follow: [`exemplar`] ends it.
fn sample(out: &mut String, name: &str, labels: &[LabelPair], le: Option<&str>, value: f64) {
    out.push_str(name);
    if !labels.is_empty() || le.is_some() {
        let mut sep = '{';
        for l in labels {
            let _ = write!(out, "{sep}{}=\"{}\"", l.name(), escape(l.value()));
            sep = ',';
        }
        if let Some(le) = le {
            let _ = write!(out, "{sep}le=\"{le}\"");
        }
        out.push('}');
    }
    let _ = write!(out, " {}", number(value));
    if le.is_none() {
        out.push('\n');
    }
}

/// Ends a bucket line, with its exemplar if it has one.
fn exemplar(out: &mut String, exemplar: Option<&Exemplar>) {
    if let Some(e) = exemplar.filter(|e| !e.is_empty()) {
        let _ = write!(
            out,
            " # {{exchange_id=\"{}\"}} {} {}.{:03}",
            e.id,
            number(e.seconds()),
            e.unix_ms / 1_000,
            e.unix_ms % 1_000
        );
    }
    out.push('\n');
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.is_nan() {
        "NaN".to_owned()
    } else {
        v.to_string()
    }
}

/// OpenMetrics escapes `\`, the line feed and `"` in label values and help texts alike.
fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '\n', '"']) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::exposition::{family, sample as metric};
    use crate::recorder::ExchangeId;
    use prometheus::proto::{Bucket, Histogram};

    fn histogram_family() -> MetricFamily {
        let mut h = Histogram::default();
        let buckets = [(0.001, 2u64), (0.1, 5)]
            .iter()
            .map(|&(le, n)| {
                let mut b = Bucket::default();
                b.set_upper_bound(le);
                b.set_cumulative_count(n);
                b
            })
            .collect();
        h.set_bucket(buckets);
        h.set_sample_count(6);
        h.set_sample_sum(0.5);
        let mut pair = LabelPair::default();
        pair.set_name("route".into());
        pair.set_value("a\"b\\c".into());
        let mut m = Metric::from_label(vec![pair]);
        m.set_histogram(h);
        family("d_seconds", "Durations.", MetricType::HISTOGRAM, vec![m]).unwrap()
    }

    #[test]
    fn counters_drop_total_from_the_family_unless_it_collides_and_eof_ends_it() {
        let families = vec![
            family(
                "c_total",
                "Help \"quoted\"\nnext.",
                MetricType::COUNTER,
                vec![metric(MetricType::COUNTER, &[("tap", "t")], 3.0)],
            )
            .unwrap(),
            family(
                "g",
                "A gauge.",
                MetricType::GAUGE,
                vec![metric(MetricType::GAUGE, &[], 1.5)],
            )
            .unwrap(),
            family(
                "g_total",
                "Beside g.",
                MetricType::COUNTER,
                vec![metric(MetricType::COUNTER, &[], 2.0)],
            )
            .unwrap(),
        ];
        let text = encode(&families, |_, _| &[]);
        assert_eq!(
            text,
            "# HELP c Help \\\"quoted\\\"\\nnext.\n# TYPE c counter\nc_total{tap=\"t\"} 3\n\
             # HELP g A gauge.\n# TYPE g gauge\ng 1.5\n\
             # HELP g_total Beside g.\n# TYPE g_total unknown\ng_total 2\n# EOF\n"
        );
    }

    #[test]
    fn a_bucket_with_an_exemplar_carries_it_and_the_others_do_not() {
        let exemplars = [
            Exemplar::default(),
            Exemplar {
                id: ExchangeId(0x2a),
                ns: 52_000_000,
                unix_ms: 1_738_324_800_123,
            },
            Exemplar {
                id: ExchangeId(0x2b),
                ns: 3_000_000_000,
                unix_ms: 1_738_324_800_004,
            },
        ];
        let text = encode(&[histogram_family()], |name, i| {
            assert_eq!((name, i), ("d_seconds", 0));
            &exemplars
        });
        assert_eq!(
            text,
            "# HELP d_seconds Durations.\n# TYPE d_seconds histogram\n\
             d_seconds_bucket{route=\"a\\\"b\\\\c\",le=\"0.001\"} 2\n\
             d_seconds_bucket{route=\"a\\\"b\\\\c\",le=\"0.1\"} 5 # {exchange_id=\"000000000000002a\"} 0.052 1738324800.123\n\
             d_seconds_bucket{route=\"a\\\"b\\\\c\",le=\"+Inf\"} 6 # {exchange_id=\"000000000000002b\"} 3 1738324800.004\n\
             d_seconds_sum{route=\"a\\\"b\\\\c\"} 0.5\n\
             d_seconds_count{route=\"a\\\"b\\\\c\"} 6\n# EOF\n"
        );
    }
}

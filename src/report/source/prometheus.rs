//! Reading the phase histograms back from a Prometheus server, so that a fleet of proxies
//! scraped by one Prometheus reports as one: the `instance` label is summed away.
//!
//! Three instant queries over the HTTP API (`/api/v1/query`): the bucket, sum and count
//! increases over the range. Percentiles are then interpolated within buckets, which is
//! as precise as the bucket layout allows and no more; the report says so.
//!
//! A Prometheus with native histograms on keeps no classic series of a histogram that has
//! native buckets: when the classic queries find nothing, the native series is read
//! instead ([`super::prometheus_native`]). Which of the two it was goes into the notes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde::Deserialize;

use super::dataset::{bucket_max, Dataset, Distribution, Precision, Series, TapData};
use super::http::{self, Url};
use super::prometheus_answer::results;

const METRIC: &str = "phasescope_phase_duration_seconds";

/// The PromQL `range` for `range`, in whole seconds (`15m` → `900s`).
pub fn promql_range(range: Duration) -> anyhow::Result<String> {
    ensure!(range.as_secs() >= 1, "--range must be at least one second");
    Ok(format!("{}s", range.as_secs()))
}

/// What the counter `series` counted over `range`, as PromQL.
///
/// `increase()` starts from a series' first sample in the range, so a series born inside
/// it (a route's first request, a tap's first 503) loses all it counted before its first
/// scrape: in a 12 s outage run that was a third of the successes and a sixth of the 503s,
/// and the share of errors read 63 % where the proxy counted 55 %. Every phasescope series
/// starts from zero when the proxy creates it, so the first sample of a series that has
/// no sample at the range's start (`unless … offset`) is what it counted before: for a
/// counter that only grows, `min_over_time`. Series present at the start are
/// `increase()` alone (the `or`), which also handles a proxy's restart.
pub fn counted(series: &str, range: &str) -> String {
    format!(
        "(increase({series}[{range}]) + (min_over_time({series}[{range}]) unless {series} offset {range})) \
         or increase({series}[{range}])"
    )
}

/// The three queries, in the order buckets, sums, counts.
pub fn queries(range: &str) -> [String; 3] {
    [
        format!(
            "sum by (tap, phase, route, le) ({})",
            counted(&format!("{METRIC}_bucket"), range)
        ),
        format!(
            "sum by (tap, phase, route) ({})",
            counted(&format!("{METRIC}_sum"), range)
        ),
        format!(
            "sum by (tap, phase, route) ({})",
            counted(&format!("{METRIC}_count"), range)
        ),
    ]
}

/// Queries `base` (the Prometheus server, e.g. `http://127.0.0.1:9090`) and builds the
/// dataset.
pub fn load(base: &str, range: Duration) -> anyhow::Result<Dataset> {
    Ok(load_with_findings(base, range)?.0)
}

/// [`load`], and the findings the proxies' `phasescope_finding` gauge held in the range.
pub fn load_with_findings(
    base: &str,
    range: Duration,
) -> anyhow::Result<(Dataset, Vec<crate::snapshot::Finding>)> {
    let base = Url::parse(base)?;
    let prefix = base.path_and_query.trim_end_matches('/').to_owned();
    let range_text = promql_range(range)?;
    // One evaluation instant for the three queries, so that a scrape landing between
    // them cannot make the buckets disagree with the counts.
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let get = |q: &str| {
        let url = base.with_path(&format!(
            "{prefix}/api/v1/query?query={}&time={at:.3}",
            encode(q)
        ));
        http::get(&url).with_context(|| format!("Prometheus query {q}"))
    };
    let [buckets, sums, counts] = queries(&range_text).map(|q| {
        get(&q)
            .and_then(|body| parse_vector(&body))
            .with_context(|| format!("Prometheus query {q}"))
    });
    let mut ds = build(buckets?, sums?, counts?)?;
    if ds.taps.is_empty() {
        let q = super::prometheus_native::query(METRIC, &range_text);
        ds.taps = get(&q)
            .and_then(|body| super::prometheus_native::parse(&body))
            .with_context(|| format!("Prometheus query {q}"))?;
        ds.notes = vec![NATIVE_NOTE.to_owned()];
    }
    // The failures, the proxy's and the server's, beside the answered exchanges.
    let [errors, connects, server] = super::prometheus_failures::queries(&range_text).map(|q| {
        get(&q)
            .and_then(|body| parse_vector(&body))
            .with_context(|| format!("Prometheus query {q}"))
    });
    super::prometheus_failures::add(&mut ds.taps, &errors?, &connects?, &server?);
    if ds.taps.is_empty() {
        explain_empty(&base, &prefix, range, at)?;
    }
    // phasescope itself, each upstream's process and the findings, from their series.
    let answers = super::prometheus_process::queries(&range_text).map(|q| {
        get(&q)
            .and_then(|body| parse_vector(&body))
            .with_context(|| format!("Prometheus query {q}"))
    });
    let [a, b, c, d, e, f, g, h, i, j, k, l] = answers;
    let answers = [a?, b?, c?, d?, e?, f?, g?, h?, i?, j?, k?, l?];
    let findings = super::prometheus_process::add(&mut ds, &answers, range.as_secs_f64());
    let traffic = super::prometheus_traffic::queries(&range_text).map(|q| {
        get(&q)
            .and_then(|body| parse_vector(&body))
            .with_context(|| format!("Prometheus query {q}"))
    });
    let [a, b, c, d, e, f, g, h] = traffic;
    super::prometheus_traffic::add(&mut ds, &[a?, b?, c?, d?, e?, f?, g?, h?]);
    let with_traffic = ds.proxy.as_ref().is_some_and(|p| p.traffic.is_some());
    if ds.proxy.is_some() || ds.taps.values().any(|t| t.upstream.is_some()) {
        ds.notes.push(
            if with_traffic {
                PROCESS_NOTE_TRAFFIC
            } else {
                PROCESS_NOTE
            }
            .to_owned(),
        );
    }
    ds.sources = vec![format!(
        "Prometheus {base}, last {}",
        humantime::format_duration(range)
    )];
    Ok((ds, findings))
}

/// The note of a report whose processes came from Prometheus's counters, of proxies
/// too old to export the seconds that held traffic.
const PROCESS_NOTE: &str = "phasescope itself and inside the upstream from Prometheus's \
     counters: over the whole range, every instance summed (idle seconds included: \
     these proxies export no seconds with traffic); the findings are those the proxies' \
     phasescope_finding gauge held in the range, their evidence on the live page";

/// The note of a report whose processes came from Prometheus's counters, traffic's too.
const PROCESS_NOTE_TRAFFIC: &str = "phasescope itself and inside the upstream from \
     Prometheus's counters, every instance summed: per request and cores over the seconds \
     that held traffic (the *_traffic_* counters); the findings are those the proxies' \
     phasescope_finding gauge held in the range, their evidence on the live page";

/// The note of a report read from native histograms.
const NATIVE_NOTE: &str = "from Prometheus native histograms: percentiles are interpolated \
     within a bucket (the proxy's schema 4: a bucket spans a factor of 1.044), max is the \
     top of the highest non-empty bucket, and counts are increase() estimates, rounded";

/// How far back [`explain_empty`] looks for the proxy's samples.
const LOOKBACK: Duration = Duration::from_secs(15 * 60);

/// Nothing in the range: say why when Prometheus can tell. `increase()` needs two samples
/// of a series inside the range, so a range shorter than two scrapes is empty even though
/// the proxy is scraped and busy; an error then says what range would work.
fn explain_empty(base: &Url, prefix: &str, range: Duration, at: f64) -> anyhow::Result<()> {
    let lookback = range.max(LOOKBACK);
    // The classic `_count` series or the native one, whichever the server keeps.
    let q = format!(
        "{{__name__=~\"{METRIC}(_count)?\",phase=\"total\"}}[{}]",
        promql_range(lookback)?
    );
    let get = |q: &str| {
        let url = base.with_path(&format!(
            "{prefix}/api/v1/query?query={}&time={at:.3}",
            encode(q)
        ));
        http::get(&url).with_context(|| format!("Prometheus query {q}"))
    };
    let times = get(&q)
        .and_then(|body| parse_matrix_times(&body))
        .with_context(|| format!("Prometheus query {q}"))?;
    if times.is_empty() {
        // Every proxy exposes build_info from its start: if Prometheus has it, it scrapes
        // proxies that have not served a request yet.
        let info = format!("phasescope_build_info[{}]", promql_range(lookback)?);
        let proxies = get(&info)
            .and_then(|body| parse_matrix_times(&body))
            .with_context(|| format!("Prometheus query {info}"))?;
        ensure!(
            proxies.is_empty(),
            "Prometheus at {base} scrapes {} phasescope proxies, but none has recorded a \
             request in the last {}: send traffic through a tap",
            proxies.len(),
            humantime::format_duration(lookback)
        );
        bail!(
            "Prometheus at {base} has no phasescope series in the last {}: is it scraping \
             the proxy's admin address (/metrics)?",
            humantime::format_duration(lookback)
        );
    }
    let Some(interval) = scrape_interval(&times) else {
        bail!(
            "Prometheus at {base} has scraped the proxy only once in the last {}: \
             increase() needs two scrapes inside --range; wait for the next scrape",
            humantime::format_duration(lookback)
        );
    };
    if range.as_secs_f64() < 2.0 * interval {
        // Prometheus's own advice for rate() and increase(): four scrape intervals.
        let works = Duration::from_secs(((4.0 * interval).round() as u64).max(2));
        bail!(
            "--range {} is shorter than two scrapes (Prometheus scrapes the proxy every {}): \
             increase() needs two samples inside the range; try --range {}",
            humantime::format_duration(range),
            humantime::format_duration(Duration::from_secs_f64(interval.round())),
            humantime::format_duration(works)
        );
    }
    Ok(())
}

/// The sample timestamps of each series of a range-vector answer.
fn parse_matrix_times(body: &[u8]) -> anyhow::Result<Vec<Vec<f64>>> {
    #[derive(Deserialize)]
    struct MatrixSeries {
        #[serde(default)]
        values: Vec<(f64, String)>,
        /// A native histogram's samples: `[time, {count, sum, buckets}]`.
        #[serde(default)]
        histograms: Vec<(f64, serde::de::IgnoredAny)>,
    }
    Ok(results::<MatrixSeries>(body, None)?
        .into_iter()
        .map(|s| {
            let mut times: Vec<f64> = s.values.into_iter().map(|(t, _)| t).collect();
            times.extend(s.histograms.into_iter().map(|(t, _)| t));
            times
        })
        .filter(|t: &Vec<f64>| !t.is_empty())
        .collect())
}

/// The typical time between two scrapes: the median gap between consecutive samples of
/// the same series; `None` with fewer than two samples in every series.
fn scrape_interval(times: &[Vec<f64>]) -> Option<f64> {
    let mut gaps: Vec<f64> = times
        .iter()
        .flat_map(|t| t.windows(2).map(|w| w[1] - w[0]))
        .filter(|g| *g > 0.0)
        .collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_by(f64::total_cmp);
    Some(gaps[gaps.len() / 2])
}

/// One sample of an instant-vector answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Deserialize)]
struct VectorSample {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Parses a `/api/v1/query` answer that must be an instant vector.
pub fn parse_vector(body: &[u8]) -> anyhow::Result<Vec<Sample>> {
    results::<VectorSample>(body, Some("vector"))?
        .into_iter()
        .map(|s| {
            let value = parse_float(&s.value.1)?;
            Ok(Sample {
                labels: s.metric,
                value,
            })
        })
        .collect()
}

fn parse_float(text: &str) -> anyhow::Result<f64> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        t => t.parse().with_context(|| format!("bad sample value {t:?}")),
    }
}

type Key = (String, String, String);

fn key(s: &Sample) -> Option<Key> {
    Some((
        s.labels.get("tap")?.clone(),
        s.labels.get("phase")?.clone(),
        s.labels.get("route")?.clone(),
    ))
}

/// Builds the dataset from the three answers. A series with no observation in the range
/// (count rounds to 0) is left out, as a snapshot leaves it out.
pub fn build(
    buckets: Vec<Sample>,
    sums: Vec<Sample>,
    counts: Vec<Sample>,
) -> anyhow::Result<Dataset> {
    let mut by_key: BTreeMap<Key, Vec<(f64, f64)>> = BTreeMap::new();
    for s in &buckets {
        let (Some(k), Some(le)) = (key(s), s.labels.get("le")) else {
            continue;
        };
        if !s.value.is_finite() {
            continue;
        }
        by_key
            .entry(k)
            .or_default()
            .push((parse_float(le)?, s.value));
    }
    let sums: BTreeMap<Key, f64> = sums
        .iter()
        .filter_map(|s| Some((key(s)?, s.value)))
        .collect();
    let mut taps: BTreeMap<String, TapData> = BTreeMap::new();
    for s in &counts {
        let Some(k) = key(s) else { continue };
        if !s.value.is_finite() || s.value.round() < 1.0 {
            continue;
        }
        let mut b = by_key.remove(&k).unwrap_or_default();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        // increase() extrapolates each bucket on its own: keep the list cumulative.
        let mut running: f64 = 0.0;
        for entry in &mut b {
            running = running.max(entry.1);
            entry.1 = running;
        }
        let (tap, phase, route) = k.clone();
        let sum = sums
            .get(&k)
            .copied()
            .filter(|v| v.is_finite())
            .unwrap_or(0.0);
        let series = Series {
            count: s.value.round() as u64,
            sum,
            min: None,
            // A phase that always took 0 has nothing but a first bucket to show.
            max: if sum > 0.0 { bucket_max(&b) } else { 0.0 },
            dist: Distribution::Buckets(b),
        };
        taps.entry(tap)
            .or_default()
            .insert_answered(phase, route, series);
    }
    Ok(Dataset {
        precision: Precision::Buckets,
        sources: Vec::new(),
        notes: vec![
            "from Prometheus buckets: percentiles are interpolated linearly within a bucket \
             (approximate: with the default layout a bucket spans a factor of 1.33-1.5), \
             max is the top of the highest non-empty bucket, and counts are increase() \
             estimates, rounded"
                .to_owned(),
        ],
        taps,
        proxy: None,
    })
}

/// Percent-encodes a query-string value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scrape_interval_is_the_median_gap_between_samples() {
        assert_eq!(scrape_interval(&[vec![10.0]]), None);
        assert_eq!(
            scrape_interval(&[vec![0.0, 15.0, 30.0, 60.0], vec![5.0, 20.0]]),
            Some(15.0)
        );
        let answer = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"tap":"w"},"values":[[100.5,"1"],[101.5,"3"]]}]}}"#;
        assert_eq!(parse_matrix_times(answer).unwrap(), [vec![100.5, 101.5]]);
        let native = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"tap":"w"},"histograms":[[100.5,{"count":"1","sum":"0.1"}],[101.5,{"count":"2","sum":"0.2"}]]}]}}"#;
        assert_eq!(parse_matrix_times(native).unwrap(), [vec![100.5, 101.5]]);
    }

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            value,
        }
    }

    #[test]
    fn answers_parse_and_errors_are_reported() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"tap":"t","le":"+Inf"},"value":[1700000000.5,"12.5"]}]}}"#;
        let v = parse_vector(body).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].value, 12.5);
        assert_eq!(v[0].labels["le"], "+Inf");
        let e = parse_vector(br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("parse error"), "{e}");
        assert!(parse_vector(b"<html>").is_err());
    }

    #[test]
    fn series_are_built_from_buckets_sums_and_counts() {
        let l = |le: &'static str| {
            [
                ("tap", "w"),
                ("phase", "total"),
                ("route", "GET"),
                ("le", le),
            ]
        };
        let buckets = vec![
            sample(&l("0.001"), 40.0),
            sample(&l("0.002"), 99.0),
            // extrapolation can make a higher bucket a hair smaller: kept cumulative
            sample(&l("0.004"), 98.9),
            sample(&l("+Inf"), 100.0),
        ];
        let k = [("tap", "w"), ("phase", "total"), ("route", "GET")];
        let idle = [("tap", "w"), ("phase", "queue"), ("route", "GET")];
        let ds = build(
            buckets,
            vec![sample(&k, 0.15)],
            vec![sample(&k, 100.0), sample(&idle, 0.2)],
        )
        .unwrap();
        let tap = &ds.taps["w"];
        assert!(!tap.phases.contains_key("queue"), "no observation in range");
        let s = &tap.phases["total"]["GET"];
        assert_eq!(s.count, 100);
        assert!((s.mean() - 0.0015).abs() < 1e-12);
        // rank 50 lies in (0.001, 0.002]: 10 of its 59 values in
        let p50 = s.quantile(0.5);
        assert!((p50 - (0.001 + 0.001 * 10.0 / 59.0)).abs() < 1e-12, "{p50}");
        assert_eq!(s.max, 0.004);
        assert_eq!(ds.precision, Precision::Buckets);
    }

    #[test]
    fn a_phase_that_always_took_zero_reads_zero() {
        let l = |le: &'static str| {
            [
                ("tap", "w"),
                ("phase", "write"),
                ("route", "all"),
                ("le", le),
            ]
        };
        let k = [("tap", "w"), ("phase", "write"), ("route", "all")];
        let ds = build(
            vec![sample(&l("1e-07"), 10.0), sample(&l("+Inf"), 10.0)],
            vec![sample(&k, 0.0)],
            vec![sample(&k, 10.0)],
        )
        .unwrap();
        let st = ds.taps["w"].phases["write"]["all"].stats();
        assert_eq!((st.p50, st.p99, st.max), (0.0, 0.0, 0.0));
    }

    #[test]
    fn queries_sum_the_instances_away_and_encode() {
        let [b, s, c] = queries("900s");
        assert_eq!(
            b,
            "sum by (tap, phase, route, le) ((increase(phasescope_phase_duration_seconds_bucket[900s]) \
             + (min_over_time(phasescope_phase_duration_seconds_bucket[900s]) \
             unless phasescope_phase_duration_seconds_bucket offset 900s)) \
             or increase(phasescope_phase_duration_seconds_bucket[900s]))"
        );
        assert!(s.contains("_sum[900s]") && c.contains("_count[900s]"));
        assert_eq!(encode("a b[1]"), "a%20b%5B1%5D");
        assert_eq!(promql_range(Duration::from_secs(900)).unwrap(), "900s");
        assert!(promql_range(Duration::from_millis(10)).is_err());
    }
}

//! The phase histograms as a Prometheus with native histograms keeps them: one series per
//! (tap, phase, route) whose samples are whole histograms, and no `_bucket`, `_sum` or
//! `_count` series (Prometheus 2.40+ with `--enable-feature=native-histograms`, unless
//! the scrape config also asks for the classic ones).
//!
//! One instant query, `increase()` of the native series over the range, gives per series
//! a count, a sum and the buckets with their bounds; they become the same cumulative
//! `(upper bound, count)` list the classic buckets make, so the report reads both alike.

use std::collections::BTreeMap;

use anyhow::Context;
use serde::Deserialize;

use super::dataset::{bucket_max, Distribution, Series, TapData};
use super::prometheus_answer::results;

/// The query: the native series' increase over `range`, the instances summed away.
pub fn query(metric: &str, range: &str) -> String {
    format!("sum by (tap, phase, route) (increase({metric}[{range}]))")
}

#[derive(Deserialize)]
struct HistogramSample {
    metric: BTreeMap<String, String>,
    /// `[time, {count, sum, buckets}]`; absent for a float sample (a classic series
    /// caught by the same name would have none).
    #[serde(default)]
    histogram: Option<(f64, NativeHistogram)>,
}

/// A native histogram in the HTTP API's JSON: counts and bounds as strings, each bucket
/// `[boundary rule, lower, upper, count]`, counts per bucket (not cumulative).
#[derive(Deserialize)]
struct NativeHistogram {
    count: String,
    sum: String,
    #[serde(default)]
    buckets: Vec<(u8, String, String, String)>,
}

/// The taps of a native-histogram answer. A series with no observation in the range
/// (count rounds to 0) is left out, as for classic buckets.
pub fn parse(body: &[u8]) -> anyhow::Result<BTreeMap<String, TapData>> {
    let mut taps: BTreeMap<String, TapData> = BTreeMap::new();
    for sample in results::<HistogramSample>(body, Some("vector"))? {
        let Some((_, h)) = sample.histogram else {
            continue;
        };
        let label = |name: &str| sample.metric.get(name).cloned();
        let (Some(tap), Some(phase), Some(route)) = (label("tap"), label("phase"), label("route"))
        else {
            continue;
        };
        let Some(series) = series(&h)? else { continue };
        taps.entry(tap)
            .or_default()
            .insert_answered(phase, route, series);
    }
    Ok(taps)
}

fn series(h: &NativeHistogram) -> anyhow::Result<Option<Series>> {
    let count = number(&h.count)?;
    if !count.is_finite() || count.round() < 1.0 {
        return Ok(None);
    }
    let sum = number(&h.sum)?;
    let mut buckets = Vec::with_capacity(h.buckets.len());
    for (_, _, upper, n) in &h.buckets {
        buckets.push((number(upper)?, number(n)?));
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut running = 0.0;
    for bucket in &mut buckets {
        running += bucket.1;
        bucket.1 = running;
    }
    let sum = if sum.is_finite() { sum } else { 0.0 };
    Ok(Some(Series {
        count: count.round() as u64,
        sum,
        min: None,
        // A phase that always took 0 has only the zero bucket to show.
        max: if sum > 0.0 { bucket_max(&buckets) } else { 0.0 },
        dist: Distribution::Buckets(buckets),
    }))
}

fn number(text: &str) -> anyhow::Result<f64> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        t => t.parse().with_context(|| format!("bad value {t:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_buckets_become_cumulative_bounds() {
        // What Prometheus 2.42 answers for increase() of a native histogram: the zero
        // bucket (threshold 0) and two exponential buckets.
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"tap":"w","phase":"total","route":"GET"},
             "histogram":[1700000000.5,{"count":"100","sum":"0.15",
               "buckets":[[0,"0.0019","0.002","60"],[3,"-0","0","0"],[0,"0.00095","0.001","40"]]}]},
            {"metric":{"tap":"w","phase":"queue","route":"GET"},
             "histogram":[1700000000.5,{"count":"0.2","sum":"0"}]}]}}"#;
        let taps = parse(body).unwrap();
        let tap = &taps["w"];
        assert!(!tap.phases.contains_key("queue"), "no observation in range");
        let s = &tap.phases["total"]["GET"];
        assert_eq!(s.count, 100);
        assert!((s.mean() - 0.0015).abs() < 1e-12);
        let Distribution::Buckets(b) = &s.dist else {
            panic!("buckets")
        };
        assert_eq!(b, &[(0.0, 0.0), (0.001, 40.0), (0.002, 100.0)]);
        assert_eq!(s.max, 0.002);
    }

    #[test]
    fn errors_and_float_samples() {
        let e = parse(br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("parse error"), "{e}");
        let floats = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"tap":"w","phase":"total","route":"GET"},"value":[1.0,"3"]}]}}"#;
        assert!(parse(floats).unwrap().is_empty());
    }
}

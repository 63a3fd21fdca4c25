//! Native (exponential) histogram buckets of a series, derived at scrape time from its HDR
//! copy rather than recorded a second time: the relay's hot path pays nothing for them.
//!
//! Schema 4: every power of two is cut into 16 buckets, each 2^(1/16) ≈ 1.0443 times as
//! wide as the one below, bucket `i` holding (2^((i-1)/16), 2^(i/16)] seconds. Each HDR
//! bucket (at most 1/128 of its value wide) goes whole into the native bucket that holds
//! its middle, so a value is placed at most 1/256 of itself off; a quantile Prometheus
//! interpolates inside a native bucket is therefore within 2^(1/16) × (1 + 1/256) − 1 ≈
//! 4.85 % of the exact one. Zero is its own bucket (threshold 0): a phase that took 0 ns
//! reads 0, not the lower end of some positive bucket. docs/metrics.md states the bound.

use hdrhistogram::Histogram;

/// Each power of two is divided into 2^SCHEMA buckets.
pub const SCHEMA: i32 = 4;
/// Only exact zeros are in the zero bucket (every phase is a whole number of ns ≥ 0).
pub const ZERO_THRESHOLD: f64 = 0.0;
/// Worst relative error of a quantile read off these buckets (see the module comment).
pub const MAX_RELATIVE_ERROR: f64 = 0.0485;
// The bound docs/metrics.md promises.
const _: () = assert!(MAX_RELATIVE_ERROR <= 0.05);

/// One series' native buckets in the exposition's sparse form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NativeBuckets {
    pub zero_count: u64,
    /// (offset, length): the first span's offset is the index of its first bucket, each
    /// later one's the number of empty buckets since the previous span.
    pub spans: Vec<(i32, u32)>,
    /// Each bucket's count minus the previous one's (the first minus 0).
    pub deltas: Vec<i64>,
}

/// The native bucket of `seconds` (> 0).
pub fn index(seconds: f64) -> i32 {
    // Values here are HDR bucket middles between 1e-9 and 3.6e3 s: log2 is within ±32,
    // so the product is far inside i32.
    (seconds.log2() * f64::from(1 << SCHEMA)).ceil() as i32
}

/// The upper bound of native bucket `i`, in seconds.
pub fn upper_bound(i: i32) -> f64 {
    (f64::from(i) / f64::from(1 << SCHEMA)).exp2()
}

/// Empty buckets between two populated ones that are sent as zeros rather than starting
/// a new span: a span costs two fields, a zero delta one.
const MAX_GAP_IN_SPAN: i32 = 2;

/// The native buckets of an HDR histogram of nanoseconds.
pub fn from_hdr(hist: &Histogram<u64>) -> NativeBuckets {
    let mut out = NativeBuckets::default();
    // HDR buckets come in increasing order, so their native indexes never decrease.
    let mut counts: Vec<(i32, u64)> = Vec::new();
    for v in hist.iter_recorded() {
        let hi = v.value_iterated_to();
        let n = v.count_at_value();
        if hi == 0 {
            out.zero_count += n;
            continue;
        }
        let lo = hist.lowest_equivalent(hi);
        let middle_ns = lo as f64 + (hi - lo) as f64 / 2.0;
        let i = index(middle_ns / 1e9);
        match counts.last_mut() {
            Some((last, c)) if *last == i => *c += n,
            _ => counts.push((i, n)),
        }
    }
    let mut previous: Option<i32> = None;
    let mut last_count = 0i64;
    for (i, n) in counts {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        match previous {
            None => out.spans.push((i, 1)),
            Some(p) => {
                let gap = i - p - 1;
                let span = out.spans.last_mut();
                match span {
                    Some(span) if gap <= MAX_GAP_IN_SPAN => {
                        for _ in 0..gap {
                            out.deltas.push(-last_count);
                            last_count = 0;
                        }
                        // gap ≤ 2, so the length grows by at most 3.
                        span.1 += gap as u32 + 1;
                    }
                    _ => out.spans.push((gap, 1)),
                }
            }
        }
        out.deltas.push(n - last_count);
        last_count = n;
        previous = Some(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::hdr::template;

    /// (index, count) of every bucket, expanded from spans and deltas.
    fn expand(b: &NativeBuckets) -> Vec<(i32, u64)> {
        let mut out = Vec::new();
        let mut deltas = b.deltas.iter();
        let mut i = 0;
        let mut count = 0i64;
        for (k, &(offset, len)) in b.spans.iter().enumerate() {
            i = if k == 0 { offset } else { i + offset };
            for _ in 0..len {
                count += deltas.next().unwrap();
                if count > 0 {
                    out.push((i, count as u64));
                }
                i += 1;
            }
        }
        assert!(deltas.next().is_none(), "deltas beyond the spans");
        out
    }

    #[test]
    fn bucket_bounds_follow_the_schema() {
        assert_eq!(index(1.0), 0);
        assert_eq!(upper_bound(0), 1.0);
        assert_eq!(upper_bound(16), 2.0);
        assert_eq!(upper_bound(-16), 0.5);
        for &s in &[1e-9, 3.3e-7, 1e-3, 1.5e-3, 0.9, 60.0, 3600.0] {
            let i = index(s);
            assert!(
                upper_bound(i - 1) < s && s <= upper_bound(i),
                "{s} in bucket {i}"
            );
        }
        let width = upper_bound(1) / upper_bound(0);
        assert!(width * (1.0 + 1.0 / 256.0) - 1.0 <= MAX_RELATIVE_ERROR);
    }

    #[test]
    fn zeros_go_to_the_zero_bucket_and_counts_are_kept() {
        let mut h = template().unwrap();
        let values = [
            0u64,
            0,
            0,
            1,
            100,
            100,
            1_000_000,
            1_000_100,
            1_500_000,
            30_000_000_000,
        ];
        for v in values {
            h.record(v).unwrap();
        }
        let b = from_hdr(&h);
        assert_eq!(b.zero_count, 3);
        let buckets = expand(&b);
        let total: u64 = buckets.iter().map(|(_, n)| n).sum();
        assert_eq!(total + b.zero_count, values.len() as u64);
        for v in &values[3..] {
            let s = *v as f64 / 1e9;
            let i = index(s);
            // Within 1/256 of the value, the bucket is the value's own or a neighbour.
            assert!(
                buckets.iter().any(|&(j, _)| (j - i).abs() <= 1),
                "{v} ns: bucket {i} in {buckets:?}"
            );
        }
        // 1 ms and 1.0001 ms share a bucket (both HDR buckets have their middle in it).
        assert!(buckets.contains(&(index(1e-3), 2)), "{buckets:?}");
        assert!(buckets.contains(&(index(100e-9), 2)), "{buckets:?}");
    }

    #[test]
    fn short_gaps_stay_in_a_span_and_long_ones_start_a_new_one() {
        let mut h = template().unwrap();
        // Buckets i, i+2 (gap 1), then one far away.
        let base = upper_bound(-160); // ~1 ms
        for s in [
            base * 0.99,
            upper_bound(-158) * 0.99,
            upper_bound(-100) * 0.99,
        ] {
            h.record((s * 1e9) as u64).unwrap();
        }
        let b = from_hdr(&h);
        assert_eq!(b.spans.len(), 2, "{b:?}");
        assert_eq!(b.spans[0], (-160, 3));
        assert_eq!(b.spans[1], (-100 - (-158) - 1, 1));
        assert_eq!(b.deltas, vec![1, -1, 1, 0]);
        assert_eq!(expand(&b), vec![(-160, 1), (-158, 1), (-100, 1)]);
    }

    #[test]
    fn an_empty_histogram_has_no_buckets() {
        assert_eq!(from_hdr(&template().unwrap()), NativeBuckets::default());
    }
}

//! The bucket layout of `phasescope_phase_duration_seconds`.
//!
//! One layout has to cover a 300 ns parse and a 30 s backend wait, eight orders of
//! magnitude apart, so the default is geometric: every bucket is about √2 wider than the one
//! below it, which bounds the *relative* error of any value read off a bucket, at the cost
//! of ~60 buckets per series. docs/metrics.md states the bound.
//!
//! Bounds are kept in integer nanoseconds because that is what the relay measures: a value
//! lands in a bucket with integer comparisons only, never a float conversion per observation.
//!
//! Every layout starts with a bucket at `le="0"`: phases that took no time at all
//! (`upstream_recv` and `write` of a response read and written in one go) are common, and
//! without it `histogram_quantile()` interpolates them to somewhere inside the first
//! bucket (50–99 ns) instead of 0. Prometheus returns 0 for a quantile in a bucket whose
//! upper bound is 0.

use anyhow::{bail, ensure};

use crate::metrics::hdr;

/// The smallest default bound, in nanoseconds.
const DEFAULT_FIRST_NS: f64 = 100.0;
/// The default layout ends at the first bound at or above this (60 s, the default
/// response timeout).
const DEFAULT_LAST_NS: f64 = 60e9;
/// Most buckets a configured layout may have: each one is a line per series in every scrape.
pub const MAX_BUCKETS: usize = 256;

/// Histogram bucket upper bounds (inclusive, Prometheus `le`), plus an index that finds the
/// bucket of a value in a couple of comparisons.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    bounds_ns: Box<[u64]>,
    bounds_s: Box<[f64]>,
    /// `octave[k]` is the first bucket whose bound is ≥ 2^k; a value in [2^k, 2^(k+1)) can
    /// only belong to a bucket in `octave[k]..=octave[k+1]`.
    octave: [u16; 65],
    /// The bucket of every value in each HDR bucket (by `hdr::index_of`), or
    /// [`STRADDLES`] where a bound cuts the HDR bucket in two. The recorder works out a
    /// value's HDR index anyway, so this finds its bucket with one load for all values but
    /// the few near a bound.
    by_hdr: Box<[u16]>,
}

/// A `by_hdr` entry whose HDR bucket holds values of more than one bucket.
const STRADDLES: u16 = u16::MAX;

impl Buckets {
    /// The configured layout (`[metrics] buckets`, seconds), or the default when empty.
    pub fn from_config(seconds: &[f64]) -> anyhow::Result<Self> {
        if seconds.is_empty() {
            return Ok(Self::default_layout());
        }
        ensure!(
            seconds.len() < MAX_BUCKETS,
            "metrics.buckets has {} bounds; at most {} are allowed (with the zero bucket, {MAX_BUCKETS})",
            seconds.len(),
            MAX_BUCKETS - 1
        );
        let mut ns = Vec::with_capacity(seconds.len());
        for (i, &s) in seconds.iter().enumerate() {
            if !(s.is_finite() && s > 0.0) {
                bail!("metrics.buckets[{i}] = {s}: bounds must be positive, finite seconds");
            }
            let n = (s * 1e9).round();
            if n < 1.0 || n > u64::MAX as f64 {
                bail!("metrics.buckets[{i}] = {s}: bounds must lie between 1 ns and 584 years");
            }
            let n = n as u64;
            if let Some(&prev) = ns.last() {
                if n <= prev {
                    bail!(
                        "metrics.buckets[{i}] = {s}: bounds must increase by at least 1 ns \
                         (the previous one is {prev} ns)"
                    );
                }
            }
            ns.push(n);
        }
        Ok(Self::from_parts(ns, seconds.to_vec()))
    }

    /// The bounds with the zero bucket first (see the module comment).
    fn with_zero(mut ns: Vec<u64>, mut seconds: Vec<f64>) -> (Vec<u64>, Vec<f64>) {
        ns.insert(0, 0);
        seconds.insert(0, 0.0);
        (ns, seconds)
    }

    /// 100 ns × √2^i rounded to two significant figures, up to the first bound ≥ 60 s.
    pub fn default_layout() -> Self {
        let mut ns = Vec::new();
        let mut i = 0;
        loop {
            let exact = DEFAULT_FIRST_NS * 2f64.powf(f64::from(i) / 2.0);
            let b = round_to_two_figures(exact);
            ns.push(b);
            if exact >= DEFAULT_LAST_NS {
                break;
            }
            i += 1;
        }
        let seconds = ns.iter().map(|&n| n as f64 / 1e9).collect();
        Self::from_parts(ns, seconds)
    }

    fn from_parts(bounds_ns: Vec<u64>, bounds_s: Vec<f64>) -> Self {
        let (bounds_ns, bounds_s) = Self::with_zero(bounds_ns, bounds_s);
        let mut octave = [0u16; 65];
        for (k, slot) in octave.iter_mut().enumerate() {
            let first = if k == 64 {
                bounds_ns.len()
            } else {
                bounds_ns.partition_point(|&b| b < (1u64 << k))
            };
            // At most MAX_BUCKETS bounds, so the index fits.
            *slot = first as u16;
        }
        let mut b = Self {
            bounds_ns: bounds_ns.into_boxed_slice(),
            bounds_s: bounds_s.into_boxed_slice(),
            octave,
            by_hdr: Box::default(),
        };
        // HDR buckets tile 0..=HIGHEST_NS in order, each from its lowest value to the one
        // below the next bucket's. At most MAX_BUCKETS + 1 slots, so a bucket fits in u16.
        b.by_hdr = (0..=hdr::index_of(hdr::HIGHEST_NS))
            .map(|i| {
                let lo = b.index(hdr::value_of(i));
                let hi = b.index(hdr::value_of(i + 1).saturating_sub(1));
                if lo == hi {
                    lo as u16
                } else {
                    STRADDLES
                }
            })
            .collect();
        b
    }

    /// Finite bucket upper bounds, in nanoseconds.
    pub fn bounds_ns(&self) -> &[u64] {
        &self.bounds_ns
    }

    /// Finite bucket upper bounds, in seconds (the exposed `le` values).
    pub fn bounds_seconds(&self) -> &[f64] {
        &self.bounds_s
    }

    /// Buckets including the implicit `+Inf` one: the length of a per-series count array.
    pub fn slots(&self) -> usize {
        self.bounds_ns.len() + 1
    }

    /// The bucket of a value: the first whose bound is ≥ `ns`, or `bounds_ns().len()` (the
    /// `+Inf` bucket) past the last bound.
    #[inline]
    pub fn index(&self, ns: u64) -> usize {
        if ns == 0 {
            return 0; // the `le="0"` bucket
        }
        let k = 63 - ns.leading_zeros() as usize;
        let lo = usize::from(self.octave[k]);
        let hi = usize::from(self.octave[k + 1]).min(self.bounds_ns.len());
        // The default layout has at most three bounds per octave, so this is a couple of
        // comparisons; a dense configured layout degrades to a binary search.
        lo + self.bounds_ns[lo..hi].partition_point(|&b| b < ns)
    }
}

impl Buckets {
    /// [`Buckets::index`] of a value whose HDR index (`hdr::index_of(ns)`) is `hdr`.
    #[inline]
    pub fn index_by_hdr(&self, hdr: usize, ns: u64) -> usize {
        match self.by_hdr.get(hdr) {
            Some(&b) if b != STRADDLES => usize::from(b),
            _ => self.index(ns),
        }
    }
}

fn round_to_two_figures(x: f64) -> u64 {
    let scale = 10f64.powi(x.log10().floor() as i32 - 1);
    ((x / scale).round() * scale).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_index(b: &Buckets, ns: u64) -> usize {
        b.bounds_ns()
            .iter()
            .position(|&x| x >= ns)
            .unwrap_or(b.bounds_ns().len())
    }

    #[test]
    fn default_layout_spans_300ns_to_30s_with_bounded_ratio() {
        let b = Buckets::default_layout();
        assert_eq!(b.bounds_ns()[0], 0, "the zero bucket comes first");
        assert_eq!(b.index(0), 0);
        assert_eq!(b.index(1), 1);
        let ns = &b.bounds_ns()[1..];
        assert_eq!(ns[0], 100);
        assert!(*ns.last().unwrap() >= 60_000_000_000);
        assert!(ns.len() <= 64, "{} buckets", ns.len());
        for w in ns.windows(2) {
            let ratio = w[1] as f64 / w[0] as f64;
            assert!(
                (1.3..=1.5).contains(&ratio),
                "{} -> {} ratio {ratio}",
                w[0],
                w[1]
            );
        }
        // A 300 ns parse and a 30 s wait each land in a finite bucket no wider than 1.5x.
        let ns = b.bounds_ns();
        for v in [300u64, 30_000_000_000] {
            let i = b.index(v);
            assert!(i > 1 && i < ns.len());
            assert!(ns[i - 1] < v && v <= ns[i]);
        }
    }

    #[test]
    fn index_agrees_with_a_linear_scan() {
        let layouts = [
            Buckets::default_layout(),
            Buckets::from_config(&[1e-9, 2e-9, 3e-9, 1e-6, 1.0]).unwrap(),
            Buckets::from_config(&[0.5]).unwrap(),
        ];
        for b in &layouts {
            let mut probes = vec![0, 1, 2, 3, 4, u64::MAX, u64::MAX - 1];
            for &x in b.bounds_ns() {
                probes.extend([x.saturating_sub(1), x, x + 1]);
            }
            for k in 0..64 {
                probes.extend([1u64 << k, (1u64 << k) - 1, (1u64 << k) + 1]);
            }
            for v in probes {
                assert_eq!(b.index(v), naive_index(b, v), "value {v}");
            }
        }
    }

    #[test]
    fn the_index_by_hdr_bucket_agrees_with_the_index() {
        let layouts = [
            Buckets::default_layout(),
            Buckets::from_config(&[1e-9, 2e-9, 3e-9, 1e-6, 1.0]).unwrap(),
            Buckets::from_config(&[0.5]).unwrap(),
            Buckets::from_config(&(1..200).map(|i| f64::from(i) * 1.3e-7).collect::<Vec<_>>())
                .unwrap(),
        ];
        for b in &layouts {
            let mut probes = vec![0, 1, 2, 255, 256, 257, u64::MAX, hdr::HIGHEST_NS];
            probes.push(hdr::HIGHEST_NS + 1);
            for &x in b.bounds_ns() {
                probes.extend([x.saturating_sub(1), x, x + 1, x + x / 100, x - x / 100]);
            }
            for i in 0..=hdr::index_of(hdr::HIGHEST_NS) + 2 {
                let v = hdr::value_of(i);
                probes.extend([v, v.saturating_sub(1), v + 1]);
            }
            for v in probes {
                assert_eq!(b.index_by_hdr(hdr::index_of(v), v), b.index(v), "value {v}");
            }
        }
    }

    #[test]
    fn bad_configured_layouts_are_refused_with_a_reason() {
        let err = Buckets::from_config(&[0.1, 0.1]).unwrap_err().to_string();
        assert!(err.contains("increase"), "{err}");
        let err = Buckets::from_config(&[-1.0]).unwrap_err().to_string();
        assert!(err.contains("positive"), "{err}");
        assert!(Buckets::from_config(&[f64::NAN]).is_err());
        assert!(Buckets::from_config(&[1e-12]).is_err());
        assert!(Buckets::from_config(&vec![1.0; MAX_BUCKETS]).is_err());
        let ok = Buckets::from_config(&[0.001, 0.01]).unwrap();
        assert_eq!(ok.bounds_ns(), &[0, 1_000_000, 10_000_000]);
        assert_eq!(ok.bounds_seconds(), &[0.0, 0.001, 0.01]);
        assert_eq!(ok.slots(), 4);
    }
}

//! Resampling from recorded histograms, for a compare with one run per side.
//!
//! A run's HDR histogram is its sample, binned to 1/128: drawing from it with replacement
//! (Walker's alias method, O(1) per draw) and tallying the draws per bucket gives a
//! bootstrap replicate whose mean and percentiles are read off the tally, without sorting.

use hdrhistogram::Histogram;

use crate::rng::Rng;

/// The statistics compared, in this order everywhere.
pub const STATISTICS: [&str; 3] = ["mean", "p50", "p99"];

/// A histogram as buckets, ready to draw from.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// Bucket values in seconds (the top of each HDR bucket, as the snapshot names it).
    values: Vec<f64>,
    prob: Vec<f64>,
    alias: Vec<usize>,
    count: u64,
}

impl Sampler {
    /// `None` for an empty histogram.
    pub fn new(h: &Histogram<u64>) -> Option<Sampler> {
        let buckets: Vec<(f64, u64)> = h
            .iter_recorded()
            .map(|v| (v.value_iterated_to() as f64 / 1e9, v.count_at_value()))
            .collect();
        let count: u64 = buckets.iter().map(|b| b.1).sum();
        if count == 0 {
            return None;
        }
        let k = buckets.len();
        // Vose's construction: scaled probabilities split into under- and over-full.
        let mut scaled: Vec<f64> = buckets
            .iter()
            .map(|&(_, c)| c as f64 * k as f64 / count as f64)
            .collect();
        let mut prob = vec![1.0; k];
        let mut alias: Vec<usize> = (0..k).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..k).partition(|&i| scaled[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            prob[s] = scaled[s];
            alias[s] = l;
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        Some(Sampler {
            values: buckets.iter().map(|b| b.0).collect(),
            prob,
            alias,
            count,
        })
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    fn draw(&self, rng: &mut Rng) -> usize {
        let i = rng.below(self.values.len());
        if rng.unit() < self.prob[i] {
            i
        } else {
            self.alias[i]
        }
    }

    /// One replicate of `n` draws: [mean, p50, p99] in seconds. `tally` is scratch space.
    pub fn replicate(&self, n: u64, rng: &mut Rng, tally: &mut Vec<u64>) -> [f64; 3] {
        tally.clear();
        tally.resize(self.values.len(), 0);
        for _ in 0..n {
            tally[self.draw(rng)] += 1;
        }
        let mut sum = 0.0;
        for (v, c) in self.values.iter().zip(tally.iter()) {
            sum += v * *c as f64;
        }
        let rank = |q: f64| ((q * n as f64).ceil() as u64).max(1);
        let (r50, r99) = (rank(0.5), rank(0.99));
        let (mut p50, mut p99) = (None, None);
        let mut seen = 0;
        for (v, c) in self.values.iter().zip(tally.iter()) {
            seen += c;
            if p50.is_none() && seen >= r50 {
                p50 = Some(*v);
            }
            if seen >= r99 {
                p99 = Some(*v);
                break;
            }
        }
        let last = self.values.last().copied().unwrap_or(0.0);
        [sum / n as f64, p50.unwrap_or(last), p99.unwrap_or(last)]
    }
}

/// Natural log with a floor of 1 ns, so a zero duration has a finite log.
pub fn ln_seconds(x: f64) -> f64 {
    x.max(1e-9).ln()
}

/// Bootstrap standard errors of ln(stat_B / stat_A) for [mean, p50, p99]: `resamples`
/// replicates of each side, each of min(count, `max_draws`) draws.
pub fn log_ratio_se(
    a: &Sampler,
    b: &Sampler,
    resamples: usize,
    max_draws: u64,
    rng: &mut Rng,
) -> [f64; 3] {
    let na = a.count().min(max_draws).max(1);
    let nb = b.count().min(max_draws).max(1);
    let mut tally = Vec::new();
    let mut samples: [Vec<f64>; 3] = Default::default();
    for _ in 0..resamples {
        let ra = a.replicate(na, rng, &mut tally);
        let rb = b.replicate(nb, rng, &mut tally);
        for i in 0..3 {
            samples[i].push(ln_seconds(rb[i]) - ln_seconds(ra[i]));
        }
    }
    samples.map(|s| std_dev(&s))
}

/// Sample standard deviation (n − 1); 0 for fewer than two values.
pub fn std_dev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[(u64, u64)]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000_000, 2).unwrap();
        for &(v, n) in values {
            h.record_n(v, n).unwrap();
        }
        h
    }

    #[test]
    fn draws_follow_the_histogram() {
        let s = Sampler::new(&hist(&[(1000, 1), (2000, 3)])).unwrap();
        let mut rng = Rng::new(1);
        let mut tally = Vec::new();
        let r = s.replicate(100_000, &mut rng, &mut tally);
        // 3/4 of the draws are 2000 ns (bucket tops are within 1/128 above)
        let mean = r[0] * 1e9;
        assert!((mean - 1750.0).abs() < 1750.0 * 0.015, "{mean}");
        assert!((r[1] * 1e9 - 2000.0).abs() < 20.0);
        assert!(Sampler::new(&hist(&[])).is_none());
    }

    #[test]
    fn the_standard_error_of_a_mean_ratio_matches_theory() {
        // Two-point distribution 1000/3000 ns, equal weights: sd 1000, mean 2000. With
        // n = 2000 per side, se(ln mean ratio) ≈ sqrt(2) · (1000/2000)/sqrt(2000) ≈ 0.0158.
        let h = hist(&[(1000, 1000), (3000, 1000)]);
        let s = Sampler::new(&h).unwrap();
        let se = log_ratio_se(&s, &s, 400, 10_000, &mut Rng::new(3));
        assert!((se[0] - 0.0158).abs() < 0.003, "{se:?}");
        // Capping the draws at 500 widens it by sqrt(2000/500) = 2.
        let capped = log_ratio_se(&s, &s, 400, 500, &mut Rng::new(3));
        assert!(
            (capped[0] / se[0] - 2.0).abs() < 0.4,
            "{capped:?} vs {se:?}"
        );
    }
}

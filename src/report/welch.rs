//! Welch's t interval for the difference of two means with unequal variances, used on
//! the logarithms of per-run statistics when each side has several runs: then the
//! interval reflects how much whole runs differ from each other, which is the noise that
//! matters when someone reruns a benchmark.

use super::bootstrap::std_dev;
use super::distributions::t_quantile;

/// An interval for mean(b) − mean(a).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// Welch–Satterthwaite degrees of freedom (infinite when both spreads are 0).
    pub df: f64,
}

/// The two-sided `confidence` interval (e.g. 0.95) for mean(b) − mean(a). Each side needs
/// at least two values; `None` otherwise.
pub fn interval(a: &[f64], b: &[f64], confidence: f64) -> Option<Interval> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (std_dev(a).powi(2) / na, std_dev(b).powi(2) / nb);
    let estimate = mean(b) - mean(a);
    let se = (va + vb).sqrt();
    if se == 0.0 {
        return Some(Interval {
            estimate,
            low: estimate,
            high: estimate,
            df: f64::INFINITY,
        });
    }
    let df = (va + vb).powi(2) / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let t = t_quantile(1.0 - (1.0 - confidence) / 2.0, df);
    Some(Interval {
        estimate,
        low: estimate - t * se,
        high: estimate + t * se,
        df,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_hand_computed_welch_interval() {
        // a: mean 2, var 1 (n 3); b: mean 5, var 4 (n 3).
        // se = sqrt(1/3 + 4/3) = 1.29099; df = (5/3)^2 / ((1/9 + 16/9)/2) = 2.94118
        let i = interval(&[1.0, 2.0, 3.0], &[3.0, 5.0, 7.0], 0.95).unwrap();
        assert!((i.estimate - 3.0).abs() < 1e-12);
        assert!((i.df - 2.941_176_470_588).abs() < 1e-9, "{}", i.df);
        let t = t_quantile(0.975, i.df);
        assert!((i.high - (3.0 + t * 1.290_994_448_735_8)).abs() < 1e-9);
        // t(0.975, 2.94) ≈ 3.19: the interval still covers 0 with three runs a side
        assert!(i.low < 0.0 && i.high > 6.0, "{i:?}");
        assert!(interval(&[1.0], &[1.0, 2.0], 0.95).is_none());
        let flat = interval(&[1.0, 1.0], &[2.0, 2.0], 0.95).unwrap();
        assert_eq!((flat.low, flat.high), (1.0, 1.0));
    }
}

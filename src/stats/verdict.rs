//! The three outcomes of one compared statistic, and the power of the experiment.
//!
//! Everything here works on the logarithm of the statistic, so that a change is a ratio:
//! `estimate` is ln(B/A), `se` its standard error, `df` the degrees of freedom of its t
//! distribution (infinite: normal). Given a threshold (2 % by default) the interval says:
//!
//! - `same`: it lies inside ±threshold — an equivalence test (the two one-sided tests);
//! - `different`: it lies entirely beyond +threshold or −threshold — a minimum-effect
//!   test: the change is, with confidence, larger than the threshold, so it excludes 0
//!   and reaches past the threshold;
//! - `unknown`: neither; more runs would narrow it.
//!
//! Quantiles come from `statrs` (Student's t, normal): a maintained implementation rather
//! than one more hand-rolled incomplete beta function.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// Power the minimum detectable effect and the runs needed are computed for.
pub const POWER: f64 = 0.8;

/// Runs a side beyond which `runs_needed` stops counting (and says "more than").
pub const MAX_RUNS: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Same,
    Different,
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Same => "same",
            Outcome::Different => "different",
            Outcome::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which way a `different` change goes: a longer time is slower, a higher rate faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Slower,
    Faster,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Slower => "slower",
            Direction::Faster => "faster",
        }
    }
}

/// A log-ratio with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogChange {
    pub estimate: f64,
    pub se: f64,
    /// Degrees of freedom; `f64::INFINITY` for a normal interval.
    pub df: f64,
}

/// The `p` quantile of Student's t with `df` degrees of freedom (normal when `df` is
/// infinite or huge).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if !df.is_finite() || df > 1e7 {
        return Normal::standard().inverse_cdf(p);
    }
    // df ≥ some tiny positive number: Welch–Satterthwaite can give less than 1.
    match StudentsT::new(0.0, 1.0, df.max(0.1)) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => Normal::standard().inverse_cdf(p),
    }
}

/// P(T > x) for Student's t with `df` degrees of freedom.
fn t_sf(x: f64, df: f64) -> f64 {
    if !df.is_finite() || df > 1e7 {
        return Normal::standard().sf(x);
    }
    match StudentsT::new(0.0, 1.0, df.max(0.1)) {
        Ok(t) => t.sf(x),
        Err(_) => Normal::standard().sf(x),
    }
}

impl LogChange {
    /// The two-sided interval at `confidence`, as ratios minus one (B/A − 1).
    pub fn interval(&self, confidence: f64) -> (f64, f64) {
        let h = t_quantile(1.0 - (1.0 - confidence) / 2.0, self.df) * self.se;
        ((self.estimate - h).exp_m1(), (self.estimate + h).exp_m1())
    }

    pub fn change(&self) -> f64 {
        self.estimate.exp_m1()
    }

    /// The outcome of the interval at `confidence` against ±`threshold` (a fraction).
    pub fn outcome(&self, confidence: f64, threshold: f64) -> Outcome {
        let (low, high) = self.interval(confidence);
        if low > threshold || high < -threshold {
            Outcome::Different
        } else if low > -threshold && high < threshold {
            Outcome::Same
        } else {
            Outcome::Unknown
        }
    }

    /// The p-value of "the change is larger than the threshold" (the minimum-effect
    /// test), two-sided so that `p ≤ a` exactly when the `1 − a` interval lies beyond
    /// ±threshold. Used to rank explanatory rows for the false-discovery control.
    pub fn p_beyond(&self, threshold: f64) -> f64 {
        // How far past the nearer threshold the estimate lies (negative: short of it).
        let distance = if self.estimate >= 0.0 {
            self.estimate - threshold.ln_1p()
        } else {
            (-threshold).ln_1p() - self.estimate
        };
        if self.se <= 0.0 {
            return if distance > 0.0 { 0.0 } else { 1.0 };
        }
        (2.0 * t_sf(distance / self.se, self.df)).min(1.0)
    }

    /// The smallest true change this experiment would show as an interval excluding 0
    /// with probability [`POWER`], at `confidence` (a fraction, e.g. 0.06 for 6 %).
    pub fn mde(&self, confidence: f64) -> f64 {
        let z = t_quantile(1.0 - (1.0 - confidence) / 2.0, self.df) + t_quantile(POWER, self.df);
        (z * self.se).exp_m1()
    }
}

/// Runs per side for an interval at `confidence` to exclude 0 with probability [`POWER`]
/// when the true change is `detect` (a fraction), given run-to-run coefficients of
/// variation `cv_a` and `cv_b` (standard deviations of the log of one run's value).
/// `None` when it would take more than [`MAX_RUNS`].
pub fn runs_needed(cv_a: f64, cv_b: f64, detect: f64, confidence: f64) -> Option<u64> {
    let target = detect.abs().ln_1p();
    let var = cv_a * cv_a + cv_b * cv_b;
    if var <= 0.0 {
        return Some(2);
    }
    let fits = |n: u64| {
        let df = 2.0 * (n as f64 - 1.0);
        let z = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) + t_quantile(POWER, df);
        z * (var / n as f64).sqrt() <= target
    };
    fewest(fits)
}

/// The fewest runs or windows in 2..=[`MAX_RUNS`] for which `fits` holds, `fits` being
/// monotone (more never fits less): a binary search. `None` when even the most do not.
fn fewest(fits: impl Fn(u64) -> bool) -> Option<u64> {
    if !fits(MAX_RUNS) {
        return None;
    }
    let (mut lo, mut hi) = (2u64, MAX_RUNS);
    if fits(lo) {
        return Some(lo);
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// Windows (or runs) for an interval at `confidence` to exclude 0 with probability
/// [`POWER`] when the true change is `detect`, from the interval's own standard error
/// `se` over `n` of them and its rule for the degrees of freedom `df_of(n)`: the standard
/// error shrinks as 1/√n. At `n` itself this is the inverse of [`LogChange::mde`], so a
/// row whose mde is at most `detect` needs no more than it had. (Reckoned instead from
/// the windows' spread with 2n − 2 degrees of freedom, a `cpu` row of 100 windows, whose
/// interval has one degree of freedom per block of √n windows, said `100 windows detect
/// 0.6 % or more; to detect 1 % you need about 29 windows`.) `None` beyond [`MAX_RUNS`].
pub fn windows_needed(
    se: f64,
    n: usize,
    detect: f64,
    confidence: f64,
    df_of: impl Fn(usize) -> f64,
) -> Option<u64> {
    let target = detect.abs().ln_1p();
    if se <= 0.0 || n == 0 {
        return Some(2);
    }
    let fits = |m: u64| {
        let df = df_of(usize::try_from(m).unwrap_or(usize::MAX));
        let z = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) + t_quantile(POWER, df);
        z * se * (n as f64 / m as f64).sqrt() <= target
    };
    fewest(fits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_tables() {
        assert!((t_quantile(0.975, f64::INFINITY) - 1.959_964).abs() < 1e-5);
        assert!((t_quantile(0.975, 4.0) - 2.776_445).abs() < 1e-5);
        assert!((t_quantile(0.8, 10.0) - 0.879_058).abs() < 1e-5);
    }

    #[test]
    fn outcomes_follow_the_interval() {
        let c = |estimate: f64, se: f64| LogChange {
            estimate: estimate.ln_1p(),
            se,
            df: f64::INFINITY,
        };
        // ±1.96 % around 0: inside ±2 %
        assert_eq!(c(0.0, 0.01).outcome(0.95, 0.02), Outcome::Same);
        // +10 % ± 2 %: beyond +2 %
        assert_eq!(c(0.10, 0.01).outcome(0.95, 0.02), Outcome::Different);
        assert_eq!(c(-0.10, 0.01).outcome(0.95, 0.02), Outcome::Different);
        // +3 % ± 2 %: excludes 0 but not clearly past 2 %
        assert_eq!(c(0.03, 0.01).outcome(0.95, 0.02), Outcome::Unknown);
        // p ≤ 0.05 exactly when the 95 % interval lies beyond the threshold
        for (e, se) in [(0.10, 0.01), (0.03, 0.01), (-0.05, 0.01), (-0.045, 0.012)] {
            let x = c(e, se);
            assert_eq!(
                x.p_beyond(0.02) <= 0.05,
                x.outcome(0.95, 0.02) == Outcome::Different,
                "{e} {se}"
            );
        }
        // on the wrong side of the threshold the p-value is large
        assert!(c(0.01, 0.01).p_beyond(0.02) > 0.5);
    }

    #[test]
    fn power_and_runs_needed_agree() {
        // cv 2 % per run, 95 %, 80 % power: n ≈ 2·((1.96 + 0.84)·0.02/0.00995)² ≈ 64
        let n = runs_needed(0.02, 0.02, 0.01, 0.95).unwrap();
        assert!((62..=68).contains(&n), "{n}");
        // and the MDE at that n is about 1 %
        let se = (2.0 * 0.02f64.powi(2) / n as f64).sqrt();
        let mde = LogChange {
            estimate: 0.0,
            se,
            df: 2.0 * (n as f64 - 1.0),
        }
        .mde(0.95);
        assert!((mde - 0.01).abs() < 0.0005, "{mde}");
        assert_eq!(runs_needed(0.0, 0.0, 0.01, 0.95), Some(2));
        assert_eq!(runs_needed(1.0, 1.0, 0.001, 0.95), None);
    }

    /// The windows needed agree with the mde at the windows measured: an mde under the
    /// change to detect needs no more windows than were had, one above it more.
    #[test]
    fn windows_needed_agree_with_the_mde() {
        let df = |m: usize| ((m as f64).sqrt().round()).max(2.0) - 1.0;
        for (se, n) in [(0.0019, 100usize), (0.004, 100), (0.01, 30), (0.0005, 400)] {
            let c = LogChange {
                estimate: 0.0,
                se,
                df: df(n),
            };
            let mde = c.mde(0.95);
            let need = windows_needed(se, n, 0.01, 0.95, df).unwrap();
            assert_eq!(
                mde <= 0.01,
                need <= n as u64,
                "se {se} n {n}: mde {mde}, need {need}"
            );
        }
    }
}

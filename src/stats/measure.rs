//! What one compared statistic measured before its outcome is decided: the change of its
//! logarithm from A to B with a standard error, and each side's run-to-run variation.
//! Several runs a side: Welch's t on the per-run logs ([`between_runs`]); one run on a
//! side: the bootstrap's standard error plus an assumed drift ([`within_run`]); paired
//! windows: [`super::paired`].

use serde::Serialize;

use super::bootstrap::{ln_seconds, std_dev};
use super::verdict::LogChange;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Welch's t on per-run values.
    Runs,
    /// A paired t interval on the log ratios of windows measured at the same time.
    Paired,
    /// Bootstrap from the histograms plus the assumed drift.
    Resampling,
    /// Not compared (absent on a side, or too few exchanges).
    None,
}

/// One side of a row: the runs' log values and the merged value.
pub struct Side {
    pub logs: Vec<f64>,
    pub value: f64,
    pub count: u64,
}

/// What one row measured before the outcome is decided.
pub struct Measured {
    pub change: LogChange,
    pub cv: [f64; 2],
    pub cv_assumed: bool,
    /// Paired windows: the standard deviation of the per-window log ratios.
    pub pair_sd: Option<f64>,
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// Welch's t on the per-run logs.
pub fn between_runs(a: &Side, b: &Side) -> Measured {
    let (na, nb) = (a.logs.len() as f64, b.logs.len() as f64);
    let (sa, sb) = (std_dev(&a.logs), std_dev(&b.logs));
    let (va, vb) = (sa * sa / na, sb * sb / nb);
    let se = (va + vb).sqrt();
    let df = if se == 0.0 {
        f64::INFINITY
    } else {
        (va + vb).powi(2) / (va * va / (na - 1.0) + vb * vb / (nb - 1.0))
    };
    Measured {
        change: LogChange {
            estimate: mean(&b.logs) - mean(&a.logs),
            se,
            df,
        },
        cv: [sa, sb],
        cv_assumed: false,
        pair_sd: None,
    }
}

/// Bootstrap standard error (0 for the rate) plus the drift one run cannot show.
pub fn within_run(a: &Side, b: &Side, boot_se: f64, drift: f64) -> Measured {
    let cv = |s: &Side| {
        if s.logs.len() >= 2 {
            std_dev(&s.logs)
        } else {
            drift
        }
    };
    let (ca, cb) = (cv(a), cv(b));
    let drift_var = ca * ca / a.logs.len() as f64 + cb * cb / b.logs.len() as f64;
    Measured {
        change: LogChange {
            estimate: ln_seconds(b.value) - ln_seconds(a.value),
            se: (boot_se * boot_se + drift_var).sqrt(),
            df: f64::INFINITY,
        },
        cv: [ca, cb],
        cv_assumed: true,
        pair_sd: None,
    }
}

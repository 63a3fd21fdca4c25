//! The fit and its intervals: the background measured where the server served nothing,
//! the routes' costs by non-negative least squares over the rest ([`crate::snapshot::nnls`]),
//! and a block bootstrap over the slices for the 95 % intervals.
//!
//! The background (CPU seconds per second whatever the server serves) is measured only
//! from idle slices, never fitted beside the routes: under a closed-loop load (every
//! client waits for its answer before it asks again, as `wrk`, `ab` and the tests do) each
//! connection is always busy, so the routes' counts weighted by their latencies add up to
//! the slice's length, and a column of lengths is all but a combination of the counts'.
//! The fit then reads CPU that follows time under contention (wakeups, preemptions of a
//! server sharing its cores) as background and takes it from the routes: against the burn
//! upstream beside other work, a fitted background of 0.085 CPU put its 0, 100 and 300 µs
//! routes at 9.2, 114 and 299 µs against truths of 23.9, 128 and 327; measured from the
//! idle slices instead, 19.6, 130 and 327 (docs/report.md, "CPU per route").

use super::design::Design;
use super::window::Window;
use super::{Interval, MIN_IDLE_SLICES, REPLICATES};
use crate::rng::Rng;
use crate::snapshot::nnls::{least_squares, nnls, normal_equations};

/// What the fit makes of a window: the background, and each column's interval or why
/// it has none.
pub(super) struct Fitted {
    pub background: Option<Interval>,
    /// The background per second the routes' figures are net of (0 without one).
    pub background_rate: f64,
    pub columns: Vec<Result<Interval, String>>,
}

/// The fit of `d` over `w`'s slices, its intervals from [`REPLICATES`] resamples.
pub(super) fn fit(w: &Window, d: &Design, seed: u64) -> Fitted {
    let k = d.width();
    let ones = vec![1.0; w.rows.len()];
    let b0 = background(w, &ones);
    let point = solve(w, d, &ones, b0.unwrap_or(0.0));
    let mut bounded: Vec<Vec<f64>> = vec![Vec::with_capacity(REPLICATES); k];
    let mut free: Vec<Vec<f64>> = vec![Vec::with_capacity(REPLICATES); k];
    let mut backgrounds = Vec::with_capacity(REPLICATES);
    let mut rng = Rng::new(seed);
    let mut weights = vec![0.0; w.rows.len()];
    for _ in 0..REPLICATES {
        resample(&mut rng, &mut weights);
        // A resample without idle slices keeps the window's background.
        let b = b0.map(|b0| background(w, &weights).unwrap_or(b0));
        if let Some(b) = b {
            backgrounds.push(b);
        }
        let r = solve(w, d, &weights, b.unwrap_or(0.0));
        for j in 0..k {
            // A replicate without the column's exchanges says nothing of it.
            if r.present[j] {
                bounded[j].push(r.bounded[j]);
                if let Some(x) = &r.free {
                    free[j].push(x[j]);
                }
            }
        }
    }
    Fitted {
        background: b0.map(|b0| {
            let mut v = backgrounds;
            symmetric(b0, quantile(&mut v, 0.025), quantile(&mut v, 0.975))
        }),
        background_rate: b0.unwrap_or(0.0),
        columns: (0..k)
            .map(|j| interval(point.bounded[j], &mut bounded[j], &mut free[j]))
            .collect(),
    }
}

/// The fit of one replicate: the constrained figures, the unconstrained ones (`None`
/// when the columns are dependent), and which columns had exchanges.
struct Solution {
    bounded: Vec<f64>,
    free: Option<Vec<f64>>,
    present: Vec<bool>,
}

/// The routes' fit over the slices weighted `weights`, their CPU net of the background
/// `b` per second.
fn solve(w: &Window, d: &Design, weights: &[f64], b: f64) -> Solution {
    let k = d.width();
    let (g, h) = normal_equations(
        d.counts
            .iter()
            .zip(&w.rows)
            .zip(weights)
            .map(|((row, s), &wt)| (row.as_slice(), s.cpu_seconds - b * s.seconds, wt)),
        k,
    );
    Solution {
        bounded: nnls(&g, &h),
        free: least_squares(&g, &h),
        present: (0..k).map(|j| g[j * k + j] > 0.0).collect(),
    }
}

/// The background over the idle slices weighted `weights`: their CPU over their length;
/// `None` with fewer than [`MIN_IDLE_SLICES`] of them drawn.
fn background(w: &Window, weights: &[f64]) -> Option<f64> {
    let (mut n, mut cpu, mut seconds) = (0.0, 0.0, 0.0);
    for ((s, &idle), &wt) in w.rows.iter().zip(&w.idle).zip(weights) {
        if idle {
            n += wt;
            cpu += wt * s.cpu_seconds;
            seconds += wt * s.seconds;
        }
    }
    (n >= MIN_IDLE_SLICES as f64 && seconds > 0.0).then(|| cpu / seconds)
}

/// A column's interval from its replicates, constrained (`bounded`) and not (`free`):
/// the estimate ± the larger of its distances to the constrained replicates' 2.5th and
/// 97.5th percentiles and half the unconstrained ones' 95 % range. A figure the bound
/// holds at 0 in every replicate has no spread of its own (Redis's SET read `0 ns (0
/// ns–0 ns)`); the unconstrained fit's spread says how far the slices could move it.
/// When even that is nil the resamples cannot say how sure the figure is: no figure.
pub(super) fn interval(
    estimate: f64,
    bounded: &mut [f64],
    free: &mut [f64],
) -> Result<Interval, String> {
    let spread = if free.len() >= 2 {
        (quantile(free, 0.975) - quantile(free, 0.025)) / 2.0
    } else {
        0.0
    };
    let around = if bounded.is_empty() {
        0.0
    } else {
        (estimate - quantile(bounded, 0.025)).max(quantile(bounded, 0.975) - estimate)
    };
    let half = around.max(spread);
    if !(half.is_finite() && estimate.is_finite()) || half <= 1e-6 * estimate.abs() || half <= 0.0 {
        return Err(format!(
            "every resample of the slices gave the same figure ({}), so the window cannot say how sure it is",
            super::duration(estimate)
        ));
    }
    Ok(Interval {
        estimate,
        low: (estimate - half).max(0.0),
        high: estimate + half,
    })
}

/// The `p` quantile of `v` (sorted here), the nearest rank.
fn quantile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
}

/// The interval around `estimate` from the bootstrap's 2.5th and 97.5th percentiles: the
/// estimate ± the larger of its distances to them, never below 0. The percentiles alone
/// are lopsided where the fit meets its bound: replicates that give one column a little
/// CPU take it from another, and none can give it less than none, so the replicates fall
/// on one side of the estimate more than the other.
fn symmetric(estimate: f64, low: f64, high: f64) -> Interval {
    let half = (estimate - low).max(high - estimate).max(0.0);
    let half = if half.is_finite() { half } else { 0.0 };
    Interval {
        estimate,
        low: (estimate - half).max(0.0),
        high: estimate + half,
    }
}

/// One bootstrap replicate as weights (how often each slice is drawn): a moving-block
/// bootstrap, blocks of ⌈√n⌉ consecutive slices from random starts (wrapping round)
/// until n slices are drawn. Slices next to each other are alike (a mix that drifts, a
/// machine busy for a while), and resampling them one by one took them for independent:
/// against the burn upstream its intervals missed the truth by a few µs in two runs of
/// three.
pub(super) fn resample(rng: &mut Rng, weights: &mut [f64]) {
    let n = weights.len();
    weights.iter_mut().for_each(|w| *w = 0.0);
    if n == 0 {
        return;
    }
    let block = ((n as f64).sqrt().ceil() as usize).clamp(1, n);
    let mut drawn = 0;
    while drawn < n {
        let start = rng.below(n);
        for i in 0..block.min(n - drawn) {
            weights[(start + i) % n] += 1.0;
        }
        drawn += block;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_degenerate_resample_never_gives_an_interval_of_zero_width() {
        // Every replicate held at the bound, the unconstrained ones spread: a width.
        let mut bounded = vec![0.0; 200];
        let mut free: Vec<f64> = (0..200).map(|i| (i as f64 - 100.0) * 1e-7).collect();
        let iv = interval(0.0, &mut bounded, &mut free).unwrap();
        assert!(iv.high > 9e-6 && iv.low == 0.0, "{iv:?}");
        // Every replicate the same, constrained or not: no figure.
        let mut same = vec![0.0; 200];
        let why = interval(0.0, &mut same.clone(), &mut same).unwrap_err();
        assert!(why.contains("every resample"), "{why}");
        let mut same = vec![5e-5; 200];
        assert!(interval(5e-5, &mut same.clone(), &mut same).is_err());
        assert!(interval(5e-5, &mut [], &mut []).is_err());
    }
}

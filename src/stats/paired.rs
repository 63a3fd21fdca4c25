//! Paired windows: A's `i`-th snapshot and B's `i`-th were measured at the same time (the
//! windows of a duet bench, both servers loaded together), so whatever disturbed the
//! machine in that window disturbed both, and the two sides are compared window by
//! window rather than as two independent samples.
//!
//! The change of a mean or a rate is the ratio of B's and A's totals over the windows
//! (Σ time / Σ exchanges, or Σ exchanges: the windows are the same for both), and its
//! standard error is a bootstrap that resamples blocks of neighbouring windows, each
//! window drawn with both of its sides: what moved both sides in a window moves both in every replicate, so it
//! cancels in the ratio. Ratios of totals, not the mean of per-window log ratios: a short
//! window in which a side was descheduled holds few exchanges, and its log ratio is an
//! outlier that a t interval over windows takes at face value (measured: a false
//! `different` at 500 ms windows on a machine at load average 25). A percentile is the
//! mean of the per-window log ratios, resampled the same way.

use super::bootstrap::std_dev;
use super::measure::Measured;
use super::statistic::Statistic;
use super::verdict::LogChange;
use crate::rng::Rng;

/// Windows with the series on both sides, fewer than this: not a paired comparison.
pub const MIN_PAIRS: usize = 3;

/// One window of one side: exchanges, their summed time, the statistic's log.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub count: f64,
    pub sum: f64,
    pub log: f64,
}

/// ln(B/A) of `stat` over these windows.
fn estimate(stat: Statistic, pairs: &[(Cell, Cell)], pick: impl Fn(usize) -> usize) -> f64 {
    let (mut ca, mut sa, mut cb, mut sb, mut d) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for i in 0..pairs.len() {
        let (x, y) = pairs[pick(i)];
        ca += x.count;
        sa += x.sum;
        cb += y.count;
        sb += y.sum;
        d += y.log - x.log;
    }
    match stat {
        Statistic::Mean | Statistic::PerRequest => (sb / cb).ln() - (sa / ca).ln(),
        Statistic::Rate => (cb / ca).ln(),
        Statistic::P50 | Statistic::P99 => d / pairs.len() as f64,
    }
}

/// Windows drawn together in a replicate (a moving-block bootstrap): interference that
/// lasts longer than a window (another job's compile, a starved thread) makes
/// neighbouring windows alike, and drawing them one by one would count them as
/// independent evidence. n^(1/3), the usual order for a standard error.
///
/// A server's CPU per request is a ratio of two counters (thread-time, exchanges), and
/// its noise is at the windows' edges: the work in flight when a window is cut (20
/// threads part-way through a request) is counted in one window and its exchange in the
/// next, so neighbouring windows err in opposite directions (lag-1 correlation −0.24
/// measured) and over a stretch of windows only the stretch's two ends count. Blocks of
/// n^(1/3) counted the edges of ~22 blocks in 112 windows and doubled the standard error
/// (0.94 % against 0.48–0.68 % from 4 and 8 independent stretches); blocks of 10
/// windows, about n^(1/2), measured 0.68 %.
fn block_length(stat: Statistic, n: usize) -> usize {
    let root = match stat {
        Statistic::PerRequest => (n as f64).sqrt(),
        _ => (n as f64).cbrt(),
    };
    (root.round() as usize).clamp(1, n)
}

/// The degrees of freedom of the t interval of `stat` over `n` windows: long blocks are
/// few, and the interval's t has as many as there are blocks, less one; otherwise one
/// fewer than the windows. The windows a bench would need are reckoned with the same
/// rule ([`super::verdict::windows_needed`]), so that they agree with the interval.
pub fn degrees_of_freedom(stat: Statistic, n: usize) -> f64 {
    match stat {
        Statistic::PerRequest => (n / block_length(stat, n)).max(2) as f64 - 1.0,
        _ => n.max(2) as f64 - 1.0,
    }
}

/// The paired measurement of these windows, its standard error from `resamples`
/// bootstrap replicates of blocks of neighbouring windows.
pub fn of_cells(
    stat: Statistic,
    pairs: &[(Cell, Cell)],
    resamples: usize,
    rng: &mut Rng,
) -> Option<Measured> {
    let n = pairs.len();
    if n < MIN_PAIRS {
        return None;
    }
    // A phase that took 0 ns on a side has no ratio: not a paired comparison.
    let point = estimate(stat, pairs, |i| i);
    if !point.is_finite() {
        return None;
    }
    let mut replicates = Vec::with_capacity(resamples);
    let mut picks = vec![0usize; n];
    let block = block_length(stat, n);
    for _ in 0..resamples {
        for chunk in picks.chunks_mut(block) {
            let start = rng.below(n - block + 1);
            for (k, p) in chunk.iter_mut().enumerate() {
                *p = start + k;
            }
        }
        replicates.push(estimate(stat, pairs, |i| picks[i]));
    }
    if replicates.iter().any(|r| !r.is_finite()) {
        return None;
    }
    let se = std_dev(&replicates);
    // A window can hold none of a sampled figure (the parser's CPU): its log is not a
    // value, and the spread is of the windows that have one.
    let logs = |side: fn(&(Cell, Cell)) -> f64| -> Vec<f64> {
        pairs.iter().map(side).filter(|l| l.is_finite()).collect()
    };
    let (la, lb) = (logs(|p| p.0.log), logs(|p| p.1.log));
    Some(Measured {
        change: LogChange {
            estimate: point,
            se,
            df: degrees_of_freedom(stat, n),
        },
        cv: [std_dev(&la), std_dev(&lb)],
        cv_assumed: false,
        // The spread of one window's ratio, as a t interval over windows would see it.
        pair_sd: Some(se * (n as f64).sqrt()),
    })
}

/// One side's ratio of totals over its windows (Σ sum / Σ count), with its interval at
/// `confidence`: the same block bootstrap, for a figure the other side has none of (a
/// function that one build has and the other has not), where there is no ratio of B to
/// A to measure. `None` with fewer than [`MIN_PAIRS`] windows or nothing in them.
pub fn one_side(
    cells: &[Cell],
    resamples: usize,
    rng: &mut Rng,
    confidence: f64,
) -> Option<(f64, [f64; 2])> {
    let n = cells.len();
    let level = |pick: &dyn Fn(usize) -> usize| -> f64 {
        let (c, s) = (0..n).fold((0.0, 0.0), |(c, s), i| {
            let x = cells[pick(i)];
            (c + x.count, s + x.sum)
        });
        (s / c).ln()
    };
    let point = level(&|i| i);
    if n < MIN_PAIRS || !point.is_finite() {
        return None;
    }
    let block = block_length(Statistic::PerRequest, n);
    let mut picks = vec![0usize; n];
    let mut replicates = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for chunk in picks.chunks_mut(block) {
            let start = rng.below(n - block + 1);
            for (k, p) in chunk.iter_mut().enumerate() {
                *p = start + k;
            }
        }
        let r = level(&|i| picks[i]);
        if r.is_finite() {
            replicates.push(r);
        }
    }
    let se = std_dev(&replicates);
    let df = degrees_of_freedom(Statistic::PerRequest, n);
    let t = super::verdict::t_quantile(1.0 - (1.0 - confidence) / 2.0, df);
    Some((
        point.exp(),
        [(point - t * se).exp(), (point + t * se).exp()],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::verdict::Outcome;

    fn cells(swing: &[f64], level: f64, jitter: f64) -> Vec<Cell> {
        swing
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let count = (100.0 / s).round();
                let mean = level * s * (1.0 + jitter * (i % 3) as f64);
                Cell {
                    count,
                    sum: count * mean,
                    log: mean.ln(),
                }
            })
            .collect()
    }

    /// Windows whose level swings ±30 % together on both sides, B 5 % above A in every
    /// one: the swing cancels in the pairs, so the interval is narrow and `different`,
    /// though each side's own spread is six times the change. Out of step, it does not.
    #[test]
    fn common_noise_cancels_in_the_pairs() {
        let swing = [
            1.0, 1.3, 0.7, 1.2, 0.8, 1.1, 0.9, 1.25, 0.75, 1.0, 1.15, 0.85,
        ];
        let a = cells(&swing, 100e-6, 0.0);
        let b = cells(&swing, 105e-6, 0.002);
        let pairs: Vec<(Cell, Cell)> = a.iter().copied().zip(b.iter().copied()).collect();
        let mut rng = Rng::new(7);
        let m =
            of_cells(Statistic::Mean, &pairs, 500, &mut rng).unwrap_or_else(|| panic!("no pairs"));
        assert!(m.cv[0] > 0.15, "{:?}", m.cv);
        assert!(
            (m.change.change() - 0.052).abs() < 0.005,
            "{}",
            m.change.change()
        );
        assert_eq!(m.change.outcome(0.975, 0.02), Outcome::Different);
        assert!(m.change.mde(0.975) < 0.02, "{}", m.change.mde(0.975));
        let mut shifted = pairs.clone();
        for (i, p) in shifted.iter_mut().enumerate() {
            p.1 = b[(i + 1) % b.len()];
        }
        let u = of_cells(Statistic::Mean, &shifted, 500, &mut rng)
            .unwrap_or_else(|| panic!("no pairs"));
        assert!(
            u.change.mde(0.975) > 3.0 * m.change.mde(0.975),
            "{}",
            u.change.mde(0.975)
        );
    }
}

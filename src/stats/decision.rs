//! A measured statistic's verdict: its change and interval at a confidence, the outcome
//! against the threshold, the direction of a `different` change, the minimum detectable
//! effect, the runs or windows needed to detect a change, and the p-value the
//! false-discovery control ranks by.

use super::measure::Measured;
use super::paired;
use super::statistic::Statistic;
use super::verdict::{runs_needed, windows_needed, Direction, Outcome};

/// What a statistic is tested against.
#[derive(Debug, Clone, Copy)]
pub struct Criteria {
    /// Confidence of the interval.
    pub confidence: f64,
    /// `same` inside ±threshold, `different` beyond it (a fraction: 0.02 for 2 %).
    pub threshold: f64,
    /// The change the power statement is about, a fraction.
    pub detect: f64,
}

/// The numbers of a verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// B/A − 1.
    pub change: f64,
    /// The interval of B/A − 1 at the criteria's confidence.
    pub interval: [f64; 2],
    /// The smallest change detectable with 80 % power, a fraction.
    pub mde: f64,
    /// Runs (or windows) a side to detect the criteria's `detect`; `None` beyond
    /// [`super::verdict::MAX_RUNS`].
    pub runs_needed: Option<u64>,
    /// Two-sided p-value of "the change is beyond the threshold".
    pub p: f64,
    pub outcome: Outcome,
    /// Of a `different` outcome.
    pub direction: Option<Direction>,
    /// Beyond the threshold alone, but not kept by the false-discovery control: `unknown`.
    pub not_discovered: bool,
}

/// The verdict on `m`, a measurement of `stat` over `n` runs (or windows) on the smaller
/// side. `discovered` is `None` for a statistic outside the false-discovery control (a
/// question of its own), else whether the control kept it.
pub fn decide(
    m: &Measured,
    stat: Statistic,
    n: usize,
    at: Criteria,
    discovered: Option<bool>,
) -> Decision {
    let (low, high) = m.change.interval(at.confidence);
    let mut outcome = m.change.outcome(at.confidence, at.threshold);
    let not_discovered =
        outcome == Outcome::Different && discovered == Some(false) && m.change.se > 0.0;
    if not_discovered {
        outcome = Outcome::Unknown;
    }
    let change = m.change.change();
    let direction = (outcome == Outcome::Different).then(|| {
        let up = change > 0.0;
        match (up, stat == Statistic::Rate) {
            (true, false) | (false, true) => Direction::Slower,
            _ => Direction::Faster,
        }
    });
    // Paired: from the interval's own standard error and degrees of freedom, so that the
    // windows needed agree with the mde; runs: from each side's run-to-run variation.
    let runs_needed = match m.pair_sd {
        Some(_) => windows_needed(m.change.se, n, at.detect, at.confidence, |k| {
            paired::degrees_of_freedom(stat, k)
        }),
        None => runs_needed(m.cv[0], m.cv[1], at.detect, at.confidence),
    };
    Decision {
        change,
        interval: [low, high],
        mde: m.change.mde(at.confidence),
        runs_needed,
        p: m.change.p_beyond(at.threshold),
        outcome,
        direction,
        not_discovered,
    }
}

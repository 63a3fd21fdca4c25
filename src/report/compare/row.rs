//! One compared row: the draft a series makes before α is shared ([`Draft`]), the row
//! it becomes once its verdict is decided ([`Row`], [`decide`]), and which rows are a
//! question of their own (a server's whole CPU per request).

use serde::Serialize;

use super::options::Options;
use crate::stats::{self, Criteria, Direction, Measured, Method, Outcome, Statistic};

/// A row's series: (tap, phase, route).
pub(super) type Key = (String, String, String);

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub tap: String,
    pub route: String,
    pub phase: String,
    pub statistic: Statistic,
    /// Part of the question (tested at α), or an explanation (Benjamini–Hochberg).
    pub primary: bool,
    pub count_a: u64,
    pub count_b: u64,
    /// Runs on each side in which the series appears.
    pub runs_a: usize,
    pub runs_b: usize,
    pub method: Method,
    /// The statistic of each side (seconds; requests per second for `rate`): all runs
    /// merged, or for `rate` the geometric mean of the runs.
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// B/A − 1.
    pub change: Option<f64>,
    /// The interval of B/A − 1 at `confidence`.
    pub interval: Option<[f64; 2]>,
    pub confidence: Option<f64>,
    /// Run-to-run coefficient of variation of each side: the standard deviation of the
    /// log of the per-run values; with one run, the assumed `drift` (`cv_assumed`).
    pub cv_a: Option<f64>,
    pub cv_b: Option<f64>,
    pub cv_assumed: bool,
    /// The smallest change this experiment detects (an interval excluding 0) with 80 %
    /// power, a fraction.
    pub mde: Option<f64>,
    /// Runs a side to detect a change of `detect` with 80 % power; null beyond 10 000.
    pub runs_needed: Option<u64>,
    /// Two-sided p-value of "the change is beyond the threshold".
    pub p: Option<f64>,
    pub verdict: Outcome,
    /// `slower`/`faster` for a `different` row, else null. A higher rate is faster.
    pub direction: Option<Direction>,
    pub note: Option<String>,
}

/// A row before multiplicity: its key, what it measured (if anything) and why not.
pub(super) struct Draft {
    pub(super) key: Key,
    pub(super) stat: Statistic,
    pub(super) primary: bool,
    pub(super) runs: [usize; 2],
    pub(super) counts: [u64; 2],
    pub(super) values: [Option<f64>; 2],
    pub(super) method: Method,
    pub(super) measured: Option<Measured>,
    pub(super) note: Option<String>,
}

/// The route of the rows of a server's CPU: the process serves every route.
pub const ROUTE: &str = "*";

/// The phase name of the rows of a server's time on a CPU per request (the whole
/// server's, and each route's).
pub const CPU: &str = "cpu";

/// Whether `r` is the row of a server's whole CPU per request: a question of its own
/// ("does B cost its server more CPU a request?"), stated in the summary beside the
/// primary rows and tested at α on its own (see [`own_question`]).
pub(super) fn in_summary(r: &Row) -> bool {
    own_question(&r.phase, &r.route, r.statistic)
}

/// Whether the row of `key` and `stat` is a server's whole CPU per request. Such a row
/// is neither primary (the latency question keeps its α to itself) nor an explanation
/// of it (Benjamini–Hochberg among a dozen phase rows would ask a p-value of 0.007 of a
/// change that its own 95 % interval puts beyond the threshold): the comparison answers
/// two questions, each with an error rate of α, the second only where both servers'
/// processes were watched.
pub(super) fn own_question(phase: &str, route: &str, stat: Statistic) -> bool {
    stat == Statistic::PerRequest && phase == CPU && route == ROUTE
}

/// The row of a draft, with its outcome when it measured something.
pub(super) fn decide(d: Draft, discovered: bool, primary_confidence: f64, opts: &Options) -> Row {
    let (tap, phase, route) = d.key;
    let mut row = Row {
        tap,
        route,
        phase,
        statistic: d.stat,
        primary: d.primary,
        count_a: d.counts[0],
        count_b: d.counts[1],
        runs_a: d.runs[0],
        runs_b: d.runs[1],
        method: d.method,
        a: d.values[0],
        b: d.values[1],
        change: None,
        interval: None,
        confidence: None,
        cv_a: None,
        cv_b: None,
        cv_assumed: false,
        mde: None,
        runs_needed: None,
        p: None,
        verdict: Outcome::Unknown,
        direction: None,
        note: d.note,
    };
    if let Some(m) = d.measured {
        let confidence = if d.primary {
            primary_confidence
        } else {
            1.0 - opts.alpha
        };
        verdict(&mut row, &m, confidence, discovered, opts);
    }
    row
}

/// A measured row's change, interval, outcome, direction and power; an explanatory row
/// is `different` only if the false-discovery control kept it.
fn verdict(row: &mut Row, m: &Measured, confidence: f64, discovered: bool, opts: &Options) {
    let explains = !row.primary && !in_summary(row);
    let at = Criteria {
        confidence,
        threshold: opts.threshold,
        detect: opts.detect,
    };
    let n = row.runs_a.min(row.runs_b);
    let v = stats::decide(m, row.statistic, n, at, explains.then_some(discovered));
    if v.not_discovered {
        row.note = Some("beyond the threshold alone, not after Benjamini–Hochberg".into());
    }
    row.direction = v.direction;
    row.change = Some(v.change);
    row.interval = Some(v.interval);
    row.confidence = Some(confidence);
    row.cv_a = Some(m.cv[0]);
    row.cv_b = Some(m.cv[1]);
    row.cv_assumed = m.cv_assumed;
    row.mde = Some(v.mde);
    row.runs_needed = v.runs_needed;
    row.p = Some(v.p);
    row.verdict = v.outcome;
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::stats::LogChange;

    /// A draft of the mean of `t`/`total`/`GET` that measured `estimate` ± `se`.
    pub(in crate::report::compare) fn draft(primary: bool, estimate: f64, se: f64) -> Draft {
        Draft {
            key: ("t".into(), "total".into(), "GET".into()),
            stat: Statistic::Mean,
            primary,
            runs: [1, 1],
            counts: [100, 100],
            values: [Some(1.0), Some(1.0)],
            method: Method::Resampling,
            measured: Some(Measured {
                change: LogChange {
                    estimate,
                    se,
                    df: f64::INFINITY,
                },
                cv: [0.1, 0.1],
                cv_assumed: true,
                pair_sd: None,
            }),
            note: None,
        }
    }
}

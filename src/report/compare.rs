//! `phasescope compare`: did a change make a difference bigger than the noise?
//!
//! For every (tap, phase, route) present on both sides, the change of the mean, p50 and
//! p99 from A to B with a confidence interval, and a verdict. docs/compare.md states the
//! method; in short:
//!
//! - several runs on each side: each run gives one value per statistic; Welch's t
//!   interval on their logarithms measures the change against run-to-run variation;
//! - one run on a side: bootstrap from the recorded histograms (a bounded number of draws
//!   per replicate, seeded), which sees only the sampling noise inside the runs;
//! - Bonferroni: each interval has confidence 1 − α/k for the k intervals in the table,
//!   so that the whole table is right with probability at least 1 − α.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use anyhow::ensure;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::bootstrap::{self, ln_seconds, Sampler, STATISTICS};
use super::dataset::phase_order;
use super::distributions::normal_quantile;
use super::welch;
use crate::metrics::snapshot::{SeriesSnapshot, Snapshot};
use crate::rng::{self, Rng};

/// How to compare.
#[derive(Debug, Clone)]
pub struct Options {
    /// Family-wise error rate: the chance that any verdict in the table is wrong.
    pub alpha: f64,
    /// Bootstrap replicates per series.
    pub resamples: usize,
    /// Draws per replicate, at most (a run's count when smaller).
    pub max_draws: u64,
    pub seed: u64,
    /// Fewer exchanges than this on a side (one-run mode): no verdict.
    pub min_count: u64,
    /// One-run mode compares a percentile only with at least this many values beyond it
    /// on each side (p99: 100 × this many exchanges): the bootstrap of a percentile that
    /// only a handful of values decide is too narrow.
    pub min_tail: u64,
    /// `--fail-if-slower`: as a fraction (0.05 for 5 %).
    pub fail_if_slower: Option<f64>,
    /// Phases `--fail-if-slower` looks at; `all` for every phase.
    pub fail_phases: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            alpha: 0.05,
            resamples: 1000,
            max_draws: 10_000,
            seed: 1,
            min_count: 30,
            min_tail: 20,
            fail_if_slower: None,
            fail_phases: vec!["total".to_owned()],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Welch's t on per-run values.
    Runs,
    /// Bootstrap from the histograms.
    Resampling,
    /// Not compared (absent on a side, or too few exchanges).
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Faster,
    Slower,
    NoDetectableDifference,
    /// One statistic faster, another slower (e.g. a better median, a worse tail).
    Mixed,
    OnlyInA,
    OnlyInB,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::NoDetectableDifference => "no detectable difference",
            Verdict::Mixed => "mixed",
            Verdict::OnlyInA => "only in A",
            Verdict::OnlyInB => "only in B",
        })
    }
}

/// The change of one statistic, B relative to A: `change` = B/A − 1, and the interval of
/// that ratio, at the table's per-interval confidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change {
    /// Seconds, over all runs of the side merged.
    pub a: f64,
    pub b: f64,
    pub change: f64,
    pub low: f64,
    pub high: f64,
}

impl Change {
    fn direction(&self) -> Option<Verdict> {
        if self.low > 0.0 {
            Some(Verdict::Slower)
        } else if self.high < 0.0 {
            Some(Verdict::Faster)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub tap: String,
    pub phase: String,
    pub route: String,
    pub count_a: u64,
    pub count_b: u64,
    /// Runs on each side in which the series appears.
    pub runs_a: usize,
    pub runs_b: usize,
    pub method: Method,
    /// mean, p50, p99, when compared.
    pub mean: Option<Change>,
    pub p50: Option<Change>,
    pub p99: Option<Change>,
    pub verdict: Verdict,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: Vec<String>,
    pub b: Vec<String>,
    /// The chance that the table is right everywhere, at least.
    pub family_confidence: f64,
    /// The confidence of each interval (Bonferroni).
    pub interval_confidence: f64,
    /// Intervals in the table.
    pub intervals: usize,
    pub resamples: usize,
    pub max_draws: u64,
    pub seed: u64,
    pub rows: Vec<Row>,
    /// Why `--fail-if-slower` failed, one line per offending statistic.
    pub failures: Vec<String>,
    pub notes: Vec<String>,
}

type Key = (String, String, String);

/// Per (tap, phase, route), the series of each run that has it.
fn index(runs: &[Snapshot]) -> BTreeMap<Key, Vec<(&SeriesSnapshot, &Snapshot)>> {
    let mut out: BTreeMap<Key, Vec<_>> = BTreeMap::new();
    for snap in runs {
        for (tap, t) in &snap.taps {
            for (phase, routes) in &t.phases {
                for (route, s) in routes {
                    if s.count > 0 {
                        out.entry((tap.clone(), phase.clone(), route.clone()))
                            .or_default()
                            .push((s, snap));
                    }
                }
            }
        }
    }
    out
}

fn merged(
    series: &[(&SeriesSnapshot, &Snapshot)],
) -> anyhow::Result<(Histogram<u64>, u64, f64, f64, f64)> {
    let layout = series
        .first()
        .map(|(_, snap)| snap.hdr)
        .unwrap_or(crate::metrics::HdrLayout::CURRENT);
    let mut h = layout.empty_histogram()?;
    let (mut count, mut sum, mut min, mut max) = (0, 0.0, f64::INFINITY, 0.0f64);
    for (s, _) in series {
        s.add_to(&mut h)?;
        count += s.count;
        sum += s.sum;
        min = min.min(s.min);
        max = max.max(s.max);
    }
    Ok((h, count, sum, min, max))
}

/// Merged mean, p50, p99 of one side, in seconds, computed as `/api/snapshot` does.
fn side_stats(h: &Histogram<u64>, count: u64, sum: f64, min: f64, max: f64) -> [f64; 3] {
    let (lo, hi) = ((min * 1e9).round() as u64, (max * 1e9).round() as u64);
    let q = |q: f64| h.value_at_quantile(q).clamp(lo.min(hi), hi) as f64 / 1e9;
    [sum / count.max(1) as f64, q(0.5), q(0.99)]
}

/// Compares runs `a` against runs `b` (names for the header in `a_names`, `b_names`).
pub fn compare(
    a: &[Snapshot],
    b: &[Snapshot],
    a_names: Vec<String>,
    b_names: Vec<String>,
    opts: &Options,
) -> anyhow::Result<Comparison> {
    ensure!(
        !a.is_empty() && !b.is_empty(),
        "compare needs at least one snapshot on each side"
    );
    ensure!(
        opts.alpha > 0.0 && opts.alpha < 1.0,
        "alpha must lie between 0 and 1"
    );
    ensure!(opts.resamples >= 50, "at least 50 resamples");
    let ia = index(a);
    let ib = index(b);
    let mut keys: Vec<&Key> = ia
        .keys()
        .chain(ib.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    keys.sort_by_key(|(tap, phase, route)| (tap.clone(), phase_order(phase), route.clone()));

    // First pass: what gets compared, and how; that fixes k for Bonferroni.
    struct Plan<'a> {
        key: &'a Key,
        method: Method,
        /// Which of mean, p50, p99 get an interval.
        stats: [bool; 3],
        verdict: Option<Verdict>,
        note: Option<String>,
    }
    let mut plans = Vec::new();
    for key in keys {
        let (sa, sb) = (ia.get(key), ib.get(key));
        let count = |s: Option<&Vec<(&SeriesSnapshot, &Snapshot)>>| {
            s.map_or(0, |v| v.iter().map(|(x, _)| x.count).sum::<u64>())
        };
        let (ca, cb) = (count(sa), count(sb));
        let plan = match (sa, sb) {
            (Some(_), None) => Plan {
                key,
                method: Method::None,
                stats: [false; 3],
                verdict: Some(Verdict::OnlyInA),
                note: None,
            },
            (None, Some(_)) => Plan {
                key,
                method: Method::None,
                stats: [false; 3],
                verdict: Some(Verdict::OnlyInB),
                note: None,
            },
            (Some(ra), Some(rb)) if ra.len() >= 2 && rb.len() >= 2 => Plan {
                key,
                method: Method::Runs,
                stats: [true; 3],
                verdict: None,
                note: None,
            },
            _ if ca < opts.min_count || cb < opts.min_count => Plan {
                key,
                method: Method::None,
                stats: [false; 3],
                verdict: Some(Verdict::NoDetectableDifference),
                note: Some(format!(
                    "too few exchanges: fewer than {} on a side",
                    opts.min_count
                )),
            },
            _ => {
                let n = ca.min(cb) as f64;
                let tail = opts.min_tail as f64;
                Plan {
                    key,
                    method: Method::Resampling,
                    stats: [true, n * 0.5 >= tail, n * 0.01 >= tail],
                    verdict: None,
                    note: None,
                }
            }
        };
        plans.push(plan);
    }
    let skipped = plans
        .iter()
        .filter(|p| p.method == Method::Resampling && !p.stats.iter().all(|s| *s))
        .count();
    let intervals: usize = plans
        .iter()
        .map(|p| p.stats.iter().filter(|s| **s).count())
        .sum();
    let interval_confidence = 1.0 - opts.alpha / intervals.max(1) as f64;
    let z = normal_quantile(1.0 - (1.0 - interval_confidence) / 2.0);

    let mut rows = Vec::new();
    for plan in plans {
        let (tap, phase, route) = plan.key;
        let sa = ia.get(plan.key).map(Vec::as_slice).unwrap_or_default();
        let sb = ib.get(plan.key).map(Vec::as_slice).unwrap_or_default();
        let (ha, ca, suma, mina, maxa) = merged(sa)?;
        let (hb, cb, sumb, minb, maxb) = merged(sb)?;
        let va = side_stats(&ha, ca, suma, mina, maxa);
        let vb = side_stats(&hb, cb, sumb, minb, maxb);
        let changes: Option<[Change; 3]> = match plan.method {
            Method::None => None,
            Method::Runs => {
                let per_run = |runs: &[(&SeriesSnapshot, &Snapshot)]| -> [Vec<f64>; 3] {
                    [
                        runs.iter().map(|(s, _)| ln_seconds(s.mean)).collect(),
                        runs.iter().map(|(s, _)| ln_seconds(s.p50)).collect(),
                        runs.iter().map(|(s, _)| ln_seconds(s.p99)).collect(),
                    ]
                };
                let (la, lb) = (per_run(sa), per_run(sb));
                let mut out = [Change {
                    a: 0.0,
                    b: 0.0,
                    change: 0.0,
                    low: 0.0,
                    high: 0.0,
                }; 3];
                for i in 0..3 {
                    let w = welch::interval(&la[i], &lb[i], interval_confidence)
                        .ok_or_else(|| anyhow::anyhow!("Welch needs two runs a side"))?;
                    out[i] = Change {
                        a: va[i],
                        b: vb[i],
                        change: w.estimate.exp_m1(),
                        low: w.low.exp_m1(),
                        high: w.high.exp_m1(),
                    };
                }
                Some(out)
            }
            Method::Resampling => {
                let (Some(pa), Some(pb)) = (Sampler::new(&ha), Sampler::new(&hb)) else {
                    anyhow::bail!("{tap}/{phase}/{route}: an empty histogram with a count");
                };
                let mut rng = Rng::new(opts.seed ^ rng::hash(&[tap, phase, route]));
                let se =
                    bootstrap::log_ratio_se(&pa, &pb, opts.resamples, opts.max_draws, &mut rng);
                let mut out = [Change {
                    a: 0.0,
                    b: 0.0,
                    change: 0.0,
                    low: 0.0,
                    high: 0.0,
                }; 3];
                for i in 0..3 {
                    let d = ln_seconds(vb[i]) - ln_seconds(va[i]);
                    out[i] = Change {
                        a: va[i],
                        b: vb[i],
                        change: d.exp_m1(),
                        low: (d - z * se[i]).exp_m1(),
                        high: (d + z * se[i]).exp_m1(),
                    };
                }
                Some(out)
            }
        };
        let verdict = plan.verdict.unwrap_or_else(|| {
            let dirs: Vec<Verdict> = changes
                .iter()
                .flatten()
                .zip(plan.stats)
                .filter(|(_, compared)| *compared)
                .filter_map(|(c, _)| c.direction())
                .collect();
            let slower = dirs.contains(&Verdict::Slower);
            let faster = dirs.contains(&Verdict::Faster);
            match (slower, faster) {
                (true, true) => Verdict::Mixed,
                (true, false) => Verdict::Slower,
                (false, true) => Verdict::Faster,
                (false, false) => Verdict::NoDetectableDifference,
            }
        });
        let pick = |i: usize| changes.filter(|_| plan.stats[i]).map(|c| c[i]);
        rows.push(Row {
            tap: tap.clone(),
            phase: phase.clone(),
            route: route.clone(),
            count_a: ca,
            count_b: cb,
            runs_a: sa.len(),
            runs_b: sb.len(),
            method: plan.method,
            mean: pick(0),
            p50: pick(1),
            p99: pick(2),
            verdict,
            note: plan.note,
        });
    }

    let mut failures = Vec::new();
    if let Some(limit) = opts.fail_if_slower {
        let all = opts.fail_phases.iter().any(|p| p == "all");
        for r in &rows {
            if !all && !opts.fail_phases.contains(&r.phase) {
                continue;
            }
            for (name, c) in STATISTICS.iter().zip([r.mean, r.p50, r.p99]) {
                if let Some(c) = c.filter(|c| c.low > limit) {
                    failures.push(format!(
                        "{}/{}/{}: {name} slower by {:+.1} % (interval {:+.1} % to {:+.1} %), more than the {:.1} % allowed",
                        r.tap, r.route, r.phase,
                        c.change * 100.0, c.low * 100.0, c.high * 100.0, limit * 100.0
                    ));
                }
            }
        }
    }

    let mut notes = Vec::new();
    let methods: BTreeSet<Method> = rows
        .iter()
        .map(|r| r.method)
        .filter(|m| *m != Method::None)
        .collect();
    if methods.contains(&Method::Runs) {
        notes.push(format!(
            "several runs per side: one mean, p50 and p99 per run; Welch's t interval on their \
             logarithms, so the interval covers run-to-run variation ({} vs {} runs)",
            a.len(),
            b.len()
        ));
    }
    if methods.contains(&Method::Resampling) {
        notes.push(format!(
            "one run on a side: bootstrap from the recorded histograms, {} replicates of at most \
             {} draws per side (runs with more exchanges are resampled at {} draws, which widens \
             the interval: the safe side), seed {}; a percentile is compared only with at least \
             {} values beyond it on each side (p99: {} exchanges); this sees the sampling noise \
             inside the runs only, not differences between runs (warm-up, other load, CPU \
             frequency): compare several runs per side for that",
            opts.resamples,
            opts.max_draws,
            opts.max_draws,
            opts.seed,
            opts.min_tail,
            opts.min_tail * 100
        ));
    }
    if skipped > 0 {
        notes.push(format!(
            "{skipped} series had too few exchanges for a percentile interval (p50 needs {}, \
             p99 {} on each side): shown as -",
            opts.min_tail * 2,
            opts.min_tail * 100
        ));
    }
    notes.extend(super::inside::compare_notes(a, b));
    notes.push(format!(
        "each interval is {:.3} % (Bonferroni: {:.0} % for all {} together); a verdict is \
         'slower' or 'faster' only when a whole interval lies on one side of 0",
        interval_confidence * 100.0,
        (1.0 - opts.alpha) * 100.0,
        intervals
    ));

    Ok(Comparison {
        a: a_names,
        b: b_names,
        family_confidence: 1.0 - opts.alpha,
        interval_confidence,
        intervals,
        resamples: opts.resamples,
        max_draws: opts.max_draws,
        seed: opts.seed,
        rows,
        failures,
        notes,
    })
}

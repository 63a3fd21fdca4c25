//! `phasescope compare`: is B the same as A, different, or is it too early to say?
//!
//! For every compared statistic (the mean of each phase; p50, p99 of the primary phases;
//! the request rate) one row with the change B/A − 1, its interval, each side's run-to-run
//! variation, the minimum detectable effect and the runs needed to detect `--detect`, and
//! one of three outcomes ([`Outcome`]): `same` (the interval lies inside ±threshold),
//! `different` (it lies beyond it), `unknown`. docs/compare.md states the method; in short:
//!
//! - several runs on each side: one value per run; Welch's t on their logarithms, so the
//!   interval is made of run-to-run variation, the noise of a rerun;
//! - one run on a side: a bootstrap from the histograms gives the sampling noise inside
//!   the runs, and a run-to-run drift that one run cannot show is added as an assumed
//!   coefficient of variation (`--drift`, 10 %): one run alone is `different` only for a
//!   change far beyond what reruns drift by;
//! - the primary rows (the front tap's `total` and request rate, per route) share α by
//!   Bonferroni; the other rows explain and are controlled by Benjamini–Hochberg.

mod cpu;
pub mod findings;
pub mod functions;
mod route_cpu;
pub mod selection;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::ensure;
use hdrhistogram::Histogram;
use serde::Serialize;

use self::selection::{check_named, front_taps, select};
use crate::metrics::snapshot::{SeriesSnapshot, Snapshot};
use crate::report::bootstrap::{self, ln_seconds, std_dev, Sampler};
use crate::report::multiplicity::benjamini_hochberg;
use crate::report::source::dataset::phase_order;
use crate::report::verdict::{runs_needed, LogChange, Outcome};
use crate::rng::{self, Rng};

/// How to compare.
#[derive(Debug, Clone)]
pub struct Options {
    /// Error rate of the primary question (shared by its rows), and the false-discovery
    /// rate of the explanatory rows.
    pub alpha: f64,
    /// `same` inside ±threshold, `different` beyond it (a fraction: 0.02 for 2 %).
    pub threshold: f64,
    /// The change the power statement is about (`runs_needed`), a fraction.
    pub detect: f64,
    /// Run-to-run coefficient of variation assumed for a side with one run, a fraction.
    pub drift: f64,
    /// Bootstrap replicates per series.
    pub resamples: usize,
    /// Draws per replicate, at most (a run's count when smaller).
    pub max_draws: u64,
    pub seed: u64,
    /// Fewer exchanges than this on a side (one-run mode): no interval.
    pub min_count: u64,
    /// One-run mode compares a percentile only with at least this many values beyond it
    /// on each side (p99: 100 × this many exchanges).
    pub min_tail: u64,
    /// `--fail-if-slower`: as a fraction (0.05 for 5 %).
    pub fail_if_slower: Option<f64>,
    /// Phases `--fail-if-slower` looks at besides the primary rows' (`all`: every row);
    /// empty: the primary rows only.
    pub fail_phases: Vec<String>,
    /// Taps compared (all when empty); the primary taps when given.
    pub taps: Vec<String>,
    /// B's tap compared as A's single `taps` entry (an A/B bench: tap `b` against `a`).
    pub vs_tap: Option<String>,
    /// The primary phases (`total`).
    pub phases: Vec<String>,
    /// Routes compared (all when empty).
    pub routes: Vec<String>,
    /// A's `i`-th snapshot and B's `i`-th were measured at the same time (a duet's
    /// windows): compare the paired log ratios (`paired`).
    pub paired: bool,
    /// Compare the servers' functions and components too, where both sides have call
    /// stacks (a bench's check of its mde so far needs the primary rows only).
    pub functions: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            alpha: 0.05,
            threshold: 0.02,
            detect: 0.01,
            drift: 0.10,
            resamples: 1000,
            max_draws: 10_000,
            seed: 1,
            min_count: 30,
            min_tail: 20,
            fail_if_slower: None,
            fail_phases: Vec::new(),
            taps: Vec::new(),
            vs_tap: None,
            phases: vec!["total".to_owned()],
            routes: Vec::new(),
            paired: false,
            functions: true,
        }
    }
}

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

/// What a row compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    Mean,
    P50,
    P99,
    /// Requests per second of the run (`total`'s count over the snapshot's window).
    Rate,
    /// Seconds of the upstream's thread-time per exchange (the `cpu` rows,
    /// [`self::cpu`]).
    PerRequest,
}

impl Statistic {
    pub fn as_str(self) -> &'static str {
        match self {
            Statistic::Mean => "mean",
            Statistic::P50 => "p50",
            Statistic::P99 => "p99",
            Statistic::Rate => "req/s",
            Statistic::PerRequest => "per req",
        }
    }
}

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

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: Vec<String>,
    pub b: Vec<String>,
    pub alpha: f64,
    pub threshold: f64,
    pub detect: f64,
    pub drift: f64,
    /// Confidence of each primary row's interval (Bonferroni over the primary rows).
    pub primary_confidence: f64,
    /// Primary rows with an interval.
    pub primary_rows: usize,
    pub resamples: usize,
    pub max_draws: u64,
    pub seed: u64,
    pub rows: Vec<Row>,
    /// The primary rows' outcomes in words.
    pub summary: Vec<String>,
    /// Why `--fail-if-slower` failed, one line per offending row.
    pub failures: Vec<String>,
    pub notes: Vec<String>,
    /// Findings (docs/findings.md) that appear, go or stay between A and B.
    pub findings: self::findings::FindingsChange,
    /// Where both sides have sampled call stacks: per function and per component, CPU
    /// per request on each side with its verdict, those that changed most first
    /// ([`self::functions`]).
    pub functions: Vec<self::functions::FunctionRow>,
}

pub(super) type Key = (String, String, String);
type Runs<'a> = Vec<(&'a SeriesSnapshot, &'a Snapshot)>;

/// Per (tap, phase, route), the series of each run that has it.
fn index<'a>(runs: &'a [Snapshot], routes: &[String]) -> BTreeMap<Key, Runs<'a>> {
    let mut out: BTreeMap<Key, Runs<'a>> = BTreeMap::new();
    for snap in runs {
        for (tap, t) in &snap.taps {
            for (phase, by_route) in &t.phases {
                for (route, s) in by_route {
                    if s.count > 0 && (routes.is_empty() || routes.contains(route)) {
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

fn merged(series: &Runs<'_>) -> anyhow::Result<(Histogram<u64>, u64, f64, f64, f64)> {
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

/// The request rate of one run: exchanges over the snapshot's window.
fn rate(s: &SeriesSnapshot, snap: &Snapshot) -> Option<f64> {
    let window = snap.taken_at_unix - snap.since_unix;
    (window > 0.0).then(|| s.count as f64 / window)
}

/// One run's value of `stat`.
pub(super) fn per_run(stat: Statistic, s: &SeriesSnapshot, snap: &Snapshot) -> Option<f64> {
    match stat {
        Statistic::Mean => Some(s.mean),
        Statistic::P50 => Some(s.p50),
        Statistic::P99 => Some(s.p99),
        Statistic::Rate => rate(s, snap),
        // Not a series' statistic: the upstream's, in `compare_cpu`.
        Statistic::PerRequest => None,
    }
}

/// One side of a row: the runs' log values and the merged value.
pub(super) struct Side {
    pub(super) logs: Vec<f64>,
    pub(super) value: f64,
    pub(super) count: u64,
}

fn side(stat: Statistic, runs: &Runs<'_>) -> anyhow::Result<Option<Side>> {
    let logs: Option<Vec<f64>> = runs
        .iter()
        .map(|(s, snap)| per_run(stat, s, snap).map(ln_seconds))
        .collect();
    let Some(logs) = logs else {
        return Ok(None);
    };
    let (h, count, sum, min, max) = merged(runs)?;
    let (lo, hi) = ((min * 1e9).round() as u64, (max * 1e9).round() as u64);
    let q = |q: f64| h.value_at_quantile(q).clamp(lo.min(hi), hi) as f64 / 1e9;
    let value = match stat {
        Statistic::Mean | Statistic::PerRequest => sum / count.max(1) as f64,
        Statistic::P50 => q(0.5),
        Statistic::P99 => q(0.99),
        Statistic::Rate => (logs.iter().sum::<f64>() / logs.len() as f64).exp(),
    };
    Ok(Some(Side { logs, value, count }))
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// What one row measured before the outcome is decided.
pub(super) struct Measured {
    pub(super) change: LogChange,
    pub(super) cv: [f64; 2],
    pub(super) cv_assumed: bool,
    /// Paired windows: the standard deviation of the per-window log ratios.
    pub(super) pair_sd: Option<f64>,
}

/// Welch's t on the per-run logs.
pub(super) fn between_runs(a: &Side, b: &Side) -> Measured {
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
fn within_run(a: &Side, b: &Side, boot_se: f64, drift: f64) -> Measured {
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

/// Compares runs `a` against runs `b` (names for the header in `a_names`, `b_names`), in
/// named steps: check the options, select the taps, draft a row per statistic of every
/// series, share α among the rows, decide each row's outcome, and say how in the notes.
pub fn compare(
    a: &[Snapshot],
    b: &[Snapshot],
    a_names: Vec<String>,
    b_names: Vec<String>,
    opts: &Options,
) -> anyhow::Result<Comparison> {
    validate(a, b, opts)?;
    let (a, b) = selected(a, b, opts)?;
    let drafts = draft_all(&a, &b, opts)?;
    let family = Family::of(&drafts, opts);
    let rows: Vec<Row> = drafts
        .into_iter()
        .zip(&family.discovered)
        .map(|(d, &discovered)| decide(d, discovered, family.primary_confidence, opts))
        .collect();
    let failures = opts
        .fail_if_slower
        .map(|limit| failures(&rows, limit, &opts.fail_phases))
        .unwrap_or_default();
    // The question's rows, then what a request costs each watched server's CPU: a verdict
    // of its own, not part of α's split among the primary rows.
    let summary = rows
        .iter()
        .filter(|r| r.primary)
        .chain(rows.iter().filter(|r| self::cpu::in_summary(r)))
        .map(|r| statement(r, opts))
        .collect();
    let functions = if opts.functions {
        self::functions::rows(&a, &b, opts)
    } else {
        Vec::new()
    };
    let mut notes = notes(&rows, &a, &b, &family, opts);
    if !functions.is_empty() {
        notes.push(self::functions::note(&functions, opts));
    }
    Ok(Comparison {
        a: a_names,
        b: b_names,
        alpha: opts.alpha,
        threshold: opts.threshold,
        detect: opts.detect,
        drift: opts.drift,
        primary_confidence: family.primary_confidence,
        primary_rows: family.primary_rows,
        resamples: opts.resamples,
        max_draws: opts.max_draws,
        seed: opts.seed,
        rows,
        summary,
        failures,
        notes,
        functions,
        findings: self::findings::FindingsChange::of(
            &a,
            &b,
            opts.vs_tap
                .as_deref()
                .and_then(|vs| Some((opts.taps.first()?.as_str(), vs))),
        ),
    })
}

/// The options a comparison can be made with, and the taps they name on each side.
fn validate(a: &[Snapshot], b: &[Snapshot], opts: &Options) -> anyhow::Result<()> {
    ensure!(
        !a.is_empty() && !b.is_empty(),
        "compare needs at least one snapshot on each side"
    );
    ensure!(
        opts.alpha > 0.0 && opts.alpha < 1.0,
        "alpha must lie between 0 and 1"
    );
    ensure!(
        opts.threshold > 0.0 && opts.threshold < 1.0,
        "the threshold must lie between 0 and 100 %"
    );
    ensure!(opts.detect > 0.0, "--detect must be above 0");
    ensure!(opts.drift >= 0.0, "--drift must not be negative");
    ensure!(opts.resamples >= 50, "at least 50 resamples");
    check_named(a, b, &opts.taps, opts.vs_tap.as_deref())
}

/// Each side with the compared taps only; with `--vs-tap`, B's tap renamed as A's.
fn selected(
    a: &[Snapshot],
    b: &[Snapshot],
    opts: &Options,
) -> anyhow::Result<(Vec<Snapshot>, Vec<Snapshot>)> {
    Ok(match &opts.vs_tap {
        Some(vs) => {
            ensure!(
                opts.taps.len() == 1,
                "--vs-tap compares B's tap with one tap of A: give exactly one --tap"
            );
            (
                select(a, &opts.taps, None),
                select(b, &[], Some((vs, &opts.taps[0]))),
            )
        }
        None => (select(a, &opts.taps, None), select(b, &opts.taps, None)),
    })
}

/// The taps whose primary phases are the question: those named, else the front taps.
fn primary_taps(a: &[Snapshot], b: &[Snapshot], opts: &Options) -> BTreeSet<String> {
    if opts.taps.is_empty() {
        let mut both = a.to_vec();
        both.extend(b.iter().cloned());
        front_taps(&both)
    } else {
        opts.taps.iter().cloned().collect()
    }
}

/// Every series of either side, by tap, then route, then phase in the readers' order.
fn ordered_keys<'k>(
    ia: &'k BTreeMap<Key, Runs<'_>>,
    ib: &'k BTreeMap<Key, Runs<'_>>,
) -> Vec<&'k Key> {
    let mut keys: Vec<&Key> = ia
        .keys()
        .chain(ib.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    keys.sort_by_key(|(tap, phase, route)| (tap.clone(), route.clone(), phase_order(phase)));
    keys
}

/// One draft per statistic of every series, in the order the rows are shown.
fn draft_all(a: &[Snapshot], b: &[Snapshot], opts: &Options) -> anyhow::Result<Vec<Draft>> {
    let primary_taps = primary_taps(a, b, opts);
    let ia = index(a, &opts.routes);
    let ib = index(b, &opts.routes);
    let empty = Vec::new();
    let mut drafts = Vec::new();
    for key in ordered_keys(&ia, &ib) {
        let series = Series {
            key,
            runs: [ia.get(key).unwrap_or(&empty), ib.get(key).unwrap_or(&empty)],
            primary: opts.phases.contains(&key.1) && primary_taps.contains(&key.0),
        };
        drafts.extend(series.drafts(a, b, opts)?);
    }
    drafts.extend(self::cpu::drafts(a, b, opts));
    drafts.extend(self::route_cpu::drafts(a, b, opts));
    Ok(drafts)
}

/// The statistics compared for a phase: the mean of every phase; p50 and p99 of the
/// primary phases; the request rate from `total`.
fn statistics(phase: &str, opts: &Options) -> Vec<Statistic> {
    let mut stats = vec![Statistic::Mean];
    if opts.phases.iter().any(|p| p == phase) {
        stats.extend([Statistic::P50, Statistic::P99]);
    }
    if phase == "total" {
        stats.push(Statistic::Rate);
    }
    stats
}

/// Whether a statistic of a primary series is part of the question. In paired windows
/// both sides share one load generator and one proxy, and the split of the request rate
/// between them measures how those scheduled the two as much as the servers (A/A
/// measured +6.4 %): it explains, it is not the question (docs/compare.md).
fn primary_statistic(stat: Statistic, paired: bool) -> bool {
    match stat {
        Statistic::Mean => true,
        Statistic::Rate => !paired,
        _ => false,
    }
}

/// One series (tap, phase, route) and its runs on each side.
struct Series<'k, 'r, 's> {
    key: &'k Key,
    runs: [&'r Runs<'s>; 2],
    /// A primary phase of a primary tap.
    primary: bool,
}

impl Series<'_, '_, '_> {
    fn drafts(&self, a: &[Snapshot], b: &[Snapshot], opts: &Options) -> anyhow::Result<Vec<Draft>> {
        let [ra, rb] = self.runs;
        let counts = [ra, rb].map(|r| r.iter().map(|(s, _)| s.count).sum::<u64>());
        // The bootstrap is computed once per series, for all its statistics.
        let mut boot: Option<[f64; 3]> = None;
        let mut out = Vec::new();
        for stat in statistics(&self.key.1, opts) {
            let mut d = Draft {
                key: self.key.clone(),
                stat,
                primary: self.primary && primary_statistic(stat, opts.paired),
                runs: [ra.len(), rb.len()],
                counts,
                values: [None, None],
                method: Method::None,
                measured: None,
                note: None,
            };
            self.measure(&mut d, (a, b), &mut boot, opts)?;
            out.push(d);
        }
        Ok(out)
    }

    /// Fills in what `d` measured and how, or the note that says why it could not.
    fn measure(
        &self,
        d: &mut Draft,
        (a, b): (&[Snapshot], &[Snapshot]),
        boot: &mut Option<[f64; 3]>,
        opts: &Options,
    ) -> anyhow::Result<()> {
        let [ra, rb] = self.runs;
        let stat = d.stat;
        if ra.is_empty() || rb.is_empty() {
            d.note = Some(
                if ra.is_empty() {
                    "only in B"
                } else {
                    "only in A"
                }
                .to_owned(),
            );
            return Ok(());
        }
        let (Some(sa), Some(sb)) = (side(stat, ra)?, side(stat, rb)?) else {
            d.note = Some("a snapshot without a time window".to_owned());
            return Ok(());
        };
        d.values = [Some(sa.value), Some(sb.value)];
        let several = ra.len() >= 2 && rb.len() >= 2;
        if several && self.thin_in_a_run(stat, opts.min_tail) {
            d.note = Some(format!(
                "too few exchanges beyond the percentile in a run (needs {} beyond it)",
                opts.min_tail
            ));
            return Ok(());
        }
        if opts.paired {
            let (tap, phase, route) = self.key;
            let mut rng = Rng::new(opts.seed ^ rng::hash(&[tap, phase, route, stat.as_str()]));
            let paired = crate::report::paired::measure(
                stat,
                (tap, phase, route),
                a,
                b,
                opts.resamples,
                &mut rng,
            );
            if let Some((m, pairs)) = paired {
                d.method = Method::Paired;
                d.runs = [pairs; 2];
                d.measured = Some(m);
                return Ok(());
            }
        }
        if several {
            d.method = Method::Runs;
            d.measured = Some(between_runs(&sa, &sb));
            return Ok(());
        }
        if let Some(note) = too_few(stat, sa.count.min(sb.count), opts) {
            d.note = Some(note);
            return Ok(());
        }
        let boot_se = self.boot_se(stat, boot, opts)?;
        d.method = Method::Resampling;
        d.measured = Some(within_run(&sa, &sb, boot_se, opts.drift));
        Ok(())
    }

    /// A percentile decided by a handful of values is heavy-tailed noise, per run as much
    /// as per bootstrap: with several runs, it is compared only with enough values beyond
    /// it in every run.
    fn thin_in_a_run(&self, stat: Statistic, min_tail: u64) -> bool {
        let beyond = match stat {
            Statistic::P50 => Some(0.5),
            Statistic::P99 => Some(0.01),
            _ => None,
        };
        let [ra, rb] = self.runs;
        let smallest_run = ra.iter().chain(rb.iter()).map(|(s, _)| s.count).min();
        matches!((beyond, smallest_run), (Some(q), Some(n)) if (n as f64) * q < min_tail as f64)
    }

    /// The bootstrap's standard error of the log ratio of `stat` (0 for the rate, which
    /// has no histogram), computed once for the series' three statistics.
    fn boot_se(
        &self,
        stat: Statistic,
        boot: &mut Option<[f64; 3]>,
        opts: &Options,
    ) -> anyhow::Result<f64> {
        let i = match stat {
            Statistic::Rate | Statistic::PerRequest => return Ok(0.0),
            Statistic::Mean => 0,
            Statistic::P50 => 1,
            Statistic::P99 => 2,
        };
        if boot.is_none() {
            let (tap, phase, route) = self.key;
            let (ha, ..) = merged(self.runs[0])?;
            let (hb, ..) = merged(self.runs[1])?;
            let (Some(pa), Some(pb)) = (Sampler::new(&ha), Sampler::new(&hb)) else {
                anyhow::bail!("{tap}/{phase}/{route}: an empty histogram with a count");
            };
            let mut rng = Rng::new(opts.seed ^ rng::hash(&[tap, phase, route]));
            *boot = Some(bootstrap::log_ratio_se(
                &pa,
                &pb,
                opts.resamples,
                opts.max_draws,
                &mut rng,
            ));
        }
        Ok(boot.map_or(0.0, |b| b[i]))
    }
}

/// One run a side: why `stat` cannot be compared with `n` exchanges on the smaller side.
fn too_few(stat: Statistic, n: u64, opts: &Options) -> Option<String> {
    let tail = opts.min_tail as f64;
    let enough = match stat {
        Statistic::Mean | Statistic::Rate | Statistic::PerRequest => n >= opts.min_count,
        Statistic::P50 => n >= opts.min_count && n as f64 * 0.5 >= tail,
        Statistic::P99 => n >= opts.min_count && n as f64 * 0.01 >= tail,
    };
    (!enough).then(|| match stat {
        Statistic::P50 | Statistic::P99 if n >= opts.min_count => format!(
            "too few exchanges beyond the percentile (needs {} beyond it on each side)",
            opts.min_tail
        ),
        _ => format!("too few exchanges: fewer than {} on a side", opts.min_count),
    })
}

/// How the rows share α: Bonferroni over the primary rows, Benjamini–Hochberg over the
/// others.
struct Family {
    /// Primary rows with an interval.
    primary_rows: usize,
    /// Each primary row's confidence.
    primary_confidence: f64,
    /// Per draft: an explanatory row whose change survived the false-discovery control.
    discovered: Vec<bool>,
}

impl Family {
    fn of(drafts: &[Draft], opts: &Options) -> Family {
        let primary_rows = drafts
            .iter()
            .filter(|d| d.primary && d.measured.is_some())
            .count();
        let primary_confidence = 1.0 - opts.alpha / primary_rows.max(1) as f64;
        // A statistic without any spread (a phase that takes 0 ns in every run) is no
        // test: it is not counted in the false-discovery family.
        let explanatory: Vec<usize> = (0..drafts.len())
            .filter(|&i| {
                !drafts[i].primary
                    && !self::cpu::own_question(&drafts[i].key.1, &drafts[i].key.2, drafts[i].stat)
                    && drafts[i]
                        .measured
                        .as_ref()
                        .is_some_and(|m| m.change.se > 0.0)
            })
            .collect();
        let p_expl: Vec<f64> = explanatory
            .iter()
            .filter_map(|&i| drafts[i].measured.as_ref())
            .map(|m| m.change.p_beyond(opts.threshold))
            .collect();
        let rejected = benjamini_hochberg(&p_expl, opts.alpha);
        let mut discovered = vec![false; drafts.len()];
        for (&i, r) in explanatory.iter().zip(rejected) {
            discovered[i] = r;
        }
        Family {
            primary_rows,
            primary_confidence,
            discovered,
        }
    }
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

/// A measured row's change, interval, outcome, direction and power.
fn verdict(row: &mut Row, m: &Measured, confidence: f64, discovered: bool, opts: &Options) {
    let (low, high) = m.change.interval(confidence);
    let mut verdict = m.change.outcome(confidence, opts.threshold);
    let explains = !row.primary && !self::cpu::in_summary(row);
    if verdict == Outcome::Different && explains && !discovered && m.change.se > 0.0 {
        verdict = Outcome::Unknown;
        row.note = Some("beyond the threshold alone, not after Benjamini–Hochberg".into());
    }
    let change = m.change.change();
    row.direction = (verdict == Outcome::Different).then(|| {
        let up = change > 0.0;
        match (up, row.statistic == Statistic::Rate) {
            (true, false) | (false, true) => Direction::Slower,
            _ => Direction::Faster,
        }
    });
    row.change = Some(change);
    row.interval = Some([low, high]);
    row.confidence = Some(confidence);
    row.cv_a = Some(m.cv[0]);
    row.cv_b = Some(m.cv[1]);
    row.cv_assumed = m.cv_assumed;
    row.mde = Some(m.change.mde(confidence));
    // Paired: from the interval's own standard error and degrees of freedom, so that the
    // windows needed agree with the mde; runs: from each side's run-to-run variation.
    let stat = row.statistic;
    row.runs_needed = match m.pair_sd {
        Some(_) => crate::report::verdict::windows_needed(
            m.change.se,
            row.runs_a.min(row.runs_b),
            opts.detect,
            confidence,
            |n| crate::report::paired::degrees_of_freedom(stat, n),
        ),
        None => runs_needed(m.cv[0], m.cv[1], opts.detect, confidence),
    };
    row.p = Some(m.change.p_beyond(opts.threshold));
    row.verdict = verdict;
}

/// How the rows were compared, in words: one note per method used, the inside of the
/// upstreams, and what the outcomes and α mean.
fn notes(
    rows: &[Row],
    a: &[Snapshot],
    b: &[Snapshot],
    family: &Family,
    opts: &Options,
) -> Vec<String> {
    let mut notes = Vec::new();
    let methods: BTreeSet<Method> = rows.iter().map(|r| r.method).collect();
    if methods.contains(&Method::Runs) && methods.contains(&Method::Paired) {
        // Paired windows compare a statistic only where both sides have it in a window and
        // it is above zero (a log ratio); the rest fall back to the windows as runs.
        let unpaired: BTreeSet<&str> = rows
            .iter()
            .filter(|r| r.method == Method::Runs)
            .map(|r| r.phase.as_str())
            .collect();
        notes.push(format!(
            "not paired ({}): zero or missing in some window, so compared as {} vs {} runs \
             with Welch's t on the logarithms of the windows' values",
            unpaired.into_iter().collect::<Vec<_>>().join(", "),
            a.len(),
            b.len()
        ));
    } else if methods.contains(&Method::Runs) {
        notes.push(format!(
            "several runs per side ({} vs {}): one value per run; Welch's t interval on their \
             logarithms, so the interval is made of run-to-run variation",
            a.len(),
            b.len()
        ));
    }
    if methods.contains(&Method::Paired) {
        notes.push(format!(
            "paired windows ({} of A, {} of B, measured at the same time): B/A of the totals \
             over the windows, its standard error from {} bootstrap replicates of whole \
             windows (both sides together), so what disturbed both sides in a window \
             cancels; runs_a and runs_b count the windows compared",
            a.len(),
            b.len(),
            opts.resamples
        ));
    }
    if methods.contains(&Method::Resampling) {
        notes.push(format!(
            "one run on a side: a bootstrap from the histograms ({} replicates of at most {} \
             draws, seed {}) measures the noise inside the runs; one run cannot show how much \
             reruns drift, so a run-to-run variation of {:.1} % a run is assumed (--drift): \
             take several runs a side to measure it",
            opts.resamples,
            opts.max_draws,
            opts.seed,
            opts.drift * 100.0
        ));
    }
    notes.extend(crate::report::render::inside::compare_notes(a, b));
    if rows.iter().any(self::cpu::in_summary) {
        notes.push(format!(
            "phase cpu, route *: the server's time on a CPU per request (its threads' \
             scheduler statistics over the tap's exchanges), a question of its own at {:.0} %: \
             thread-time does not grow while a thread waits for a CPU, so the machine's load \
             moves it far less than latency; cpu_user, cpu_system and cpu_parser explain it",
            (1.0 - opts.alpha) * 100.0
        ));
    }
    notes.push(format!(
        "same: the interval lies inside ±{t:.1} %; different: it lies entirely beyond ±{t:.1} %; \
         unknown: neither. Primary rows (the client-facing tap's {phases} and request rate) \
         share α = {alpha}: each interval is {pc:.2} % (Bonferroni over {n}); the other rows \
         explain, each at {ec:.0} %, and are different only under Benjamini–Hochberg at q = \
         {alpha}. mde: the change detectable with 80 % power at these runs",
        t = opts.threshold * 100.0,
        phases = opts.phases.join(", "),
        alpha = opts.alpha,
        pc = family.primary_confidence * 100.0,
        n = family.primary_rows,
        ec = (1.0 - opts.alpha) * 100.0,
    ));
    notes
}

/// `--fail-if-slower`: rows slower, with confidence, by more than `limit`.
fn failures(rows: &[Row], limit: f64, phases: &[String]) -> Vec<String> {
    let all = phases.iter().any(|p| p == "all");
    let mut out = Vec::new();
    for r in rows {
        let checked = if phases.is_empty() {
            r.primary
        } else {
            r.primary || all || phases.contains(&r.phase)
        };
        let (Some([low, high]), Some(change)) = (r.interval, r.change) else {
            continue;
        };
        // The bound nearer no change must lie past the limit; explanatory rows must also
        // have survived the false-discovery control.
        let beyond = match r.statistic {
            Statistic::Rate => high < -limit,
            _ => low > limit,
        };
        if checked && beyond && (r.primary || r.verdict == Outcome::Different) {
            out.push(format!(
                "{}/{}/{} {}: slower by {} (interval {:+.1} % to {:+.1} %), more than the {:.1} % allowed",
                r.tap,
                r.route,
                r.phase,
                r.statistic.as_str(),
                crate::units::change(change),
                low * 100.0,
                high * 100.0,
                limit * 100.0
            ));
        }
    }
    out
}

/// A fraction as a percentage without needless decimals: 0.01 → "1", 0.005 → "0.5".
fn percent(fraction: f64) -> String {
    let s = format!("{:.2}", fraction * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A primary row's outcome in words, with the power of the experiment.
pub fn statement(r: &Row, opts: &Options) -> String {
    let name = format!("{}/{} {} {}", r.tap, r.route, r.phase, r.statistic.as_str());
    let (Some(change), Some([low, high])) = (r.change, r.interval) else {
        return format!(
            "{name}: unknown: {}",
            r.note.as_deref().unwrap_or("not compared")
        );
    };
    let pct = |v: f64| format!("{:+.1} %", v * 100.0);
    let t = percent(opts.threshold);
    // Paired rows count windows, each holding both sides.
    let (unit, a_side) = if r.method == Method::Paired {
        ("window", "")
    } else {
        ("run", " a side")
    };
    let n = r.runs_a.min(r.runs_b);
    let runs = format!("{n} {unit}{}{a_side}", if n == 1 { "" } else { "s" });
    let need = match r.runs_needed {
        Some(n) => format!("about {n} {unit}s{a_side}"),
        None => format!(
            "more than {} {unit}s{a_side}",
            crate::report::verdict::MAX_RUNS
        ),
    };
    let assumed = if r.cv_assumed {
        format!(
            " (at an assumed run-to-run variation of {:.1} %)",
            opts.drift * 100.0
        )
    } else {
        String::new()
    };
    match (r.verdict, r.direction) {
        (Outcome::Same, _) => format!(
            "{name}: same: no difference of {t} % or more ({} [{}, {}], ±{:.1} %)",
            pct(change),
            pct(low),
            pct(high),
            (high - low) * 50.0
        ),
        (Outcome::Different, Some(dir)) => format!(
            "{name}: different: {} by {} [{}, {}], beyond the {t} % threshold",
            dir.as_str(),
            pct(change),
            pct(low),
            pct(high)
        ),
        // It had what detecting `--detect` takes: what keeps it unknown is a change that
        // lies across the threshold, not too few runs.
        _ if r.runs_needed.is_some_and(|k| k <= n as u64) => format!(
            "{name}: unknown: {} [{}, {}]; {runs} detect {:.1} % or more, enough for {} %: \
             the change lies across the {t} % threshold{assumed}",
            pct(change),
            pct(low),
            pct(high),
            r.mde.unwrap_or(f64::NAN) * 100.0,
            percent(opts.detect)
        ),
        _ => format!(
            "{name}: unknown: {} [{}, {}]; {runs} detect {:.1} % or more; to detect {} % you \
             need {need}{assumed}",
            pct(change),
            pct(low),
            pct(high),
            r.mde.unwrap_or(f64::NAN) * 100.0,
            percent(opts.detect)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_phases_get_percentiles_and_total_the_rate() {
        use Statistic::*;
        let opts = Options::default();
        assert_eq!(statistics("total", &opts), [Mean, P50, P99, Rate]);
        assert_eq!(statistics("upstream_wait", &opts), [Mean]);
        // In paired windows the rate explains; the mean stays the question.
        assert!(primary_statistic(Rate, false) && !primary_statistic(Rate, true));
        assert!(primary_statistic(Mean, true) && !primary_statistic(P99, false));
    }

    #[test]
    fn one_run_a_side_needs_enough_exchanges_and_enough_beyond_a_percentile() {
        let opts = Options::default(); // 30 exchanges, 20 beyond a percentile
        assert_eq!(too_few(Statistic::Mean, 30, &opts), None);
        assert_eq!(
            too_few(Statistic::Mean, 29, &opts).as_deref(),
            Some("too few exchanges: fewer than 30 on a side")
        );
        assert_eq!(too_few(Statistic::P50, 40, &opts), None);
        assert_eq!(too_few(Statistic::P99, 2000, &opts), None);
        assert_eq!(
            too_few(Statistic::P99, 1999, &opts).as_deref(),
            Some("too few exchanges beyond the percentile (needs 20 beyond it on each side)")
        );
    }

    fn draft(primary: bool, estimate: f64, se: f64) -> Draft {
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

    /// A paired row of 100 windows whose mde is under the 1 % to detect, unknown because
    /// its interval straddles the threshold: the statement asks for no more windows
    /// (it once said `100 windows detect 0.6 % or more; to detect 1 % you need about 29
    /// windows`); one of 10 windows asks for more, as many as its interval needs.
    #[test]
    fn the_statement_asks_for_windows_only_when_they_are_short() {
        let opts = Options::default();
        let paired = |n: usize, estimate: f64, se: f64| {
            let mut d = draft(false, estimate, se);
            d.key.1 = "cpu".into();
            d.key.2 = super::cpu::ROUTE.into();
            d.stat = Statistic::PerRequest;
            d.method = Method::Paired;
            d.runs = [n, n];
            if let Some(m) = d.measured.as_mut() {
                m.change.df = crate::report::paired::degrees_of_freedom(Statistic::PerRequest, n);
                m.pair_sd = Some(se * (n as f64).sqrt());
                m.cv_assumed = false;
            }
            decide(d, false, 0.975, &opts)
        };
        let enough = paired(100, 0.021f64.ln_1p(), 0.0017);
        assert_eq!(enough.verdict, Outcome::Unknown, "{enough:?}");
        assert!(enough.mde.unwrap_or(1.0) < 0.01, "{enough:?}");
        let said = statement(&enough, &opts);
        assert!(!said.contains("you need"), "{said}");
        assert!(said.contains("enough for 1 %"), "{said}");
        let short = paired(10, 0.021f64.ln_1p(), 0.01);
        let said = statement(&short, &opts);
        let need = short.runs_needed.unwrap_or(0);
        assert!(need > 10, "{short:?}");
        assert!(
            said.contains(&format!("you need about {need} windows")),
            "{said}"
        );
    }

    #[test]
    fn the_family_splits_alpha_among_primary_rows_and_controls_the_others() {
        let opts = Options::default();
        let mut unmeasured = draft(true, 0.0, 0.0);
        unmeasured.measured = None;
        let drafts = [
            draft(true, 0.0, 0.01),
            draft(true, 0.0, 0.01),
            unmeasured,
            // Far beyond the threshold, then barely past it, then without any spread.
            draft(false, 0.5, 0.01),
            draft(false, 0.021, 0.01),
            draft(false, 0.5, 0.0),
        ];
        let f = Family::of(&drafts, &opts);
        assert_eq!(
            f.primary_rows, 2,
            "a row without an interval is not counted"
        );
        assert!((f.primary_confidence - 0.975).abs() < 1e-12);
        assert_eq!(f.discovered, [false, false, false, true, false, false]);
    }
}

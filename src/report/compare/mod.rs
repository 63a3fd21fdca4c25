//! `phasescope compare`: is B the same as A, different, or is it too early to say?
//!
//! For every compared statistic (the mean of each phase; p50, p99 of the primary phases;
//! the request rate) one row with the change B/A − 1, its interval, each side's run-to-run
//! variation, the minimum detectable effect and the runs needed to detect `--detect`, and
//! one of three outcomes ([`crate::stats::Outcome`]): `same` (the interval lies inside
//! ±threshold), `different` (it lies beyond it), `unknown`. docs/compare.md states the
//! method; in short:
//!
//! - several runs on each side: one value per run; Welch's t on their logarithms, so the
//!   interval is made of run-to-run variation, the noise of a rerun;
//! - one run on a side: a bootstrap from the histograms gives the sampling noise inside
//!   the runs, and a run-to-run drift that one run cannot show is added as an assumed
//!   coefficient of variation (`--drift`, 10 %): one run alone is `different` only for a
//!   change far beyond what reruns drift by;
//! - the primary rows (the front tap's `total` and request rate, per route) share α by
//!   Bonferroni; the other rows explain and are controlled by Benjamini–Hochberg.
//!
//! The arithmetic is [`crate::stats`]'s; here the snapshots become rows and the rows
//! words: [`series`] drafts the phases' rows, [`cpu`], [`route_cpu`] and [`functions`]
//! those of the servers' CPU, [`family`] shares α among them, [`row::decide`] gives each
//! its verdict, and [`summary`] and [`notes`] say what they mean.

pub mod builds;
mod cpu;
mod family;
pub mod findings;
pub mod functions;
mod inside;
mod notes;
mod one_process;
pub mod one_sided;
mod options;
mod route_cpu;
mod row;
mod selection;
mod series;
mod summary;

use anyhow::ensure;
use serde::Serialize;

use self::family::Family;
pub use self::options::Options;
pub use self::row::Row;
use self::selection::{check_named, select};
pub use self::summary::statement;
use crate::snapshot::Snapshot;
pub use crate::stats::Method;

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
    pub findings: findings::FindingsChange,
    /// Where both sides have sampled call stacks: per function and per component, CPU
    /// per request on each side with its verdict, those that changed most first
    /// ([`functions`]).
    pub functions: Vec<functions::FunctionRow>,
    /// The taps whose two sides run different builds (binaries of different file
    /// names): their own code is matched by function name ([`builds`]).
    pub builds: Vec<builds::Builds>,
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
    let drafts = series::draft_all(&a, &b, opts)?;
    let family = Family::of(&drafts, opts);
    let rows: Vec<Row> = drafts
        .into_iter()
        .zip(&family.discovered)
        .map(|(d, &discovered)| row::decide(d, discovered, family.primary_confidence, opts))
        .collect();
    let failures = opts
        .fail_if_slower
        .map(|limit| summary::failures(&rows, limit, &opts.fail_phases))
        .unwrap_or_default();
    // The question's rows, then what a request costs each watched server's CPU: a verdict
    // of its own, not part of α's split among the primary rows.
    let summary = rows
        .iter()
        .filter(|r| r.primary)
        .chain(rows.iter().filter(|r| row::in_summary(r)))
        .map(|r| summary::statement(r, opts))
        .collect();
    let (functions, builds) = if opts.functions {
        functions::rows(&a, &b, opts)
    } else {
        (Vec::new(), Vec::new())
    };
    let mut notes = notes::notes(&rows, &a, &b, &family, opts);
    if !functions.is_empty() {
        notes.push(functions::note(&functions, opts));
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
        builds,
        findings: findings::FindingsChange::of(
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

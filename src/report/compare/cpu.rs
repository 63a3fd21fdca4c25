//! Rows for what a request costs the upstream's CPU, compared with intervals and
//! verdicts like the phases' rows: for a tap whose process was watched on both sides, its
//! time on a CPU per request (the threads' scheduler statistics, to the nanosecond), its
//! user and system time per request (clock ticks), and with sampling the HTTP parser's
//! part (its inclusive share where call stacks were taken, else its self share, times
//! the CPU per request).
//!
//! A figure per request is a ratio of totals, like a phase's mean: thread-time over the
//! `total` exchanges of the same snapshot. So it is compared as a mean is, by the same
//! methods ([`Method::Paired`] on a duet's windows, [`Method::Runs`] on several runs a
//! side); one run a side has no spread to measure, and no interval. Thread-time per
//! request does not move with the machine's load the way latency does (a thread that
//! waits for a CPU accrues none), which is why these rows can decide a CPU-bound change
//! that the latency rows cannot yet (docs/compare.md). The whole-CPU row is a question
//! of its own ([`super::row::own_question`]); the others explain it, under the
//! false-discovery control with the phases' explanatory rows.

use super::options::Options;
use super::row::{Draft, Key, CPU, ROUTE};
use crate::rng::{self, Rng};
use crate::snapshot::summary::PARSER;
use crate::snapshot::Snapshot;
use crate::snapshot::UpstreamSnapshot;
use crate::stats::measure::{between_runs, Side};
use crate::stats::paired::{self, Cell};
use crate::stats::{Method, Statistic};

/// One compared figure: the row's phase name, and the seconds of it in one snapshot of
/// the upstream (`None`: not measured there).
type Figure = (&'static str, fn(&UpstreamSnapshot) -> Option<f64>);

const FIGURES: [Figure; 4] = [
    (CPU, |u| Some(on_cpu(u))),
    ("cpu_user", |u| Some(u.cpu_user_seconds)),
    ("cpu_system", |u| Some(u.cpu_system_seconds)),
    ("cpu_parser", parser_seconds),
];

/// The upstream's time on a CPU: to the nanosecond where the threads' scheduler
/// statistics were read, else user + system (clock ticks).
fn on_cpu(u: &UpstreamSnapshot) -> f64 {
    u.cpu_seconds
        .unwrap_or(u.cpu_user_seconds + u.cpu_system_seconds)
}

/// The parser's CPU in a sampled snapshot: its share of the samples (inclusive where
/// there are call stacks) times the CPU. `None` without samples, or when the parser is
/// not a component of this upstream at all.
fn parser_seconds(u: &UpstreamSnapshot) -> Option<f64> {
    let samples = u.samples()?;
    let total: u64 = samples.values().sum();
    if total == 0 {
        return None;
    }
    let own = samples.get(PARSER).copied();
    let inclusive = u.inclusive().and_then(|i| i.get(PARSER).copied());
    let parser = inclusive.or(own).unwrap_or(0);
    Some(on_cpu(u) * parser as f64 / total as f64)
}

/// One snapshot of `tap` with its upstream watched: the figure's seconds and the
/// exchanges (`total`, every route) over the same window.
fn cell(snap: &Snapshot, tap: &str, figure: Figure) -> Option<Cell> {
    let t = snap.taps.get(tap)?;
    let u = t.upstream.as_ref()?;
    let requests: u64 = t.phases.get("total")?.values().map(|s| s.count).sum();
    if requests == 0 || u.watched_seconds <= 0.0 {
        return None;
    }
    let seconds = (figure.1)(u)?;
    Some(Cell {
        count: requests as f64,
        sum: seconds,
        log: (seconds / requests as f64).ln(),
    })
}

/// The drafts of every tap watched on both sides, after the phases' rows.
pub(super) fn drafts(a: &[Snapshot], b: &[Snapshot], opts: &Options) -> Vec<Draft> {
    let taps: std::collections::BTreeSet<&String> = a.iter().flat_map(|s| s.taps.keys()).collect();
    let mut out = Vec::new();
    for tap in taps {
        for figure in FIGURES {
            if let Some(d) = draft(tap, figure, a, b, opts) {
                out.push(d);
            }
        }
    }
    out
}

/// The row of one figure of `tap`; `None` when a side never measured it (no watched
/// process, no samples, or a server without the parser as a component).
fn draft(
    tap: &str,
    figure: Figure,
    a: &[Snapshot],
    b: &[Snapshot],
    opts: &Options,
) -> Option<Draft> {
    // Per snapshot, in order (a duet pairs them by position).
    let per_snapshot = |runs: &[Snapshot]| -> Vec<Option<Cell>> {
        runs.iter().map(|s| cell(s, tap, figure)).collect()
    };
    let (oa, ob) = (per_snapshot(a), per_snapshot(b));
    // The parser's row only where the parser is a component on some side.
    if figure.0 == "cpu_parser" && oa.iter().chain(&ob).flatten().all(|c| c.sum == 0.0) {
        return None;
    }
    let key: Key = (tap.to_owned(), figure.0.to_owned(), ROUTE.to_owned());
    if let Some(pid) = super::one_process::of(a, b, tap) {
        return Some(super::one_process::draft(key, pid, &oa, &ob));
    }
    per_request(key, &oa, &ob, opts)
}

/// A row of seconds per request from each snapshot's cell (`None`: not measured in that
/// snapshot), compared as a mean is: paired windows when the options say so, Welch's t
/// over runs with two or more a side, else no interval. `None` when a side measured it
/// nowhere. The `cpu` rows and the functions' rows ([`super::functions`]) are
/// made by it.
pub(super) fn per_request(
    key: Key,
    oa: &[Option<Cell>],
    ob: &[Option<Cell>],
    opts: &Options,
) -> Option<Draft> {
    let measured = |cs: &[Option<Cell>]| -> Vec<Cell> { cs.iter().flatten().copied().collect() };
    let (ca, cb) = (measured(oa), measured(ob));
    if ca.is_empty() || cb.is_empty() {
        return None;
    }
    let total = |cs: &[Cell]| {
        let (n, s) = cs
            .iter()
            .fold((0.0, 0.0), |(n, s), c| (n + c.count, s + c.sum));
        s / n
    };
    let mut d = Draft {
        stat: Statistic::PerRequest,
        primary: false,
        runs: [ca.len(), cb.len()],
        counts: [&ca, &cb].map(|cs| cs.iter().map(|c| c.count as u64).sum()),
        values: [Some(total(&ca)), Some(total(&cb))],
        method: Method::None,
        measured: None,
        note: None,
        key,
    };
    if opts.paired {
        let pairs: Vec<(Cell, Cell)> = oa
            .iter()
            .zip(ob)
            .filter_map(|(x, y)| Some(((*x)?, (*y)?)))
            .collect();
        let (t, p, r) = (&d.key.0, &d.key.1, &d.key.2);
        let mut rng = Rng::new(opts.seed ^ rng::hash(&[t, p, r, "per_request"]));
        if let Some(m) = paired::of_cells(Statistic::PerRequest, &pairs, opts.resamples, &mut rng) {
            d.method = Method::Paired;
            d.runs = [pairs.len(); 2];
            d.measured = Some(m);
            return Some(d);
        }
    }
    let finite = |cs: &[Cell]| cs.iter().all(|c| c.log.is_finite());
    if ca.len() < 2 || cb.len() < 2 {
        d.note = Some("one run on a side: thread-time per request has no spread to measure".into());
    } else if !finite(&ca) || !finite(&cb) {
        d.note = Some("a run without a sample of it".into());
    } else {
        let side = |cs: &[Cell]| Side {
            logs: cs.iter().map(|c| c.log).collect(),
            value: total(cs),
            count: cs.iter().map(|c| c.count as u64).sum(),
        };
        d.method = Method::Runs;
        d.measured = Some(between_runs(&side(&ca), &side(&cb)));
    }
    Some(d)
}

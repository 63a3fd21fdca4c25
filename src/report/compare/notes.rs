//! How the rows were compared, in words: the notes under a comparison's table.

use std::collections::BTreeSet;

use super::family::Family;
use super::inside;
use super::options::Options;
use super::row::{in_summary, Row};
use crate::snapshot::Snapshot;
use crate::stats::Method;

/// How the rows were compared, in words: one note per method used, the inside of the
/// upstreams, and what the outcomes and α mean.
pub(super) fn notes(
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
    notes.extend(inside::compare_notes(a, b));
    notes.extend(super::one_process::notes(a, b));
    if rows.iter().any(in_summary) {
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

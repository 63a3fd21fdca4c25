//! What a bench prints: each run's request rate, then the comparison (the same rows,
//! summary and notes as `phasescope compare`), in text or JSON (docs/compare.md).

use std::fmt::Write as _;

use serde::Serialize;

use super::order::Side;
use super::record::{RunRecord, SideErrors, UntilMde};
use super::Design;
use crate::report::render::compare_table;
use crate::report::{Comparison, Format};

/// The bench's result: the comparison's fields, plus the setup and the runs.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub a: String,
    pub b: String,
    pub paths: Vec<String>,
    pub design: super::Design,
    /// Duet: seconds per paired window; interleave: per four slices; null for runs.
    pub window: Option<f64>,
    /// Client connections: of each run (runs), of both sides together, half each (duet),
    /// or of each side on its slices (interleave).
    pub connections: usize,
    /// Seconds per run (runs), or of the whole duet or interleave (its measured windows with
    /// `--until-mde`).
    pub duration: f64,
    /// With `--until-mde`: the target, the mde reached, and whether it was reached
    /// before `--max-duration`; null without it.
    pub until_mde: Option<UntilMde>,
    pub rate: Option<f64>,
    /// `--cpus`: the CPUs of A's threads, B's, and the bench's own; null without it.
    pub cpus: Option<super::pin::Cpus>,
    /// `closed loop`, `open loop`, or the external command.
    pub load: String,
    pub runs: Vec<RunRecord>,
    /// The command that reruns the comparison on the kept snapshots.
    pub rerun: Option<String>,
    /// Each side's failed exchanges and invalid runs.
    pub validity: Vec<SideErrors>,
    /// Why there is no comparison (a side failed too often); null when there is one.
    pub refused: Option<String>,
    /// The comparison's fields; absent when refused.
    #[serde(flatten)]
    pub comparison: Option<Comparison>,
}

pub fn render(r: &BenchReport, format: Format) -> anyhow::Result<String> {
    if format == Format::Json {
        return Ok(serde_json::to_string_pretty(r)? + "\n");
    }
    let mut out = String::new();
    let how = match (r.design, r.window) {
        (Design::Duet, Some(w)) => format!(
            "duet: both at once, {} connections each, {} s in windows of {} s",
            (r.connections / 2).max(1),
            r.duration,
            w
        ),
        (Design::Interleave, Some(w)) => format!(
            "interleave: one side at a time, {} connections, {} s in slices of {} s A B B A B A A B …",
            r.connections,
            r.duration,
            w / f64::from(Design::Interleave.ticks_per_window())
        ),
        _ => format!("{} connections, {} s a run", r.connections, r.duration),
    };
    let _ = writeln!(
        out,
        "bench: A {} vs B {}, {} ({how}), paths {}",
        r.a,
        r.b,
        r.load,
        r.paths.join(" ")
    );
    if let Some(cpus) = &r.cpus {
        let _ = writeln!(out, "  pinned: {cpus}");
    }
    for side in [Side::A, Side::B] {
        let rates: Vec<String> = r
            .runs
            .iter()
            .filter(|x| x.side == side)
            .map(|x| {
                let mark = if x.valid { "" } else { "!" };
                format!("{:.0}{mark}", x.requests_per_s)
            })
            .collect();
        let _ = writeln!(
            out,
            "  {} requests/s{}: {}",
            side.tap(),
            if r.window.is_some() { "" } else { " per run" },
            rates.join(" ")
        );
    }
    for s in r.validity.iter().filter(|s| s.invalid_runs > 0) {
        let _ = writeln!(
            out,
            "  {}: {} of {} runs invalid (!), {} of {} exchanges failed",
            s.side.tap(),
            s.invalid_runs,
            s.runs,
            s.errors,
            s.attempts
        );
    }
    if let Some(u) = &r.until_mde {
        let _ = writeln!(out, "  {}", until_line(u));
    }
    let _ = writeln!(out);
    match (&r.comparison, &r.refused) {
        (Some(c), _) => out.push_str(&compare_table::render(c, format, false)?),
        (None, Some(why)) => {
            let _ = writeln!(out, "{why}");
        }
        (None, None) => {}
    }
    if let Some(cmd) = &r.rerun {
        let _ = writeln!(out, "\nrerun the comparison: {cmd}");
    }
    Ok(out)
}

/// `--until-mde`'s outcome in words.
fn until_line(u: &UntilMde) -> String {
    let pct = |x: f64| format!("{:.1} %", x * 100.0);
    let got = u.mde.map_or_else(|| "no mde yet".to_owned(), pct);
    if u.reached {
        format!(
            "until mde {}: reached, {got} after {:.1} s",
            pct(u.target),
            u.seconds
        )
    } else {
        format!(
            "until mde {}: not reached, {got} when --max-duration {} s passed",
            pct(u.target),
            u.max_duration
        )
    }
}

//! `parser_worth_replacing` and `parser_not_the_problem`: the what-if of a parser twice as
//! fast (Amdahl's law on the parser's share of the server's CPU), stated as a finding
//! either way, so that the answer to "would a faster parser help?" is never left out.

use super::{met, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::summary::Basis;
use crate::snapshot::{Finding, Severity};
use crate::units::{duration, share};

/// Samples the what-if needs before it says anything.
pub const MIN_SAMPLES: u64 = 200;
/// What a parser twice as fast must save, as a share of the mean `total` (or of the
/// throughput of a CPU-bound server), to be worth replacing.
pub const WORTH: f64 = 0.05;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let (u, i) = (v.tap.upstream.as_ref()?, v.inside.as_ref()?);
    let w = i.what_if.as_ref()?;
    let samples: u64 = u.samples().into_iter().flat_map(|s| s.values()).sum();
    if u.samples_for_rules(samples) < MIN_SAMPLES {
        return None;
    }
    let saved_of_total = w.saved_of_total.unwrap_or(0.0);
    let worth =
        saved_of_total >= WORTH || w.throughput_gain >= WORTH && saved_of_total >= WORTH / 5.0;
    let kind = match w.basis {
        Basis::UpperBound => "at most (the binary has no symbols: its own code)",
        Basis::Work => "its own work (the helpers it calls, not its callbacks)",
        Basis::Functions => "its own functions",
    };
    let mut evidence = vec![
        shown(
            &format!("{} share of the server's CPU, {kind}", w.component),
            w.share,
            "ratio",
        ),
        shown(
            "upstream CPU per request",
            i.cpu_user + i.cpu_system,
            "seconds",
        ),
        met(
            &format!(
                "saved by a parser {}× as fast, over the mean total",
                w.factor
            ),
            saved_of_total,
            "ratio",
            if worth { "≥" } else { "<" },
            WORTH,
        ),
        shown("throughput gain if CPU-bound", w.throughput_gain, "ratio"),
        shown("samples", samples as f64, "count"),
    ];
    if let Some(parse) = v.mean("parse") {
        evidence.push(shown(
            "the proxy's own parse of the same heads",
            parse,
            "seconds",
        ));
    }
    let larger = super::largest_part(i, |c| c.name == w.component || c.label == w.component);
    let saving = format!(
        "a parser {}× as fast would save {} per request, {} of a request's time",
        w.factor,
        duration(w.saved),
        share(saved_of_total)
    );
    let what = if w.upper_bound {
        format!(
            "{}'s parser is inside {}, {} of its CPU (an upper bound)",
            i.comm,
            w.component,
            share(w.share)
        )
    } else {
        format!(
            "the {} is {} of {}'s CPU",
            w.component,
            share(w.share),
            i.comm
        )
    };
    let (id, summary, fix, severity) = if worth {
        (
            "parser_worth_replacing",
            format!("{what}: {saving}"),
            format!("A faster parser is worth trying: build the server with it and compare both with `phasescope bench` (A/B under the same load); `report --what-if N` gives the bound for other speed-ups.{larger}"),
            Severity::Warn,
        )
    } else {
        (
            "parser_not_the_problem",
            format!("{what}: {saving} — not where the time goes"),
            format!("Leave the parser: a faster one cannot make a visible difference. Look at the phases that hold the time and at the server's larger components.{larger}"),
            Severity::Info,
        )
    };
    Some(
        Draft {
            id,
            route: None,
            summary,
            evidence,
            seconds: w.saved,
            share: w.saved_of_total,
            fix,
        }
        .with(v, severity),
    )
}

//! `hot_path`: the one to three functions where the upstream's CPU goes (the hot path of
//! docs/report.md), each with its share, CPU per request, callers and samples, and what
//! the first one twice as fast would buy — the answer to "then what is it?" after
//! `parser_not_the_problem`.

use super::{met, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::hot::HotFunction;
use crate::snapshot::{Evidence, Finding, Severity};
use crate::units::{duration, share};

/// Samples of call stacks the rule needs before it names anything.
pub const MIN_SAMPLES: u64 = 200;
/// Functions named at most.
pub const MAX_NAMED: usize = 3;
/// A function after the first is named when its share on the hot path is at least this.
pub const MIN_LISTED: f64 = 0.05;
/// What the first one twice as fast must save, over the mean `total`, for a warning (the
/// parser's threshold: `parser_worth_replacing`).
pub const WORTH: f64 = super::parser::WORTH;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let (u, i) = (v.tap.upstream.as_ref()?, v.inside.as_ref()?);
    let samples = u.stacks()?.total();
    if u.samples_for_rules(samples) < MIN_SAMPLES {
        return None;
    }
    // A wait is the kernel's cost of hand-offs, not a function to make faster: start
    // with the first entry that is work.
    let first = i.hot.iter().find(|h| !h.waits).or(i.hot.first())?;
    let named: Vec<_> = i
        .hot
        .iter()
        .enumerate()
        .filter(|(n, h)| *n == 0 || h.listed >= MIN_LISTED)
        .map(|(_, h)| h)
        .take(MAX_NAMED)
        .collect();
    let (mut evidence, parts) = described(&named);
    let w = &first.what_if;
    let saved_of_total = w.saved_of_total.unwrap_or(0.0);
    let worth = saved_of_total >= WORTH;
    evidence.push(met(
        &format!(
            "saved by {} {}× as fast, over the mean total",
            first.shown(),
            w.factor
        ),
        saved_of_total,
        "ratio",
        if worth { "≥" } else { "<" },
        WORTH,
    ));
    evidence.push(shown(
        "throughput gain if CPU-bound",
        w.throughput_gain,
        "ratio",
    ));
    evidence.push(shown("samples", samples as f64, "count"));
    let summary = format!(
        "{}'s CPU goes to {}: {} {}× as fast would save {} per request, {} of a request's time",
        i.comm,
        parts.join(", "),
        first.shown(),
        w.factor,
        duration(w.saved),
        share(saved_of_total)
    );
    let fix = format!(
        "Start with {}: it and what it calls but the entries listed apart are {} of the server's CPU; call it less often per request or make it cheaper, then compare both builds with `phasescope bench`. If the server is CPU-bound, one {}× as fast gives at most {} more throughput. `report --flamegraph` shows its stacks; `report --what-if N` gives the bound for other speed-ups.",
        first.shown(),
        share(first.listed),
        w.factor,
        share(w.throughput_gain)
    );
    Some(
        Draft {
            id: "hot_path",
            route: None,
            summary,
            evidence,
            seconds: w.saved,
            share: w.saved_of_total,
            fix,
        }
        .with(
            v,
            if worth {
                Severity::Warn
            } else {
                Severity::Info
            },
        ),
    )
}

/// Each named function's evidence (the function alone) and its part of the summary (where
/// it leads, its share, CPU per request and first caller).
fn described(named: &[&HotFunction]) -> (Vec<Evidence>, Vec<String>) {
    let mut evidence = Vec::new();
    let mut parts = Vec::new();
    for h in named {
        // The evidence names the function alone; the summary says where it leads.
        let name = match h.line {
            Some(line) => format!("{}:{line}", h.name),
            None => h.name.clone(),
        };
        evidence.push(shown(
            &format!("{name}: share of the server's CPU on the hot path"),
            h.listed,
            "ratio",
        ));
        // Its share with all it calls, where that is what the entry stands for (not a
        // driver whose callees are listed apart: see `HotFunction::line`).
        if h.inclusive_is_its_own() {
            evidence.push(shown(
                &format!("{name}: share with all it calls"),
                h.inclusive,
                "ratio",
            ));
        }
        evidence.push(shown(&format!("{name}: CPU per request"), h.cpu, "seconds"));
        evidence.push(shown(
            &format!("{name}: samples"),
            h.samples as f64,
            "count",
        ));
        if let Some(c) = h.callers.first() {
            evidence.push(shown(
                &format!("{name}: share of its samples called from {}", c.name),
                c.share,
                "ratio",
            ));
        }
        let from = h
            .callers
            .first()
            .map(|c| format!(", from {}", c.name))
            .unwrap_or_default();
        parts.push(format!(
            "{} {} ({} per request{from})",
            h.shown(),
            share(h.listed),
            duration(h.cpu)
        ));
    }
    (evidence, parts)
}

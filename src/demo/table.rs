//! The per-phase table the demo prints from the registry's snapshot.
//!
//! `render` is the demo's only dependency on how a report looks: once the project's report
//! module can render a snapshot, the call in `super::run` switches to it.

use std::fmt::Write as _;

use anyhow::Context;

use crate::metrics::{SeriesSnapshot, Snapshot};
use crate::phase::Phase;

/// Every phase of `tap`, all routes merged (exact percentiles from the merged HDR
/// histograms), then `total` and `upstream_wait` by route.
pub fn render(snapshot: &Snapshot, tap: &str) -> anyhow::Result<String> {
    let tap_snapshot = snapshot
        .taps
        .get(tap)
        .with_context(|| format!("the snapshot has no tap {tap:?}"))?;
    let mut out = String::new();
    let total_mean = tap_snapshot
        .phases
        .get(Phase::Total.name())
        .map(|routes| merge(snapshot, routes.values()))
        .transpose()?
        .map_or(0.0, |t| t.mean);

    let _ = writeln!(
        out,
        "{:<17} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  {:>7}",
        "phase", "count", "mean", "p50", "p90", "p99", "max", "of total"
    );
    for phase in Phase::ALL {
        let Some(routes) = tap_snapshot.phases.get(phase.name()) else {
            continue;
        };
        let m = merge(snapshot, routes.values())?;
        // Share of the mean total; for `parse` (inside client_recv) and `response_parse`
        // (inside the response's transfer) it overlaps the others.
        let share = if total_mean > 0.0 {
            format!(
                "{:.1} %",
                100.0 * m.mean * m.count as f64 / (total_mean * total_count(snapshot, tap))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:<17} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  {:>7}",
            phase.name(),
            m.count,
            secs(m.mean),
            secs(m.p50),
            secs(m.p90),
            secs(m.p99),
            secs(m.max),
            share
        );
    }

    for phase in [Phase::Total, Phase::UpstreamWait] {
        let Some(routes) = tap_snapshot.phases.get(phase.name()) else {
            continue;
        };
        let _ = writeln!(out, "\n{} by route", phase.name());
        let _ = writeln!(
            out,
            "{:<17} {:>7} {:>10} {:>10} {:>10} {:>10}",
            "route", "count", "mean", "p50", "p99", "max"
        );
        for (route, s) in routes {
            let _ = writeln!(
                out,
                "{:<17} {:>7} {:>10} {:>10} {:>10} {:>10}",
                route,
                s.count,
                secs(s.mean),
                secs(s.p50),
                secs(s.p99),
                secs(s.max)
            );
        }
    }
    let t = &tap_snapshot.totals;
    let errors: u64 = t.errors.values().sum();
    let _ = writeln!(
        out,
        "\nexchanges {}, errors {}, connections {} client / {} upstream, bytes {} in / {} out",
        t.requests,
        errors,
        t.connections.get("client").copied().unwrap_or(0),
        t.connections.get("upstream").copied().unwrap_or(0),
        t.bytes.get("request").copied().unwrap_or(0),
        t.bytes.get("response").copied().unwrap_or(0),
    );
    Ok(out)
}

/// Count of `total` observations (the number of exchanges with a total).
fn total_count(snapshot: &Snapshot, tap: &str) -> f64 {
    snapshot
        .taps
        .get(tap)
        .and_then(|t| t.phases.get(Phase::Total.name()))
        .map_or(0, |routes| routes.values().map(|s| s.count).sum::<u64>()) as f64
}

/// One phase over every route.
struct Merged {
    count: u64,
    mean: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

fn merge<'a>(
    snapshot: &Snapshot,
    series: impl Iterator<Item = &'a SeriesSnapshot>,
) -> anyhow::Result<Merged> {
    let mut hist = snapshot.hdr.empty_histogram()?;
    let (mut count, mut sum, mut min, mut max) = (0u64, 0.0, f64::INFINITY, 0.0f64);
    for s in series {
        s.add_to(&mut hist)?;
        count += s.count;
        sum += s.sum;
        min = min.min(s.min);
        max = max.max(s.max);
    }
    // The histogram names each bucket by its top, which can lie past the exact extremes.
    let q = |q: f64| (hist.value_at_quantile(q) as f64 / 1e9).clamp(min.min(max), max);
    Ok(Merged {
        count,
        mean: if count == 0 { 0.0 } else { sum / count as f64 },
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        max,
    })
}

/// Seconds in the unit that suits them.
fn secs(s: f64) -> String {
    crate::probe::format_ns(s * 1e9)
}

//! The rules of docs/findings.md, one file per cause. Each `check` reads one tap's window
//! and returns its findings; thresholds are named constants, quoted in the evidence.

mod backend_queue;
mod churn;
mod client;
mod competes;
mod cpu;
mod errors;
mod hot;
mod nagle;
mod parser;
mod proxy;
mod server_errors;
mod stalled;

use super::TapView;
use crate::snapshot::summary::{Component, Inside};
use crate::snapshot::{Evidence, Finding, Impact, Severity};

/// A share of a request's time at or above which a finding is a warning.
const WARN_SHARE: f64 = 0.2;

/// The rules that look at a tap whatever its number of answered requests: its
/// failures (a tap whose every request failed has none answered).
pub fn failures(v: &TapView<'_>) -> Vec<Finding> {
    errors::check(v)
        .into_iter()
        .chain(server_errors::check(v))
        .chain(stalled::check(v))
        .collect()
}

/// Every rule's findings for one tap that answered enough requests.
pub fn all(v: &TapView<'_>) -> Vec<Finding> {
    let mut out = nagle::check(v);
    out.extend(backend_queue::check(v));
    out.extend(cpu::cpu_bound(v));
    out.extend(cpu::runqueue(v));
    out.extend(churn::check(v));
    out.extend(client::check(v));
    out.extend(proxy::check(v));
    out.extend(competes::check(v));
    out.extend(parser::check(v));
    out.extend(hot::check(v));
    out
}

/// A finding in the making: what a rule says, before the tap is attached.
struct Draft {
    id: &'static str,
    route: Option<String>,
    summary: String,
    evidence: Vec<Evidence>,
    /// Seconds per request it explains.
    seconds: f64,
    /// Its share of the mean `total` (of the route, for a route's finding).
    share: Option<f64>,
    fix: String,
}

impl Draft {
    /// A warning when it explains [`WARN_SHARE`] of a request's time or more, else
    /// information.
    fn scaled(self, v: &TapView<'_>) -> Finding {
        let severity = if self.share.is_some_and(|s| s >= WARN_SHARE) {
            Severity::Warn
        } else {
            Severity::Info
        };
        self.with(v, severity)
    }

    fn with(self, v: &TapView<'_>, severity: Severity) -> Finding {
        Finding {
            id: self.id.to_owned(),
            tap: v.name.to_owned(),
            route: self.route,
            severity,
            summary: self.summary,
            evidence: self.evidence,
            impact: Impact {
                seconds_per_request: self.seconds,
                share_of_total: self.share,
            },
            fix: self.fix,
        }
    }
}

/// A figure that met a threshold: `op` (`≥`, `<`) and the threshold `at`, written in the
/// figure's own unit (`85 % (≥ 85 %)`, not `85 % (≥ 0.85)`).
fn met(name: &str, value: f64, unit: &str, op: &str, at: f64) -> Evidence {
    met_as(
        name,
        value,
        unit,
        format!("{op} {}", crate::units::figure(at, unit)),
    )
}

/// A figure that met a threshold written out (`< 21.4 ms (0.5 × mean pause)`): one that
/// depends on other figures, given in the figure's unit with how it was made.
fn met_as(name: &str, value: f64, unit: &str, threshold: String) -> Evidence {
    debug_assert!(value.is_finite(), "{name}: {value} is written null in JSON");
    Evidence {
        name: name.to_owned(),
        value,
        unit: unit.to_owned(),
        threshold: Some(threshold),
    }
}

/// A figure shown for context.
fn shown(name: &str, value: f64, unit: &str) -> Evidence {
    debug_assert!(value.is_finite(), "{name}: {value} is written null in JSON");
    Evidence {
        name: name.to_owned(),
        value,
        unit: unit.to_owned(),
        threshold: None,
    }
}

/// " Its largest part is … (… of its CPU)." for the upstream's first hot function (the
/// hot path, docs/report.md) whose component `skip` does not leave out, else, without
/// call stacks, its largest component `skip` does not leave out; empty when the process
/// was not sampled.
fn largest_part(i: &Inside, skip: impl Fn(&Component) -> bool) -> String {
    let skipped = |component: &str| i.components.iter().any(|c| c.name == component && skip(c));
    if let Some(h) = i.hot.iter().find(|h| !skipped(&h.component)) {
        return format!(
            " Its largest part is {} ({} of its CPU with what it calls, {} per request).",
            h.shown(),
            crate::units::share(h.listed),
            crate::units::duration(h.cpu)
        );
    }
    i.components
        .iter()
        .filter(|c| !skip(c))
        .max_by(|a, b| a.share.total_cmp(&b.share))
        .map(|c| {
            format!(
                " Its largest part is {} ({} of its CPU).",
                c.label,
                crate::units::share(c.share)
            )
        })
        .unwrap_or_default()
}

/// `x`, a process's figure (CPU, waiting for a CPU), per exchange its server answered in
/// the tap's window: the successes and its error answers, which cost it too.
fn per_exchange(v: &TapView<'_>, x: f64) -> f64 {
    let n = v.requests + v.server_errors;
    if n == 0 {
        0.0
    } else {
        x / n as f64
    }
}

/// `x`, a sum over the successes' phases, per request of the tap's window.
fn per_request(v: &TapView<'_>, x: f64) -> f64 {
    if v.requests == 0 {
        0.0
    } else {
        x / v.requests as f64
    }
}

//! Findings: why a request's time goes where it goes, said from the proxy's own
//! measurements, with the numbers that show it and what to change (docs/findings.md).
//!
//! Each rule is a plain function over one tap's window ([`TapView`]) that returns a
//! [`Finding`] only when its figures meet its documented thresholds; a finding carries
//! those figures as its evidence, so none stands without them. The rules read snapshots
//! (live, saved or the difference of two), never the registry, so the report, the live
//! page, `compare` and the gauge all say the same of the same window.

mod monitor;
mod rules;
mod view;

pub use monitor::Monitor;
pub use view::{Agg, TapView};

use crate::metrics::{Finding, Snapshot};

/// Fewer requests than this in a tap's window say nothing: no rule looks at it.
pub const MIN_REQUESTS: u64 = 20;

/// Every finding of every tap in `snapshot`'s window, the most severe and largest first.
pub fn diagnose(snapshot: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, tap) in &snapshot.taps {
        let view = TapView::new(name, tap, snapshot.taken_at_unix - snapshot.since_unix);
        if view.requests < MIN_REQUESTS {
            continue;
        }
        out.extend(rules::all(&view));
    }
    out.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(
                b.impact
                    .seconds_per_request
                    .total_cmp(&a.impact.seconds_per_request),
            )
            .then(a.tap.cmp(&b.tap))
            .then(a.id.cmp(&b.id))
    });
    out
}

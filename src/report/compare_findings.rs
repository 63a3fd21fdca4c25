//! `compare`'s findings: what the rules of docs/findings.md find on each side, and which
//! findings appear in B, go away from A, or stay. A finding is the same on both sides
//! when its rule, tap and route are (B's `--vs-tap` read as A's tap).

use serde::Serialize;

use super::units;
use crate::metrics::{Finding, Snapshot};

/// The findings of both sides, split by whether they changed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FindingsChange {
    /// In B, not in A.
    pub appeared: Vec<Finding>,
    /// In A, not in B.
    pub gone: Vec<Finding>,
    /// In both: B's finding (its figures are B's).
    pub kept: Vec<Finding>,
}

impl FindingsChange {
    /// `taps` limits the taps compared (all when empty); with `vs_tap`, B's tap of that
    /// name is compared with A's single tap.
    pub fn of(a: &[Snapshot], b: &[Snapshot], taps: &[String], vs_tap: Option<&str>) -> Self {
        let diagnose = |runs: &[Snapshot]| {
            Snapshot::merged(runs)
                .map(|s| crate::findings::diagnose(&s))
                .unwrap_or_default()
        };
        let wanted = |tap: &str| taps.is_empty() || taps.iter().any(|t| t == tap);
        let a: Vec<Finding> = diagnose(a).into_iter().filter(|f| wanted(&f.tap)).collect();
        let b: Vec<Finding> = diagnose(b)
            .into_iter()
            .filter_map(|mut f| match (vs_tap, taps.first()) {
                (Some(vs), Some(tap)) if f.tap == vs => {
                    f.tap.clone_from(tap);
                    Some(f)
                }
                (Some(_), _) => None,
                (None, _) => wanted(&f.tap).then_some(f),
            })
            .collect();
        let same = |x: &Finding, y: &Finding| x.id == y.id && x.tap == y.tap && x.route == y.route;
        Self {
            appeared: b
                .iter()
                .filter(|f| !a.iter().any(|g| same(f, g)))
                .cloned()
                .collect(),
            gone: a
                .iter()
                .filter(|f| !b.iter().any(|g| same(f, g)))
                .cloned()
                .collect(),
            kept: b
                .iter()
                .filter(|f| a.iter().any(|g| same(f, g)))
                .cloned()
                .collect(),
        }
    }

    /// One line per finding, for the text and markdown compare.
    pub fn lines(&self) -> Vec<String> {
        let name = |f: &Finding| {
            let route = f
                .route
                .as_ref()
                .map(|r| format!(", route {r}"))
                .unwrap_or_default();
            let share = f
                .impact
                .share_of_total
                .map(|s| format!(", {} of total", units::share(s)))
                .unwrap_or_default();
            format!(
                "{} (tap {}{route}): {} per request{share}",
                f.id,
                f.tap,
                units::duration(f.impact.seconds_per_request)
            )
        };
        let mut out = Vec::new();
        for (what, list) in [
            ("appeared in B", &self.appeared),
            ("gone in B", &self.gone),
            ("in both", &self.kept),
        ] {
            out.extend(list.iter().map(|f| format!("finding {what}: {}", name(f))));
        }
        out
    }
}

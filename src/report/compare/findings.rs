//! `compare`'s findings: what the rules of docs/findings.md find on each side, and which
//! findings appear in B, go away from A, or stay. A finding is the same on both sides
//! when it is about the same thing: its rule (`id`), its route and the tap it was found
//! on, where B's `--vs-tap` stands for A's tap (an A/B bench compares tap `b` as tap `a`).
//!
//! The snapshots given are the comparison's selection ([`super::selection::select`]):
//! B's `--vs-tap` already carries A's tap's name there, so a finding is matched by id and
//! route within a tap, never by the tap's own name on each side. Matched by tap name, the
//! two sides of every bench (taps `a` and `b`) never met: each printed `finding gone in
//! B` for every finding A had, an A/A bench of one binary included.

use serde::Serialize;

use crate::snapshot::{Finding, Snapshot};
use crate::units;

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
    /// The findings of the selected snapshots of each side. `vs = Some((a_tap, b_tap))`:
    /// B's tap `b_tap` was selected as A's `a_tap`; B's findings then name `b_tap`, as
    /// B's snapshots do.
    pub fn of(a: &[Snapshot], b: &[Snapshot], vs: Option<(&str, &str)>) -> Self {
        let diagnose = |runs: &[Snapshot]| {
            Snapshot::merged(runs)
                .map(|s| crate::findings::diagnose(&s))
                .unwrap_or_default()
        };
        // A tap whose sides are one process: its CPU measured once, over both sides'
        // exchanges, as the `cpu` rows read it (else each side's findings divided the
        // process's CPU, both sides' work, by its own exchanges alone).
        let once = super::one_process::measured_once(a, b);
        let (a, b) = once
            .as_ref()
            .map_or((a, b), |(x, y)| (x.as_slice(), y.as_slice()));
        let a = diagnose(a);
        let b = diagnose(b);
        let same = |x: &Finding, y: &Finding| x.id == y.id && x.tap == y.tap && x.route == y.route;
        let pick = |from: &[Finding], other: &[Finding], found: bool| -> Vec<Finding> {
            from.iter()
                .filter(|f| other.iter().any(|g| same(f, g)) == found)
                .cloned()
                .collect()
        };
        // B's own tap name back on B's findings.
        let named = |mut list: Vec<Finding>| {
            if let Some((a_tap, b_tap)) = vs {
                for f in list.iter_mut().filter(|f| f.tap == a_tap) {
                    b_tap.clone_into(&mut f.tap);
                }
            }
            list
        };
        Self {
            appeared: named(pick(&b, &a, false)),
            gone: pick(&a, &b, false),
            kept: named(pick(&b, &a, true)),
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

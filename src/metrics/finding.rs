//! The `phasescope_finding` gauge (docs/findings.md, docs/metrics.md): the board the
//! last evaluation leaves its findings on, and the family the expositions write from it.
//!
//! The rules that make findings read snapshots and live above the exporters, and the
//! finding itself is part of the snapshot's contract ([`crate::snapshot::Finding`]); this
//! module holds only the board, so that the exposition does not depend on the rules.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus::proto::{MetricFamily, MetricType};

use super::exposition::{family, sample};
use crate::snapshot::{Finding, Severity};
use crate::sync::lock;

/// The gauge: 1 for each finding active in the last evaluation.
pub const GAUGE: &str = "phasescope_finding";

/// The findings active now, as the last evaluation left them, for the gauge. Written by
/// the evaluation a scrape makes (at most every 10 s), read by the exposition.
#[derive(Debug, Default)]
pub struct Board {
    /// (tap, id) → the most severe of its findings: one series per tap and rule, whose
    /// `severity` label an alert selects on (`phasescope_finding{severity="critical"}`).
    active: Mutex<BTreeMap<(String, String), Severity>>,
}

impl Board {
    /// Replaces the active findings with `findings`.
    pub fn set(&self, findings: &[Finding]) {
        let mut active = BTreeMap::new();
        for f in findings {
            let s = active
                .entry((f.tap.clone(), f.id.clone()))
                .or_insert(f.severity);
            *s = (*s).max(f.severity);
        }
        *lock(&self.active) = active;
    }

    /// The gauge family, for either exposition; none while nothing is active (a gauge of 1
    /// only while active: `phasescope_finding == 1` in an alert, absent otherwise).
    pub fn families(&self) -> Vec<MetricFamily> {
        let active = lock(&self.active).clone();
        let metrics = active
            .iter()
            .map(|((tap, id), severity)| {
                sample(
                    MetricType::GAUGE,
                    &[("tap", tap), ("id", id), ("severity", severity.name())],
                    1.0,
                )
            })
            .collect();
        family(
            GAUGE,
            "Findings active in the last evaluation (docs/findings.md): 1 while the rule holds.",
            MetricType::GAUGE,
            metrics,
        )
        .into_iter()
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Impact;

    fn finding(tap: &str, id: &str) -> Finding {
        Finding {
            id: id.to_owned(),
            tap: tap.to_owned(),
            route: None,
            severity: Severity::Warn,
            summary: String::new(),
            evidence: Vec::new(),
            impact: Impact {
                seconds_per_request: 0.0,
                share_of_total: None,
            },
            fix: String::new(),
        }
    }

    #[test]
    fn the_gauge_holds_what_the_last_evaluation_found_once_per_tap_and_rule() {
        let board = Board::default();
        assert!(board.families().is_empty());
        board.set(&[
            finding("amp", "nagle_delayed_ack"),
            finding("amp", "nagle_delayed_ack"),
            finding("webdis", "backend_queue"),
        ]);
        let families = board.families();
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].get_metric().len(), 2);
        // The most severe of a rule's findings names the series.
        let mut critical = finding("webdis", "backend_queue");
        critical.severity = Severity::Critical;
        board.set(&[finding("webdis", "backend_queue"), critical]);
        let families = board.families();
        let labels = families[0].get_metric()[0].get_label();
        assert!(
            labels
                .iter()
                .any(|l| l.name() == "severity" && l.value() == "critical"),
            "{labels:?}"
        );
        board.set(&[]);
        assert!(board.families().is_empty());
    }
}

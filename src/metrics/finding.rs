//! Findings: what a diagnosis of a window says, as the snapshot JSON carries it and as
//! the `phasescope_finding` gauge exports it (docs/findings.md, docs/metrics.md).
//!
//! The rules that make findings read snapshots and live above the exporters; this module
//! holds only the contract they produce and the board the gauge is read from, so that the
//! exposition does not depend on the rules.

use std::sync::Mutex;

use prometheus::proto::{MetricFamily, MetricType};
use serde::{Deserialize, Serialize};

use super::exposition::{family, sample};
use crate::sync::lock;

/// The gauge: 1 for each finding active in the last evaluation.
pub const GAUGE: &str = "phasescope_finding";

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; explains little of a request's time, or says where the time is not.
    Info,
    /// Explains a large part of a request's time, or caps throughput.
    Warn,
    /// Requests fail: before any question of time (`report --fail-on critical`).
    Critical,
}

impl Severity {
    /// The name in the JSON and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Critical => "critical",
        }
    }
}

/// One diagnosis with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule's name (`nagle_delayed_ack`, `backend_queue`, …): the gauge's `id` label.
    pub id: String,
    pub tap: String,
    /// The route it is confined to, or null for the whole tap.
    pub route: Option<String>,
    pub severity: Severity,
    /// One sentence: what is happening.
    pub summary: String,
    /// The figures that triggered the rule, each with its value and the threshold it met.
    pub evidence: Vec<Evidence>,
    /// The time per request (or share) the finding explains.
    pub impact: Impact,
    /// What to change.
    pub fix: String,
}

/// One figure of a finding's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What was measured, in words a reader knows from the report.
    pub name: String,
    pub value: f64,
    /// `seconds`, `ratio` (0–1), `count`, `cpus`, `per_second`.
    pub unit: String,
    /// The rule's bound this value met, in the value's unit as the report prints it
    /// (`≥ 10 %` for a ratio, docs/findings.md), or null for a figure shown for context.
    pub threshold: Option<String>,
}

/// What a finding explains of a request's time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Impact {
    /// Seconds per request the cause accounts for (wall time, or CPU for the CPU rules).
    pub seconds_per_request: f64,
    /// `seconds_per_request` over the tap's mean `total`; null without a `total`.
    pub share_of_total: Option<f64>,
}

/// The findings active now, as the last evaluation left them, for the gauge. Written by
/// the evaluation a scrape makes (at most every 10 s), read by the exposition.
#[derive(Debug, Default)]
pub struct Board {
    active: Mutex<Vec<(String, String)>>,
}

impl Board {
    /// Replaces the active findings with `findings`.
    pub fn set(&self, findings: &[Finding]) {
        let mut pairs: Vec<(String, String)> = findings
            .iter()
            .map(|f| (f.tap.clone(), f.id.clone()))
            .collect();
        pairs.sort();
        pairs.dedup();
        *lock(&self.active) = pairs;
    }

    /// The gauge family, for either exposition; none while nothing is active (a gauge of 1
    /// only while active: `phasescope_finding == 1` in an alert, absent otherwise).
    pub fn families(&self) -> Vec<MetricFamily> {
        let active = lock(&self.active).clone();
        let metrics = active
            .iter()
            .map(|(tap, id)| sample(MetricType::GAUGE, &[("tap", tap), ("id", id)], 1.0))
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
        board.set(&[]);
        assert!(board.families().is_empty());
    }
}

//! A finding as the snapshot carries it (`findings`, docs/findings.md): the rule that
//! found it, where, how much it matters, the figures behind it and the fix.
//!
//! The contract only. The rules that make findings read snapshots and live above them
//! (`findings`); the gauge that exports the active ones is the metrics' (`metrics::finding`'s
//! board). Both read these types, so they lie here, below both.

use serde::{Deserialize, Serialize};

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

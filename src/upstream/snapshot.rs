//! The snapshot's per-tap `upstream` object (docs/metrics.md).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::account::{ProcessInfo, Totals};

/// What the tap's upstream process did since the snapshot's `since`. Seconds and counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSnapshot {
    /// The process watched now; null while none is found.
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub exe: Option<String>,
    pub threads: u64,
    /// How often the process is read.
    pub interval_seconds: f64,
    /// Wall time, within the window, during which a process was watched.
    #[serde(default)]
    pub watched_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    /// Time its threads were runnable but waiting for a CPU.
    pub runqueue_seconds: f64,
    pub context_switches_voluntary: u64,
    pub context_switches_involuntary: u64,
    /// Times the process went away and another took its place.
    pub restarts: u64,
    /// When profiling: component → samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<BTreeMap<String, u64>>,
    /// When profiling: the 20 symbols with the most samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_symbols: Option<Vec<SymbolSnapshot>>,
    /// When profiling: the main binary has no symbol table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripped: Option<bool>,
    /// When profiling: samples the kernel dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_samples: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolSnapshot {
    pub symbol: String,
    pub object: String,
    pub component: String,
    pub samples: u64,
}

impl UpstreamSnapshot {
    pub(crate) fn new(window: Totals, process: Option<&ProcessInfo>, interval: Duration) -> Self {
        let s = |ns: u64| ns as f64 / 1e9;
        Self {
            pid: process.map(|p| p.pid),
            comm: process.map(|p| p.comm.clone()),
            exe: process.and_then(|p| p.exe.as_ref().map(|e| e.display().to_string())),
            threads: process.map_or(0, |p| p.threads),
            interval_seconds: interval.as_secs_f64(),
            watched_seconds: s(window.watched_ns),
            cpu_user_seconds: s(window.user_ns),
            cpu_system_seconds: s(window.system_ns),
            runqueue_seconds: s(window.runqueue_ns),
            context_switches_voluntary: window.voluntary,
            context_switches_involuntary: window.involuntary,
            restarts: window.restarts,
            samples: None,
            top_symbols: None,
            stripped: None,
            lost_samples: None,
        }
    }
}

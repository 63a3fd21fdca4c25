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

/// Two windows of the same tap (snapshots of several runs) as one: times, counts and
/// samples add up; the later one names the process.
pub fn merge(a: UpstreamSnapshot, b: &UpstreamSnapshot) -> UpstreamSnapshot {
    let samples = match (a.samples, &b.samples) {
        (None, None) => None,
        (x, y) => {
            let mut m = x.unwrap_or_default();
            for (k, v) in y.iter().flatten() {
                *m.entry(k.clone()).or_default() += v;
            }
            Some(m)
        }
    };
    let top_symbols = match (a.top_symbols, &b.top_symbols) {
        (None, None) => None,
        (x, y) => {
            let mut all: BTreeMap<(String, String, String), u64> = BTreeMap::new();
            for s in x.iter().flatten().chain(y.iter().flatten()) {
                *all.entry((s.symbol.clone(), s.object.clone(), s.component.clone()))
                    .or_default() += s.samples;
            }
            let mut v: Vec<SymbolSnapshot> = all
                .into_iter()
                .map(|((symbol, object, component), samples)| SymbolSnapshot {
                    symbol,
                    object,
                    component,
                    samples,
                })
                .collect();
            v.sort_by_key(|s| std::cmp::Reverse(s.samples));
            v.truncate(TOP_SYMBOLS);
            Some(v)
        }
    };
    let add = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    };
    UpstreamSnapshot {
        pid: b.pid.or(a.pid),
        comm: b.comm.clone().or(a.comm),
        exe: b.exe.clone().or(a.exe),
        threads: b.threads.max(a.threads),
        interval_seconds: b.interval_seconds,
        watched_seconds: a.watched_seconds + b.watched_seconds,
        cpu_user_seconds: a.cpu_user_seconds + b.cpu_user_seconds,
        cpu_system_seconds: a.cpu_system_seconds + b.cpu_system_seconds,
        runqueue_seconds: a.runqueue_seconds + b.runqueue_seconds,
        context_switches_voluntary: a.context_switches_voluntary + b.context_switches_voluntary,
        context_switches_involuntary: a.context_switches_involuntary
            + b.context_switches_involuntary,
        restarts: a.restarts + b.restarts,
        samples,
        top_symbols,
        stripped: match (a.stripped, b.stripped) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(false) || y.unwrap_or(false)),
        },
        lost_samples: add(a.lost_samples, b.lost_samples),
    }
}

/// Symbols kept in a snapshot.
pub const TOP_SYMBOLS: usize = 20;

//! The snapshot's per-tap `upstream` object (docs/metrics.md).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::account::{ProcessInfo, Totals};
pub use super::slices::{RouteSlices, Slice};
pub use super::stacks::{
    keep_top_functions, sort_functions, Frame, FrameKind, FunctionSnapshot, Stack, Stacks,
    MAX_STACKS, OTHER_STACKS, THREAD_ROOTS, TOP_FUNCTIONS, TRUNCATED,
};

/// What the tap's upstream process did since the snapshot's `since`. Seconds and counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSnapshot {
    /// The process watched now; null while none is found.
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub exe: Option<String>,
    pub threads: u64,
    /// The CPUs it may run on (its affinity), when readable. Absent in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_allowed: Option<Vec<u32>>,
    /// How often the process is read.
    pub interval_seconds: f64,
    /// Wall time, within the window, during which a process was watched.
    #[serde(default)]
    pub watched_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    /// Time on a CPU from the threads' scheduler statistics, to the nanosecond (user and
    /// system come in clock ticks): what a comparison's `cpu` rows divide. Null when the
    /// threads' files could not be read, and in older snapshots: user + system stand in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Time its threads were runnable but waiting for a CPU.
    pub runqueue_seconds: f64,
    /// Of `watched_seconds`, the time its busiest thread wanted a CPU (running or
    /// waiting for one), thread by thread per read: near `watched_seconds` when one
    /// thread is saturated. Absent in older snapshots.
    #[serde(default)]
    pub busiest_thread_seconds: f64,
    /// Of `watched_seconds`, the reads in which its threads together wanted at least a
    /// tenth of a CPU: the time it was at work. Absent in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_seconds: Option<f64>,
    /// `busiest_thread_seconds` over the reads of `active_seconds` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_busiest_thread_seconds: Option<f64>,
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
    /// When profiling: threads of the process without a perf event at the latest
    /// collect (only the busiest are sampled, within the descriptor budget). Absent in
    /// older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsampled_threads: Option<u64>,
    /// When profiling: CPU time, in the window, of threads that had no perf event; the
    /// samples stand for the rest of `cpu_user_seconds + cpu_system_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsampled_cpu_seconds: Option<f64>,
    /// When profiling with call stacks: `native` (machine code: the binary, its libraries,
    /// the kernel) or `php` (the PHP interpreter's own call stack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<FrameKind>,
    /// When profiling with call stacks: component → samples whose stack holds at least
    /// one frame of it (so a component's inclusive count is at least its self count in
    /// `samples`, and they do not add up to the total).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inclusive: Option<BTreeMap<String, u64>>,
    /// When profiling with call stacks: the [`TOP_FUNCTIONS`] functions with the most
    /// inclusive samples and the [`TOP_FUNCTIONS`] with the most self samples, with both
    /// counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<Vec<FunctionSnapshot>>,
    /// When profiling with call stacks: the sampled stacks themselves (flame graphs,
    /// folded stacks and pprof are made from them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<Stacks>,
    /// When profiling: samples per second of a thread's CPU time (a sample stands for
    /// 1/frequency seconds of CPU). Absent in older snapshots: the default, 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_hz: Option<u32>,
    /// The window in short slices: per slice its CPU and each route's exchanges, what
    /// the CPU per route is estimated from ([`super::route_cpu`]). Absent when the tap's
    /// routes are not counted, and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<RouteSlices>,
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
            cpus_allowed: process.and_then(|p| p.cpus_allowed.clone()),
            interval_seconds: interval.as_secs_f64(),
            watched_seconds: s(window.watched_ns),
            cpu_user_seconds: s(window.user_ns),
            cpu_system_seconds: s(window.system_ns),
            cpu_seconds: Some(s(window.cpu_ns)),
            runqueue_seconds: s(window.runqueue_ns),
            busiest_thread_seconds: s(window.busiest_ns),
            active_seconds: Some(s(window.active_ns)),
            active_busiest_thread_seconds: Some(s(window.active_busiest_ns)),
            context_switches_voluntary: window.voluntary,
            context_switches_involuntary: window.involuntary,
            restarts: window.restarts,
            samples: None,
            top_symbols: None,
            stripped: None,
            lost_samples: None,
            unsampled_threads: None,
            unsampled_cpu_seconds: None,
            frames: None,
            inclusive: None,
            functions: None,
            stacks: None,
            frequency_hz: None,
            slices: None,
        }
    }
}

/// Two windows of the same tap (snapshots of several runs) as one: times, counts and
/// samples add up; the later one names the process.
pub fn merge(a: UpstreamSnapshot, b: &UpstreamSnapshot) -> UpstreamSnapshot {
    let samples = add_maps(a.samples, b.samples.as_ref());
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
        cpus_allowed: b.cpus_allowed.clone().or(a.cpus_allowed),
        interval_seconds: b.interval_seconds,
        watched_seconds: a.watched_seconds + b.watched_seconds,
        cpu_user_seconds: a.cpu_user_seconds + b.cpu_user_seconds,
        cpu_system_seconds: a.cpu_system_seconds + b.cpu_system_seconds,
        // One window without it, and the sum would not be the CPU of them all.
        cpu_seconds: a.cpu_seconds.zip(b.cpu_seconds).map(|(x, y)| x + y),
        runqueue_seconds: a.runqueue_seconds + b.runqueue_seconds,
        busiest_thread_seconds: a.busiest_thread_seconds + b.busiest_thread_seconds,
        active_seconds: a.active_seconds.zip(b.active_seconds).map(|(x, y)| x + y),
        active_busiest_thread_seconds: a
            .active_busiest_thread_seconds
            .zip(b.active_busiest_thread_seconds)
            .map(|(x, y)| x + y),
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
        unsampled_threads: b.unsampled_threads.or(a.unsampled_threads),
        unsampled_cpu_seconds: match (a.unsampled_cpu_seconds, b.unsampled_cpu_seconds) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
        },
        frames: b.frames.or(a.frames),
        inclusive: add_maps(a.inclusive, b.inclusive.as_ref()),
        functions: merge_functions(a.functions, b.functions.as_deref()),
        stacks: match (a.stacks, &b.stacks) {
            (None, None) => None,
            (x, y) => {
                let mut stacks = x.unwrap_or_default();
                if let Some(y) = y {
                    stacks.merge(y);
                }
                Some(stacks)
            }
        },
        // Windows sampled at different rates weigh their samples differently; the later
        // rate is kept, as for the process's name.
        frequency_hz: b.frequency_hz.or(a.frequency_hz),
        slices: match (a.slices, &b.slices) {
            (None, None) => None,
            (x, y) => {
                let mut slices = x.unwrap_or_default();
                if let Some(y) = y {
                    slices.append(y);
                }
                Some(slices)
            }
        },
    }
}

/// The part of `now`'s window after `before` was taken (two snapshots of one process, no
/// reset between): times, counts and samples subtract. Stacks, functions and top symbols
/// are not kept per part of a window, so the difference has none.
pub fn since(now: &UpstreamSnapshot, before: &UpstreamSnapshot) -> UpstreamSnapshot {
    let sub_maps = |a: &Option<BTreeMap<String, u64>>, b: &Option<BTreeMap<String, u64>>| {
        a.as_ref().map(|a| {
            a.iter()
                .map(|(k, v)| {
                    let then = b.as_ref().and_then(|b| b.get(k)).copied().unwrap_or(0);
                    (k.clone(), v.saturating_sub(then))
                })
                .collect()
        })
    };
    let sub = |a: f64, b: f64| (a - b).max(0.0);
    UpstreamSnapshot {
        watched_seconds: sub(now.watched_seconds, before.watched_seconds),
        cpu_user_seconds: sub(now.cpu_user_seconds, before.cpu_user_seconds),
        cpu_system_seconds: sub(now.cpu_system_seconds, before.cpu_system_seconds),
        runqueue_seconds: sub(now.runqueue_seconds, before.runqueue_seconds),
        busiest_thread_seconds: sub(now.busiest_thread_seconds, before.busiest_thread_seconds),
        // Kept whole before: the difference of two windows had the later one's CPU.
        cpu_seconds: now
            .cpu_seconds
            .zip(before.cpu_seconds)
            .map(|(a, b)| sub(a, b)),
        active_seconds: now
            .active_seconds
            .zip(before.active_seconds)
            .map(|(a, b)| sub(a, b)),
        active_busiest_thread_seconds: now
            .active_busiest_thread_seconds
            .zip(before.active_busiest_thread_seconds)
            .map(|(a, b)| sub(a, b)),
        context_switches_voluntary: now
            .context_switches_voluntary
            .saturating_sub(before.context_switches_voluntary),
        context_switches_involuntary: now
            .context_switches_involuntary
            .saturating_sub(before.context_switches_involuntary),
        restarts: now.restarts.saturating_sub(before.restarts),
        samples: sub_maps(&now.samples, &before.samples),
        inclusive: sub_maps(&now.inclusive, &before.inclusive),
        lost_samples: now
            .lost_samples
            .map(|n| n.saturating_sub(before.lost_samples.unwrap_or(0))),
        unsampled_cpu_seconds: now
            .unsampled_cpu_seconds
            .map(|s| sub(s, before.unsampled_cpu_seconds.unwrap_or(0.0))),
        top_symbols: None,
        functions: None,
        stacks: None,
        // Each slice says when it ended: those of the later part are kept whole.
        slices: now.slices.as_ref().map(|s| {
            match before.slices.as_ref().and_then(|b| b.slices.last()) {
                Some(last) => s.after(last.end_unix),
                None => s.clone(),
            }
        }),
        ..now.clone()
    }
}

fn add_maps(
    a: Option<BTreeMap<String, u64>>,
    b: Option<&BTreeMap<String, u64>>,
) -> Option<BTreeMap<String, u64>> {
    match (a, b) {
        (None, None) => None,
        (x, y) => {
            let mut m = x.unwrap_or_default();
            for (k, v) in y.into_iter().flatten() {
                *m.entry(k.clone()).or_default() += v;
            }
            Some(m)
        }
    }
}

/// Two windows' top functions as one: counts of the same (name, object, component,
/// line) add up. A function in the top of one window only is counted from that window alone, so a
/// merged count is a lower bound for functions near the cut.
fn merge_functions(
    a: Option<Vec<FunctionSnapshot>>,
    b: Option<&[FunctionSnapshot]>,
) -> Option<Vec<FunctionSnapshot>> {
    if a.is_none() && b.is_none() {
        return None;
    }
    type Key = (String, String, String, Option<u32>);
    let mut all: BTreeMap<Key, (u64, u64)> = BTreeMap::new();
    for f in a.iter().flatten().chain(b.into_iter().flatten()) {
        let e = all
            .entry((
                f.name.clone(),
                f.object.clone(),
                f.component.clone(),
                f.line,
            ))
            .or_default();
        e.0 += f.self_samples;
        e.1 += f.inclusive_samples;
    }
    let mut v: Vec<FunctionSnapshot> = all
        .into_iter()
        .map(
            |((name, object, component, line), (self_samples, inclusive_samples))| {
                FunctionSnapshot {
                    name,
                    object,
                    component,
                    self_samples,
                    inclusive_samples,
                    line,
                }
            },
        )
        .collect();
    keep_top_functions(&mut v);
    Some(v)
}

/// Symbols kept in a snapshot.
pub const TOP_SYMBOLS: usize = 20;

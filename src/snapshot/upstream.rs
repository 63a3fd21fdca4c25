//! The snapshot's per-tap `upstream` (docs/metrics.md): what the tap's upstream process
//! did over the window, its profile when it was sampled, and its slices; and how two
//! windows of it add up ([`merge`]) and subtract ([`since`]).
//!
//! The figures that come together when the process is sampled (samples, top symbols,
//! stacks, …) are one optional group, [`ProfileSnapshot`]: `merge` and `since` handle the
//! group as one instead of eleven `Option`s each by hand. In the JSON they stay where they
//! always were, among the process's figures (see [`UpstreamSnapshot`] for how).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::slices::RouteSlices;
use super::stacks::{keep_top_functions, FrameKind, FunctionSnapshot, Stacks};
use super::traffic::Traffic;

/// Symbols kept in a snapshot.
pub const TOP_SYMBOLS: usize = 20;

/// The sampling rate of a snapshot without `frequency_hz` (older builds sampled at this
/// rate only): one sample per millisecond of CPU. A sample stands for 1/frequency seconds
/// of CPU, so readers that turn samples into time need it.
pub const DEFAULT_FREQUENCY_HZ: u32 = 1000;

/// What the tap's upstream process did since the snapshot's `since`. Seconds and counts.
///
/// The profile is a group of its own ([`Self::profile`]) whose fields the JSON keeps in
/// place, between `restarts` and `slices`: `#[serde(flatten)]` writes them there, byte
/// for byte as when they were fields of this struct. Reading goes through the flat form
/// (`UpstreamWire`) instead of `flatten`, because serde reads a flattened `Option` by
/// trying the group and taking any error as `None`: a damaged profile would load as no
/// profile at all instead of failing, and a group whose fields all have defaults would
/// load as `Some` from a snapshot without any. The flat form keeps every error and makes
/// the group present exactly when `samples` is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "UpstreamWire")]
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
    /// Time on a CPU to the nanosecond (user and system come in clock ticks): the
    /// process's own CPU clock, which keeps what exited threads ran, else the sum of its
    /// threads' scheduler statistics. What a comparison's `cpu` rows divide. Null when the
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
    /// Of `watched_seconds`, the reads in which the tap counted exchanges, and the
    /// process's CPU over them: what CPU per request is read over. Absent when the tap's
    /// exchanges are not counted, and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Traffic>,
    pub context_switches_voluntary: u64,
    pub context_switches_involuntary: u64,
    /// Times the process went away and another took its place.
    pub restarts: u64,
    /// A server of several processes (forked workers sharing its listening socket,
    /// processes bound to its address with SO_REUSEPORT): each one's CPU in the window,
    /// lowest pid first. Absent for a server of one process, and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<ProcessCpu>>,
    /// When profiling: what the samples say. Its fields are written in place (see above).
    #[serde(flatten)]
    pub profile: Option<ProfileSnapshot>,
    /// The window in short slices: per slice its CPU and each route's exchanges, what
    /// the CPU per route is estimated from ([`super::route_cpu`]). Absent when the tap's
    /// routes are not counted, and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<RouteSlices>,
}

/// What sampling the process found over the window: present when a profiler ran on it,
/// and then `samples` always is; the call stacks' part (`frames`, `inclusive`,
/// `functions`, `stacks`) only with call stacks. The part of a window after an older
/// snapshot ([`since`]) has no `top_symbols`, `functions` or `stacks`: they are not kept
/// per part of a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProfileSnapshot {
    /// Component → samples (self: each sample under the component of its leaf).
    pub samples: BTreeMap<String, u64>,
    /// The [`TOP_SYMBOLS`] symbols with the most samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_symbols: Option<Vec<SymbolSnapshot>>,
    /// The main binary has no symbol table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stripped: Option<bool>,
    /// Samples the kernel dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_samples: Option<u64>,
    /// Threads of the process without a perf event at the latest collect (only the
    /// busiest are sampled, within the descriptor budget). Absent in older snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsampled_threads: Option<u64>,
    /// CPU time, in the window, of threads that had no perf event; the samples stand for
    /// the rest of `cpu_user_seconds + cpu_system_seconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsampled_cpu_seconds: Option<f64>,
    /// With call stacks: `native` (machine code: the binary, its libraries, the kernel)
    /// or `php` (the PHP interpreter's own call stack).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames: Option<FrameKind>,
    /// With call stacks: component → samples whose stack holds at least one frame of it
    /// (so a component's inclusive count is at least its self count in `samples`, and
    /// they do not add up to the total).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inclusive: Option<BTreeMap<String, u64>>,
    /// With call stacks: the [`super::stacks::TOP_FUNCTIONS`] functions with the most
    /// inclusive samples and as many with the most self samples, with both counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub functions: Option<Vec<FunctionSnapshot>>,
    /// With call stacks: the sampled stacks themselves (flame graphs, folded stacks and
    /// pprof are made from them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stacks: Option<Stacks>,
    /// Samples per second of a thread's CPU time (a sample stands for 1/frequency
    /// seconds of CPU). Absent in older snapshots: [`DEFAULT_FREQUENCY_HZ`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_hz: Option<u32>,
    /// The proxy's own CPU time spent sampling in the window: draining the ring buffers,
    /// unwinding, naming and folding the samples (the kernel's work at each sample is
    /// charged to the sampled process itself, inside its CPU). Absent in older snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler_cpu_seconds: Option<f64>,
    /// Samples taken in the window, each once. With a rate that adapts to a budget
    /// (`sample_budget`), a sample taken at `k` times the period of `frequency_hz` counts
    /// `k` in `samples`, `stacks` and every count above (`k` a power of two, so the counts
    /// stay whole): they stay in units of 1/`frequency_hz` of CPU whatever the rate did in
    /// the window, and readers weigh them as before. Absent in older snapshots (every
    /// sample counted 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_taken: Option<u64>,
    /// The sampling rate at the end of the window, samples per second of a thread's CPU
    /// (`frequency_hz` over the period's multiple). Absent in older snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_hz: Option<f64>,
    /// With `profile = "on-demand"`: true, and the part of the window sampled —
    /// `sampled_seconds` of wall time, during which the sampled processes ran
    /// `sampled_cpu_seconds` of CPU (what the samples stand for). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_demand: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled_cpu_seconds: Option<f64>,
}

/// One process of a server of several: its CPU (user + system) in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessCpu {
    pub pid: u32,
    pub comm: String,
    pub cpu_seconds: f64,
}

/// Two lists of processes' CPU as one, by pid: `f` combines the CPU of a pid in both
/// (added up, or subtracted); a pid in `b` only is taken as `f(0, b)`.
fn combine_processes(
    a: Option<&[ProcessCpu]>,
    b: Option<&[ProcessCpu]>,
    f: impl Fn(f64, f64) -> f64,
) -> Option<Vec<ProcessCpu>> {
    if a.is_none() && b.is_none() {
        return None;
    }
    let mut by_pid: BTreeMap<u32, ProcessCpu> = BTreeMap::new();
    for p in a.into_iter().flatten() {
        by_pid.insert(p.pid, p.clone());
    }
    for p in b.into_iter().flatten() {
        let entry = by_pid.entry(p.pid).or_insert_with(|| ProcessCpu {
            cpu_seconds: 0.0,
            ..p.clone()
        });
        entry.cpu_seconds = f(entry.cpu_seconds, p.cpu_seconds).max(0.0);
        entry.comm.clone_from(&p.comm);
    }
    Some(by_pid.into_values().collect())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolSnapshot {
    pub symbol: String,
    pub object: String,
    pub component: String,
    pub samples: u64,
}

/// [`UpstreamSnapshot`] as the JSON spells it, every field at one level: what it is read
/// from. The attributes are the ones each field had when the struct was flat, so that
/// every snapshot loads as it did.
#[derive(Deserialize)]
struct UpstreamWire {
    pid: Option<u32>,
    comm: Option<String>,
    exe: Option<String>,
    threads: u64,
    #[serde(default)]
    cpus_allowed: Option<Vec<u32>>,
    interval_seconds: f64,
    #[serde(default)]
    watched_seconds: f64,
    cpu_user_seconds: f64,
    cpu_system_seconds: f64,
    #[serde(default)]
    cpu_seconds: Option<f64>,
    runqueue_seconds: f64,
    #[serde(default)]
    busiest_thread_seconds: f64,
    #[serde(default)]
    active_seconds: Option<f64>,
    #[serde(default)]
    active_busiest_thread_seconds: Option<f64>,
    #[serde(default)]
    traffic: Option<Traffic>,
    context_switches_voluntary: u64,
    context_switches_involuntary: u64,
    restarts: u64,
    #[serde(default)]
    processes: Option<Vec<ProcessCpu>>,
    #[serde(default)]
    samples: Option<BTreeMap<String, u64>>,
    #[serde(default)]
    top_symbols: Option<Vec<SymbolSnapshot>>,
    #[serde(default)]
    stripped: Option<bool>,
    #[serde(default)]
    lost_samples: Option<u64>,
    #[serde(default)]
    unsampled_threads: Option<u64>,
    #[serde(default)]
    unsampled_cpu_seconds: Option<f64>,
    #[serde(default)]
    frames: Option<FrameKind>,
    #[serde(default)]
    inclusive: Option<BTreeMap<String, u64>>,
    #[serde(default)]
    functions: Option<Vec<FunctionSnapshot>>,
    #[serde(default)]
    stacks: Option<Stacks>,
    #[serde(default)]
    frequency_hz: Option<u32>,
    #[serde(default)]
    sampler_cpu_seconds: Option<f64>,
    #[serde(default)]
    samples_taken: Option<u64>,
    #[serde(default)]
    rate_hz: Option<f64>,
    #[serde(default)]
    on_demand: Option<bool>,
    #[serde(default)]
    sampled_seconds: Option<f64>,
    #[serde(default)]
    sampled_cpu_seconds: Option<f64>,
    #[serde(default)]
    slices: Option<RouteSlices>,
}

impl From<UpstreamWire> for UpstreamSnapshot {
    fn from(w: UpstreamWire) -> Self {
        let profile = w.samples.map(|samples| ProfileSnapshot {
            samples,
            top_symbols: w.top_symbols,
            stripped: w.stripped,
            lost_samples: w.lost_samples,
            unsampled_threads: w.unsampled_threads,
            unsampled_cpu_seconds: w.unsampled_cpu_seconds,
            frames: w.frames,
            inclusive: w.inclusive,
            functions: w.functions,
            stacks: w.stacks,
            frequency_hz: w.frequency_hz,
            sampler_cpu_seconds: w.sampler_cpu_seconds,
            samples_taken: w.samples_taken,
            rate_hz: w.rate_hz,
            on_demand: w.on_demand,
            sampled_seconds: w.sampled_seconds,
            sampled_cpu_seconds: w.sampled_cpu_seconds,
        });
        UpstreamSnapshot {
            pid: w.pid,
            comm: w.comm,
            exe: w.exe,
            threads: w.threads,
            cpus_allowed: w.cpus_allowed,
            interval_seconds: w.interval_seconds,
            watched_seconds: w.watched_seconds,
            cpu_user_seconds: w.cpu_user_seconds,
            cpu_system_seconds: w.cpu_system_seconds,
            cpu_seconds: w.cpu_seconds,
            runqueue_seconds: w.runqueue_seconds,
            busiest_thread_seconds: w.busiest_thread_seconds,
            active_seconds: w.active_seconds,
            active_busiest_thread_seconds: w.active_busiest_thread_seconds,
            traffic: w.traffic,
            context_switches_voluntary: w.context_switches_voluntary,
            context_switches_involuntary: w.context_switches_involuntary,
            restarts: w.restarts,
            processes: w.processes,
            profile,
            slices: w.slices,
        }
    }
}

impl UpstreamSnapshot {
    /// What per-request and per-core figures are read over: the reads that held traffic
    /// when the snapshot says them, else the whole time watched (older snapshots).
    pub fn work(&self) -> Traffic {
        self.traffic.unwrap_or(Traffic {
            seconds: self.watched_seconds,
            cpu_user_seconds: self.cpu_user_seconds,
            cpu_system_seconds: self.cpu_system_seconds,
            runqueue_seconds: self.runqueue_seconds,
            machine_busy_seconds: None,
            exchanges: None,
        })
    }

    /// The sampled stacks, when it was profiled with call stacks.
    pub fn stacks(&self) -> Option<&Stacks> {
        self.profile.as_ref()?.stacks.as_ref()
    }

    /// The samples a rule may rest on: `weighted` (counts in periods of `frequency_hz`,
    /// as every count of the profile is) unless fewer were taken. Under a budget a
    /// sample taken at 32× the period counts 32, so 200 counted can be 7 taken: a
    /// finding's minimum is of samples taken.
    pub fn samples_for_rules(&self, weighted: u64) -> u64 {
        self.profile
            .as_ref()
            .and_then(|p| p.samples_taken)
            .map_or(weighted, |taken| taken.min(weighted))
    }

    /// Component → samples (self), when it was profiled.
    pub fn samples(&self) -> Option<&BTreeMap<String, u64>> {
        self.profile.as_ref().map(|p| &p.samples)
    }

    /// Component → samples with a frame of it, when it was profiled with call stacks.
    pub fn inclusive(&self) -> Option<&BTreeMap<String, u64>> {
        self.profile.as_ref()?.inclusive.as_ref()
    }

    /// The top functions, when it was profiled with call stacks.
    pub fn functions(&self) -> Option<&[FunctionSnapshot]> {
        self.profile.as_ref()?.functions.as_deref()
    }

    /// What the call stacks' frames are, when it was profiled with call stacks.
    pub fn frames(&self) -> Option<FrameKind> {
        self.profile.as_ref()?.frames
    }

    /// The sampling rate, when the snapshot says it ([`DEFAULT_FREQUENCY_HZ`] otherwise).
    pub fn frequency_hz(&self) -> Option<u32> {
        self.profile.as_ref()?.frequency_hz
    }

    /// The profile, made present (empty) if it was not: for building snapshots by hand.
    pub fn profile_mut(&mut self) -> &mut ProfileSnapshot {
        self.profile.get_or_insert_with(ProfileSnapshot::default)
    }
}

/// Two windows of the same tap (snapshots of several runs) as one: times, counts and
/// samples add up; the later one names the process.
pub fn merge(a: UpstreamSnapshot, b: &UpstreamSnapshot) -> UpstreamSnapshot {
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
        traffic: super::traffic::add(a.traffic, b.traffic),
        context_switches_voluntary: a.context_switches_voluntary + b.context_switches_voluntary,
        context_switches_involuntary: a.context_switches_involuntary
            + b.context_switches_involuntary,
        restarts: a.restarts + b.restarts,
        processes: combine_processes(a.processes.as_deref(), b.processes.as_deref(), |x, y| x + y),
        profile: match (a.profile, &b.profile) {
            (None, None) => None,
            // A window without a profile adds nothing to the other's.
            (x, y) => Some(merge_profiles(
                x.unwrap_or_default(),
                y.as_ref().unwrap_or(&ProfileSnapshot::default()),
            )),
        },
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

/// Two windows' profiles as one. An absent figure of one side counts as nothing: an
/// empty profile added to another leaves it as it is.
fn merge_profiles(a: ProfileSnapshot, b: &ProfileSnapshot) -> ProfileSnapshot {
    let mut samples = a.samples;
    for (k, v) in &b.samples {
        *samples.entry(k.clone()).or_default() += v;
    }
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
    ProfileSnapshot {
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
        sampler_cpu_seconds: match (a.sampler_cpu_seconds, b.sampler_cpu_seconds) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
        },
        samples_taken: add(a.samples_taken, b.samples_taken),
        rate_hz: b.rate_hz.or(a.rate_hz),
        on_demand: b.on_demand.or(a.on_demand),
        sampled_seconds: add_f64(a.sampled_seconds, b.sampled_seconds),
        sampled_cpu_seconds: add_f64(a.sampled_cpu_seconds, b.sampled_cpu_seconds),
    }
}

/// Two optional figures added, absent only when both are.
fn add_f64(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    }
}

/// The part of `now`'s window after `before` was taken (two snapshots of one process, no
/// reset between): times, counts and samples subtract. Stacks, functions and top symbols
/// are not kept per part of a window, so the difference has none.
pub fn since(now: &UpstreamSnapshot, before: &UpstreamSnapshot) -> UpstreamSnapshot {
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
        traffic: super::traffic::since(now.traffic, before.traffic),
        context_switches_voluntary: now
            .context_switches_voluntary
            .saturating_sub(before.context_switches_voluntary),
        context_switches_involuntary: now
            .context_switches_involuntary
            .saturating_sub(before.context_switches_involuntary),
        restarts: now.restarts.saturating_sub(before.restarts),
        // The later window's processes, less what each had done before.
        processes: now.processes.as_ref().map(|now| {
            now.iter()
                .map(|p| {
                    let then = before
                        .processes
                        .iter()
                        .flatten()
                        .find(|b| b.pid == p.pid)
                        .map_or(0.0, |b| b.cpu_seconds);
                    ProcessCpu {
                        cpu_seconds: sub(p.cpu_seconds, then),
                        ..p.clone()
                    }
                })
                .collect()
        }),
        profile: now
            .profile
            .as_ref()
            .map(|p| profile_since(p, before.profile.as_ref())),
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

/// The part of `now`'s profile after `before` (absent: nothing to subtract).
fn profile_since(now: &ProfileSnapshot, before: Option<&ProfileSnapshot>) -> ProfileSnapshot {
    let sub_maps = |a: &BTreeMap<String, u64>, b: Option<&BTreeMap<String, u64>>| {
        a.iter()
            .map(|(k, v)| {
                let then = b.and_then(|b| b.get(k)).copied().unwrap_or(0);
                (k.clone(), v.saturating_sub(then))
            })
            .collect()
    };
    ProfileSnapshot {
        samples: sub_maps(&now.samples, before.map(|b| &b.samples)),
        inclusive: now
            .inclusive
            .as_ref()
            .map(|i| sub_maps(i, before.and_then(|b| b.inclusive.as_ref()))),
        lost_samples: now
            .lost_samples
            .map(|n| n.saturating_sub(before.and_then(|b| b.lost_samples).unwrap_or(0))),
        unsampled_cpu_seconds: now
            .unsampled_cpu_seconds
            .map(|s| (s - before.and_then(|b| b.unsampled_cpu_seconds).unwrap_or(0.0)).max(0.0)),
        sampled_seconds: now
            .sampled_seconds
            .map(|s| (s - before.and_then(|b| b.sampled_seconds).unwrap_or(0.0)).max(0.0)),
        sampled_cpu_seconds: now
            .sampled_cpu_seconds
            .map(|s| (s - before.and_then(|b| b.sampled_cpu_seconds).unwrap_or(0.0)).max(0.0)),
        samples_taken: now
            .samples_taken
            .map(|n| n.saturating_sub(before.and_then(|b| b.samples_taken).unwrap_or(0))),
        sampler_cpu_seconds: now
            .sampler_cpu_seconds
            .map(|s| (s - before.and_then(|b| b.sampler_cpu_seconds).unwrap_or(0.0)).max(0.0)),
        top_symbols: None,
        functions: None,
        stacks: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    const PROCESS: &str = r#""pid":7,"comm":"srv","exe":null,"threads":2,"interval_seconds":1.0,"watched_seconds":3.0,"cpu_user_seconds":0.5,"cpu_system_seconds":0.25,"runqueue_seconds":0.0,"busiest_thread_seconds":0.0,"context_switches_voluntary":1,"context_switches_involuntary":2,"restarts":0"#;

    fn load(json: &str) -> UpstreamSnapshot {
        serde_json::from_str(json).unwrap()
    }

    /// A group's processes add up by pid over merged windows and subtract by pid in
    /// `since`; a process in one window only is kept as it is.
    #[test]
    fn processes_merge_and_subtract_by_pid() {
        let with = |list: &str| load(&format!("{{{PROCESS},\"processes\":[{list}]}}"));
        let a = with(
            r#"{"pid":1,"comm":"m","cpu_seconds":0.0},{"pid":2,"comm":"w","cpu_seconds":1.0}"#,
        );
        let b = with(
            r#"{"pid":2,"comm":"w","cpu_seconds":2.0},{"pid":3,"comm":"w","cpu_seconds":0.5}"#,
        );
        let cpu = |u: &UpstreamSnapshot| -> Vec<(u32, f64)> {
            u.processes
                .iter()
                .flatten()
                .map(|p| (p.pid, p.cpu_seconds))
                .collect()
        };
        assert_eq!(cpu(&merge(a.clone(), &b)), [(1, 0.0), (2, 3.0), (3, 0.5)]);
        assert_eq!(cpu(&since(&b, &a)), [(2, 1.0), (3, 0.5)]);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(load(&json), a, "{json}");
        assert!(merge(
            load(&format!("{{{PROCESS}}}")),
            &load(&format!("{{{PROCESS}}}"))
        )
        .processes
        .is_none());
    }

    /// Without `samples` there is no profile, and the object is written back as it came.
    #[test]
    fn an_unsampled_process_has_no_profile_and_keeps_its_bytes() {
        let json = format!("{{{PROCESS}}}");
        let u = load(&json);
        assert_eq!(u.profile, None);
        assert_eq!(serde_json::to_string(&u).unwrap(), json);
    }

    /// The profile's fields are written where they always were: after `restarts`, before
    /// `slices`, in their order.
    #[test]
    fn a_profile_is_written_in_place_byte_for_byte() {
        let json = format!(
            r#"{{{PROCESS},"samples":{{"srv":3}},"top_symbols":[],"stripped":false,"lost_samples":0,"unsampled_threads":0,"unsampled_cpu_seconds":0.0,"frames":"native","inclusive":{{"srv":3}},"functions":[],"stacks":{{"frames":[],"stacks":[],"truncated_samples":0,"unmapped_samples":0}},"frequency_hz":99,"slices":{{"routes":[],"slices":[]}}}}"#
        );
        let u = load(&json);
        let p = u.profile.as_ref().unwrap();
        assert_eq!(
            (p.frames, p.frequency_hz),
            (Some(FrameKind::Native), Some(99))
        );
        assert_eq!(serde_json::to_string(&u).unwrap(), json);
    }

    /// A damaged profile fails to load, as it did when its fields were the struct's own
    /// (a flattened `Option` would read it as no profile).
    #[test]
    fn a_damaged_profile_is_an_error_not_an_absent_profile() {
        let json = format!(r#"{{{PROCESS},"samples":{{"srv":3}},"frames":"cobol"}}"#);
        assert!(serde_json::from_str::<UpstreamSnapshot>(&json).is_err());
    }

    /// Merging with a window without a profile keeps the other's; the part after an older
    /// window subtracts the samples and drops what is not kept per part of a window.
    #[test]
    fn the_profile_merges_and_subtracts_as_one() {
        let bare = load(&format!("{{{PROCESS}}}"));
        let sampled = load(&format!(
            r#"{{{PROCESS},"samples":{{"srv":5}},"top_symbols":[],"lost_samples":2}}"#
        ));
        let merged = merge(bare.clone(), &sampled);
        assert_eq!(merged.profile, sampled.profile);
        assert_eq!(merge(bare.clone(), &bare).profile, None);
        let twice = merge(sampled.clone(), &sampled);
        assert_eq!(twice.samples().and_then(|s| s.get("srv")), Some(&10));
        let later = since(&twice, &sampled);
        let p = later.profile.unwrap();
        assert_eq!((p.samples.get("srv"), p.lost_samples), (Some(&5), Some(2)));
        assert_eq!(p.top_symbols, None);
        assert_eq!(since(&bare, &sampled).profile, None);
    }
}

//! One sampler per process of the upstream's group, following the group as its processes
//! come and go: a worker that joins gets one, a worker that leaves takes its own away.
//!
//! Each process has its own address space (its own maps, symbols and unwind tables), so
//! each gets its own profiler; their samples add up into one window. Each native profiler
//! keeps its events within the descriptor budget counted over the whole proxy (the open
//! descriptors include the other profilers' events), and at most
//! [`MAX_SAMPLED_PROCESSES`] processes are sampled: the CPU of those left out is counted
//! as unsampled, as a thread without an event is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::profile::{
    self, ComponentRules, PhpProfiler, ProfileDelta, Profiler, PyProfiler, Sampler,
    UserComponentRule,
};
use super::Upstream;

/// Processes of one group sampled at most (lowest pids first: the parent, then the
/// workers it forked first). Each costs a profiler: its perf events, a drainer and a
/// symbolizer thread, and its own copy of the symbol tables.
pub const MAX_SAMPLED_PROCESSES: usize = 16;

/// What `profile = true` asks for: the rate and the user's component rules.
#[derive(Debug, Clone)]
pub struct ProfileSettings {
    /// Sampled only while asked ([`super::Upstream::profile_for`]).
    pub on_demand: bool,
    pub frequency: u32,
    /// Samples per second of each process, the rate adapting to it; 0: `frequency`, fixed.
    pub sample_budget: u32,
    pub stack_bytes: u32,
    /// One event per CPU over the machine, filtered to the process, instead of one per
    /// thread (`[tap.process] events = "per-cpu"`).
    pub per_cpu: bool,
    pub rules: Vec<UserComponentRule>,
}

impl ProfileSettings {
    /// From `[tap.process]`; `None` when profiling is off.
    pub fn of(tap: &crate::config::TapConfig) -> Option<ProfileSettings> {
        let p = &tap.process;
        p.profile.any().then(|| ProfileSettings {
            on_demand: p.profile == crate::config::Profile::OnDemand,
            frequency: p.frequency,
            sample_budget: p.sample_budget,
            stack_bytes: p.stack_bytes,
            per_cpu: p.events == crate::config::SampleEvents::PerCpu,
            rules: p
                .components
                .iter()
                .map(|c| UserComponentRule {
                    name: c.name.clone(),
                    symbol: c.symbol.clone(),
                    object: c.object.clone(),
                })
                .collect(),
        })
    }
}

/// The samplers of the group's processes, by pid.
#[derive(Default)]
pub struct Samplers {
    running: BTreeMap<u32, Sampler>,
    /// Processes a sampler was started on (or failed to start on): not tried again while
    /// they stay in the group.
    tried: BTreeSet<u32>,
    /// A missing permission was logged: not again until a sampler starts.
    told: bool,
}

impl Samplers {
    /// Drops every sampler (the group went away).
    pub fn clear(&mut self) {
        self.running.clear();
        self.tried.clear();
    }

    /// Matches the samplers to the group `members` (lowest pid first): those of
    /// processes gone are dropped, new processes get one, up to [`MAX_SAMPLED_PROCESSES`].
    pub fn follow(&mut self, members: &[u32], settings: &ProfileSettings, upstream: &Upstream) {
        self.running.retain(|pid, _| members.contains(pid));
        self.tried.retain(|pid| members.contains(pid));
        for &pid in members.iter().take(MAX_SAMPLED_PROCESSES) {
            if self.tried.insert(pid) {
                if let Some(s) = start(upstream.tap(), pid, settings, upstream, &mut self.told) {
                    self.running.insert(pid, s);
                }
            }
        }
    }

    /// The pids sampled now.
    pub fn sampled(&self) -> Vec<u32> {
        self.running.keys().copied().collect()
    }

    /// Each sampler's samples since the last collect.
    pub fn collect(&mut self, tap: &str) -> Vec<ProfileDelta> {
        let mut deltas = Vec::with_capacity(self.running.len());
        for (&pid, p) in &mut self.running {
            match p.collect() {
                Ok(delta) => deltas.push(delta),
                // The process may be exiting; the read that follows tells.
                Err(e) => tracing::debug!(tap, pid, "collecting samples: {e}"),
            }
        }
        deltas
    }
}

/// Starts sampling process `pid`; a failure is one log line (once per watcher for a
/// missing permission) and the accounting goes on without samples.
fn start(
    tap: &str,
    pid: u32,
    settings: &ProfileSettings,
    upstream: &Upstream,
    told: &mut bool,
) -> Option<Sampler> {
    let rules = || match ComponentRules::new(&settings.rules) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(tap, "{e}; sampling is off");
            upstream.sampling_failed(e.to_string());
            None
        }
    };
    // A PHP interpreter's own stacks say which PHP function runs; its machine code would
    // only name the VM's handlers.
    if settings.stack_bytes > 0 {
        match PhpProfiler::start(pid, settings.frequency, rules()?) {
            Ok(Some(mut p)) => {
                p.set_budget(settings.sample_budget);
                upstream.profiling(false, settings.frequency);
                tracing::info!(
                    tap,
                    pid,
                    "sampling the upstream's PHP call stacks (PHP {}) at {} while it is on a CPU",
                    p.version(),
                    rate(settings)
                );
                *told = false;
                return Some(Sampler::Php(p));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                tap,
                pid,
                "{e}. Sampling its machine code instead: PHP functions will not be named"
            ),
        }
    }
    if settings.stack_bytes > 0 {
        if let Some(p) = start_python(tap, pid, settings, upstream, rules()?) {
            *told = false;
            return Some(p);
        }
    }
    let events = profile::Events {
        stack_bytes: settings.stack_bytes,
        per_cpu: settings.per_cpu,
    };
    match Profiler::start_with(pid, settings.frequency, events, rules()?) {
        Ok(mut p) => {
            p.set_budget(settings.sample_budget);
            let exe: Option<PathBuf> = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            let stripped = exe.as_deref().is_some_and(profile::is_stripped);
            upstream.profiling(stripped, settings.frequency);
            tracing::info!(
                tap,
                pid,
                "sampling the upstream's CPU (pid {pid}) at {} {}{}",
                rate(settings),
                if settings.per_cpu {
                    "per CPU, other processes' samples dropped"
                } else {
                    "per thread"
                },
                if stripped {
                    "; its binary is stripped: its own code reads as one component"
                } else {
                    ""
                }
            );
            *told = false;
            Some(Sampler::Native(p))
        }
        Err(e) => {
            upstream.sampling_failed(e.to_string());
            if !*told {
                tracing::warn!(
                    tap,
                    pid,
                    "{e}. Sampling is off; CPU and run-queue accounting go on"
                );
                *told = e.is_permission();
            }
            None
        }
    }
}

/// A CPython interpreter's own stacks say which Python function runs; its machine code
/// would only name `_PyEval_EvalFrameDefault`. `None` when `pid` is not CPython, or when
/// its frames cannot be read (said once in the log; the native profile follows).
fn start_python(
    tap: &str,
    pid: u32,
    settings: &ProfileSettings,
    upstream: &Upstream,
    rules: ComponentRules,
) -> Option<Sampler> {
    match PyProfiler::start(pid, settings.frequency, rules) {
        Ok(Some(mut p)) => {
            p.set_budget(settings.sample_budget);
            upstream.profiling(false, settings.frequency);
            tracing::info!(
                tap,
                pid,
                "sampling the upstream's Python call stacks (CPython {}) at {} per thread while on a CPU",
                p.version(),
                rate(settings)
            );
            Some(Sampler::Python(p))
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(
                tap,
                pid,
                "{e}. Sampling its machine code instead: Python functions will not be named"
            );
            None
        }
    }
}

/// The rate a sampler starts at, as its start line says it: the configured one, and what
/// the budget lets it come down to.
fn rate(settings: &ProfileSettings) -> String {
    if settings.sample_budget == 0 {
        return format!("{} Hz", settings.frequency);
    }
    format!(
        "{} Hz, down to {} Hz while the process gives more than {} samples a second",
        settings.frequency,
        settings.frequency >> profile::MAX_RATE_SHIFT,
        settings.sample_budget
    )
}

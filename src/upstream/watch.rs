//! The per-tap watcher thread: find the process, read it every `interval`, follow it
//! across restarts, and say so in the log once per change.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;

use anyhow::Context;

use crate::sync::Background;

use super::account::Read;
use super::find::Target;
use super::profile::{self, ComponentRules, PhpProfiler, Profiler, Sampler, UserComponentRule};
use super::slices::SLICE;
use super::Upstream;

/// What `profile = true` asks for: the rate and the user's component rules.
#[derive(Debug, Clone)]
pub struct ProfileSettings {
    pub frequency: u32,
    pub stack_bytes: u32,
    pub rules: Vec<UserComponentRule>,
}

impl ProfileSettings {
    /// From `[tap.process]`; `None` when profiling is off.
    pub fn of(tap: &crate::config::TapConfig) -> Option<ProfileSettings> {
        let p = &tap.process;
        p.profile.then(|| ProfileSettings {
            frequency: p.frequency,
            stack_bytes: p.stack_bytes,
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

/// Owns the thread; dropping it (or [`Watcher::stop`]) ends the thread within one
/// `interval`'s wait, which the stop cuts short.
pub struct Watcher {
    thread: Background,
}

impl Watcher {
    /// Starts watching for `target` into `upstream`. The thread runs apart from the
    /// connection workers: /proc reads never delay a request.
    pub fn spawn(
        target: Target,
        upstream: Arc<Upstream>,
        profile: Option<ProfileSettings>,
    ) -> anyhow::Result<Watcher> {
        let name = format!("ps-up-{}", upstream.tap());
        let thread = Background::spawn(&name, move |stopped| {
            run(&target, &upstream, profile.as_ref(), &stopped)
        })
        .context("starting the upstream watcher thread")?;
        Ok(Watcher { thread })
    }

    pub fn stop(self) {
        self.thread.stop();
    }
}

/// The watcher's loop: a turn finds the process or reads it, then waits an interval
/// (longer while the process stays missing) or until stopped.
fn run(
    target: &Target,
    upstream: &Upstream,
    profile: Option<&ProfileSettings>,
    stopped: &mpsc::Receiver<()>,
) {
    if let Err(e) = super::account::check_kernel() {
        let tap = upstream.tap();
        tracing::warn!(tap, "{e:#}; upstream accounting is off for this tap");
        return;
    }
    let mut w = Watch {
        target,
        upstream,
        profile,
        told_missing: false,
        misses: 0,
        attached: None,
        last_pid: None,
        last_exe: None,
        exec: false,
        profiler: None,
        told_profile: false,
    };
    loop {
        let turn = match w.attached {
            None => w.find(),
            Some(pid) => w.read(pid),
        };
        match turn {
            Turn::Wait => {}
            Turn::Again => continue,
            Turn::Stop => return,
        }
        // Between turns, a slice every `SLICE` when the routes are counted: the reads
        // that close them add to the accounting as any read does.
        let until = std::time::Instant::now() + w.wait();
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let slicing = w.attached.is_some() && upstream.slicing();
            let step = if slicing { left.min(SLICE) } else { left };
            match stopped.recv_timeout(step) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            if slicing && step < left {
                // A process gone is the next turn's to notice.
                let _ = upstream.read();
            }
        }
    }
}

/// What one turn of the watcher leaves to do.
enum Turn {
    /// Wait for the next turn.
    Wait,
    /// Take the next turn now.
    Again,
    /// Stop watching: the process cannot be watched from here.
    Stop,
}

/// What the watcher remembers from one turn to the next.
struct Watch<'a> {
    target: &'a Target,
    upstream: &'a Upstream,
    profile: Option<&'a ProfileSettings>,
    /// Log a failure to find once, until something changes.
    told_missing: bool,
    /// Consecutive failures to find: finding scans every process's fds, so a process
    /// that stays missing is looked for less often.
    misses: u32,
    attached: Option<u32>,
    last_pid: Option<u32>,
    /// The executable of the process last attached, to name what an exec replaced.
    last_exe: Option<std::path::PathBuf>,
    /// The process let go exec'd another program: the next attach is that program.
    exec: bool,
    /// One profiler per process: a restart gets a new one, never the old one's events.
    profiler: Option<Sampler>,
    told_profile: bool,
}

impl Watch<'_> {
    /// Looks for the process and attaches to it.
    fn find(&mut self) -> Turn {
        let tap = self.upstream.tap();
        let interval = self.upstream.interval();
        match self
            .target
            .locate()
            .and_then(|pid| self.upstream.attach(pid))
        {
            Ok((info, threads_readable)) => self.attached_to(&info, threads_readable),
            Err(e) if e.downcast_ref::<super::find::NotLocal>().is_some() => {
                tracing::warn!(
                    tap,
                    "cannot watch the upstream process: {e:#}. The tap works as before, without upstream accounting"
                );
                return Turn::Stop;
            }
            Err(e) => {
                self.misses = self.misses.saturating_add(1);
                if !self.told_missing {
                    let retry = if self.target.follows_restarts() || self.last_pid.is_none() {
                        format!(
                            "; looking again every {}",
                            humantime::format_duration(interval)
                        )
                    } else {
                        String::new()
                    };
                    tracing::warn!(
                        tap,
                        "cannot watch the upstream process: {e:#}. The tap works as before, without upstream accounting{retry}"
                    );
                    self.told_missing = true;
                }
            }
        }
        Turn::Wait
    }

    /// The process found: say so (a restart, or the first), and start sampling it.
    fn attached_to(&mut self, info: &super::account::ProcessInfo, threads_readable: bool) {
        let tap = self.upstream.tap();
        self.told_missing = false;
        self.misses = 0;
        self.attached = Some(info.pid);
        let shown = |exe: &Option<std::path::PathBuf>| {
            exe.as_ref().map_or_else(
                || "an unreadable executable".to_owned(),
                |e| e.display().to_string(),
            )
        };
        match self.last_pid {
            Some(old) if std::mem::take(&mut self.exec) && old == info.pid => tracing::info!(
                tap,
                pid = info.pid,
                comm = %info.comm,
                "the upstream process {} exec'd another program: now {} ({}, {} threads), was {}; counted as a restart, counters go on from the new program",
                info.pid,
                shown(&info.exe),
                info.comm,
                info.threads,
                shown(&self.last_exe)
            ),
            Some(old) => tracing::info!(
                tap,
                pid = info.pid,
                old_pid = old,
                comm = %info.comm,
                "the upstream process restarted: now watching pid {} ({}, {} threads); counters go on from the new process, nothing of pid {old} after its last read is counted",
                info.pid, info.comm, info.threads
            ),
            None => tracing::info!(
                tap,
                pid = info.pid,
                comm = %info.comm,
                "watching the upstream process: pid {} ({}, {} threads), every {}",
                info.pid,
                info.comm,
                info.threads,
                humantime::format_duration(self.upstream.interval())
            ),
        }
        if !threads_readable {
            tracing::warn!(
                tap,
                pid = info.pid,
                "cannot read /proc/{}/task/*/schedstat or status: CPU time is counted, run-queue delay and context switches are not; run as the upstream's user or as root, or grant CAP_SYS_PTRACE",
                info.pid
            );
        }
        self.last_pid = Some(info.pid);
        self.last_exe = info.exe.clone();
        if let Some(settings) = self.profile {
            self.profiler =
                start_profiler(tap, info, settings, self.upstream, &mut self.told_profile);
        }
    }

    /// Adds the samples since the last turn and reads the process; a process gone is
    /// let go, and looked for again at once when its successor may already listen.
    fn read(&mut self, pid: u32) -> Turn {
        let tap = self.upstream.tap();
        if let Some(p) = &mut self.profiler {
            match p.collect() {
                Ok(delta) => self.upstream.add_samples(&delta),
                Err(e) => {
                    // The process may be exiting; the read below tells.
                    tracing::debug!(tap, pid, "collecting samples: {e}");
                }
            }
        }
        match self.upstream.read() {
            Read::Gone => {
                self.let_go();
                tracing::info!(tap, pid, "the upstream process {pid} is gone");
                if self.target.follows_restarts() {
                    return Turn::Again;
                }
            }
            // Another program in the same process: attached again at once, whatever the
            // target (the pid is still the one asked for).
            Read::Exec => {
                self.let_go();
                self.exec = true;
                tracing::info!(
                    tap,
                    pid,
                    "the upstream process {pid} exec'd another program"
                );
                return Turn::Again;
            }
            Read::Alive | Read::Skipped | Read::Detached => {}
        }
        Turn::Wait
    }

    /// Stops reading and sampling the process attached.
    fn let_go(&mut self) {
        self.upstream.detach();
        self.attached = None;
        self.profiler = None;
    }

    /// How long to wait before the next turn.
    fn wait(&self) -> std::time::Duration {
        let interval = self.upstream.interval();
        if self.attached.is_none() && self.misses >= SLOW_AFTER_MISSES {
            interval.max((interval * 10).min(SLOW_FIND))
        } else {
            interval
        }
    }
}

/// After this many failed attempts in a row, look for the process only every
/// `min(10 × interval, SLOW_FIND)` (never less often than `interval`).
const SLOW_AFTER_MISSES: u32 = 30;
const SLOW_FIND: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts sampling `info`'s process; a failure is one log line (once per watcher for a
/// missing permission) and the accounting goes on without samples.
fn start_profiler(
    tap: &str,
    info: &super::account::ProcessInfo,
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
        match PhpProfiler::start(info.pid, settings.frequency, rules()?) {
            Ok(Some(p)) => {
                upstream.profiling(false, settings.frequency);
                tracing::info!(
                    tap,
                    pid = info.pid,
                    "sampling the upstream's PHP call stacks (PHP {}) at {} Hz while it is on a CPU",
                    p.version(),
                    settings.frequency
                );
                *told = false;
                return Some(Sampler::Php(p));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                tap,
                pid = info.pid,
                "{e}. Sampling its machine code instead: PHP functions will not be named"
            ),
        }
    }
    match Profiler::start(info.pid, settings.frequency, settings.stack_bytes, rules()?) {
        Ok(p) => {
            let stripped = info.exe.as_deref().is_some_and(profile::is_stripped);
            upstream.profiling(stripped, settings.frequency);
            tracing::info!(
                tap,
                pid = info.pid,
                "sampling the upstream's CPU at {} Hz per thread{}",
                settings.frequency,
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
                    pid = info.pid,
                    "{e}. Sampling is off; CPU and run-queue accounting go on"
                );
                *told = e.is_permission();
            }
            None
        }
    }
}

//! The per-tap watcher thread: find the process (with `auto`, the group of processes
//! that serve the upstream's socket), read it every `interval`, follow workers that
//! come and go and the whole across restarts, and say so in the log once per change.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;

use anyhow::Context;

use crate::sync::Background;

use super::account::Read;
use super::find::{self, Target};
use super::samplers::{ProfileSettings, Samplers};
use super::slices::SLICE;
use super::Upstream;

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
    if profile.is_some_and(|p| p.on_demand) {
        upstream.set_on_demand();
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
        samplers: Samplers::default(),
        turns: 0,
        children: std::collections::HashSet::new(),
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
    /// One profiler per process: a restart gets new ones, never the old one's events.
    samplers: Samplers,
    /// Turns since the group was last looked for.
    turns: u32,
    /// The children of the group's processes at the last turn (see [`Watch::regroup`]).
    children: std::collections::HashSet<u32>,
}

impl Watch<'_> {
    /// Looks for the process and attaches to it.
    fn find(&mut self) -> Turn {
        let tap = self.upstream.tap();
        let interval = self.upstream.interval();
        match self
            .target
            .locate_group()
            .and_then(|pids| self.upstream.attach(&pids))
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
                // Nothing listening is found from /proc/net/tcp alone: looking again every
                // interval costs little, and a successor is found within one interval of
                // listening however long the absence. Only a search that scanned every
                // process's files and failed slows down.
                if e.downcast_ref::<super::find::NothingListens>().is_some() {
                    self.misses = 0;
                } else {
                    self.misses = self.misses.saturating_add(1);
                }
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
        self.turns = 0;
        self.samplers.clear();
        self.follow_samplers();
    }

    /// Gives each process of the group its sampler, and takes away those of processes
    /// that left.
    fn follow_samplers(&mut self) {
        if let Some(settings) = self.profile {
            // On demand: only while asked ([`Self::follow_demand`]).
            if settings.on_demand && !self.upstream.demand().1 {
                return;
            }
            let members = self.upstream.members();
            self.samplers.follow(&members, settings, self.upstream);
        }
    }

    /// With `auto`, looks for the group's processes again when one left (a master
    /// replaces the workers that exit), when one forked a child not seen before (a
    /// forking server's child for a connection, which holds the listening socket it
    /// inherited: found within a turn, not ten) and every [`REGROUP_TURNS`] turns (a
    /// worker added, a new SO_REUSEPORT process): finding scans every process's open
    /// files, so not every turn.
    fn regroup(&mut self) {
        let tap = self.upstream.tap();
        self.turns += 1;
        let left = self.upstream.take_left();
        let forked = self.target.finds_groups() && self.forked();
        if self.target.finds_groups() && (left || forked || self.turns >= REGROUP_TURNS) {
            self.turns = 0;
            let members = self.upstream.members();
            for pid in self.target.locate_group().unwrap_or_default() {
                if members.contains(&pid) {
                    continue;
                }
                match self.upstream.join(pid) {
                    Ok(info) => tracing::info!(
                        tap,
                        pid,
                        "pid {pid} serves the upstream too: now {} processes ({} threads)",
                        info.processes,
                        info.threads
                    ),
                    Err(e) => {
                        tracing::debug!(tap, pid, "cannot watch a process of the upstream: {e:#}")
                    }
                }
            }
        }
        if left || self.turns == 0 {
            self.follow_samplers();
        }
    }

    /// Adds the samples since the last turn and reads the process; a process gone is
    /// let go, and looked for again at once when its successor may already listen.
    fn read(&mut self, pid: u32) -> Turn {
        let tap = self.upstream.tap();
        let sampled = self.samplers.sampled();
        if !sampled.is_empty() {
            let deltas = self.samplers.collect(tap);
            self.upstream.add_samples(&deltas, &sampled);
        }
        self.follow_demand();
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
            Read::Alive | Read::Skipped | Read::Detached => self.regroup(),
        }
        Turn::Wait
    }

    /// With `profile = "on-demand"`: starts the samplers when asked, and stops them,
    /// their last samples added, once the asked time is over: no perf event stays open.
    fn follow_demand(&mut self) {
        let Some(settings) = self.profile.filter(|p| p.on_demand) else {
            return;
        };
        let tap = self.upstream.tap();
        let wanted = self.upstream.demand().1;
        let running = !self.samplers.sampled().is_empty();
        if wanted && !running {
            let members = self.upstream.members();
            self.samplers.follow(&members, settings, self.upstream);
            self.upstream.sampling_started();
            tracing::info!(tap, "sampling on demand");
        } else if !wanted && running {
            self.samplers.clear();
            self.upstream.sampling_stopped();
            tracing::info!(tap, "sampling on demand ended: no perf event open");
        }
    }

    /// Stops reading and sampling the process attached.
    fn let_go(&mut self) {
        self.upstream.detach();
        self.attached = None;
        self.samplers.clear();
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

impl Watch<'_> {
    /// Whether a process of the group has a child that was not there at the last turn and
    /// is not in the group: one file per process ([`find::children`]).
    fn forked(&mut self) -> bool {
        let members = self.upstream.members();
        let now: std::collections::HashSet<u32> = members
            .iter()
            .flat_map(|&pid| find::children(pid))
            .collect();
        let new = now
            .iter()
            .any(|c| !members.contains(c) && !self.children.contains(c));
        self.children = now;
        new
    }
}

/// After this many failed searches in a row that scanned every process's open files (a
/// socket listened, but no process this user can read held it), look for the process
/// only every `min(10 × interval, SLOW_FIND)` (never less often than `interval`). A search
/// that found nothing listening does not count: it read /proc/net/tcp only.
const SLOW_AFTER_MISSES: u32 = 30;
const SLOW_FIND: std::time::Duration = std::time::Duration::from_secs(10);

/// With `auto`, the group is looked for again every this many turns even when no process
/// left it: a worker added or a new SO_REUSEPORT process is found within that many
/// `interval`s.
const REGROUP_TURNS: u32 = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn nothing_listening_for_long_keeps_looking_every_interval() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let target = Target::Listener(format!("127.0.0.1:{port}"));
        let upstream = Upstream::new("t", Duration::from_millis(300));
        let mut w = Watch {
            target: &target,
            upstream: &upstream,
            profile: None,
            told_missing: false,
            misses: 0,
            attached: None,
            last_pid: Some(1),
            last_exe: None,
            exec: false,
            samplers: Samplers::default(),
            turns: 0,
            children: std::collections::HashSet::new(),
        };
        for _ in 0..SLOW_AFTER_MISSES * 2 {
            assert!(matches!(w.find(), Turn::Wait));
        }
        // A miss with nothing listening reads /proc/net/tcp only: no slowing down, so a
        // successor is found within one interval of listening.
        assert_eq!(w.wait(), Duration::from_millis(300));
        // Once it listens, it is found at the next turn.
        let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        assert!(matches!(w.find(), Turn::Wait));
        assert_eq!(w.attached, Some(std::process::id()));
        drop(l);
    }
}

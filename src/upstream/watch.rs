//! The per-tap watcher thread: find the process, read it every `interval`, follow it
//! across restarts, and say so in the log once per change.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;

use super::account::Read;
use super::find::Target;
use super::Upstream;

/// Owns the thread; dropping it (or [`Watcher::stop`]) ends the thread within one
/// `interval`'s wait, which the stop cuts short.
pub struct Watcher {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching for `target` into `upstream`. The thread runs apart from the
    /// connection workers: /proc reads never delay a request.
    pub fn spawn(target: Target, upstream: Arc<Upstream>) -> anyhow::Result<Watcher> {
        let (stop, stopped) = mpsc::channel();
        let name = format!("ps-up-{}", upstream.tap());
        let thread = std::thread::Builder::new()
            // Thread names are cut at 15 bytes by the kernel; the prefix is what matters.
            .name(name.chars().take(15).collect())
            .spawn(move || run(&target, &upstream, &stopped))
            .context("starting the upstream watcher thread")?;
        Ok(Watcher {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(target: &Target, upstream: &Upstream, stopped: &mpsc::Receiver<()>) {
    let tap = upstream.tap();
    let interval = upstream.interval();
    if let Err(e) = super::account::check_kernel() {
        tracing::warn!(tap, "{e:#}; upstream accounting is off for this tap");
        return;
    }
    // Log a failure to find once, until something changes.
    let mut told_missing = false;
    let mut attached: Option<u32> = None;
    let mut last_pid: Option<u32> = None;
    loop {
        match attached {
            None => match target.locate().and_then(|pid| upstream.attach(pid)) {
                Ok((info, threads_readable)) => {
                    told_missing = false;
                    attached = Some(info.pid);
                    match last_pid {
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
                            humantime::format_duration(interval)
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
                    last_pid = Some(info.pid);
                }
                Err(e) => {
                    if !told_missing {
                        let retry = if target.follows_restarts() || last_pid.is_none() {
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
                        told_missing = true;
                    }
                }
            },
            Some(pid) => {
                if upstream.read() == Read::Gone {
                    upstream.detach();
                    attached = None;
                    tracing::info!(tap, pid, "the upstream process {pid} is gone");
                    if target.follows_restarts() {
                        // Its successor may already listen: look now rather than an
                        // interval later.
                        continue;
                    }
                }
            }
        }
        match stopped.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

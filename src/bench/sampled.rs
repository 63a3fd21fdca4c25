//! With `--profile-upstream`: both servers sampled before the first request of the
//! warm-up.
//!
//! Why: how a server's threads come to carry their perf events changes what the server
//! pays for them. A thread created after the sampler opened its events inherits copies of
//! its creator's, and the kernel switches between two threads with such copies of one
//! parent almost for free; a thread that already existed gets events of its own, which
//! are switched out and in at each of its context switches. A thread-per-connection
//! server whose connection threads the warm-up of side A created before A's sampler had
//! started, while B's sampler had started before B's warm-up, paid 4 µs a request more
//! in the scheduler (`finish_task_switch`) on side A: an A/A bench of two identical
//! servers read a dozen kernel functions as 40 % dearer on A, run after run. Waited for,
//! both sides' servers get their events the same way.

use std::sync::Arc;
use std::time::Duration;

use crate::config::TapConfig;
use crate::metrics::Registry;
use crate::upstream::{Upstream, Watcher, SAMPLER_START};

/// The watcher's first look for the process comes at once and takes milliseconds: a side
/// whose process is not found within this (a server on another host) has no sampler to
/// wait for.
const FIND: Duration = Duration::from_secs(2);

/// Each side's upstream watcher and the figures it fills.
pub(super) struct Watched(Vec<(Watcher, Arc<Upstream>)>);

/// The watchers of `taps`' servers (found by the port they listen on), so that each
/// snapshot carries their CPU and the comparison's note sets CPU per request side by
/// side; one not found is a log line and the bench measures as before.
pub(super) fn watch(taps: &[TapConfig], registry: &Registry) -> Watched {
    Watched(crate::app::watched_upstreams(taps, registry))
}

impl Watched {
    /// Waits, at most [`SAMPLER_START`] (past it the bench begins and says so), until
    /// every side's sampler samples with whole stacks or has said why it cannot; a side whose process was not found within [`FIND`] (a
    /// server on another host) is not waited for.
    pub(super) async fn sampling(&self) {
        let begun = tokio::time::Instant::now();
        let ready = |u: &Upstream| {
            u.sampler_settled() || (begun.elapsed() >= FIND && u.totals().1.is_none())
        };
        let deadline = begun + SAMPLER_START;
        let upstreams = || self.0.iter().map(|(_, u)| u.as_ref());
        while !upstreams().all(ready) {
            if tokio::time::Instant::now() >= deadline {
                let late: Vec<&str> = upstreams().filter(|u| !ready(u)).map(|u| u.tap()).collect();
                tracing::warn!(
                    taps = ?late,
                    "the servers' samplers had not started after {} s: the bench begins \
                     without them, and the sides' threads may carry their events differently",
                    SAMPLER_START.as_secs()
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

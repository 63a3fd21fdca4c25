//! Inside the upstream: the process behind a tap, what its threads spend on a CPU and
//! waiting for one, read from /proc off the data path.
//!
//! Per tap with a process to watch ([`find::Target`]), one thread ([`watch`]) finds the
//! process, reads it every `interval` into an [`account::Accountant`] and follows it
//! across restarts. The admin server reads the same [`Upstream`] for `/metrics` and the
//! snapshot. docs/phases.md says what the figures mean per request; docs/metrics.md names
//! them.

pub mod account;
pub mod find;
mod metrics;
pub mod snapshot;
mod watch;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use metrics::encode as encode_prometheus;
pub use snapshot::{SymbolSnapshot, UpstreamSnapshot};
pub use watch::Watcher;

use crate::metrics::lock;
use account::{Accountant, ProcessInfo, Read, Totals};

/// One tap's upstream accounting, shared by its watcher and the admin server.
pub struct Upstream {
    tap: String,
    interval: Duration,
    state: Mutex<State>,
}

struct State {
    accountant: Accountant,
    /// The totals at the last snapshot reset: the snapshot shows what happened since.
    baseline: Totals,
}

impl Upstream {
    pub fn new(tap: &str, interval: Duration) -> Arc<Self> {
        Arc::new(Self {
            tap: tap.to_owned(),
            interval,
            state: Mutex::new(State {
                accountant: Accountant::new(),
                baseline: Totals::default(),
            }),
        })
    }

    pub fn tap(&self) -> &str {
        &self.tap
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Reads the watched process now (a scrape or a snapshot wants current counters).
    /// Gone is left for the watcher to notice and act on.
    pub fn refresh(&self) {
        let mut s = lock(&self.state);
        let _ = s.accountant.read();
    }

    pub(crate) fn read(&self) -> Read {
        lock(&self.state).accountant.read()
    }

    pub(crate) fn attach(&self, pid: u32) -> anyhow::Result<(ProcessInfo, bool)> {
        let mut s = lock(&self.state);
        let info = s.accountant.attach(pid)?.clone();
        Ok((info, s.accountant.threads_readable()))
    }

    pub(crate) fn detach(&self) {
        lock(&self.state).accountant.detach();
    }

    /// Counters since phasescope started watching, and the process now (if any).
    pub fn totals(&self) -> (Totals, Option<ProcessInfo>) {
        let s = lock(&self.state);
        (s.accountant.totals(), s.accountant.process().cloned())
    }

    /// Starts a new snapshot window (`POST /api/reset`); the Prometheus counters go on.
    pub fn reset(&self) {
        let mut s = lock(&self.state);
        let _ = s.accountant.read();
        s.baseline = s.accountant.totals();
    }

    /// The snapshot's `upstream` object: counters since the last reset.
    pub fn snapshot(&self) -> UpstreamSnapshot {
        let mut s = lock(&self.state);
        let _ = s.accountant.read();
        let window = s.accountant.totals().since(&s.baseline);
        UpstreamSnapshot::new(window, s.accountant.process(), self.interval)
    }
}

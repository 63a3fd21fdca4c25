//! The findings of the last minute, for the `phasescope_finding` gauge: a thread takes a
//! snapshot every [`EVERY`], diagnoses the window between the newest and the one taken
//! [`WINDOW`] before it, and leaves the result on the registry's board. A finding is
//! therefore 1 within [`EVERY`] of its cause holding for a window's worth of requests,
//! and gone within a [`WINDOW`] of the cause going away.

use std::collections::VecDeque;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::metrics::{Registry, Snapshot};
use crate::sync::Background;

/// How often the findings are evaluated.
pub const EVERY: Duration = Duration::from_secs(10);
/// The window they are evaluated over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Owns the thread; [`Monitor::stop`] (or dropping it) ends it at once.
pub struct Monitor {
    thread: Background,
}

impl Monitor {
    pub fn spawn(registry: Arc<Registry>) -> anyhow::Result<Monitor> {
        let thread = Background::spawn("ps-findings", move |stopped| {
            let mut ring = VecDeque::new();
            loop {
                evaluate(&registry, &mut ring);
                match stopped.recv_timeout(EVERY) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        })
        .context("starting the findings thread")?;
        Ok(Monitor { thread })
    }

    pub fn stop(self) {
        self.thread.stop();
    }
}

/// One evaluation: the newest snapshot joins the ring, those older than the window leave
/// it (but one, the window's start), and the window between them is diagnosed.
fn evaluate(registry: &Registry, ring: &mut VecDeque<Snapshot>) {
    let now = registry.snapshot();
    let start = now.taken_at_unix - WINDOW.as_secs_f64();
    while ring.len() > 1 && ring.get(1).is_some_and(|s| s.taken_at_unix <= start) {
        ring.pop_front();
    }
    let window = match ring.front() {
        Some(oldest) => now.since(oldest),
        None => now.clone(),
    };
    registry.findings().set(&super::diagnose(&window));
    ring.push_back(now);
}

//! The duet design (Bulej et al., "Duet benchmarking", ICPE 2020): A and B are loaded at
//! the same time, each through its own tap with its own half of the connections, and the
//! proxy's figures are cut into short windows (250 ms by default). A window's snapshot
//! holds both taps, measured over the same interval, so whatever else the machine did in
//! that window fell on both; the comparison is made on the per-window ratios B/A (a
//! paired t interval, `compare --paired`), where that common noise cancels.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use tokio::time::Instant;

use super::order::Side;
use super::{load, progress, validity, Bench, Measured, RunRecord};
use crate::metrics::Snapshot;

impl Bench<'_> {
    /// How long the duet loads both sides: as long as the runs design would take.
    pub(super) fn duet_length(&self) -> Duration {
        self.args.duration * u32::try_from(2 * self.args.runs).unwrap_or(u32::MAX)
    }

    /// Both sides at once; the windows, each as both sides' snapshot.
    pub(super) async fn duet(&self) -> anyhow::Result<(Vec<RunRecord>, Measured)> {
        let args = self.args;
        ensure!(
            args.load.is_none(),
            "--load drives one server at a time: use it with --design runs"
        );
        let window = args.window;
        ensure!(
            window >= Duration::from_millis(10),
            "--window must be at least 10ms"
        );
        let length = self.duet_length();
        let count = (length.as_secs_f64() / window.as_secs_f64()).floor() as usize;
        ensure!(
            count >= super::MIN_WINDOWS,
            "a duet of {length:?} has {count} windows of {window:?}: needs at least {} \
             (more --runs or --duration, or a shorter --window)",
            super::MIN_WINDOWS
        );
        let half = (args.connections / 2).max(1);
        // One window more than measured: the first, while the connections open, is not.
        let plan = |side| self.plan(side, length + window, half);
        let counters = [(); 2].map(|()| Arc::new(load::Counters::default()));
        let (a_plan, b_plan) = (plan(Side::A), plan(Side::B));
        let (a_addr, b_addr, threads) = (self.a_addr, self.b_addr, args.threads);
        let generated = tokio::task::spawn_blocking(move || {
            load::drive_pair_on_threads(
                [
                    (a_addr, &a_plan, &counters[0]),
                    (b_addr, &b_plan, &counters[1]),
                ],
                threads,
            )
        });
        let (generated, windows) = tokio::join!(generated, self.windows(count, window));
        let [a, b] = generated.context("the load generator")??;
        let whole = Snapshot::merged(&windows)
            .ok_or_else(|| anyhow::anyhow!("the duet measured no window"))?;
        let mut runs = Vec::new();
        let mut measured = Measured::default();
        for (i, (side, outcome)) in [(Side::A, a), (Side::B, b)].into_iter().enumerate() {
            let record = RunRecord::new(i + 1, side, &whole, Some(outcome));
            progress::done(
                i + 1,
                2,
                side,
                record.requests,
                record.seconds,
                validity::failed(&record),
            );
            runs.push(record);
        }
        for (i, snap) in windows.into_iter().enumerate() {
            let name = format!("window-{:04}.json", i + 1);
            self.keep(&name, &snap)?;
            measured.push(Side::A, snap.clone(), name.clone());
            measured.push(Side::B, snap, name);
        }
        Ok((runs, measured))
    }

    /// `count` consecutive windows of `window` after one unmeasured: each the snapshot
    /// since the reset that began it.
    async fn windows(&self, count: usize, window: Duration) -> Vec<Snapshot> {
        let start = Instant::now() + window;
        tokio::time::sleep_until(start).await;
        self.registry.reset();
        let mut out = Vec::with_capacity(count);
        for i in 1..=count {
            tokio::time::sleep_until(start + window * u32::try_from(i).unwrap_or(u32::MAX)).await;
            out.push(self.registry.snapshot());
            self.registry.reset();
        }
        out
    }
}

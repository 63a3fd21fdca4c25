//! The duet design (Bulej et al., "Duet benchmarking", ICPE 2020): A and B are loaded at
//! the same time, each through its own tap with its own half of the connections, and the
//! proxy's figures are cut into short windows (250 ms by default). A window's snapshot
//! holds both taps, measured over the same interval, so whatever else the machine did in
//! that window fell on both; the comparison is made on the per-window ratios B/A (a
//! paired t interval, `compare --paired`), where that common noise cancels.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use serde::Serialize;
use tokio::time::Instant;

use super::order::Side;
use super::{load, progress, validity, Bench, Measured, RunRecord};
use crate::metrics::Snapshot;
use crate::report::{compare, CompareOptions, Comparison};

/// With `--until-mde`, how often the windows so far are compared: often enough that the
/// duet stops soon after the target is reached, rarely enough that the comparison (a
/// bootstrap per row) costs little of the windows' time.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What `--until-mde` came to.
#[derive(Debug, Clone, Serialize)]
pub struct UntilMde {
    /// The target, a fraction.
    pub target: f64,
    /// The primary rows' largest mde when the duet ended (null: a row had none).
    pub mde: Option<f64>,
    /// Whether the target was reached (else `--max-duration` passed first).
    pub reached: bool,
    /// Seconds of measured windows.
    pub seconds: f64,
    pub max_duration: f64,
}

impl Bench<'_> {
    /// How long the duet loads both sides: as long as the runs design would take, or with
    /// `--until-mde` at most `--max-duration`.
    pub(super) fn duet_length(&self) -> Duration {
        match self.args.until_mde {
            Some(_) => self.args.max_duration,
            None => self.args.duration * u32::try_from(2 * self.args.runs).unwrap_or(u32::MAX),
        }
    }

    /// Both sides at once; the windows, each as both sides' snapshot, and what
    /// `--until-mde` came to.
    pub(super) async fn duet(
        &self,
    ) -> anyhow::Result<(Vec<RunRecord>, Measured, Option<UntilMde>)> {
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
        if let Some(pct) = args.until_mde {
            ensure!(
                pct > 0.0 && pct.is_finite(),
                "--until-mde must be a positive percentage, not {pct}"
            );
        }
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
        let stop = counters.clone();
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
        let measure = async {
            let (windows, until) = self.windows(count, window).await;
            // Reached early, or the last window taken: the load ends with the windows.
            for c in &stop {
                c.stop();
            }
            (windows, until)
        };
        let (generated, (windows, until)) = tokio::join!(generated, measure);
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
        Ok((runs, measured, until))
    }

    /// Up to `count` consecutive windows of `window` after one unmeasured: each the
    /// snapshot since the reset that began it. With `--until-mde`, fewer once the windows
    /// so far reach the target.
    ///
    /// The check runs on a thread of its own while the windows go on being taken on
    /// time (a comparison of hundreds of windows takes longer than one window: done in
    /// line, it delayed the next snapshots, which then held almost nothing). Checks are
    /// spaced by [`CHECK_EVERY`] and by a tenth more windows each, so their cost grows
    /// with the windows only as a logarithm. When one says reached, the windows taken
    /// after the ones it saw are left out: the duet stops where the rule was met, and the
    /// verdict's mde is the one the rule saw.
    async fn windows(&self, count: usize, window: Duration) -> (Vec<Snapshot>, Option<UntilMde>) {
        let target = self.args.until_mde.map(|pct| pct / 100.0);
        let check_every = (CHECK_EVERY.as_secs_f64() / window.as_secs_f64()).ceil() as usize;
        let start = Instant::now() + window;
        tokio::time::sleep_until(start).await;
        self.registry.reset();
        let mut out = Vec::with_capacity(count);
        let mut mde = None;
        let mut checking: Option<(usize, tokio::task::JoinHandle<Option<f64>>)> = None;
        let mut checked = 0;
        for i in 1..=count {
            tokio::time::sleep_until(start + window * u32::try_from(i).unwrap_or(u32::MAX)).await;
            // One cut, not a snapshot then a reset: what was recorded between the two
            // fell in no window.
            out.push(self.registry.cut());
            let Some(target) = target else { continue };
            if let Some((seen, handle)) = checking.take_if(|(_, h)| h.is_finished()) {
                mde = handle.await.ok().flatten();
                if mde.is_some_and(|m| m <= target) {
                    out.truncate(seen);
                    break;
                }
            }
            let due = i >= super::MIN_WINDOWS
                && i >= checked + check_every.max(1)
                && i >= checked + checked / 10;
            if checking.is_none() && due && i < count {
                checked = i;
                let (windows, options) = (out.clone(), self.compare_options());
                checking = Some((
                    i,
                    tokio::task::spawn_blocking(move || primary_mde(&windows, &options)),
                ));
            }
        }
        if let Some((_, handle)) = checking {
            handle.abort();
        }
        if target.is_some() && !mde.is_some_and(|m| target.is_some_and(|t| m <= t)) {
            // Max duration: the last word is the comparison of every window.
            mde = primary_mde(&out, &self.compare_options());
        }
        let until = target.map(|target| UntilMde {
            target,
            mde,
            reached: mde.is_some_and(|m| m <= target),
            seconds: window.as_secs_f64() * out.len() as f64,
            max_duration: self.args.max_duration.as_secs_f64(),
        });
        (out, until)
    }
}

/// The largest mde of the primary rows of these windows, as the verdict compares them;
/// `None` while a primary row has none (too few windows with its series).
fn primary_mde(windows: &[Snapshot], options: &CompareOptions) -> Option<f64> {
    let names: Vec<String> = (1..=windows.len()).map(|i| format!("window-{i}")).collect();
    let c = compare(windows, windows, names.clone(), names, options).ok()?;
    largest_primary_mde(&c)
}

/// The largest mde among `c`'s primary rows; `None` if there is none or a row has none.
fn largest_primary_mde(c: &Comparison) -> Option<f64> {
    let mut rows = c.rows.iter().filter(|r| r.primary).peekable();
    rows.peek()?;
    rows.try_fold(0.0_f64, |most, r| Some(most.max(r.mde?)))
}

//! Driving a paired design: the load, both sides' connections on the generator's
//! threads, and beside it the windows' clock, a thread of its own that passes an
//! interleave's turns and cuts the windows, until their count or `--until-mde`'s target;
//! the load stops when the windows end.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::sync::watch;

use super::super::args::MIN_WINDOWS;
use super::super::order::Side;
use super::super::record::UntilMde;
use super::super::{load, progress, Bench};
use super::plan::Plan;
use super::turns::{pass, turn_of, Turns};
use super::until::{primary_mde, CHECK_EVERY};
use crate::snapshot::Snapshot;

/// What the drive measured: the windows, each both sides' snapshot; what `--until-mde`
/// came to; and what each side's generator saw, A's then B's.
pub(super) struct Driven {
    pub windows: Vec<Snapshot>,
    pub until: Option<UntilMde>,
    pub outcomes: [load::Outcome; 2],
}

impl Bench<'_> {
    /// Loads both sides as `plan` says while the clock takes the windows, and stops the
    /// load when they end (reached early, or the last window taken): connections waiting
    /// for a turn stop waiting.
    pub(super) async fn drive(&self, plan: &Plan) -> anyhow::Result<Driven> {
        let (turns, whose) = watch::channel(turn_of(Side::B));
        let side_plan = |side| {
            let mut load_plan = self.load_plan(side, plan.deadline, plan.connections);
            load_plan.turn = plan.interleave.then(|| load::Turn {
                whose: whose.clone(),
                me: turn_of(side),
            });
            load_plan
        };
        let counters = [(); 2].map(|()| Arc::new(load::Counters::default()));
        let stop = counters.clone();
        let turns = plan.interleave.then(|| Turns {
            whose: turns,
            sides: counters.clone(),
            drain: plan.tick / 2,
        });
        let (a_plan, b_plan) = (side_plan(Side::A), side_plan(Side::B));
        drop(whose);
        let (a_addr, b_addr, threads) = (self.a_addr, self.b_addr, self.args.threads);
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
            let windows = self.windows(plan, turns.as_ref()).await;
            // Reached early, or the last window taken: the load ends with the windows,
            // and connections waiting for a turn stop waiting.
            for c in &stop {
                c.stop();
            }
            drop(turns);
            windows
        };
        let (generated, windows) = tokio::join!(generated, measure);
        let (windows, until) = windows?;
        let outcomes = generated.context("the load generator")??;
        Ok(Driven {
            windows,
            until,
            outcomes,
        })
    }

    /// The windows of [`Self::clock`], timed and cut on a thread of their own at
    /// real-time priority where the system allows it. Beside a CPU-bound server the run
    /// queue holds tens of busy threads, and a thread of the normal class waited many
    /// times its own work for each wake-up: in a debug build a cut that took 17 ms once
    /// the load had stopped took a median of 269 ms under it (more than a slice), the turn
    /// passed late, and the slice after each cut, A's and B's in turn, was another length
    /// than the one before it.
    async fn windows(
        &self,
        plan: &Plan,
        turns: Option<&Turns>,
    ) -> anyhow::Result<(Vec<Snapshot>, Option<UntilMde>)> {
        let runtime = tokio::runtime::Handle::current();
        // The clock borrows the bench; this worker waits for it, and the proxy's tasks
        // move to the runtime's other workers meanwhile.
        tokio::task::block_in_place(|| {
            std::thread::scope(|scope| {
                let clock = std::thread::Builder::new()
                    .name("bench-clock".into())
                    .spawn_scoped(scope, || {
                        if !crate::sync::realtime() {
                            progress::note(
                                "the windows' clock runs at normal priority (no CAP_SYS_NICE): \
                                 on a busy machine its turns and cuts may be late",
                            );
                        }
                        self.clock(plan, turns, &runtime)
                    })
                    .context("starting the bench's clock thread")?;
                clock
                    .join()
                    .map_err(|_| anyhow::anyhow!("the bench's clock thread panicked"))
            })
        })
    }

    /// Up to `plan.count` consecutive windows after one unmeasured tick, each the snapshot
    /// since the cut that began it: a duet's window is one tick; an interleave's is four,
    /// with the turn passing (`turns`) at every tick, A B B A B A A B …, so that each window
    /// holds two slices of each side. With `--until-mde`, fewer once the windows so far reach
    /// the target.
    ///
    /// The check runs on a thread of its own (`runtime`'s blocking pool, at normal
    /// priority) while the windows go on being taken on time (a comparison of hundreds of
    /// windows takes longer than one window: done in line, it delayed the next snapshots,
    /// which then held almost nothing). Checks are spaced by [`CHECK_EVERY`] and by a
    /// tenth more windows each, so their cost grows with the windows only as a logarithm.
    /// When one says reached, the windows taken after the ones it saw are left out: the
    /// duet stops where the rule was met, and the verdict's mde is the one the rule saw.
    fn clock(
        &self,
        plan: &Plan,
        turns: Option<&Turns>,
        runtime: &tokio::runtime::Handle,
    ) -> (Vec<Snapshot>, Option<UntilMde>) {
        let (count, tick, window) = (plan.count, plan.tick, plan.window);
        let target = self.args.until_mde.map(|pct| pct / 100.0);
        let per_window = self.args.design.ticks_per_window();
        let cycle = self.args.design.windows_per_cycle();
        let check_every = (CHECK_EVERY.as_secs_f64() / window.as_secs_f64()).ceil() as usize;
        let start = Instant::now() + tick;
        sleep_until(start);
        pass(turns, 0, || {
            self.registry.reset();
        });
        let mut out = Vec::with_capacity(count);
        let mut mde = None;
        let mut checking: Option<(usize, tokio::task::JoinHandle<Option<f64>>)> = None;
        let mut checked = 0;
        let mut said = Instant::now();
        for i in 1..=count {
            if said.elapsed() >= progress::WINDOWS_EVERY {
                said = Instant::now();
                progress::windows(i - 1, count, window);
            }
            // An interleave's turn passes at each of the window's slices; the window is
            // cut at its end, where the side changes (A B B A, then B A A B), after the
            // side that had the turn has finished its exchanges and before the other
            // begins: the cut, on this thread at real-time priority, stalls no exchange.
            // One cut, not a snapshot then a reset: what was recorded between the two
            // fell in no window.
            for j in 1..=per_window {
                let k = (i - 1) * per_window as usize + j as usize;
                sleep_until(start + tick * u32::try_from(k).unwrap_or(u32::MAX));
                pass(turns, k, || {
                    if j == per_window {
                        let cutting = Instant::now();
                        out.push(self.registry.cut());
                        tracing::debug!(took = ?cutting.elapsed(), window = i, "bench window cut");
                    }
                });
            }
            let Some(target) = target else { continue };
            if let Some((seen, handle)) = checking.take_if(|(_, h)| h.is_finished()) {
                mde = runtime.block_on(handle).ok().flatten();
                if mde.is_some_and(|m| m <= target) {
                    out.truncate(seen);
                    break;
                }
            }
            let due = i >= MIN_WINDOWS
                && i.is_multiple_of(cycle)
                && i >= checked + check_every.max(1)
                && i >= checked + checked / 10;
            if checking.is_none() && due && i < count {
                checked = i;
                let (windows, options) = (out.clone(), self.until_options());
                checking = Some((
                    i,
                    runtime.spawn_blocking(move || primary_mde(&windows, &options)),
                ));
            }
        }
        if let Some((_, handle)) = checking {
            handle.abort();
        }
        if target.is_some() && !mde.is_some_and(|m| target.is_some_and(|t| m <= t)) {
            // Max duration: the last word is the comparison of every window.
            mde = primary_mde(&out, &self.until_options());
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

/// Sleeps the calling thread until `deadline` (at once if it has passed).
fn sleep_until(deadline: Instant) {
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
}

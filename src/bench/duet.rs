//! The designs measured in paired windows.
//!
//! The duet (Bulej et al., "Duet benchmarking", ICPE 2020): A and B are loaded at the
//! same time, each through its own tap with its own half of the connections, and the
//! proxy's figures are cut into short windows (250 ms by default). A window's snapshot
//! holds both taps, measured over the same interval, so whatever else the machine did in
//! that window fell on both; the comparison is made on the per-window ratios B/A (a
//! paired t interval, `compare --paired`), where that common noise cancels.
//!
//! The interleave (after Abedi and Brecht's multiple interleaved trials, ICPE 2017): one
//! side at a time with all the connections, in slices (250 ms by default) A B B A B A A B
//! …; each four slices are one window, compared as a duet's (four, not two: see
//! [`super::Design::ticks_per_window`]; alternating A B B A and B A A B: see
//! [`order::slice`]). Interference slower than a window cancels as in
//! the duet; each side has the whole
//! machine while it is measured, so a difference in CPU shows in latency undiluted (in a
//! duet the two servers share the cores, and the slower one takes a larger share).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use std::time::Instant;
use tokio::sync::watch;

use super::order::{self, Side};
use super::record::{RunRecord, UntilMde};
use super::{load, progress, Bench, Measured};
use crate::metrics::Snapshot;
use crate::report::{compare, CompareOptions, Comparison};

/// With `--until-mde`, how often the windows so far are compared: often enough that the
/// duet stops soon after the target is reached, rarely enough that the comparison (a
/// bootstrap per row) costs little of the windows' time.
const CHECK_EVERY: Duration = Duration::from_secs(2);

impl Bench<'_> {
    /// The duet (both sides at once) or the interleave (one side a slice at a time): the
    /// windows, each as both sides' snapshot, and what `--until-mde` came to.
    pub(super) async fn paired(
        &self,
    ) -> anyhow::Result<(Vec<RunRecord>, Measured, Option<UntilMde>)> {
        let args = self.args;
        let interleave = args.design == super::Design::Interleave;
        // The flags were checked (`BenchArgs::check`): a paired design has its windows.
        let (Some((tick, _)), Some(window), Some(count)) =
            (args.tick(), args.paired_window(), args.window_count())
        else {
            anyhow::bail!("the runs design has no windows");
        };
        let length = args.paired_length();
        // The duet halves the connections between the sides; the interleave gives each
        // side all of them on its turns. B has the unmeasured opening tick, while the
        // connections open; A the first measured slice.
        let connections = if interleave {
            args.connections
        } else {
            (args.connections / 2).max(1)
        };
        let why = match args.until_mde {
            Some(pct) => format!("until the mde reaches {pct} %, at most --max-duration"),
            None => format!(
                "2 × --runs {} × --duration {}",
                args.runs,
                humantime::format_duration(args.duration)
            ),
        };
        let name = if interleave { "interleave" } else { "duet" };
        progress::paired_start(name, length, count, window, &why);
        let (turns, whose) = watch::channel(turn_of(Side::B));
        // The load ends when the windows do (`stop`, below); its own deadline is only a
        // bound, one tick beyond the opening tick and the windows, which the last drain and
        // cut never reach. At the windows' length exactly, the connections closed during
        // the last drain, the servers' threads exited before the last cut, and their
        // thread-time in that window was never read (B's `cpu` per request −28 % in one
        // kept bench's last window; 20 of 20 A/A benches negative, −0.77 % on average).
        let plan = |side| {
            let mut plan = self.plan(side, length + 2 * tick, connections);
            plan.turn = interleave.then(|| load::Turn {
                whose: whose.clone(),
                me: turn_of(side),
            });
            plan
        };
        let counters = [(); 2].map(|()| Arc::new(load::Counters::default()));
        let stop = counters.clone();
        let turns = interleave.then(|| Turns {
            whose: turns,
            sides: counters.clone(),
            drain: tick / 2,
        });
        let (a_plan, b_plan) = (plan(Side::A), plan(Side::B));
        drop(whose);
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
            let windows = self.windows(count, tick, turns.as_ref()).await;
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
        let [a, b] = generated.context("the load generator")??;
        let whole = Snapshot::merged(&windows)
            .ok_or_else(|| anyhow::anyhow!("the bench measured no window"))?;
        let mut runs = Vec::new();
        let mut measured = Measured::default();
        for (i, (side, outcome)) in [(Side::A, a), (Side::B, b)].into_iter().enumerate() {
            let mut record = RunRecord::new(i + 1, side, &whole, Some(outcome));
            if interleave {
                // Each side was loaded on half the slices: its rate is over those.
                record.seconds /= 2.0;
                record.requests_per_s *= 2.0;
            }
            progress::side_done(
                side,
                record.requests,
                record.seconds,
                record.failed(),
                interleave,
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

    /// The windows of [`Self::clock`], timed and cut on a thread of their own at
    /// real-time priority where the system allows it. Beside a CPU-bound server the run
    /// queue holds tens of busy threads, and a thread of the normal class waited many
    /// times its own work for each wake-up: in a debug build a cut that took 17 ms once
    /// the load had stopped took a median of 269 ms under it (more than a slice), the turn
    /// passed late, and the slice after each cut, A's and B's in turn, was another length
    /// than the one before it.
    async fn windows(
        &self,
        count: usize,
        tick: Duration,
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
                        self.clock(count, tick, turns, &runtime)
                    })
                    .context("starting the bench's clock thread")?;
                clock
                    .join()
                    .map_err(|_| anyhow::anyhow!("the bench's clock thread panicked"))
            })
        })
    }

    /// Up to `count` consecutive windows after one unmeasured tick, each the snapshot
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
        count: usize,
        tick: Duration,
        turns: Option<&Turns>,
        runtime: &tokio::runtime::Handle,
    ) -> (Vec<Snapshot>, Option<UntilMde>) {
        let target = self.args.until_mde.map(|pct| pct / 100.0);
        let per_window = self.args.design.ticks_per_window();
        let cycle = self.args.design.windows_per_cycle();
        let window = tick * per_window;
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
            let due = i >= super::args::MIN_WINDOWS
                && i.is_multiple_of(cycle)
                && i >= checked + check_every.max(1)
                && i >= checked + checked / 10;
            if checking.is_none() && due && i < count {
                checked = i;
                let (windows, options) = (
                    out.clone(),
                    CompareOptions {
                        functions: false,
                        ..self.compare_options()
                    },
                );
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
            mde = primary_mde(
                &out,
                &CompareOptions {
                    functions: false,
                    ..self.compare_options()
                },
            );
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

/// The turn value of `side` in a [`load::Turn`].
fn turn_of(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

/// An interleave's turns: whose it is, and each side's counters (what it has in flight).
struct Turns {
    whose: watch::Sender<usize>,
    sides: [Arc<load::Counters>; 2],
    /// The longest a turn waits for the other side's exchanges in flight.
    drain: Duration,
}

/// The turn value no side's: each side's connections wait (a turn being drained).
const NOBODY: usize = usize::MAX;

/// An interleave's turn passes to the side of slice `k` (from 0, [`order::slice`]), and
/// `between` runs before it does (at once in a duet, which has no turns). Where the side
/// changes, the side that had the turn first finishes the exchanges it has in flight (for
/// at most `drain`), then `between` runs while neither side has the turn, and only then
/// does the other begin: each side has the machine to itself on its slices. Begun at
/// once, the new side's first exchanges ran beside the old side's last ones, both slower,
/// by as much as the old side had in flight then.
fn pass(turns: Option<&Turns>, k: usize, between: impl FnOnce()) {
    let Some(turns) = turns else {
        between();
        return;
    };
    let next = turn_of(order::slice(k));
    let before = *turns.whose.borrow();
    if before != next && before != NOBODY {
        turns.whose.send_replace(NOBODY);
        let until = Instant::now() + turns.drain;
        let flying = || turns.sides.get(before).map_or(0, |side| side.in_flight());
        while flying() > 0 && Instant::now() < until {
            std::thread::sleep(DRAIN_POLL);
        }
    }
    between();
    turns.whose.send_replace(next);
}

/// How often a drained turn looks at what is still in flight: a small share of an
/// exchange (a CPU-bound server's take milliseconds) and of a slice.
const DRAIN_POLL: Duration = Duration::from_micros(200);

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

#[cfg(test)]
mod tests {
    use super::*;

    fn turns(drain: Duration) -> (Turns, watch::Receiver<usize>) {
        let (whose, seen) = watch::channel(turn_of(Side::A));
        let sides = [(); 2].map(|()| Arc::new(load::Counters::default()));
        (
            Turns {
                whose,
                sides,
                drain,
            },
            seen,
        )
    }

    /// A to B (slice 1): B begins only once A's last exchange is answered, and nobody
    /// sends meanwhile.
    #[test]
    fn a_switch_waits_for_the_old_sides_exchanges_in_flight() {
        let (turns, seen) = turns(Duration::from_secs(30));
        let a = Arc::clone(&turns.sides[0]);
        let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, during) = (Arc::clone(&drained), seen.clone());
        std::thread::scope(|s| {
            s.spawn(move || {
                let flying = load::InFlight::count(&a);
                // The turn leaves A: nobody's while this exchange is in flight, or B's
                // at once (no drain).
                while *during.borrow() == turn_of(Side::A) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                flag.store(
                    *during.borrow() == NOBODY,
                    std::sync::atomic::Ordering::SeqCst,
                );
                drop(flying);
            });
            while turns.sides[0].in_flight() == 0 {
                std::thread::yield_now();
            }
            pass(Some(&turns), 1, || ());
        });
        assert!(drained.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(*seen.borrow(), turn_of(Side::B));
    }

    /// An exchange that never ends holds the turn only for `drain`.
    #[test]
    fn a_drain_ends_at_its_deadline() {
        let (turns, seen) = turns(Duration::from_millis(20));
        let _stuck = load::InFlight::count(&turns.sides[0]);
        pass(Some(&turns), 1, || ());
        assert_eq!(*seen.borrow(), turn_of(Side::B));
    }

    /// A window's end (slice 3, A, to slice 4, B): the cut runs after A's turn ends and
    /// before B's begins, when no side sends; in a duet, which has no turns, at once.
    #[test]
    fn a_window_is_cut_while_neither_side_has_the_turn() {
        let (turns, seen) = turns(Duration::from_millis(20));
        let mut during = None;
        pass(Some(&turns), 4, || during = Some(*seen.borrow()));
        assert_eq!(during, Some(NOBODY));
        assert_eq!(*seen.borrow(), turn_of(Side::B));
        let mut cut = false;
        pass(None, 4, || cut = true);
        assert!(cut);
    }

    /// The same side going on (slice 1 to 2, B then B) does not wait for its own
    /// exchanges: with a drain of a minute, waiting would miss the ten seconds allowed.
    #[test]
    fn the_same_side_going_on_does_not_drain() {
        let (turns, seen) = turns(Duration::from_secs(60));
        turns.whose.send_replace(turn_of(Side::B));
        let _flying = load::InFlight::count(&turns.sides[1]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                pass(Some(&turns), 2, || ());
                let _ = tx.send(());
            });
            assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok());
        });
        assert_eq!(*seen.borrow(), turn_of(Side::B));
    }
}

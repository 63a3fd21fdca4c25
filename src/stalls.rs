//! The time phasescope did not run: a stopped process (SIGSTOP, a debugger), a cgroup
//! that throttles it, a machine that gives it no CPU.
//!
//! While the proxy does not run, the instants of every exchange in flight still move
//! apart, and the one the proxy's stall lands in is almost always `upstream_wait`: the
//! request went out, the answer came back at once and sat in the socket until the proxy
//! ran again to read it. Counted there, a five-second stop of the proxy read as a
//! five-second backend, and the findings blamed the upstream (issue: the proxy stopped
//! for 5 s under load put 5.003 s in `upstream_wait`). So a thread of its own wakes every
//! [`TICK`]; a wake-up later than [`STALL_MIN`] past its due time is a stall, from when
//! it was due to when it woke. [`overlap`] is how `Exchange::phases_with` moves the part
//! of an exchange's wait that a stall covers from `upstream_wait` to `proxy_overhead`
//! (docs/phases.md, `proxy_stalled`).
//!
//! What it sees is its own thread not running. A whole process stopped or throttled
//! stops it with the workers; one worker starved while the others run is not seen.
//! The thread is of the workers' scheduling class on purpose: a real-time one would
//! outrun a cgroup's CPU quota (which throttles the normal class only) and miss the
//! workers' throttling. A thread waking after a sleep is favoured by the scheduler, so a
//! busy machine delays it by a few milliseconds, far below [`STALL_MIN`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;

use crate::clock::{self, nanos_between, Tick};
use crate::sync::lock;

/// How often the watching thread wakes.
pub const TICK: Duration = Duration::from_millis(10);
/// How late a wake-up must be to count as a stall.
pub const STALL_MIN: Duration = Duration::from_millis(50);
/// Stalls kept for [`overlap`]: the most recent ones. An exchange older than the
/// oldest kept is not corrected (with stalls a second apart, 64 s of them).
const KEPT: usize = 64;

/// Stalls since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: u64,
    pub nanos: u64,
}

struct Record {
    /// The kept stalls, `(from, to)`, oldest first once the ring has wrapped.
    ring: Mutex<Ring>,
    /// When the watching thread last woke, or when a stall was last recorded: the one
    /// who sees it overdue (the thread itself, or an exchange recorded before the thread
    /// ran again) records the stall and moves it on.
    woke: AtomicU64,
    /// The end of the latest stall: an interval that starts after it overlaps none, and
    /// that is the only thing an exchange reads unless one did (one atomic load).
    last_end: AtomicU64,
    count: AtomicU64,
    nanos: AtomicU64,
}

struct Ring {
    at: [(Tick, Tick); KEPT],
    len: usize,
    next: usize,
}

static RECORD: Record = Record {
    ring: Mutex::new(Ring {
        at: [(0, 0); KEPT],
        len: 0,
        next: 0,
    }),
    woke: AtomicU64::new(0),
    last_end: AtomicU64::new(0),
    count: AtomicU64::new(0),
    nanos: AtomicU64::new(0),
};

static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts the watching thread (once per process; later calls return at once).
pub fn start() -> anyhow::Result<()> {
    if STARTED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("phasescope-stalls".into())
        .spawn(watch)
        .context("cannot start the thread that watches for the proxy's own stalls")?;
    Ok(())
}

fn watch() {
    RECORD.woke.store(clock::now(), Ordering::Release);
    loop {
        std::thread::sleep(TICK);
        seen_at(clock::now(), true);
    }
}

/// The proxy ran at `now`: if the watching thread is overdue by [`STALL_MIN`], the time
/// since it was due is a stall, recorded once whoever sees it first. The workers call it
/// (through [`overlap`]) for an exchange whose answer came after the thread was due: after
/// a SIGCONT they record the exchanges the stop held before the thread has run again.
fn seen_at(now: Tick, watcher: bool) {
    let woke = RECORD.woke.load(Ordering::Acquire);
    if woke == 0 || now <= woke {
        return;
    }
    // Each exchange asks: one addition and one comparison, the ticks computed once.
    static OVERDUE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let overdue_after = *OVERDUE.get_or_init(|| clock::after(0, TICK + STALL_MIN));
    let overdue = now >= woke.saturating_add(overdue_after);
    // The thread moves it at every wake; an exchange only when it finds a stall.
    if !overdue && !watcher {
        return;
    }
    if RECORD
        .woke
        .compare_exchange(woke, now, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
        && overdue
    {
        record(clock::after(woke, TICK), now);
    }
}

/// Keeps the stall `from → to`.
pub(crate) fn record(from: Tick, to: Tick) {
    {
        let mut ring = lock(&RECORD.ring);
        let at = ring.next;
        ring.at[at] = (from, to);
        ring.next = (at + 1) % KEPT;
        ring.len = (ring.len + 1).min(KEPT);
    }
    RECORD.count.fetch_add(1, Ordering::Relaxed);
    RECORD
        .nanos
        .fetch_add(nanos_between(from, to), Ordering::Relaxed);
    RECORD.last_end.fetch_max(to, Ordering::Release);
    tracing::warn!(
        stalled_ms = nanos_between(from, to) / 1_000_000,
        "phasescope itself did not run for {} ms (stopped, throttled or given no CPU): \
         the exchanges waiting on the upstream meanwhile count it as proxy_stalled",
        nanos_between(from, to) / 1_000_000
    );
}

/// Nanoseconds of `from → to` during which the proxy was stalled.
#[inline]
pub fn overlap(from: Tick, to: Tick) -> u64 {
    seen_at(to, false);
    if from >= RECORD.last_end.load(Ordering::Acquire) {
        return 0;
    }
    let ring = lock(&RECORD.ring);
    ring.at[..ring.len]
        .iter()
        .map(|&(start, end)| nanos_between(start.max(from), end.min(to)))
        .sum()
}

/// Stalls since the process started.
pub fn totals() -> Totals {
    Totals {
        count: RECORD.count.load(Ordering::Relaxed),
        nanos: RECORD.nanos.load(Ordering::Relaxed),
    }
}

/// The longest kept stall that ended after `since`, in nanoseconds.
pub fn longest_since(since: Tick) -> u64 {
    let ring = lock(&RECORD.ring);
    ring.at[..ring.len]
        .iter()
        .filter(|&&(_, end)| end > since)
        .map(|&(start, end)| nanos_between(start, end))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_counts_only_what_a_stall_covers() {
        // Ticks long before now: the record is the process's, and the exchanges other
        // unit tests time start from now, after every stall kept here.
        let t0: Tick = 1_000;
        let at = |ms: u64| clock::after(t0, Duration::from_millis(ms));
        record(at(100), at(300));
        let ms = |n: u64| n as f64 / 1e6;
        // Around it, inside it, across each end, before it.
        assert!((ms(overlap(at(0), at(1000))) - 200.0).abs() < 0.01);
        assert!((ms(overlap(at(150), at(250))) - 100.0).abs() < 0.01);
        assert!((ms(overlap(at(0), at(200))) - 100.0).abs() < 0.01);
        assert!((ms(overlap(at(250), at(1000))) - 50.0).abs() < 0.01);
        assert_eq!(overlap(at(0), at(50)), 0);
        assert_eq!(overlap(at(400), at(1000)), 0);
        assert!(totals().count >= 1);
        assert!(ms(longest_since(at(0))) >= 199.99);
    }
}

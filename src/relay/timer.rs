//! A connection's one timer, armed lazily, and the thread that keeps the relay's time.
//!
//! Every exchange has deadlines (the head, the response, the idle wait) and almost none of
//! them expire. A fresh timer per wait cost a timer-wheel insert and removal per request,
//! plus a read of the OS clock for each deadline. Instead each connection keeps one timer
//! that is only ever moved *earlier*: when it fires before the deadline that is current by
//! then, the caller finds nothing expired and arms it again. Under load that is one
//! wake-up per timeout period instead of two wheel operations per request.
//!
//! Deadlines are clock ticks (`clock::after`), because the relay already holds a tick for
//! every instant it times: computing one and checking it are integer operations. A tick is
//! placed on tokio's clock only when the timer is actually moved, from a pair of readings
//! of both clocks taken then, so the two clocks' drift never accumulates.
//!
//! **The time keeper.** The timers live on a thread of their own, not on the workers. A
//! runtime with a timer reads the clock twice and walks its wheel every time it parks,
//! whether a timer is due or not: about 1,200 instructions per request on a worker that
//! parks twice a request (callgrind, docs/BENCHMARKS.md), more than the head's parsing.
//! The workers' runtimes have I/O only; every timer the relay makes ([`Timer`],
//! [`timeout`], [`interval`]) is registered with the keeper's wheel instead. Arming a timer
//! from a worker is then a cross-thread wheel operation, and its expiry a cross-thread
//! wake-up, both as rare as the timer's moves: once per timeout period, not per request.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use tokio::runtime::{Builder, Handle};
use tokio::time::{sleep_until, Instant, Interval, Sleep, Timeout};

use crate::clock::{self, Tick};

/// The keeper's runtime, once [`start_keeper`] has started it.
static KEEPER: OnceLock<Handle> = OnceLock::new();

/// Starts the time keeper's thread (once per process; later calls return at once). The
/// workers call it before they start: their runtimes have no timer of their own.
pub(super) fn start_keeper() -> anyhow::Result<()> {
    if KEEPER.get().is_some() {
        return Ok(());
    }
    let runtime = Builder::new_current_thread()
        .enable_time()
        .build()
        .context("cannot start the relay's timer runtime")?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("phasescope-timers".into())
        // It runs nothing but the timer wheel, which it turns while blocked here.
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .context("cannot start the relay's timer thread")?;
    // Two callers racing: the loser's thread idles for nothing, harmless and once.
    let _ = KEEPER.set(handle);
    Ok(())
}

/// Runs `make` (which creates tokio timers) so that they register with the keeper, or,
/// before the keeper has started (unit tests on a runtime of their own), with the current
/// runtime's timer.
fn on_keeper<T>(make: impl FnOnce() -> T) -> T {
    match KEEPER.get() {
        // Entering sets only the handle new timers take; tasks spawned meanwhile would go
        // to the keeper too, and `make` spawns none.
        Some(keeper) => {
            let _entered = keeper.enter();
            make()
        }
        None => make(),
    }
}

/// `tokio::time::timeout` on the keeper's wheel: what a worker uses in place of it.
pub(crate) fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    on_keeper(|| tokio::time::timeout(duration, future))
}

/// `tokio::time::interval` on the keeper's wheel: what a worker uses in place of it.
pub(super) fn interval(period: Duration) -> Interval {
    on_keeper(|| tokio::time::interval(period))
}

pub(super) struct Timer {
    /// Created unarmed; registered with the runtime only once armed.
    sleep: Pin<Box<Sleep>>,
    /// When the timer fires, if it is armed.
    armed: Option<Tick>,
    /// Whether the armed timer holds this task's waker: polled once since it was armed.
    /// The task is one and its waker the same at every poll, so later polls need only
    /// ask whether it fired (an atomic load) instead of polling the `Sleep` (a waker
    /// registration and a budget check, at every wait of every exchange).
    waiting: bool,
}

impl Timer {
    /// Registered with the time keeper's wheel once it has started; before that (unit
    /// tests), it must be called within a runtime with its timer enabled.
    pub(super) fn new() -> Self {
        Self {
            sleep: Box::pin(on_keeper(|| sleep_until(Instant::now()))),
            armed: None,
            waiting: false,
        }
    }

    /// The tick `after` past the tick `since`.
    #[inline]
    pub(super) fn deadline(&self, since: Tick, after: Duration) -> Tick {
        clock::after(since, after)
    }

    /// Whether the deadline `at` has passed.
    #[inline]
    pub(super) fn passed(&self, at: Tick) -> bool {
        clock::now() >= at
    }

    /// Makes sure the timer fires no later than `at` (it may fire earlier).
    #[inline]
    pub(super) fn arm(&mut self, at: Tick) {
        if self.armed.is_some_and(|armed| armed <= at) {
            return;
        }
        let (now, instant) = (clock::now(), Instant::now());
        let when = instant + Duration::from_nanos(clock::nanos_between(now, at));
        self.sleep.as_mut().reset(when);
        self.armed = Some(at);
        self.waiting = false;
    }

    /// Ready once the armed timer fires; it is then unarmed. Never ready when unarmed.
    ///
    /// Precondition: the timer is polled by one task only (each connection's own), whose
    /// waker it keeps from the first poll after arming until it fires.
    pub(super) fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.armed.is_none() {
            return Poll::Pending;
        }
        if self.waiting && !self.sleep.is_elapsed() {
            return Poll::Pending;
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            self.waiting = true;
            return Poll::Pending;
        }
        self.armed = None;
        self.waiting = false;
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fires_at_the_earliest_deadline_asked_for() {
        clock::init();
        let mut timer = Timer::new();
        let start = Instant::now();
        let t0 = clock::now();
        timer.arm(timer.deadline(t0, Duration::from_secs(10)));
        timer.arm(timer.deadline(t0, Duration::from_secs(30)));
        timer.arm(timer.deadline(t0, Duration::from_millis(100)));
        std::future::poll_fn(|cx| timer.poll_fired(cx)).await;
        let fired = start.elapsed();
        // Relative to the deadlines themselves, not to a quiet machine: a deadline never
        // fires early (load only makes a wake late), and firing before the next deadline
        // armed, 10 s, shows it took the earliest; a loaded machine wakes late by
        // milliseconds, not by ten seconds.
        assert!(fired >= Duration::from_millis(100), "{fired:?}");
        assert!(fired < Duration::from_secs(10), "{fired:?}");
        // Unarmed now: it does not fire again until armed.
        let unarmed = std::future::poll_fn(|cx| Poll::Ready(timer.poll_fired(cx))).await;
        assert!(unarmed.is_pending());
        timer.arm(timer.deadline(clock::now(), Duration::from_millis(50)));
        std::future::poll_fn(|cx| timer.poll_fired(cx)).await;
        // Again a lower bound only: re-armed, it waits at least its new duration.
        assert!(start.elapsed() >= fired + Duration::from_millis(50));
    }

    #[test]
    fn fires_from_the_keeper_on_a_runtime_without_a_timer() {
        clock::init();
        start_keeper().unwrap();
        // What a worker has: I/O and no timer. A timer of its own would panic here.
        let worker = Builder::new_current_thread().enable_io().build().unwrap();
        worker.block_on(async {
            let mut timer = Timer::new();
            let start = Instant::now();
            timer.arm(timer.deadline(clock::now(), Duration::from_millis(30)));
            // Polled again and again before it fires (the task woken by other events):
            // the later polls only look whether it fired, and the fire still wakes it.
            let mut polls = 0;
            std::future::poll_fn(|cx| {
                polls += 1;
                if polls < 5 {
                    cx.waker().wake_by_ref();
                }
                timer.poll_fired(cx)
            })
            .await;
            assert!(polls >= 5, "{polls}");
            assert!(start.elapsed() >= Duration::from_millis(30));
            // Armed again after firing, it waits its new duration.
            let again = Instant::now();
            timer.arm(timer.deadline(clock::now(), Duration::from_millis(20)));
            std::future::poll_fn(|cx| timer.poll_fired(cx)).await;
            assert!(again.elapsed() >= Duration::from_millis(20));
            // The relay's other waits use the keeper's wheel too.
            let waited = timeout(Duration::from_millis(10), std::future::pending::<()>()).await;
            assert!(waited.is_err());
            interval(Duration::from_millis(5)).tick().await;
        });
    }

    #[tokio::test]
    async fn a_deadline_passes_after_its_duration() {
        clock::init();
        let timer = Timer::new();
        let at = timer.deadline(clock::now(), Duration::from_millis(20));
        assert!(!timer.passed(at));
        std::thread::sleep(Duration::from_millis(20));
        assert!(timer.passed(at));
    }
}

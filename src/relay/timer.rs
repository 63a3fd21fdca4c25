//! A connection's one timer, armed lazily.
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

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{sleep_until, Instant, Sleep};

use crate::clock::{self, Tick};

pub(super) struct Timer {
    /// Created unarmed; registered with the runtime only once armed.
    sleep: Pin<Box<Sleep>>,
    /// When the timer fires, if it is armed.
    armed: Option<Tick>,
}

impl Timer {
    /// Must be called within a tokio runtime with its timer enabled.
    pub(super) fn new() -> Self {
        Self {
            sleep: Box::pin(sleep_until(Instant::now())),
            armed: None,
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
    }

    /// Ready once the armed timer fires; it is then unarmed. Never ready when unarmed.
    pub(super) fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.armed.is_none() {
            return Poll::Pending;
        }
        ready!(self.sleep.as_mut().poll(cx));
        self.armed = None;
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

//! A connection's one timer, armed lazily.
//!
//! Every exchange has deadlines (the head, the response, the idle wait) and almost none of
//! them expire. A fresh timer per wait cost a timer-wheel insert and removal per request,
//! plus a read of the OS clock for each deadline. Instead each connection keeps one timer
//! that is only ever moved *earlier*: when it fires before the deadline that is current by
//! then, the caller finds nothing expired and arms it again. Under load that is one
//! wake-up per timeout period instead of two wheel operations per request.
//!
//! Deadlines are given as a clock tick plus a duration, because the relay already holds a
//! tick for every instant it times; the tick is placed on tokio's clock through a pair of
//! readings of both clocks taken when the timer was last armed.

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
    armed: Option<Instant>,
    /// A tick and the tokio instant read together with it.
    origin: (Tick, Instant),
}

impl Timer {
    /// Must be called within a tokio runtime with its timer enabled.
    pub(super) fn new() -> Self {
        let now = Instant::now();
        Self {
            sleep: Box::pin(sleep_until(now)),
            armed: None,
            origin: (clock::now(), now),
        }
    }

    /// The instant `after` past the tick `since`.
    pub(super) fn deadline(&self, since: Tick, after: Duration) -> Instant {
        let (tick, instant) = self.origin;
        let later = Duration::from_nanos(clock::nanos_between(tick, since));
        let earlier = Duration::from_nanos(clock::nanos_between(since, tick));
        let at = instant + later;
        at.checked_sub(earlier).unwrap_or(at) + after
    }

    /// Makes sure the timer fires no later than `at` (it may fire earlier).
    pub(super) fn arm(&mut self, at: Instant) {
        if self.armed.is_some_and(|armed| armed <= at) {
            return;
        }
        self.sleep.as_mut().reset(at);
        self.armed = Some(at);
        // Re-reading both clocks now and then keeps their drift apart out of deadlines.
        self.origin = (clock::now(), Instant::now());
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
        timer.arm(start + Duration::from_millis(400));
        timer.arm(start + Duration::from_secs(30));
        timer.arm(start + Duration::from_millis(100));
        std::future::poll_fn(|cx| timer.poll_fired(cx)).await;
        let fired = start.elapsed();
        assert!(fired >= Duration::from_millis(100), "{fired:?}");
        assert!(fired < Duration::from_millis(400), "{fired:?}");
        // Unarmed now: it does not fire again until armed.
        let unarmed = std::future::poll_fn(|cx| Poll::Ready(timer.poll_fired(cx))).await;
        assert!(unarmed.is_pending());
        timer.arm(Instant::now() + Duration::from_millis(50));
        std::future::poll_fn(|cx| timer.poll_fired(cx)).await;
        assert!(start.elapsed() >= fired + Duration::from_millis(50));
    }

    #[tokio::test]
    async fn ticks_become_instants() {
        clock::init();
        let timer = Timer::new();
        let before = clock::now();
        std::thread::sleep(Duration::from_millis(20));
        let after = clock::now();
        let a = timer.deadline(before, Duration::from_secs(1));
        let b = timer.deadline(after, Duration::from_secs(1));
        let gap = b - a;
        assert!(gap >= Duration::from_millis(20), "{gap:?}");
        assert!(gap < Duration::from_secs(1), "{gap:?}");
    }
}

//! The admin server's open connections, and which one gives way when they are at the cap.
//!
//! Refusing the connection past the cap let 64 idle connections (a stuck scraper, a
//! port scan, a slow-loris) refuse every `/healthz` for the 10 s of the header timeout:
//! the kubelet then restarts a healthy pod. Here the newcomer is always let in while
//! some open connection is idle (no request in progress: waiting for its next request,
//! or for its first one's head), and the one idle the longest is closed for it. A
//! connection is busy only from a request's head until its answer is sent, and the
//! pools bound the requests that can be in progress (`Pool::most_in_progress`), so
//! beyond them the cap always holds an idle connection to close.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

/// One open connection, as its task and the accept loop see it.
#[derive(Debug)]
pub(super) struct Slot {
    /// Requests begun whose answer is not yet sent whole.
    busy: AtomicUsize,
    /// When it last became idle (or was accepted), in µs from `epoch`.
    idle_since_us: AtomicU64,
    epoch: Instant,
    /// Told to close, to make room for a newcomer.
    evict: Notify,
}

impl Slot {
    fn new(epoch: Instant) -> Self {
        Self {
            busy: AtomicUsize::new(0),
            idle_since_us: AtomicU64::new(micros_since(epoch)),
            epoch,
            evict: Notify::new(),
        }
    }

    /// Marks a request begun; the connection is busy until the mark is dropped.
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// Completes when the accept loop chose this connection to close.
    pub(super) async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// How long it has been idle, in µs from `epoch`; `None` while busy.
    fn idle_since(&self) -> Option<u64> {
        (self.busy.load(Ordering::Acquire) == 0).then(|| self.idle_since_us.load(Ordering::Relaxed))
    }
}

/// A request in progress on a connection; dropped when its answer is sent (or dropped).
#[derive(Debug)]
pub(crate) struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        let slot = &self.0;
        slot.idle_since_us
            .store(micros_since(slot.epoch), Ordering::Relaxed);
        slot.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

fn micros_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The open connections, kept by the accept loop alone.
#[derive(Debug)]
pub(super) struct Slots {
    open: Vec<Arc<Slot>>,
    cap: usize,
    epoch: Instant,
}

/// Whether a newcomer got a slot, and at whose expense.
#[derive(Debug)]
pub(super) enum Admitted {
    /// There was room.
    Room(Arc<Slot>),
    /// The connection idle the longest was told to close.
    Evicted(Arc<Slot>),
    /// Every open connection is busy: the newcomer is closed.
    Full,
}

impl Slots {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            open: Vec::with_capacity(cap),
            cap: cap.max(1),
            epoch: Instant::now(),
        }
    }

    /// A slot for a newly accepted connection (see the module comment).
    pub(super) fn admit(&mut self) -> Admitted {
        // A finished connection's task dropped its reference.
        self.open.retain(|s| Arc::strong_count(s) > 1);
        if self.open.len() >= self.cap {
            let idlest = self
                .open
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.idle_since().map(|t| (t, i)))
                .min();
            let Some((_, i)) = idlest else {
                return Admitted::Full;
            };
            let gone = self.open.swap_remove(i);
            gone.evict.notify_one();
            let slot = self.push();
            return Admitted::Evicted(slot);
        }
        Admitted::Room(self.push())
    }

    fn push(&mut self) -> Arc<Slot> {
        let slot = Arc::new(Slot::new(self.epoch));
        self.open.push(Arc::clone(&slot));
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_longest_idle_connection_gives_way_and_a_busy_one_never() {
        let mut slots = Slots::new(3);
        let admitted: Vec<Arc<Slot>> = (0..3)
            .map(|_| match slots.admit() {
                Admitted::Room(s) => s,
                other => panic!("{other:?}"),
            })
            .collect();
        // The first is busy, the second became idle before the third.
        let busy = admitted[0].begin();
        let done = admitted[1].begin();
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(done);
        let later = admitted[2].begin();
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(later);
        let Admitted::Evicted(fourth) = slots.admit() else {
            panic!("no room made")
        };
        // The second was idle the longest: told to close, no longer counted.
        let evicted = |s: &Arc<Slot>| futures_ready(s.evicted());
        assert!(!evicted(&admitted[0]) && evicted(&admitted[1]) && !evicted(&admitted[2]));
        let _busy_too = [fourth.begin(), admitted[2].begin()];
        assert!(matches!(slots.admit(), Admitted::Full), "all three busy");
        drop(busy);
        assert!(matches!(slots.admit(), Admitted::Evicted(_)));
    }

    #[test]
    fn a_closed_connection_frees_its_slot() {
        let mut slots = Slots::new(1);
        let Admitted::Room(first) = slots.admit() else {
            panic!()
        };
        let _busy = first.begin();
        assert!(matches!(slots.admit(), Admitted::Full));
        drop(_busy);
        drop(first);
        assert!(matches!(slots.admit(), Admitted::Room(_)));
    }

    /// Whether `f` is ready at its first poll.
    fn futures_ready(f: impl std::future::Future<Output = ()>) -> bool {
        let mut f = std::pin::pin!(f);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        f.as_mut().poll(&mut cx).is_ready()
    }
}

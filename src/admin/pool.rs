//! A bounded pool of turns for one kind of expensive admin work (formatting `/metrics`,
//! building a snapshot), with a bounded queue in front of it.
//!
//! Each kind has a pool of its own, so that snapshot readers never make a scrape wait,
//! and neither ever makes `/healthz` wait (it takes no turn). A request that finds the
//! pool full waits at most `wait`, and only if fewer than `max_waiting` wait already;
//! otherwise it is answered `503` with `Retry-After` at once. Waiters hold a connection
//! each, so the bound on them is also what keeps the connection cap from filling with
//! requests that cannot be idle (see `slots`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The right to format one answer; released when its body is sent (`body::Body`).
pub(crate) type Turn = OwnedSemaphorePermit;

#[derive(Debug)]
pub(super) struct Pool {
    permits: Arc<Semaphore>,
    size: usize,
    waiting: AtomicUsize,
    max_waiting: usize,
    wait: Duration,
}

/// Counts a waiter for as long as it waits, even when its request is dropped meanwhile.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pool {
    /// `permits` at once (at least 1), as many waiting (at least 2), each for at most
    /// `wait`.
    pub(super) fn new(permits: usize, wait: Duration) -> Self {
        let size = permits.max(1);
        Self {
            permits: Arc::new(Semaphore::new(size)),
            size,
            waiting: AtomicUsize::new(0),
            max_waiting: size.max(2),
            wait,
        }
    }

    /// A turn now, or after a bounded wait; `None`: the pool is full, answer 503.
    pub(super) async fn turn(&self) -> Option<Turn> {
        if let Ok(turn) = Arc::clone(&self.permits).try_acquire_owned() {
            return Some(turn);
        }
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let _waiting = Waiting(&self.waiting);
        let acquired =
            tokio::time::timeout(self.wait, Arc::clone(&self.permits).acquire_owned()).await;
        acquired.ok().and_then(Result::ok)
    }

    /// Requests that may be in progress at most: running and waiting.
    pub(super) fn most_in_progress(&self) -> usize {
        self.size + self.max_waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_full_pool_queues_as_many_as_it_runs_then_refuses_at_once() {
        let pool = Arc::new(Pool::new(2, Duration::from_secs(30)));
        let held = [pool.turn().await.unwrap(), pool.turn().await.unwrap()];
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let p = Arc::clone(&pool);
                tokio::spawn(async move { p.turn().await.is_some() })
            })
            .collect();
        while pool.waiting.load(Ordering::Relaxed) < 2 {
            tokio::task::yield_now().await;
        }
        // A fifth request is refused without waiting (the waiters wait up to 30 s).
        let refused = Instant::now();
        assert!(pool.turn().await.is_none());
        assert!(refused.elapsed() < Duration::from_secs(10));
        drop(held);
        for w in waiters {
            assert!(w.await.unwrap(), "a waiter got the turn released");
        }
        assert_eq!(pool.waiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_waiter_gives_up_after_the_wait() {
        let pool = Pool::new(1, Duration::from_millis(200));
        let _held = pool.turn().await.unwrap();
        let start = Instant::now();
        assert!(pool.turn().await.is_none());
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert_eq!(pool.waiting.load(Ordering::Relaxed), 0);
    }
}

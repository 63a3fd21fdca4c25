//! The shutdown signal as one connection sees it.
//!
//! A connection must notice shutdown while it waits idle for a request, and must check for
//! it after every exchange. Waiting on `watch::Receiver::changed()` afresh on every idle
//! wait added and removed a waiter under a lock that all connections share, and `borrow()`
//! takes a read lock on the value, shared too: cache lines that every core wrote on every
//! request. Here the waiter is registered once per connection, and the check is a load of
//! the channel's version until the version changes.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use tokio::sync::watch;

pub(super) struct Stop<'a> {
    rx: watch::Receiver<bool>,
    /// Completes when the value changes; polled once, to register the task's waker.
    changed: Pin<&'a mut (dyn Future<Output = ()> + Send)>,
    registered: bool,
    stopped: bool,
    /// The sender is gone: the value can no longer change.
    settled: bool,
}

impl<'a> Stop<'a> {
    /// `changed` must complete when `rx`'s channel changes (see [`changed`]).
    pub(super) fn new(
        rx: watch::Receiver<bool>,
        changed: Pin<&'a mut (dyn Future<Output = ()> + Send)>,
    ) -> Self {
        let stopped = *rx.borrow();
        Self {
            rx,
            changed,
            registered: false,
            stopped,
            settled: stopped,
        }
    }

    /// Whether shutdown was asked for.
    pub(super) fn requested(&mut self) -> bool {
        if !self.settled {
            match self.rx.has_changed() {
                Ok(false) => {}
                Ok(true) => {
                    self.stopped = *self.rx.borrow();
                    self.settled = self.stopped;
                }
                Err(_) => {
                    self.stopped = *self.rx.borrow();
                    self.settled = true;
                }
            }
        }
        self.stopped
    }

    /// Makes sure the task is woken when shutdown is asked for: the first call registers
    /// its waker, and it stays registered for the life of the connection.
    pub(super) fn register(&mut self, cx: &mut Context<'_>) {
        if !self.registered {
            self.registered = true;
            let _ = self.changed.as_mut().poll(cx);
        }
    }
}

/// The future a [`Stop`] registers with: completes when `rx`'s value changes or its
/// sender is dropped. Not an `async fn`, which would hold a second copy of `rx` in every
/// connection's task.
#[allow(clippy::manual_async_fn)]
pub(super) fn changed(mut rx: watch::Receiver<bool>) -> impl Future<Output = ()> + Send {
    async move {
        let _ = rx.changed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::task::Poll;

    #[tokio::test]
    async fn a_registered_connection_is_woken_and_sees_the_request() {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let waiter = std::pin::pin!(changed(rx.clone()));
            let mut stop = Stop::new(rx, waiter);
            assert!(!stop.requested());
            // Waits like an idle connection: registered once, then checked on each wake.
            poll_fn(|cx| {
                stop.register(cx);
                if stop.requested() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        });
        tokio::task::yield_now().await;
        tx.send(true).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("woken by the shutdown")
            .unwrap();
    }

    #[test]
    fn already_stopped_and_abandoned_channels() {
        let (tx, rx) = watch::channel(true);
        let mut waiter = std::pin::pin!(changed(rx.clone()));
        assert!(Stop::new(rx, waiter.as_mut()).requested());
        drop(tx);
        let (tx, rx) = watch::channel(false);
        drop(tx);
        let waiter = std::pin::pin!(changed(rx.clone()));
        let mut stop = Stop::new(rx, waiter);
        assert!(!stop.requested(), "no sender: never asked to stop");
        assert!(!stop.requested());
    }
}

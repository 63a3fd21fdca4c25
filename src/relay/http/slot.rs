//! Where an exchange's state lives while it is in flight: a pooled page, so that an idle
//! connection's task holds none of it.
//!
//! A task is as large as the largest state any of its awaits may need, and it holds that
//! for the life of the connection, idle or not. An HTTP exchange in flight needs far more
//! (the request head, the timeline, both sides' framing, the relay's own future) than an
//! idle connection waiting for its next head. So the exchange runs as a future of its own,
//! placed in a [`Slot`]: memory taken when the request's head is complete and given back
//! when the exchange is over, from a per-thread pool like the buffers' (`buffer`): no
//! allocator call per request in steady state, and the pooled pages are mapped from the
//! system and unmapped by [`trim`] once they go unused, so that the memory of a burst goes
//! back to the system whole instead of leaving holes in the allocator's heap.

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use crate::relay::pages::{Pages, Pool};

/// The size of a slot: one page. The futures placed in one are checked against it when
/// the program is built.
const SLOT: usize = 4096;
/// Slots each thread keeps for reuse (1 MiB, resident only as far as the futures placed
/// in them reached); past that, given-back slots are unmapped at once.
const POOL_MAX: usize = 256;

thread_local! {
    // Initialised at compile time: no first-use check on each request's take and give.
    static POOL: RefCell<Pool<SLOT, POOL_MAX>> = const { RefCell::new(Pool::new()) };
}

type Page = Pages<SLOT>;

fn take() -> Option<Page> {
    POOL.with(|pool| pool.borrow_mut().take())
}

fn give(page: Page) {
    POOL.with(|pool| pool.borrow_mut().give(page));
}

/// Unmaps the pooled slots this thread did not use since the last call (each worker calls
/// it with `buffer::trim`); returns the bytes given back.
pub fn trim() -> usize {
    let dropped = POOL.with(|pool| pool.borrow_mut().trim());
    dropped.len() * SLOT
}

#[cfg(test)]
fn pooled() -> usize {
    POOL.with(|pool| pool.borrow().len())
}

/// A future placed in a pooled slot (or, if the system refuses a mapping, on the heap).
/// It is pinned there: the slot never moves, and the future is dropped in place.
pub(super) struct Slot<F> {
    future: NonNull<F>,
    /// The page the future lives in; `None` when it is boxed.
    page: Option<Page>,
    _owns: PhantomData<F>,
}

// SAFETY: the slot owns the future and its page alone.
unsafe impl<F: Send> Send for Slot<F> {}

// The future is pinned in its page, not in the slot: moving the slot moves a pointer.
impl<F> Unpin for Slot<F> {}

impl<F: Future> Slot<F> {
    /// Places the future `make` returns in a slot, built there in place (a future
    /// built first and then moved would be copied whole). A future that does not fit a
    /// slot is a build error.
    #[inline(always)]
    pub(super) fn new(make: impl FnOnce() -> F) -> Self {
        const {
            assert!(std::mem::size_of::<F>() <= SLOT && std::mem::align_of::<F>() <= SLOT);
        }
        match take() {
            Some(page) => {
                let at = page.as_ptr().cast::<F>();
                // SAFETY: the page is SLOT bytes, page-aligned, writable, unused (taken
                // from the pool or freshly mapped), and F fits it (checked above).
                unsafe { at.as_ptr().write(make()) };
                Slot {
                    future: at,
                    page: Some(page),
                    _owns: PhantomData,
                }
            }
            None => {
                let boxed = Box::new(make());
                Slot {
                    // SAFETY: `Box::into_raw` never returns null.
                    future: unsafe { NonNull::new_unchecked(Box::into_raw(boxed)) },
                    page: None,
                    _owns: PhantomData,
                }
            }
        }
    }
}

impl<F: Future> Future for Slot<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: the future is owned by this slot, is only reached through it, and never
        // moves until it is dropped in place (see `Drop`).
        let future = unsafe { Pin::new_unchecked(&mut *self.future.as_ptr()) };
        future.poll(cx)
    }
}

impl<F> Drop for Slot<F> {
    fn drop(&mut self) {
        match self.page.take() {
            Some(page) => {
                // SAFETY: the future was written in place in `new` and not dropped yet.
                unsafe { std::ptr::drop_in_place(self.future.as_ptr()) };
                give(page);
            }
            // SAFETY: made by `Box::into_raw` in `new`, and not freed yet.
            None => drop(unsafe { Box::from_raw(self.future.as_ptr()) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_slot_runs_its_future_drops_it_in_place_and_is_reused() {
        let drops = Arc::new(AtomicUsize::new(0));
        let counted = Counted(drops.clone());
        let big = [7u8; 3000];
        let got = Slot::new(|| async move {
            tokio::task::yield_now().await;
            let _c = &counted;
            big.iter().map(|&b| b as usize).sum::<usize>()
        })
        .await;
        assert_eq!(got, 7 * 3000);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        let pooled_after_one = pooled();
        assert!(pooled_after_one >= 1);
        // The next slot is the page just given back: no new mapping.
        let second = Slot::new(|| async { 1 });
        assert_eq!(pooled(), pooled_after_one - 1);
        drop(second);
        assert_eq!(pooled(), pooled_after_one);
    }

    #[tokio::test]
    async fn a_future_dropped_unfinished_is_dropped_with_its_slot() {
        let drops = Arc::new(AtomicUsize::new(0));
        let counted = Counted(drops.clone());
        let mut slot = Slot::new(|| async move {
            let _c = counted;
            std::future::pending::<()>().await;
        });
        let polled = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut slot).poll(cx))).await;
        assert!(polled.is_pending());
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(slot);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn trim_unmaps_only_slots_unused_for_a_whole_interval() {
        let slots: Vec<_> = (0..8).map(|_| Slot::new(|| async {})).collect();
        drop(slots);
        trim();
        let held = pooled();
        assert!(held >= 8);
        // One in use during the interval: the others went unused and are unmapped.
        drop(Slot::new(|| async {}));
        assert_eq!(trim(), (held - 1) * SLOT);
        assert_eq!(pooled(), 1);
    }
}

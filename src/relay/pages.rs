//! Anonymous memory mapped a block at a time, and the per-thread pools that keep given-back
//! blocks for reuse: what the relay's buffers (`buffer`) and exchange slots (`slot`) are
//! made of.
//!
//! A block is mapped from the system (`mmap`) rather than taken from the allocator's
//! heap: zero-filled, resident only once touched, and returned to the system whole when
//! unmapped. From the heap, the blocks of a burst end up interleaved with the long-lived
//! state of the connections opened during it, and freeing them leaves holes the allocator
//! keeps resident (docs/BENCHMARKS.md). A pool keeps up to its bound for reuse, so a
//! steady load maps nothing per request; [`Pool::trim`], which each worker calls once a
//! second, unmaps the blocks that stayed unused for the whole interval.

use std::ptr::NonNull;

/// `SIZE` bytes of anonymous memory, owned alone.
pub(super) struct Pages<const SIZE: usize>(NonNull<u8>);

// SAFETY: the mapping is owned by one `Pages` and only reached through it.
unsafe impl<const SIZE: usize> Send for Pages<SIZE> {}

impl<const SIZE: usize> Pages<SIZE> {
    /// A fresh mapping, or `None` if the system refuses one.
    pub(super) fn map() -> Option<Self> {
        // SAFETY: a fresh private anonymous mapping touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast()).map(Pages)
    }

    /// The start of the mapping: page-aligned, `SIZE` bytes, readable and writable.
    pub(super) fn as_ptr(&self) -> NonNull<u8> {
        self.0
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is SIZE bytes, readable, and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), SIZE) }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, writable, and borrowed mutably through self only.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr(), SIZE) }
    }
}

impl<const SIZE: usize> Drop for Pages<SIZE> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`, which nothing else refers to.
        unsafe {
            libc::munmap(self.0.as_ptr().cast(), SIZE);
        }
    }
}

/// Given-back blocks of one size, kept for reuse by one thread (held in a `thread_local`
/// `RefCell` by its user), at most `MAX` of them.
pub(super) struct Pool<const SIZE: usize, const MAX: usize> {
    blocks: Vec<Pages<SIZE>>,
    /// The fewest blocks the pool held since the last trim: that many went unused.
    low: usize,
}

impl<const SIZE: usize, const MAX: usize> Pool<SIZE, MAX> {
    /// Empty; `const` so that a `thread_local` needs no first-use check on each take.
    pub(super) const fn new() -> Self {
        Self {
            blocks: Vec::new(),
            low: 0,
        }
    }

    /// A pooled block, or a newly mapped one (`None` if the system refuses a mapping).
    pub(super) fn take(&mut self) -> Option<Pages<SIZE>> {
        let b = self.blocks.pop();
        self.low = self.low.min(self.blocks.len());
        b.or_else(Pages::map)
    }

    /// Keeps `block` for reuse while the pool has room; unmaps it otherwise.
    pub(super) fn give(&mut self, block: Pages<SIZE>) {
        if self.blocks.len() < MAX {
            self.blocks.push(block);
        }
    }

    /// Takes out the blocks that went unused since the last call, for the caller to drop
    /// (unmap) outside its borrow of the pool; returns them.
    pub(super) fn trim(&mut self) -> Vec<Pages<SIZE>> {
        let keep = self.blocks.len() - self.low.min(self.blocks.len());
        let dropped = self.blocks.drain(keep..).collect();
        self.low = self.blocks.len();
        dropped
    }

    /// How many blocks the pool holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.blocks.len()
    }
}

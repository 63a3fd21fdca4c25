//! A read buffer that messages are framed in place and forwarded from.
//!
//! Bytes are read into the spare room at the end, framed where they lie, and written out
//! from the front; nothing is copied except when the filled part is moved back to make
//! room. The memory is taken when bytes are readable and given back as soon as the
//! connection is idle with nothing buffered, so that idle keep-alive connections hold no
//! buffer at all.
//!
//! Given-back buffers go to a small per-thread pool that the next read takes from: the
//! buffer a connection gives back between two requests is usually the one it takes again,
//! still in cache, and no allocator call is made per request. Freeing to the allocator
//! instead would not lower the memory either: the allocator keeps freed 8 KiB blocks
//! resident, scattered between the connections' long-lived state.

use std::cell::RefCell;

/// Capacity of a buffer when it is first needed.
pub const INITIAL: usize = 8 * 1024;
/// Buffers each thread keeps for reuse (2 MiB); past that, given-back buffers are freed.
const POOL_MAX: usize = 256;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `INITIAL` bytes, from the pool when it has one.
fn take() -> Vec<u8> {
    POOL.with(|pool| pool.borrow_mut().pop())
        .unwrap_or_else(|| vec![0; INITIAL])
}

#[cfg(test)]
fn pooled() -> usize {
    POOL.with(|pool| pool.borrow().len())
}

/// Keeps a buffer of the pooled size for reuse; frees any other.
fn give(data: Vec<u8>) {
    if data.len() != INITIAL {
        return;
    }
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < POOL_MAX {
            pool.push(data);
        }
    });
}

#[derive(Debug, Default)]
pub struct Buf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl Buf {
    pub const fn new() -> Self {
        Self {
            data: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// The bytes read and not yet consumed.
    #[inline]
    pub fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Drops the first `n` filled bytes (they were forwarded).
    #[inline]
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Room to read into, such that the filled part stays within `limit` bytes. Empty
    /// when the filled part already holds `limit` bytes: the caller must not read then
    /// (a read into an empty slice would look like end of stream).
    pub fn spare(&mut self, limit: usize) -> &mut [u8] {
        if self.data.is_empty() {
            self.data = if limit >= INITIAL {
                take()
            } else {
                vec![0; limit.max(1)]
            };
        }
        if self.end == self.data.len() && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.data.len() && self.data.len() < limit {
            let grown = (self.data.len() * 2).min(limit);
            self.data.resize(grown, 0);
        }
        let room = limit.saturating_sub(self.len());
        let stop = self.data.len().min(self.end + room);
        &mut self.data[self.end..stop]
    }

    /// Marks `n` bytes of the spare room as filled.
    #[inline]
    pub fn commit(&mut self, n: usize) {
        self.end += n;
        debug_assert!(self.end <= self.data.len());
    }

    /// Gives the memory back if nothing is buffered.
    pub fn release(&mut self) {
        if self.is_empty() && !self.data.is_empty() {
            give(std::mem::take(&mut self.data));
            self.start = 0;
            self.end = 0;
        }
    }

    /// Whether memory is held.
    #[cfg(test)]
    pub fn is_allocated(&self) -> bool {
        !self.data.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_consumes_compacts_and_grows_to_the_limit() {
        let mut b = Buf::new();
        assert!(!b.is_allocated());
        let s = b.spare(20_000);
        assert_eq!(s.len(), INITIAL);
        s[..3].copy_from_slice(b"abc");
        b.commit(3);
        assert_eq!(b.filled(), b"abc");
        b.consume(1);
        assert_eq!(b.filled(), b"bc");
        // Keeps offering room, growing, until the filled part reaches the limit.
        loop {
            let n = b.spare(20_000).len();
            if n == 0 {
                break;
            }
            b.commit(n);
        }
        assert_eq!(b.len(), 20_000);
        assert_eq!(&b.filled()[..2], b"bc");
        b.consume(b.len());
        b.release();
        assert!(!b.is_allocated());
    }

    #[test]
    fn given_back_buffers_are_reused_and_grown_ones_freed() {
        let base = pooled();
        let mut a = Buf::new();
        a.spare(INITIAL)[0] = 7;
        a.commit(1);
        a.release();
        assert!(a.is_allocated(), "a buffer holding bytes is kept");
        a.consume(1);
        let first = a.spare(INITIAL).as_ptr();
        a.release();
        assert!(!a.is_allocated());
        assert_eq!(pooled(), base + 1);

        let mut b = Buf::new();
        assert_eq!(
            b.spare(4 * INITIAL).as_ptr(),
            first,
            "the pooled buffer is taken again"
        );
        assert_eq!(pooled(), base);
        assert!(b.filled().is_empty());
        // Fill it past its first size: it grows, and is freed rather than pooled.
        while b.len() <= INITIAL {
            let n = b.spare(4 * INITIAL).len();
            b.commit(n);
        }
        b.consume(b.len());
        b.release();
        assert!(!b.is_allocated());
        assert_eq!(pooled(), base);
    }
}

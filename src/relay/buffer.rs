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
//!
//! So that memory follows the load, the buffers of the pooled size are pages of their own,
//! mapped from the system (`mmap`) rather than taken from the allocator's heap, and each
//! worker calls [`trim`] once a second: pooled buffers that stayed unused for the whole
//! second are unmapped. From the heap, the buffers of a burst end up interleaved with the
//! long-lived state of the connections opened during it, and freeing them leaves holes
//! the allocator keeps resident (with glibc, 7.5 KB per connection stayed after a burst of
//! 5,000 against 3.4 KB for connections opened one by one, `malloc_trim` included; see
//! docs/BENCHMARKS.md). Unmapped pages go back to the system whole, at once.

use std::cell::RefCell;

use super::pages::{Pages, Pool};

/// Capacity of a buffer when it is first needed.
pub const INITIAL: usize = 8 * 1024;
/// Buffers each thread keeps for reuse (8 MiB); past that, given-back buffers are
/// unmapped at once. Large enough that a steady load of many connections per worker does
/// not map and unmap a buffer per request: [`trim`] returns what goes unused.
const POOL_MAX: usize = 1024;
/// How often each worker calls [`trim`].
pub const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

thread_local! {
    static POOL: RefCell<Pool<INITIAL, POOL_MAX>> = const { RefCell::new(Pool::new()) };
}

/// A buffer of `INITIAL` bytes, from the pool when it has one, else newly mapped (or from
/// the heap if the system refuses a mapping).
fn take() -> Block {
    match POOL.with(|pool| pool.borrow_mut().take()) {
        Some(p) => Block::Pages(p),
        None => Block::Heap(vec![0; INITIAL].into_boxed_slice()),
    }
}

#[cfg(test)]
fn pooled() -> usize {
    POOL.with(|pool| pool.borrow().len())
}

/// Keeps mapped pages for reuse while the pool has room; frees anything else.
fn give(block: Block) {
    if let Block::Pages(p) = block {
        POOL.with(|pool| pool.borrow_mut().give(p));
    }
}

/// Unmaps the pooled buffers this thread did not use since the last call. Each worker
/// calls it every [`TRIM_EVERY`]; returns the bytes given back.
pub fn trim() -> usize {
    let dropped = POOL.with(|pool| pool.borrow_mut().trim());
    dropped.len() * INITIAL
}

/// What a buffer's bytes live in.
#[derive(Default)]
enum Block {
    #[default]
    None,
    /// The pooled size, mapped pages.
    Pages(Pages<INITIAL>),
    /// Smaller (a tap with a lower limit) or grown past `INITIAL`: from the heap. A boxed
    /// slice rather than a Vec keeps a `Buf` at 40 bytes, in every connection's state.
    Heap(Box<[u8]>),
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({} bytes)", self.len())
    }
}

impl Block {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Block::None => 0,
            Block::Pages(_) => INITIAL,
            Block::Heap(v) => v.len(),
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            Block::None => &[],
            Block::Pages(p) => p.as_slice(),
            Block::Heap(v) => v,
        }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Block::None => &mut [],
            Block::Pages(p) => p.as_mut_slice(),
            Block::Heap(v) => v,
        }
    }

    /// Grows to `len` bytes, keeping the content (mapped pages move to the heap).
    fn grow(&mut self, len: usize) {
        let mut v = vec![0; len];
        let old = self.as_slice();
        v[..old.len()].copy_from_slice(old);
        *self = Block::Heap(v.into_boxed_slice());
    }
}

#[derive(Debug, Default)]
pub struct Buf {
    data: Block,
    start: usize,
    end: usize,
}

impl Buf {
    pub const fn new() -> Self {
        Self {
            data: Block::None,
            start: 0,
            end: 0,
        }
    }

    /// The bytes read and not yet consumed.
    #[inline]
    pub fn filled(&self) -> &[u8] {
        &self.data.as_slice()[self.start..self.end]
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
                Block::Heap(vec![0; limit.max(1)].into_boxed_slice())
            };
        }
        if self.end == self.data.len() && self.start > 0 {
            self.data
                .as_mut_slice()
                .copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.data.len() && self.data.len() < limit {
            let grown = (self.data.len() * 2).min(limit);
            self.data.grow(grown);
        }
        let room = limit.saturating_sub(self.len());
        let stop = self.data.len().min(self.end + room);
        &mut self.data.as_mut_slice()[self.end..stop]
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

    /// Every connection holds two of these, idle or not; idle, they hold nothing else
    /// (the listener's test keeps the whole task state under its budget).
    #[test]
    fn an_idle_buffer_is_40_bytes_and_holds_no_memory() {
        assert!(
            std::mem::size_of::<Buf>() <= 40,
            "{}",
            std::mem::size_of::<Buf>()
        );
        let mut b = Buf::new();
        b.spare(INITIAL)[..2].copy_from_slice(b"hi");
        b.commit(2);
        b.consume(2);
        b.release();
        assert!(!b.is_allocated());
    }

    #[test]
    fn buffers_unused_for_a_whole_trim_interval_are_freed() {
        // A burst: many buffers in use at once, all given back; the pool keeps POOL_MAX.
        let mut bufs: Vec<Buf> = (0..POOL_MAX + 10).map(|_| Buf::new()).collect();
        for b in &mut bufs {
            b.spare(INITIAL);
        }
        trim(); // the interval starts with the pool drained
        for b in &mut bufs {
            b.release();
        }
        assert_eq!(pooled(), POOL_MAX, "the pool is bounded");
        // Within the interval of the burst nothing pooled is freed: all were in use.
        trim();
        assert_eq!(pooled(), POOL_MAX);
        // One buffer taken and given back: the rest stayed unused for a whole interval.
        bufs[0].spare(INITIAL);
        bufs[0].release();
        assert_eq!(trim(), (POOL_MAX - 1) * INITIAL);
        assert_eq!(pooled(), 1);
        assert_eq!(trim(), INITIAL);
        assert_eq!(pooled(), 0);
        assert_eq!(trim(), 0);
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
        // Fill it past its first size: it grows (onto the heap), and is freed, not pooled.
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

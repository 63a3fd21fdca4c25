//! Bounds that keep hostile input from costing more than a fixed amount of work per byte.
//!
//! The scanner never allocates, so the limits do not protect its own memory; they protect
//! the caller that buffers a message until [`Scanner::scan`](super::Scanner::scan) says it
//! is complete, and they turn absurd headers into an error at once instead of a wait for
//! bytes that will never come.

/// The deepest nesting any scanner can follow: its stack is a fixed array inside the
/// scanner, so nesting costs no allocation.
pub const MAX_DEPTH: usize = 32;

/// Size limits of one scanner. The defaults follow Redis's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Nesting depth of aggregates and attributes; at most [`MAX_DEPTH`] (larger values
    /// are clamped).
    pub max_depth: usize,
    /// Longest bulk string, bulk error, verbatim string or string chunk. Redis's
    /// `proto-max-bulk-len` defaults to 512 MiB.
    pub max_bulk: u64,
    /// Most elements in one aggregate (pairs, for maps and attributes). Redis refuses
    /// multibulk counts above `INT_MAX`.
    pub max_aggregate: u64,
    /// Longest simple string, simple error or big number line, without its CRLF.
    pub max_line: u64,
    /// Longest inline command line, without its line end. Redis's
    /// `PROTO_INLINE_MAX_SIZE` is 64 KiB.
    pub max_inline: u64,
}

impl Limits {
    /// Depth limit actually enforced.
    pub(crate) fn depth(&self) -> usize {
        self.max_depth.min(MAX_DEPTH)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: MAX_DEPTH,
            max_bulk: 512 * 1024 * 1024,
            max_aggregate: i32::MAX as u64,
            max_line: 1024 * 1024,
            max_inline: 64 * 1024,
        }
    }
}

//! Bounds that keep hostile input from costing more than a fixed amount of work per byte.
//!
//! The scanner allocates nothing for the messages Redis exchanges day to day, so the limits
//! mostly protect the caller that buffers a message until
//! [`Scanner::scan`](super::Scanner::scan) says it is complete, and they turn absurd headers
//! into an error at once instead of a wait for bytes that will never come.

/// Levels of nesting the scanner keeps in a fixed array of its own: nesting up to this
/// deep costs no allocation. Deeper levels (a script returning nested tables) go to a
/// vector the scanner keeps for the next deep message.
pub const INLINE_DEPTH: usize = 32;

/// The deepest nesting followed by default. Redis itself sets none for replies (a Lua
/// script returned tables nested 1000 levels deep to redis-cli here). A reply deeper than
/// this is an error of the stream (relayed, no longer timed); the bound keeps the stack at
/// 64 KiB per connection.
pub const MAX_DEPTH: usize = 4096;

/// Size limits of one scanner. The defaults follow Redis's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Nesting depth of aggregates and attributes.
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

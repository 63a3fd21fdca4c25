//! The resumable RESP scanner: finds where each message ends without copying anything.
//!
//! A relay reads whatever the socket gives it, so a message may arrive in any number of
//! pieces and a piece may hold the end of one message and the start of the next. The
//! scanner is therefore a state machine over bytes: it keeps the little it must remember
//! between pieces (the state of the line or header it is in, how many payload bytes are
//! still to skip, and a fixed stack of element counts) and never looks at a byte twice.
//! Payloads of bulk strings are skipped by their length, not examined, so a 512 MiB value
//! costs the same as an empty one.

use memchr::memchr;

use super::limits::INLINE_DEPTH;
use super::{Kind, Limits, RespError};
use crate::recorder::Direction;

/// How an open aggregate counts its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A counted aggregate: `n` elements are still to come.
    Counted,
    /// A counted attribute map: `n` elements still to come; once complete, the value it
    /// describes follows and counts in its place.
    Attribute,
    /// A streamed aggregate (`*?`, `~?`): `n` elements seen so far, until `.`.
    Streamed,
    /// A streamed map (`%?`): like [`Shape::Streamed`], and `.` must follow a whole pair.
    StreamedPairs,
}

#[derive(Debug, Clone, Copy)]
struct Level {
    n: u64,
    shape: Shape,
}

const EMPTY_LEVEL: Level = Level {
    n: 0,
    shape: Shape::Counted,
};

/// Aggregate type bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agg {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

/// Length-prefixed string type bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blob {
    String,
    Error,
    Verbatim,
}

/// What a decimal header line introduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    /// `:` — the number is the value.
    Integer,
    /// `(` — the number is the value, of any length.
    BigNumber,
    /// `$`, `!`, `=` on the reply side.
    Blob(Blob),
    /// `*`, `%`, `~`, `>`, `|` on the reply side.
    Aggregate(Agg),
    /// `;` inside a streamed string.
    Chunk,
    /// `*` starting a request.
    CommandCount,
    /// `$` of a request argument.
    CommandArg,
}

/// Short lines whose content is checked byte by byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Short {
    Null,
    EndMark,
    Boolean,
    Double,
}

/// Doubles are printed by Redis with `%.17g`, well under this; anything longer is garbage.
const MAX_DOUBLE_LINE: u64 = 64;

#[derive(Debug, Clone, Copy)]
enum State {
    /// A type byte comes next (on the request side at depth 0: `*` or an inline line).
    Type,
    /// Inside a decimal header line.
    Number(Num),
    /// Inside a `+` or `-` line; `cr` says whether the last byte seen was CR.
    Text { len: u64, cr: bool },
    /// Inside an inline request line; `cr` says whether the last byte seen was CR.
    Inline { len: u64, cr: bool },
    /// Inside a short checked line.
    Short { what: Short, len: u64, cr: bool },
    /// Payload bytes still to skip.
    Payload { left: u64, chunk: bool },
    /// The CRLF after a payload; `cr` once the CR was seen.
    PayloadEnd { cr: bool, chunk: bool },
    /// The next chunk header (`;`) of a streamed string.
    Chunk,
}

/// A decimal header line read so far.
#[derive(Debug, Clone, Copy)]
struct Num {
    header: Header,
    neg: bool,
    /// `?` instead of digits.
    streamed: bool,
    digits: u32,
    val: u64,
    /// The CR was seen; LF must follow.
    cr: bool,
}

const fn number(header: Header) -> State {
    State::Number(Num {
        header,
        neg: false,
        streamed: false,
        digits: 0,
        val: 0,
        cr: false,
    })
}

/// Finds the end of each RESP message in a byte stream, one message at a time.
///
/// Two ways to feed it; both count the bytes of the current message consumed so far, and
/// `scan(buf)` is `feed(&buf[consumed..])`:
/// - [`Scanner::scan`]: the caller keeps the message in its buffer from its first byte
///   and calls again with the same start and more bytes; the scanner resumes where it
///   stopped. This suits requests, whose bytes the tap needs whole (for the command view).
/// - [`Scanner::feed`]: the caller passes only the bytes that follow those already fed
///   and may drop them afterwards. This suits replies, which are relayed as they arrive
///   and may be far larger than any buffer.
///
/// After a complete message the scanner is ready for the next one. After an error it
/// returns that error until [`Scanner::reset`].
#[derive(Debug, Clone)]
pub struct Scanner {
    dir: Direction,
    limits: Limits,
    state: State,
    /// The open aggregates, outermost first: the first [`INLINE_DEPTH`] here, deeper ones
    /// in `deeper` (kept, emptied, for the next deep message).
    stack: [Level; INLINE_DEPTH],
    deeper: Vec<Level>,
    depth: usize,
    /// An attribute was completed and the value it describes has not started yet.
    after_attr: bool,
    /// Bytes of the current message already consumed.
    consumed: u64,
    kind: Option<Kind>,
    failed: Option<RespError>,
    inspected: u64,
}

impl Scanner {
    /// A scanner with the default (Redis's) limits. `Direction::Request` frames what a
    /// client sends (multibulk arrays of bulk strings, or inline lines); `Direction::Response`
    /// frames what a server sends (any RESP2 or RESP3 value).
    pub fn new(dir: Direction) -> Self {
        Self::with_limits(dir, Limits::default())
    }

    /// A scanner with other limits, e.g. a raised bulk limit for a Redis whose
    /// `proto-max-bulk-len` was raised.
    pub fn with_limits(dir: Direction, limits: Limits) -> Self {
        Self {
            dir,
            limits,
            state: State::Type,
            stack: [EMPTY_LEVEL; INLINE_DEPTH],
            deeper: Vec::new(),
            depth: 0,
            after_attr: false,
            consumed: 0,
            kind: None,
            failed: None,
            inspected: 0,
        }
    }

    /// Scans `buf`, which holds the current message from its first byte (and possibly
    /// more). Returns `Some(len)` when the message is complete: it is `buf[..len]`, and the
    /// scanner is ready for the next message (so the next call starts at `buf[len..]`).
    /// Returns `None` when more bytes are needed: call again with the same start and more
    /// bytes; the bytes already scanned are not examined again.
    pub fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, RespError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let start = match usize::try_from(self.consumed) {
            Ok(start) if start <= buf.len() => start,
            _ => return Err(self.fail(RespError::BufferShrank)),
        };
        Ok(self.feed(&buf[start..])?.map(|n| start + n))
    }

    /// Scans `chunk`, the bytes that follow everything fed so far. Returns `Some(n)` when
    /// the current message ends after `chunk[..n]` (the rest of `chunk` belongs to the
    /// next message), `None` when all of `chunk` belongs to a message still incomplete.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Option<usize>, RespError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        match self.run(chunk) {
            Ok(Some(n)) => {
                self.finish();
                Ok(Some(n))
            }
            Ok(None) => {
                self.consumed = self.consumed.saturating_add(chunk.len() as u64);
                Ok(None)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Forgets the current message and any error, keeping the limits and direction.
    pub fn reset(&mut self) {
        self.finish();
        self.failed = None;
        self.kind = None;
    }

    /// The type of the message being scanned, or of the last one completed, once its type
    /// byte has been seen (after any attributes).
    pub fn kind(&self) -> Option<Kind> {
        self.kind
    }

    /// Bytes of the current, incomplete message consumed so far (0 between messages).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Whether a message has started and not yet ended.
    pub fn in_message(&self) -> bool {
        self.consumed > 0
    }

    /// The error this scanner stopped at, if any.
    pub fn error(&self) -> Option<RespError> {
        self.failed
    }

    /// Bytes this scanner has examined one by one since it was made: type bytes, header
    /// and line bytes and CRLFs, but not payload bytes, which are skipped by length. It
    /// shows that the work done is proportional to the protocol overhead, not the data.
    pub fn bytes_inspected(&self) -> u64 {
        self.inspected
    }

    fn fail(&mut self, e: RespError) -> RespError {
        self.failed = Some(e);
        e
    }

    fn finish(&mut self) {
        self.state = State::Type;
        self.depth = 0;
        self.after_attr = false;
        self.consumed = 0;
    }

    fn run(&mut self, chunk: &[u8]) -> Result<Option<usize>, RespError> {
        let mut i = 0;
        while let Some(rest) = chunk.get(i..).filter(|r| !r.is_empty()) {
            let (used, done) = match self.state {
                State::Payload { left, chunk } => {
                    let avail = rest.len() as u64;
                    if avail < left {
                        self.state = State::Payload {
                            left: left - avail,
                            chunk,
                        };
                        (rest.len(), false)
                    } else {
                        self.state = State::PayloadEnd { cr: false, chunk };
                        // left <= avail, which is a usize.
                        (left as usize, false)
                    }
                }
                State::Text { len, cr } => self.text(rest, len, cr)?,
                State::Inline { len, cr } => self.inline(rest, len, cr)?,
                _ => {
                    self.inspected += 1;
                    (1, self.step(rest[0])?)
                }
            };
            i += used;
            if done {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// A `+`/`-` line: search for LF in bulk, since its content is not checked.
    fn text(&mut self, rest: &[u8], len: u64, cr: bool) -> Result<(usize, bool), RespError> {
        let limit = self.limits.max_line;
        match memchr(b'\n', rest) {
            None => {
                let len = len + rest.len() as u64;
                // One byte of slack: the last byte may be the line's CR.
                if len > limit.saturating_add(1) {
                    return Err(RespError::LineTooLong { limit });
                }
                self.inspected += rest.len() as u64;
                let cr = rest.last() == Some(&b'\r');
                self.state = State::Text { len, cr };
                Ok((rest.len(), false))
            }
            Some(p) => {
                let prev_cr = match p.checked_sub(1) {
                    Some(q) => rest[q] == b'\r',
                    None => cr,
                };
                if !prev_cr {
                    return Err(RespError::BadLineEnd);
                }
                if len + p as u64 - 1 > limit {
                    return Err(RespError::LineTooLong { limit });
                }
                self.inspected += p as u64 + 1;
                Ok((p + 1, self.value_done()))
            }
        }
    }

    /// An inline request line: it ends at LF, with or without CR, as in Redis.
    fn inline(&mut self, rest: &[u8], len: u64, cr: bool) -> Result<(usize, bool), RespError> {
        let limit = self.limits.max_inline;
        let too_long = Err(RespError::InlineTooLong { limit });
        match memchr(b'\n', rest) {
            None => {
                let len = len + rest.len() as u64;
                // One byte of slack: the last byte may be the line's CR.
                if len > limit.saturating_add(1) {
                    return too_long;
                }
                self.inspected += rest.len() as u64;
                let cr = rest.last() == Some(&b'\r');
                self.state = State::Inline { len, cr };
                Ok((rest.len(), false))
            }
            Some(p) => {
                let prev_cr = match p.checked_sub(1) {
                    Some(q) => rest[q] == b'\r',
                    None => cr,
                };
                if len + p as u64 - u64::from(prev_cr) > limit {
                    return too_long;
                }
                self.inspected += p as u64 + 1;
                Ok((p + 1, true))
            }
        }
    }

    /// One byte in a byte-by-byte state. Returns whether the message is complete.
    fn step(&mut self, b: u8) -> Result<bool, RespError> {
        match self.state {
            State::Type => match self.dir {
                Direction::Request => self.request_type(b),
                Direction::Response => self.reply_type(b),
            },
            State::Number(num) => self.number(b, num),
            State::Short { what, len, cr } => self.short(b, what, len, cr),
            State::PayloadEnd { cr: false, chunk } => {
                if b != b'\r' {
                    return Err(RespError::BadPayloadEnd);
                }
                self.state = State::PayloadEnd { cr: true, chunk };
                Ok(false)
            }
            State::PayloadEnd { cr: true, chunk } => {
                if b != b'\n' {
                    return Err(RespError::BadPayloadEnd);
                }
                if chunk {
                    self.state = State::Chunk;
                    Ok(false)
                } else {
                    Ok(self.value_done())
                }
            }
            State::Chunk => {
                if b != b';' {
                    return Err(RespError::ExpectedChunk { byte: b });
                }
                self.state = number(Header::Chunk);
                Ok(false)
            }
            // These states consume whole runs in `run` and never get here.
            State::Payload { .. } | State::Text { .. } | State::Inline { .. } => Ok(false),
        }
    }

    fn request_type(&mut self, b: u8) -> Result<bool, RespError> {
        if self.depth == 0 {
            // Redis decides by the first byte alone: `*` is a multibulk, anything else
            // an inline command line.
            if b == b'*' {
                self.kind = Some(Kind::Array);
                self.state = number(Header::CommandCount);
                return Ok(false);
            }
            self.kind = Some(Kind::Inline);
            if b == b'\n' {
                return Ok(true);
            }
            self.state = State::Inline {
                len: 1,
                cr: b == b'\r',
            };
            return Ok(false);
        }
        if b != b'$' {
            return Err(RespError::ExpectedBulk { byte: b });
        }
        self.state = number(Header::CommandArg);
        Ok(false)
    }

    fn reply_type(&mut self, b: u8) -> Result<bool, RespError> {
        let (kind, state) = match b {
            b'+' => (Kind::SimpleString, State::Text { len: 0, cr: false }),
            b'-' => (Kind::SimpleError, State::Text { len: 0, cr: false }),
            b':' => (Kind::Integer, number(Header::Integer)),
            b'$' => (Kind::BulkString, number(Header::Blob(Blob::String))),
            b'!' => (Kind::BulkError, number(Header::Blob(Blob::Error))),
            b'=' => (Kind::VerbatimString, number(Header::Blob(Blob::Verbatim))),
            b'*' => (Kind::Array, number(Header::Aggregate(Agg::Array))),
            b'%' => (Kind::Map, number(Header::Aggregate(Agg::Map))),
            b'~' => (Kind::Set, number(Header::Aggregate(Agg::Set))),
            b'>' => (Kind::Push, number(Header::Aggregate(Agg::Push))),
            b'(' => (Kind::BigNumber, number(Header::BigNumber)),
            b'_' => (Kind::Null, short(Short::Null)),
            b',' => (Kind::Double, short(Short::Double)),
            b'#' => (Kind::Boolean, short(Short::Boolean)),
            b'|' => {
                if self.depth == 0 && !self.after_attr {
                    // A new message that starts with attributes: its kind is that of the
                    // value after them.
                    self.kind = None;
                }
                self.state = number(Header::Aggregate(Agg::Attribute));
                return Ok(false);
            }
            b'.' => {
                if self.after_attr {
                    return Err(RespError::DanglingAttribute);
                }
                let top = self
                    .depth
                    .checked_sub(1)
                    .and_then(|d| self.level(d))
                    .ok_or(RespError::UnexpectedEnd)?;
                match top.shape {
                    Shape::Streamed => {}
                    Shape::StreamedPairs if top.n % 2 == 0 => {}
                    Shape::StreamedPairs => return Err(RespError::OddMapEnd),
                    Shape::Counted | Shape::Attribute => return Err(RespError::UnexpectedEnd),
                }
                self.state = short(Short::EndMark);
                return Ok(false);
            }
            _ => return Err(RespError::BadType { byte: b }),
        };
        self.after_attr = false;
        if self.depth == 0 {
            self.kind = Some(kind);
        }
        self.state = state;
        Ok(false)
    }

    fn number(&mut self, b: u8, mut num: Num) -> Result<bool, RespError> {
        if num.cr {
            if b != b'\n' {
                return Err(RespError::BadLineEnd);
            }
            return self.header_done(num.header, num.neg, num.streamed, num.val);
        }
        let fresh = num.digits == 0 && !num.neg && !num.streamed;
        match b {
            b'\r' => {
                if num.digits == 0 && !num.streamed {
                    return Err(RespError::BadNumber);
                }
                num.cr = true;
            }
            b'-' if fresh => {
                if !self.negative_allowed(num.header) {
                    return Err(RespError::NegativeLength);
                }
                num.neg = true;
            }
            b'?' if fresh => {
                if !self.streamed_allowed(num.header) {
                    return Err(RespError::StreamedNotAllowed);
                }
                num.streamed = true;
            }
            b'0'..=b'9' => {
                // Like Redis's string2ll: no leading zeros, no "-0".
                let leading_zero = num.digits > 0 && num.val == 0;
                let minus_zero = num.neg && num.digits == 0 && b == b'0';
                if num.streamed || leading_zero || minus_zero {
                    return Err(RespError::BadNumber);
                }
                num.digits = num.digits.saturating_add(1);
                num.val = self.accumulate(num.header, num.neg, num.val, b - b'0', num.digits)?;
            }
            _ => return Err(RespError::BadNumber),
        }
        self.state = State::Number(num);
        Ok(false)
    }

    fn negative_allowed(&self, header: Header) -> bool {
        match header {
            Header::Integer | Header::BigNumber => true,
            // The RESP2 nulls `$-1` and `*-1`.
            Header::Blob(Blob::String) | Header::Aggregate(Agg::Array) => true,
            // Redis reads `*-N` from a client as an empty command.
            Header::CommandCount => true,
            Header::Blob(_) | Header::Aggregate(_) | Header::Chunk | Header::CommandArg => false,
        }
    }

    fn streamed_allowed(&self, header: Header) -> bool {
        matches!(
            header,
            Header::Blob(Blob::String)
                | Header::Aggregate(Agg::Array)
                | Header::Aggregate(Agg::Map)
                | Header::Aggregate(Agg::Set)
        )
    }

    /// Adds a digit, rejecting a value past its limit as soon as it is past it, so that
    /// a hostile header fails at once and nothing overflows.
    fn accumulate(
        &self,
        header: Header,
        neg: bool,
        val: u64,
        d: u8,
        digits: u32,
    ) -> Result<u64, RespError> {
        if header == Header::BigNumber {
            if u64::from(digits) > self.limits.max_line {
                return Err(RespError::LineTooLong {
                    limit: self.limits.max_line,
                });
            }
            return Ok(val.saturating_mul(10).saturating_add(u64::from(d)));
        }
        let next = val
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d)));
        let (cap, err) = match header {
            Header::Integer => (i64::MAX as u64 + u64::from(neg), RespError::IntegerOverflow),
            Header::Blob(_) | Header::Chunk | Header::CommandArg if !neg => {
                let limit = self.limits.max_bulk;
                (limit, RespError::BulkTooLong { limit })
            }
            Header::Aggregate(_) | Header::CommandCount if !neg => {
                let limit = self.limits.max_aggregate;
                (limit, RespError::AggregateTooLong { limit })
            }
            Header::CommandCount => (self.limits.max_aggregate, RespError::BadNumber),
            // Only -1 is a valid negative length.
            _ => (1, RespError::NegativeLength),
        };
        match next {
            Some(v) if v <= cap => Ok(v),
            _ => Err(err),
        }
    }

    fn header_done(
        &mut self,
        header: Header,
        neg: bool,
        streamed: bool,
        val: u64,
    ) -> Result<bool, RespError> {
        match header {
            Header::Integer | Header::BigNumber => Ok(self.value_done()),
            Header::Blob(blob) => {
                if streamed {
                    self.state = State::Chunk;
                    return Ok(false);
                }
                if neg {
                    return Ok(self.value_done());
                }
                if blob == Blob::Verbatim && val < 4 {
                    return Err(RespError::BadVerbatim);
                }
                self.state = payload(val, false);
                Ok(false)
            }
            Header::CommandArg => {
                self.state = payload(val, false);
                Ok(false)
            }
            Header::Chunk => {
                if val == 0 {
                    return Ok(self.value_done());
                }
                self.state = payload(val, true);
                Ok(false)
            }
            Header::Aggregate(agg) => {
                if streamed {
                    let shape = if agg == Agg::Map {
                        Shape::StreamedPairs
                    } else {
                        Shape::Streamed
                    };
                    self.push(Level { n: 0, shape })?;
                    self.state = State::Type;
                    return Ok(false);
                }
                if neg {
                    return Ok(self.value_done());
                }
                let pairs = || {
                    val.checked_mul(2).ok_or(RespError::AggregateTooLong {
                        limit: self.limits.max_aggregate,
                    })
                };
                let (n, shape) = match agg {
                    Agg::Map => (pairs()?, Shape::Counted),
                    Agg::Attribute => (pairs()?, Shape::Attribute),
                    Agg::Array | Agg::Set | Agg::Push => (val, Shape::Counted),
                };
                if n == 0 {
                    if shape == Shape::Attribute {
                        self.after_attr = true;
                        self.state = State::Type;
                        return Ok(false);
                    }
                    return Ok(self.value_done());
                }
                self.push(Level { n, shape })?;
                self.state = State::Type;
                Ok(false)
            }
            Header::CommandCount => {
                // Redis skips `*0` and `*-N` from a client without a reply.
                if neg || val == 0 {
                    return Ok(true);
                }
                self.push(Level {
                    n: val,
                    shape: Shape::Counted,
                })?;
                self.state = State::Type;
                Ok(false)
            }
        }
    }

    fn short(&mut self, b: u8, what: Short, len: u64, cr: bool) -> Result<bool, RespError> {
        if cr {
            if b != b'\n' {
                return Err(RespError::BadLineEnd);
            }
            return self.short_done(what, len);
        }
        if b == b'\r' {
            self.state = State::Short {
                what,
                len,
                cr: true,
            };
            return Ok(false);
        }
        let len = len + 1;
        let ok = match what {
            Short::Null | Short::EndMark => return Err(RespError::NotEmpty),
            Short::Boolean => len == 1 && (b == b't' || b == b'f'),
            Short::Double => {
                len <= MAX_DOUBLE_LINE
                    && matches!(
                        b,
                        b'0'..=b'9' | b'+' | b'-' | b'.' | b'e' | b'E' | b'i' | b'n' | b'f' | b'a'
                    )
            }
        };
        if !ok {
            return Err(match what {
                Short::Boolean => RespError::BadBoolean,
                _ => RespError::BadDouble,
            });
        }
        self.state = State::Short {
            what,
            len,
            cr: false,
        };
        Ok(false)
    }

    fn short_done(&mut self, what: Short, len: u64) -> Result<bool, RespError> {
        match what {
            Short::Null => Ok(self.value_done()),
            Short::Boolean if len == 1 => Ok(self.value_done()),
            Short::Boolean => Err(RespError::BadBoolean),
            Short::Double if len > 0 => Ok(self.value_done()),
            Short::Double => Err(RespError::BadDouble),
            Short::EndMark => {
                // `.` was only accepted with a streamed aggregate on top.
                self.depth = self.depth.saturating_sub(1);
                Ok(self.value_done())
            }
        }
    }

    /// A lower bound of the current message's whole length, from what its headers
    /// announced so far: the bytes consumed, the payload still owed, and at least 4 bytes
    /// (`:0\r\n`, the shortest value) for each element an open aggregate still expects.
    /// `*2\r\n$3\r\nGET\r\n$400000000\r\n` is at least 400 MB before its payload
    /// began: a caller can tell it will never fit a buffer.
    pub fn announced(&self) -> u64 {
        const SHORTEST: u64 = 4;
        let owed = match self.state {
            State::Payload { left, .. } => left.saturating_add(2),
            _ => 0,
        };
        // An aggregate's count holds the element in progress, which is counted apart (the
        // aggregate inside it, or the value being read), except at the innermost level
        // between two values.
        let between = matches!(self.state, State::Type);
        let expected = (0..self.depth)
            .filter_map(|d| Some((d, self.level(d)?)))
            .filter(|(_, l)| matches!(l.shape, Shape::Counted | Shape::Attribute))
            .map(|(d, l)| match d + 1 == self.depth && between {
                true => l.n,
                false => l.n.saturating_sub(1),
            })
            .fold(0u64, |sum, n| {
                sum.saturating_add(n.saturating_mul(SHORTEST))
            });
        self.consumed.saturating_add(owed).saturating_add(expected)
    }

    fn push(&mut self, level: Level) -> Result<(), RespError> {
        let limit = self.limits.max_depth;
        if self.depth >= limit {
            return Err(RespError::TooDeep { limit });
        }
        match self.stack.get_mut(self.depth) {
            Some(slot) => *slot = level,
            None => {
                self.deeper.truncate(self.depth - INLINE_DEPTH);
                self.deeper.push(level);
            }
        }
        self.depth += 1;
        Ok(())
    }

    /// The open aggregate at depth `d` (0: the outermost).
    fn level(&self, d: usize) -> Option<Level> {
        match d.checked_sub(INLINE_DEPTH) {
            None => self.stack.get(d).copied(),
            Some(i) => self.deeper.get(i).copied(),
        }
    }

    fn level_mut(&mut self, d: usize) -> Option<&mut Level> {
        match d.checked_sub(INLINE_DEPTH) {
            None => self.stack.get_mut(d),
            Some(i) => self.deeper.get_mut(i),
        }
    }

    /// A value ended: count it in the enclosing aggregates, closing those it completes.
    /// Returns whether the whole message is complete.
    fn value_done(&mut self) -> bool {
        self.state = State::Type;
        while let Some(d) = self.depth.checked_sub(1) {
            let Some(top) = self.level_mut(d) else {
                // Every level below `depth` was pushed; none is missing.
                return false;
            };
            match top.shape {
                Shape::Streamed | Shape::StreamedPairs => {
                    top.n = top.n.wrapping_add(1);
                    return false;
                }
                Shape::Counted | Shape::Attribute => {
                    top.n = top.n.saturating_sub(1);
                    if top.n > 0 {
                        return false;
                    }
                    let attribute = top.shape == Shape::Attribute;
                    self.depth = d;
                    if attribute {
                        // The attribute is not a value: the one it describes comes next.
                        self.after_attr = true;
                        return false;
                    }
                }
            }
        }
        true
    }
}

const fn short(what: Short) -> State {
    State::Short {
        what,
        len: 0,
        cr: false,
    }
}

const fn payload(len: u64, chunk: bool) -> State {
    if len == 0 {
        State::PayloadEnd { cr: false, chunk }
    } else {
        State::Payload { left: len, chunk }
    }
}

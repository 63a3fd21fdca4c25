//! Body framing: where a message body ends, found without copying it.
//!
//! The relay passes body bytes through untouched; the framer only counts them (a length)
//! or walks the chunk structure (chunked), so that the relay knows which bytes of its
//! buffer still belong to this message and which start the next one.

use super::headers::{is_tchar, MAX_SIZE};
use super::BodyKind;

/// Longest chunk-size line (size and extensions) accepted.
const MAX_CHUNK_LINE: u32 = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: u32 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("chunk size is not a hexadecimal number")]
    BadChunkSize,
    #[error("chunk size overflows")]
    ChunkSizeOverflow,
    #[error("chunk line too long or with a control character")]
    BadChunkLine,
    #[error("chunk data not followed by CRLF")]
    BadChunkEnd,
    #[error("malformed or oversized trailer section")]
    BadTrailer,
}

/// How far a framer got through a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the buffer that belong to this body.
    pub consumed: usize,
    /// The body is complete (never true for a close-delimited body).
    pub done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// Reading hex digits of a chunk size.
    Size {
        size: u64,
        digits: u32,
    },
    /// After the size: chunk extensions up to CR; `line` counts the line's bytes.
    Ext {
        size: u64,
        line: u32,
        at: Ext,
    },
    /// Expecting the LF of the size line.
    SizeLf {
        size: u64,
    },
    Data {
        left: u64,
    },
    DataCr,
    DataLf,
    /// In the trailer section.
    Trailer {
        at: Field,
        seen: u32,
        /// Field lines completed so far.
        fields: u32,
    },
    /// Expecting the LF of the final empty line.
    EndLf,
}

/// Where a chunk extension (RFC 9112 §7.1.1) has got to:
/// `*( ";" ext-name [ "=" ( token / quoted-string ) ] )`.
///
/// The grammar also allows BWS around `;` and `=`; we do not. BWS exists only for old
/// senders, upstreams disagree on it, and `5 ;x` or `0x10` read as "size, then junk" by
/// one parser and as a different size by another is exactly how a chunked body is
/// smuggled. After the hex digits comes `;` or CR, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ext {
    NameStart,
    Name,
    ValueStart,
    Token,
    Quoted,
    Escape,
    AfterQuoted,
}

/// Where a trailer field line (RFC 9112 §7.1.2, field-line of §5) has got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    LineStart,
    Name,
    Value,
    Cr,
}

/// Resumable framer of one message body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyFramer {
    state: State,
    /// Most trailer field lines accepted (see [`BodyFramer::max_trailer_fields`]).
    max_fields: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Chunked(Chunked),
    Close,
    Done,
}

impl BodyFramer {
    pub fn new(kind: BodyKind) -> Self {
        let state = match kind {
            BodyKind::None | BodyKind::Length(0) => State::Done,
            BodyKind::Length(n) => State::Length(n),
            BodyKind::Chunked => State::Chunked(Chunked::Size { size: 0, digits: 0 }),
            BodyKind::Close => State::Close,
        };
        Self {
            state,
            max_fields: u32::MAX,
        }
    }

    /// Limits the trailer section to `n` field lines, as the head is limited: a request
    /// may not carry in its trailers the fields its head could not.
    pub fn max_trailer_fields(mut self, n: usize) -> Self {
        self.max_fields = u32::try_from(n).unwrap_or(u32::MAX);
        self
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The body ends when the connection does.
    pub fn is_close_delimited(&self) -> bool {
        self.state == State::Close
    }

    /// Bytes of body data that come next, before any framing byte: what is left of a
    /// length or of the current chunk, `u64::MAX` for a body that ends with the
    /// connection, 0 at a chunk's size line, its line end or the trailers, and once done.
    /// A reader that wants the data (rather than where the body ends) offers that many
    /// bytes as data and the framing a byte at a time; the relay never asks.
    pub fn data_ahead(&self) -> u64 {
        match self.state {
            State::Length(left) | State::Chunked(Chunked::Data { left }) => left,
            State::Close => u64::MAX,
            State::Chunked(_) | State::Done => 0,
        }
    }

    /// Frames the next bytes of the body.
    pub fn advance(&mut self, buf: &[u8]) -> Result<Progress, BodyError> {
        match &mut self.state {
            State::Done => Ok(Progress {
                consumed: 0,
                done: true,
            }),
            State::Close => Ok(Progress {
                consumed: buf.len(),
                done: false,
            }),
            State::Length(left) => {
                let n = (*left).min(buf.len() as u64);
                *left -= n;
                let done = *left == 0;
                if done {
                    self.state = State::Done;
                }
                Ok(Progress {
                    consumed: n as usize,
                    done,
                })
            }
            State::Chunked(c) => {
                let mut chunked = *c;
                let (consumed, done) = advance_chunked(&mut chunked, buf, self.max_fields)?;
                self.state = if done {
                    State::Done
                } else {
                    State::Chunked(chunked)
                };
                Ok(Progress { consumed, done })
            }
        }
    }
}

fn hex(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some(u64::from(b - b'0')),
        b'a'..=b'f' => Some(u64::from(b - b'a' + 10)),
        b'A'..=b'F' => Some(u64::from(b - b'A' + 10)),
        _ => None,
    }
}

/// qdtext of RFC 9110 §5.6.4: HTAB, SP, VCHAR but `"` and `\\`, and obs-text.
fn is_qdtext(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff)
}

/// A field value byte (RFC 9110 §5.5): VCHAR, SP, HTAB, obs-text.
fn is_value_byte(b: u8) -> bool {
    matches!(b, b'\t' | b' '..=b'~' | 0x80..=0xff)
}

/// Walks the chunk structure; returns bytes consumed and whether the body ended.
///
/// One byte at a time through the size line, the end of each chunk and the trailers (each
/// state's byte is one of the small steps below, which return the next state), and the
/// chunk data in one stride. The steps are inlined: this runs on every chunked body the
/// relay passes.
fn advance_chunked(
    st: &mut Chunked,
    buf: &[u8],
    max_fields: u32,
) -> Result<(usize, bool), BodyError> {
    let mut i = 0;
    while i < buf.len() {
        let b = buf[i];
        *st = match *st {
            Chunked::Size { size, digits } => size_byte(size, digits, b)?,
            Chunked::Ext { size, line, at } => ext_byte(size, line, at, b)?,
            Chunked::SizeLf { size } => size_lf(size, b)?,
            Chunked::Data { left } => {
                // The data itself is not looked at: skip as much of it as is here.
                let n = left.min((buf.len() - i) as u64);
                i += n as usize;
                *st = if n == left {
                    Chunked::DataCr
                } else {
                    Chunked::Data { left: left - n }
                };
                continue;
            }
            Chunked::DataCr => data_end(b, b'\r', Chunked::DataLf)?,
            Chunked::DataLf => data_end(b, b'\n', Chunked::Size { size: 0, digits: 0 })?,
            Chunked::Trailer { at, seen, fields } => trailer_byte(at, seen, fields, max_fields, b)?,
            Chunked::EndLf => {
                if b != b'\n' {
                    return Err(BodyError::BadTrailer);
                }
                return Ok((i + 1, true));
            }
        };
        i += 1;
    }
    Ok((i, false))
}

/// A byte of the chunk size, or the `;` or CR after it.
#[inline(always)]
fn size_byte(size: u64, digits: u32, b: u8) -> Result<Chunked, BodyError> {
    match hex(b) {
        Some(d) => {
            // More than 16 digits (even leading zeros) is refused: a reader that keeps
            // only the low 64 bits would see another size.
            if digits >= 16 {
                return Err(BodyError::ChunkSizeOverflow);
            }
            // A size of 2^63 or more is refused as well: many readers keep the size
            // signed and see a negative one.
            let size = size << 4 | d;
            if size > MAX_SIZE {
                return Err(BodyError::ChunkSizeOverflow);
            }
            Ok(Chunked::Size {
                size,
                digits: digits + 1,
            })
        }
        None if digits == 0 => Err(BodyError::BadChunkSize),
        None => match b {
            b';' => Ok(Chunked::Ext {
                size,
                line: digits + 1,
                at: Ext::NameStart,
            }),
            b'\r' => Ok(Chunked::SizeLf { size }),
            // A bare LF ends no line here (RFC 9112 §7.1 wants CRLF).
            b'\n' => Err(BodyError::BadChunkLine),
            _ => Err(BodyError::BadChunkSize),
        },
    }
}

/// A byte of the chunk extensions, up to the CR that ends the size line.
#[inline(always)]
fn ext_byte(size: u64, line: u32, at: Ext, b: u8) -> Result<Chunked, BodyError> {
    if line >= MAX_CHUNK_LINE {
        return Err(BodyError::BadChunkLine);
    }
    let next = match (at, b) {
        (Ext::NameStart | Ext::Name, t) if is_tchar(t) => Ext::Name,
        (Ext::Name | Ext::Token | Ext::AfterQuoted, b';') => Ext::NameStart,
        (Ext::Name | Ext::Token | Ext::AfterQuoted, b'\r') => return Ok(Chunked::SizeLf { size }),
        (Ext::Name, b'=') => Ext::ValueStart,
        (Ext::ValueStart | Ext::Token, t) if is_tchar(t) => Ext::Token,
        (Ext::ValueStart, b'"') => Ext::Quoted,
        (Ext::Quoted, b'"') => Ext::AfterQuoted,
        (Ext::Quoted, b'\\') => Ext::Escape,
        (Ext::Quoted, q) if is_qdtext(q) => Ext::Quoted,
        (Ext::Escape, q) if is_value_byte(q) => Ext::Quoted,
        _ => return Err(BodyError::BadChunkLine),
    };
    Ok(Chunked::Ext {
        size,
        line: line + 1,
        at: next,
    })
}

/// The LF of the size line: the chunk's data follows, or the trailers after the last.
#[inline(always)]
fn size_lf(size: u64, b: u8) -> Result<Chunked, BodyError> {
    if b != b'\n' {
        return Err(BodyError::BadChunkLine);
    }
    Ok(if size == 0 {
        Chunked::Trailer {
            at: Field::LineStart,
            seen: 0,
            fields: 0,
        }
    } else {
        Chunked::Data { left: size }
    })
}

/// The CR or the LF that must follow a chunk's data.
#[inline(always)]
fn data_end(b: u8, want: u8, next: Chunked) -> Result<Chunked, BodyError> {
    if b != want {
        return Err(BodyError::BadChunkEnd);
    }
    Ok(next)
}

/// A byte of the trailer section, which ends at an empty line.
#[inline(always)]
fn trailer_byte(
    at: Field,
    seen: u32,
    fields: u32,
    max_fields: u32,
    b: u8,
) -> Result<Chunked, BodyError> {
    if seen >= MAX_TRAILERS {
        return Err(BodyError::BadTrailer);
    }
    // Trailer lines must be field lines: a recipient that does not support trailers may
    // read them as the start of the next request, so nothing that could look like a
    // request line (or anything else) passes.
    let next = match (at, b) {
        (Field::LineStart, b'\r') => return Ok(Chunked::EndLf),
        (Field::LineStart | Field::Name, t) if is_tchar(t) => Field::Name,
        (Field::Name, b':') => Field::Value,
        (Field::Value, b'\r') => Field::Cr,
        (Field::Value, v) if is_value_byte(v) => Field::Value,
        (Field::Cr, b'\n') if fields < max_fields => Field::LineStart,
        _ => return Err(BodyError::BadTrailer),
    };
    Ok(Chunked::Trailer {
        at: next,
        seen: seen + 1,
        fields: fields + u32::from(next == Field::LineStart),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `piece` bytes, returning the body length found.
    fn frame(kind: BodyKind, input: &[u8], piece: usize) -> Result<Option<usize>, BodyError> {
        let mut f = BodyFramer::new(kind);
        let mut at = 0;
        while at < input.len() {
            let end = (at + piece).min(input.len());
            let p = f.advance(&input[at..end])?;
            at += p.consumed;
            if p.done {
                return Ok(Some(at));
            }
            if p.consumed < end - (at - p.consumed) {
                unreachable!("a framer that is not done consumes everything it is given");
            }
        }
        Ok(None)
    }

    #[test]
    fn chunked_with_extensions_and_trailers_any_split() {
        let body = b"4;name=\"v\"\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for piece in 1..body.len() {
            assert_eq!(
                frame(BodyKind::Chunked, body, piece),
                Ok(Some(body.len() - 4)),
                "piece {piece}"
            );
        }
    }

    #[test]
    fn chunked_errors() {
        assert_eq!(
            frame(BodyKind::Chunked, b"x\r\n", 1),
            Err(BodyError::BadChunkSize)
        );
        assert_eq!(
            frame(BodyKind::Chunked, b"-1\r\n", 1),
            Err(BodyError::BadChunkSize)
        );
        assert_eq!(
            frame(BodyKind::Chunked, b"11111111111111111\r\n", 1),
            Err(BodyError::ChunkSizeOverflow)
        );
        for huge in [&b"8000000000000005\r\n"[..], b"ffffffffffffffff\r\n"] {
            assert_eq!(
                frame(BodyKind::Chunked, huge, 1),
                Err(BodyError::ChunkSizeOverflow)
            );
        }
        assert!(frame(BodyKind::Chunked, b"7fffffffffffffff\r\n", 1).is_ok());
        assert_eq!(
            frame(BodyKind::Chunked, b"1\r\nab\r\n", 1),
            Err(BodyError::BadChunkEnd)
        );
        assert_eq!(
            frame(BodyKind::Chunked, b"1\nab", 1),
            Err(BodyError::BadChunkLine)
        );
        assert_eq!(
            frame(BodyKind::Chunked, b"0\r\nA: b\n\r\n", 1),
            Err(BodyError::BadTrailer)
        );
    }

    #[test]
    fn nothing_but_semicolon_or_cr_follows_a_chunk_size() {
        for bad in [
            &b"0x10\r\n"[..],
            b"5 \r\n",
            b"5 ;a\r\n",
            b"5\t;a\r\n",
            b"5;\r\n",
            b"5;a=\r\n",
            b"5;a =b\r\n",
            b"5;a=\"b\r\n",
            b"5;a=\"\n\"\r\n",
            b"5;a\0\r\n",
            b"+5\r\n",
            b"0000000000000000A\r\n",
        ] {
            assert!(
                frame(BodyKind::Chunked, bad, 1).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let ok = b"5;a;b=c;d=\"e \\\" f\"\r\nhello\r\n0\r\n\r\n";
        assert_eq!(frame(BodyKind::Chunked, ok, 1), Ok(Some(ok.len())));
    }

    #[test]
    fn trailers_are_field_lines() {
        for bad in [
            &b"0\r\nGET / HTTP/1.1\r\n\r\n"[..],
            b"0\r\n: v\r\n\r\n",
            b"0\r\nA\r\n\r\n",
            b"0\r\nA: b\rc\r\n\r\n",
            b"0\r\n A: b\r\n\r\n",
        ] {
            assert_eq!(
                frame(BodyKind::Chunked, bad, 1),
                Err(BodyError::BadTrailer),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let ok = b"0\r\nA: b\r\nC:\r\n\r\n";
        assert_eq!(frame(BodyKind::Chunked, ok, 3), Ok(Some(ok.len())));
    }

    /// The trailer section holds at most as many field lines as the limit says, whole or
    /// in pieces.
    #[test]
    fn trailer_fields_are_counted_against_the_limit() {
        let body = b"0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        for piece in 1..body.len() {
            let mut f = BodyFramer::new(BodyKind::Chunked).max_trailer_fields(3);
            let mut at = 0;
            let mut done = false;
            while at < body.len() && !done {
                let p = f.advance(&body[at..(at + piece).min(body.len())]).unwrap();
                at += p.consumed;
                done = p.done;
            }
            assert!(done, "three fields fit a limit of three (piece {piece})");
            let mut f = BodyFramer::new(BodyKind::Chunked).max_trailer_fields(2);
            let refused = body
                .chunks(piece)
                .map(|c| f.advance(c))
                .find_map(Result::err);
            assert_eq!(refused, Some(BodyError::BadTrailer), "piece {piece}");
        }
    }

    #[test]
    fn lengths() {
        assert_eq!(frame(BodyKind::Length(3), b"abcdef", 2), Ok(Some(3)));
        assert_eq!(frame(BodyKind::Length(9), b"abc", 2), Ok(None));
        assert!(BodyFramer::new(BodyKind::None).is_done());
        let mut close = BodyFramer::new(BodyKind::Close);
        assert_eq!(
            close.advance(b"abc"),
            Ok(Progress {
                consumed: 3,
                done: false
            })
        );
        assert!(close.is_close_delimited());
    }
}

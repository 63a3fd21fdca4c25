//! Body framing: where a message body ends, found without copying it.
//!
//! The relay passes body bytes through untouched; the framer only counts them (a length)
//! or walks the chunk structure (chunked), so that the relay knows which bytes of its
//! buffer still belong to this message and which start the next one.

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
    /// After the size: extensions up to CR.
    Ext {
        size: u64,
        line: u32,
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
    /// In the trailer section; `line_start` when the next byte begins a line.
    Trailer {
        line_start: bool,
        cr: bool,
        seen: u32,
    },
    /// Expecting the LF of the final empty line.
    EndLf,
}

/// Resumable framer of one message body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyFramer {
    state: State,
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
        Self { state }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The body ends when the connection does.
    pub fn is_close_delimited(&self) -> bool {
        self.state == State::Close
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
                let (consumed, done) = advance_chunked(&mut chunked, buf)?;
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

/// Walks the chunk structure; returns bytes consumed and whether the body ended.
fn advance_chunked(st: &mut Chunked, buf: &[u8]) -> Result<(usize, bool), BodyError> {
    let mut i = 0;
    while i < buf.len() {
        let b = buf[i];
        match *st {
            Chunked::Size { size, digits } => match hex(b) {
                Some(d) => {
                    if digits >= 16 || size > (u64::MAX >> 4) {
                        return Err(BodyError::ChunkSizeOverflow);
                    }
                    *st = Chunked::Size {
                        size: size << 4 | d,
                        digits: digits + 1,
                    };
                    i += 1;
                }
                None if digits == 0 => return Err(BodyError::BadChunkSize),
                None => *st = Chunked::Ext { size, line: digits },
            },
            Chunked::Ext { size, line } => {
                match b {
                    b'\r' => *st = Chunked::SizeLf { size },
                    // RFC 9112 §7.1.1: extensions are tokens, quoted strings, BWS.
                    b'\t' | b' '..=b'~' | 0x80..=0xff if line < MAX_CHUNK_LINE => {
                        *st = Chunked::Ext {
                            size,
                            line: line + 1,
                        }
                    }
                    _ => return Err(BodyError::BadChunkLine),
                }
                i += 1;
            }
            Chunked::SizeLf { size } => {
                if b != b'\n' {
                    return Err(BodyError::BadChunkLine);
                }
                i += 1;
                *st = if size == 0 {
                    Chunked::Trailer {
                        line_start: true,
                        cr: false,
                        seen: 0,
                    }
                } else {
                    Chunked::Data { left: size }
                };
            }
            Chunked::Data { left } => {
                let n = left.min((buf.len() - i) as u64);
                i += n as usize;
                *st = if n == left {
                    Chunked::DataCr
                } else {
                    Chunked::Data { left: left - n }
                };
            }
            Chunked::DataCr | Chunked::DataLf => {
                let want = if *st == Chunked::DataCr { b'\r' } else { b'\n' };
                if b != want {
                    return Err(BodyError::BadChunkEnd);
                }
                i += 1;
                *st = if want == b'\r' {
                    Chunked::DataLf
                } else {
                    Chunked::Size { size: 0, digits: 0 }
                };
            }
            Chunked::Trailer {
                line_start,
                cr,
                seen,
            } => {
                if seen >= MAX_TRAILERS {
                    return Err(BodyError::BadTrailer);
                }
                i += 1;
                *st = match b {
                    b'\r' if line_start => Chunked::EndLf,
                    b'\r' => Chunked::Trailer {
                        line_start: false,
                        cr: true,
                        seen: seen + 1,
                    },
                    b'\n' if cr => Chunked::Trailer {
                        line_start: true,
                        cr: false,
                        seen: seen + 1,
                    },
                    b'\n' | 0 => return Err(BodyError::BadTrailer),
                    _ if cr => return Err(BodyError::BadTrailer),
                    _ => Chunked::Trailer {
                        line_start: false,
                        cr: false,
                        seen: seen + 1,
                    },
                };
            }
            Chunked::EndLf => {
                if b != b'\n' {
                    return Err(BodyError::BadTrailer);
                }
                return Ok((i + 1, true));
            }
        }
    }
    Ok((i, false))
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

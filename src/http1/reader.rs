//! Reading whole responses, for the proxy's own clients (demo, bench, probe): where a
//! response ends in the bytes a client has read, without any I/O.
//!
//! The relay frames responses with limits of its own (`relay::http::response`); a client only
//! wants to know when the answer to its request is complete and where the next one starts.
//! The shape is that of a frame reader over a connection buffer: the caller reads into its
//! buffer, offers the unread bytes to [`ResponseReader::advance`], drops the bytes it
//! consumed, and reads more until the response is complete. Inside, the head is found
//! (`check`: [`HeadScanner`]), parsed ([`response::parse`], which knows HEAD, 204 and 304
//! have no body) and consumed, interim 1xx responses are skipped, and the body is walked by
//! [`BodyFramer`] as it arrives, so that a body larger than the buffer streams through it.
//! Nothing is allocated and nothing is copied.

use super::response::{self, ResponseError, ResponseHead};
use super::{BodyError, BodyFramer, HeadScanner, Method};

/// What one call to [`ResponseReader::advance`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// The response goes on: drop the `consumed` bytes and offer the rest with more.
    Partial { consumed: usize },
    /// The response ended after `consumed` bytes; bytes after them belong to the next one.
    Complete { consumed: usize, head: ResponseHead },
}

impl Advance {
    /// Bytes of the offered buffer that are read and may be dropped.
    pub fn consumed(&self) -> usize {
        match *self {
            Advance::Partial { consumed } | Advance::Complete { consumed, .. } => consumed,
        }
    }
}

/// The part of a response the peer closed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Head,
    Body,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::Head => "head",
            Part::Body => "body",
        })
    }
}

/// Why no response could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Head(ResponseError),
    #[error("{0}")]
    Body(BodyError),
    #[error("no end of the response head in {0} bytes")]
    HeadTooLarge(usize),
    #[error("the server closed in the middle of a response {0}")]
    Truncated(Part),
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Looking for the end of a head (the final one, or an interim 1xx before it).
    Head(HeadScanner),
    /// Walking the body of the final response.
    Body {
        head: ResponseHead,
        framer: BodyFramer,
    },
}

/// Reads one response after another on a connection, to requests of one method.
#[derive(Debug, Clone, Copy)]
pub struct ResponseReader {
    method: Method,
    max_head: usize,
    state: State,
}

impl ResponseReader {
    /// A reader of the responses to requests with `method` (HEAD's have no body), with
    /// no limit on a head's size.
    pub const fn new(method: Method) -> Self {
        Self {
            method,
            max_head: usize::MAX,
            state: State::Head(HeadScanner::new()),
        }
    }

    /// Refuses a head once more than `n` bytes arrived without its end.
    pub const fn max_head(mut self, n: usize) -> Self {
        self.max_head = n;
        self
    }

    /// The final head, once it is parsed and while its body is read: a caller that
    /// cannot use the response (one that closes the connection, say) can stop early.
    pub fn head(&self) -> Option<&ResponseHead> {
        match &self.state {
            State::Head(_) => None,
            State::Body { head, .. } => Some(head),
        }
    }

    /// Reads as far as `buf` goes. `buf` holds the unread bytes: what earlier calls did
    /// not consume, followed by whatever was read since. After `Complete` the reader
    /// starts on the next response of the connection.
    pub fn advance(&mut self, buf: &[u8]) -> Result<Advance, ReadError> {
        let mut at = 0;
        loop {
            match &mut self.state {
                State::Head(scanner) => {
                    let rest = &buf[at..];
                    let Some(len) = scanner.find_end(rest) else {
                        if rest.len() > self.max_head {
                            return Err(ReadError::HeadTooLarge(self.max_head));
                        }
                        return Ok(Advance::Partial { consumed: at });
                    };
                    let head =
                        response::parse(&rest[..len], self.method).map_err(ReadError::Head)?;
                    at += len;
                    // A 1xx other than 101 is followed by the real response.
                    self.state = if head.is_interim() {
                        State::Head(HeadScanner::new())
                    } else {
                        State::Body {
                            head,
                            framer: BodyFramer::new(head.body),
                        }
                    };
                }
                State::Body { head, framer } => {
                    let progress = framer.advance(&buf[at..]).map_err(ReadError::Body)?;
                    at += progress.consumed;
                    if !progress.done {
                        return Ok(Advance::Partial { consumed: at });
                    }
                    let head = *head;
                    self.state = State::Head(HeadScanner::new());
                    return Ok(Advance::Complete { consumed: at, head });
                }
            }
        }
    }

    /// The peer closed the connection: the end of a close-delimited body completes the
    /// response; anywhere else it is cut short.
    pub fn closed(&self) -> Result<ResponseHead, ReadError> {
        match &self.state {
            State::Head(_) => Err(ReadError::Truncated(Part::Head)),
            State::Body { head, framer } if framer.is_close_delimited() => Ok(*head),
            State::Body { .. } => Err(ReadError::Truncated(Part::Body)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::BodyKind;

    /// Feeds `input` to a reader `piece` bytes at a time, as a client's reads would bring
    /// it, dropping what each call consumed; then the close, if `closes`. Returns each
    /// complete response's status and length, and what was left unread.
    fn read_all(
        mut reader: ResponseReader,
        input: &[u8],
        piece: usize,
        closes: bool,
    ) -> Result<(Vec<(u16, usize)>, usize), ReadError> {
        let mut unread: Vec<u8> = Vec::new();
        let mut responses = Vec::new();
        let mut length = 0;
        for chunk in input.chunks(piece) {
            unread.extend_from_slice(chunk);
            loop {
                let step = reader.advance(&unread)?;
                unread.drain(..step.consumed());
                length += step.consumed();
                match step {
                    Advance::Complete { head, .. } => {
                        responses.push((head.status, length));
                        length = 0;
                    }
                    Advance::Partial { .. } => break,
                }
            }
        }
        if closes {
            let head = reader.closed()?;
            responses.push((head.status, length + unread.len()));
            unread.clear();
        }
        Ok((responses, unread.len()))
    }

    const GET: ResponseReader = ResponseReader::new(Method::Get);

    #[test]
    fn a_content_length_body_byte_by_byte_and_whole() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        for piece in [1, 7, r.len()] {
            assert_eq!(
                read_all(GET, r, piece, false),
                Ok((vec![(200, r.len())], 0))
            );
        }
        // One byte short: still partial, and a close now cuts the body short.
        let short = &r[..r.len() - 1];
        assert_eq!(read_all(GET, short, 1, false), Ok((vec![], 0)));
        assert_eq!(
            read_all(GET, short, 1, true),
            Err(ReadError::Truncated(Part::Body))
        );
    }

    #[test]
    fn interim_responses_are_skipped_for_the_final_one() {
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
                  HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        for piece in 1..=r.len() {
            assert_eq!(
                read_all(GET, r, piece, false),
                Ok((vec![(201, r.len())], 0)),
                "piece {piece}"
            );
        }
        // 101 is final: what follows it is another protocol.
        let up = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nBYTES";
        assert_eq!(
            read_all(GET, up, 1, false),
            Ok((vec![(101, up.len() - 5)], 5))
        );
    }

    #[test]
    fn a_chunked_body_with_trailers_in_every_split() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                  4;x=y\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n";
        for piece in 1..=r.len() {
            assert_eq!(
                read_all(GET, r, piece, false),
                Ok((vec![(200, r.len())], 0)),
                "piece {piece}"
            );
        }
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(
            read_all(GET, bad, 1, false),
            Err(ReadError::Body(BodyError::BadChunkSize))
        );
    }

    #[test]
    fn pipelined_responses_in_one_buffer() {
        let first = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na".as_slice();
        let second = b"HTTP/1.1 204 No Content\r\n\r\n".as_slice();
        let third = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".as_slice();
        let all = [first, second, third, b"HTTP/1.1 2"].concat();
        // In one read, each call returns one response and leaves the rest unread.
        let mut reader = GET;
        let mut unread = &all[..];
        for part in [first, second, third] {
            match reader.advance(unread) {
                Ok(Advance::Complete { consumed, .. }) => {
                    assert_eq!(consumed, part.len());
                    unread = &unread[consumed..];
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(reader.advance(unread), Ok(Advance::Partial { consumed: 0 }));
        let lengths = vec![(200, first.len()), (204, second.len()), (200, third.len())];
        for piece in [1, 5, all.len()] {
            assert_eq!(read_all(GET, &all, piece, false), Ok((lengths.clone(), 10)));
        }
    }

    #[test]
    fn head_204_and_304_have_no_body_whatever_they_announce() {
        let announced = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n";
        let head = ResponseReader::new(Method::Head);
        assert_eq!(
            read_all(head, announced, 1, false),
            Ok((vec![(200, announced.len())], 0))
        );
        let not_modified = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\nNEXT";
        assert_eq!(
            read_all(GET, not_modified, 3, false),
            Ok((vec![(304, not_modified.len() - 4)], 4))
        );
        let no_content = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(
            read_all(GET, no_content, 1, false),
            Ok((vec![(204, no_content.len())], 0))
        );
    }

    #[test]
    fn a_close_delimited_body_ends_with_the_connection() {
        let r = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert_eq!(read_all(GET, r, 2, false), Ok((vec![], 0)));
        assert_eq!(read_all(GET, r, 2, true), Ok((vec![(200, r.len())], 0)));
        let mut reader = GET;
        let _ = reader.advance(b"HTTP/1.0 200 OK\r\n\r\n");
        let head = reader.head().copied();
        assert_eq!(
            head.map(|h| (h.body, h.keep_alive)),
            Some((BodyKind::Close, false))
        );
        assert_eq!(reader.closed().map(|h| h.keep_alive), Ok(false));
    }

    #[test]
    fn a_close_in_the_head_a_bad_head_and_a_head_too_large() {
        assert_eq!(
            read_all(GET, b"HTTP/1.1 200 OK\r\n", 4, true),
            Err(ReadError::Truncated(Part::Head))
        );
        assert_eq!(
            ReadError::Truncated(Part::Head).to_string(),
            "the server closed in the middle of a response head"
        );
        assert!(matches!(
            read_all(GET, b"SSH-2.0-OpenSSH\r\n\r\n", 1, false),
            Err(ReadError::Head(_))
        ));
        let long = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'a'; 64]].concat();
        let limited = GET.max_head(32);
        assert_eq!(
            read_all(limited, &long, 8, false),
            Err(ReadError::HeadTooLarge(32))
        );
        assert_eq!(
            ReadError::HeadTooLarge(32).to_string(),
            "no end of the response head in 32 bytes"
        );
        let fits = [long.as_slice(), b"\r\n\r\n"].concat();
        assert!(read_all(GET, &fits, 8, false).is_ok());
    }
}

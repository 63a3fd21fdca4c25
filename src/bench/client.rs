//! One keep-alive client connection of the load generator: writes a prepared request,
//! reads one whole response into a fixed buffer. Nothing is allocated per request: the
//! request bytes are built once, the buffer is reused, heads are parsed on the stack, and
//! the response timeout is one timer per connection (see [`Deadline`]).

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::http1::{Advance, Method, ResponseReader};

/// Read buffer per connection: any response head must fit (bodies stream through it).
const BUFFER: usize = 64 * 1024;
/// A response that takes longer than this is an error, and the connection is dropped.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Conn {
    io: Io,
    deadline: Deadline,
}

/// The socket and its read buffer.
struct Io {
    stream: TcpStream,
    buf: Box<[u8]>,
    /// Unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

/// A connection's one response timer, only ever moved earlier. A `timeout()` per request
/// put a new entry in the runtime's timer wheel and took it out again for every request,
/// which at tens of thousands of requests a second made the generator slower than wrk
/// (whose timer is per connection too). When the timer fires before the current
/// request's due time, the wait finds nothing late and arms it again.
struct Deadline {
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
}

impl Deadline {
    fn new() -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }

    /// Ready once `due` has passed.
    fn poll_passed(&mut self, cx: &mut Context<'_>, due: Instant) -> Poll<()> {
        loop {
            if self.armed.is_none_or(|armed| armed > due) {
                self.sleep.as_mut().reset(due);
                self.armed = Some(due);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.armed = None;
            if Instant::now() >= due {
                return Poll::Ready(());
            }
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl Conn {
    pub async fn connect(target: SocketAddr) -> io::Result<Conn> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        Ok(Conn {
            io: Io {
                stream,
                buf: vec![0u8; BUFFER].into_boxed_slice(),
                start: 0,
                end: 0,
            },
            deadline: Deadline::new(),
        })
    }

    /// Sends `request` and reads its response; the status on success. A response that
    /// does not keep the connection alive is an error for a keep-alive benchmark.
    pub async fn exchange(&mut self, request: &[u8]) -> io::Result<u16> {
        let due = Instant::now() + RESPONSE_TIMEOUT;
        self.io.stream.write_all(request).await?;
        let mut read = std::pin::pin!(self.io.read_response());
        let deadline = &mut self.deadline;
        poll_fn(|cx| {
            if let Poll::Ready(r) = read.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            deadline.poll_passed(cx, due).map(|()| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no response in time",
                ))
            })
        })
        .await
    }
}

impl Io {
    /// Reads one response (interim 1xx skipped) and its status. A response after which
    /// the server closes the connection is refused as soon as its head says so.
    async fn read_response(&mut self) -> io::Result<u16> {
        let mut reader = ResponseReader::new(Method::Get);
        loop {
            let step = reader
                .advance(&self.buf[self.start..self.end])
                .map_err(invalid)?;
            self.start += step.consumed();
            let head = match step {
                Advance::Complete { head, .. } => Some(head),
                Advance::Partial { .. } => reader.head().copied(),
            };
            // A close-delimited body never keeps the connection alive either.
            if head.is_some_and(|head| !head.keep_alive) {
                return Err(invalid("the server closes the connection after a response"));
            }
            if let Advance::Complete { head, .. } = step {
                return Ok(head.status);
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes, moving unread ones to the front first when the buffer is full.
    async fn fill(&mut self) -> io::Result<()> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start == 0 {
                return Err(invalid("a response head larger than the read buffer"));
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed in the middle of a response",
            ));
        }
        self.end += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_deadline_fires_at_the_due_time_asked_for_not_at_an_earlier_one() {
        let mut d = Deadline::new();
        let start = Instant::now();
        // An earlier wait armed the timer sooner; this one's due time is later.
        let early = start + Duration::from_millis(20);
        let due = start + Duration::from_millis(120);
        let _ = poll_fn(|cx| Poll::Ready(d.poll_passed(cx, early))).await;
        poll_fn(|cx| d.poll_passed(cx, due)).await;
        let waited = start.elapsed();
        // Relative to the due times asked for: never before the later one (load only
        // makes a wake late); the upper bound is a horizon that only a hang reaches.
        assert!(waited >= Duration::from_millis(120), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // Passed already: ready at once.
        assert!(poll_fn(|cx| Poll::Ready(d.poll_passed(cx, due)))
            .await
            .is_ready());
    }
}

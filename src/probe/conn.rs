//! One keep-alive connection to the target, and the timing of one exchange on it.
//!
//! Blocking sockets on one thread, on purpose: the instant the first response byte is
//! available is then the instant `read` returns, with no event loop in between to add its
//! own scheduling delay to the measurement.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::clock;
use crate::http1::{Advance, Method, ReadError, ResponseReader};

/// How long one read may wait before the probe gives up on the target.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response head accepted.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// What one exchange measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timed {
    /// From the moment the request was handed to the socket (one write) to the moment the
    /// read that brought the response's first byte returned.
    pub ttfb_ns: u64,
    /// How long the write call took: the client's own cost of sending (copying the
    /// request into the kernel and, over loopback, delivering it), plus any time this
    /// thread was preempted before the call returned.
    pub write_ns: u64,
    pub status: u16,
    /// The server will keep the connection open for the next request.
    pub keep_alive: bool,
}

/// Why an exchange produced no measurement.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The server closed before answering: an idle timeout that raced the request, or a
    /// server that closes after each response. The probe reconnects and tries again.
    #[error("the server closed the connection before answering")]
    Closed,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the response is not HTTP/1.x: {0}")]
    BadResponse(String),
}

/// A connection to the target.
pub struct ProbeConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl ProbeConn {
    /// Connects with `TCP_NODELAY` (a request must leave in one segment burst, not wait
    /// for an ACK) and returns how long the handshake took: on a quiet network, one round
    /// trip, with no server code involved (the kernel completes it).
    pub fn connect(addr: SocketAddr) -> io::Result<(ProbeConn, u64)> {
        let start = clock::now();
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        let connect_ns = clock::nanos_between(start, clock::now());
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok((
            ProbeConn {
                stream,
                buf: Vec::with_capacity(16 * 1024),
            },
            connect_ns,
        ))
    }

    /// Sends `head` in one write and reads the whole response, timing its first byte.
    pub fn exchange(&mut self, head: &[u8]) -> Result<Timed, ExchangeError> {
        // Anything still buffered was never asked for; it must not pass for the answer.
        self.buf.clear();
        // The clock starts as the request is handed to the kernel, not when the write
        // returns: over loopback the kernel delivers the bytes to the server inside this
        // very call, and the scheduler may well run the server (on this core) before the
        // call returns to us. Started after the write, the clock would then miss part or
        // all of the server's work and read a time to first byte of a microsecond or two.
        // Started before, it includes the write's own cost, which grows with the request;
        // the caller takes that out again (`write_ns`, bounded by the typical write of the
        // same request, since only a preemption makes a write much slower).
        let start = clock::now();
        self.stream.write_all(head)?;
        let written = clock::now();
        let first = self.fill()?;
        let ttfb_ns = clock::nanos_between(start, clock::now());
        let write_ns = clock::nanos_between(start, written);
        if first == 0 {
            return Err(ExchangeError::Closed);
        }
        let (status, keep_alive) = self.read_rest()?;
        Ok(Timed {
            ttfb_ns,
            write_ns,
            status,
            keep_alive,
        })
    }

    /// Reads the rest of the response (interim 1xx responses skipped); returns its status
    /// and whether the connection stays open.
    fn read_rest(&mut self) -> Result<(u16, bool), ExchangeError> {
        let bad = |e: ReadError| ExchangeError::BadResponse(e.to_string());
        let mut reader = ResponseReader::new(Method::Get).max_head(MAX_RESPONSE_HEAD);
        loop {
            let step = reader.advance(&self.buf).map_err(bad)?;
            self.buf.drain(..step.consumed());
            if let Advance::Complete { head, .. } = step {
                return Ok((head.status, head.keep_alive));
            }
            if self.fill()? == 0 {
                // A close-delimited body ends here, and keeps nothing alive.
                let head = reader.closed().map_err(bad)?;
                return Ok((head.status, head.keep_alive));
            }
        }
    }

    /// One read into the buffer; 0 when the server closed.
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(0),
                Err(e) => return Err(e),
            }
        }
    }
}

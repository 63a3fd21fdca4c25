//! One keep-alive client connection of the load generator: writes a prepared request,
//! reads one whole response into a fixed buffer. Nothing is allocated per request: the
//! request bytes are built once, the buffer is reused, heads are parsed on the stack.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http1::{response, BodyFramer, HeadScanner, Method};

/// Read buffer per connection: any response head must fit (bodies stream through it).
const BUFFER: usize = 64 * 1024;
/// A response that takes longer than this is an error, and the connection is dropped.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
    /// Unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
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
            stream,
            buf: vec![0u8; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
        })
    }

    /// Sends `request` and reads its response; the status on success. A response that
    /// does not keep the connection alive is an error for a keep-alive benchmark.
    pub async fn exchange(&mut self, request: &[u8]) -> io::Result<u16> {
        self.stream.write_all(request).await?;
        tokio::time::timeout(RESPONSE_TIMEOUT, self.read_response())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response in time"))?
    }

    async fn read_response(&mut self) -> io::Result<u16> {
        let mut scanner = HeadScanner::new();
        let head_len = loop {
            if let Some(n) = scanner.find_end(&self.buf[self.start..self.end]) {
                break n;
            }
            self.fill().await?;
        };
        let head = response::parse(&self.buf[self.start..self.start + head_len], Method::Get)
            .map_err(invalid)?;
        self.start += head_len;
        if head.is_interim() {
            return Box::pin(self.read_response()).await;
        }
        let mut framer = BodyFramer::new(head.body);
        if framer.is_close_delimited() || !head.keep_alive {
            return Err(invalid("the server closes the connection after a response"));
        }
        while !framer.is_done() {
            if self.start == self.end {
                self.fill().await?;
            }
            let progress = framer
                .advance(&self.buf[self.start..self.end])
                .map_err(invalid)?;
            self.start += progress.consumed;
        }
        Ok(head.status)
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

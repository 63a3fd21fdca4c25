//! A deadline on a client that stops reading: an admin connection whose writes make no
//! progress for `limit` fails with `TimedOut`, and its answer (and the pool turn the
//! answer holds, see `body`) is let go. hyper times the wait for a request head, not
//! the writing of an answer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

pub(super) struct Stall<T> {
    io: T,
    limit: Duration,
    /// Armed at the first write that could not proceed, disarmed by any that did.
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl<T> Stall<T> {
    pub(super) fn new(io: T, limit: Duration) -> Self {
        Self {
            io,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }

    /// What a write's poll says, with the deadline applied.
    fn timed<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Ready(r) => {
                self.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                if !self.armed {
                    self.timer.as_mut().reset(Instant::now() + self.limit);
                    self.armed = true;
                }
                match self.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client read nothing of the answer for too long",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Stall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.timed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.timed(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_reader_that_stops_reading_fails_the_write_at_the_limit() {
        let (ours, theirs) = tokio::io::duplex(1024);
        let mut w = Stall::new(ours, Duration::from_millis(200));
        let started = std::time::Instant::now();
        // 1 KiB fits the pipe; the rest waits for a reader that never comes.
        let err = w.write_all(&[0u8; 64 * 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));
        drop(theirs);
    }

    #[tokio::test]
    async fn a_slow_but_steady_reader_is_never_cut() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut w = Stall::new(ours, Duration::from_millis(300));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let mut total = 0;
            while total < 16 * 1024 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                total += tokio::io::AsyncReadExt::read(&mut theirs, &mut buf)
                    .await
                    .unwrap();
            }
            total
        });
        // 16 KiB at 512 B per 20 ms: about 640 ms in all, over twice the limit.
        w.write_all(&[0u8; 16 * 1024]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 16 * 1024);
    }
}

//! Socket reads shared by both connection kinds (HTTP and RESP): how a relay takes bytes
//! off a socket and looks at one without consuming.

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Reads what the socket holds into `buf`. A read shorter than `buf` means the socket's
/// receive queue was emptied, so its read readiness is cleared at once: the next wait goes
/// to the poller instead of costing one more read that would return `WouldBlock` (tokio's
/// own `poll_read` does the same; `try_read` does not). Bytes that arrive later raise a
/// new readiness event, which a clear made before it cannot erase.
pub(super) fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let len = buf.len();
    let mut got = 0;
    let outcome = stream.try_io(Interest::READABLE, || {
        got = stream.try_read(buf)?;
        if got > 0 && got < len {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(got)
        }
    });
    match outcome {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}

/// Looks, without waiting, for bytes (or the end) already waiting on an idle upstream
/// connection: `Some(0)` when it closed, `Some(n)` with bytes waiting. A real `recv` with
/// `MSG_PEEK`, not the runtime's readiness flags: a pipelined request is forwarded
/// without a turn of the event loop in between, so bytes that arrived since the last
/// turn are not flagged yet.
pub(super) fn pending_bytes(stream: &TcpStream) -> Option<usize> {
    let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 64];
    match socket2::SockRef::from(stream).peek(&mut probe) {
        Ok(n) => Some(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(_) => Some(0),
    }
}

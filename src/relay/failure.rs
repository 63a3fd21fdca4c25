//! How an exchange, or a whole connection, ends badly: one type for both protocols.
//!
//! `R` is the protocol's own reply to the client: a proxy-made HTTP response
//! (`http1::Answer`) or a RESP error line. Each failure carries the `ErrorKind` it is
//! counted under, so the caller counts, logs and replies in one place.

use std::time::Duration;

use crate::recorder::ErrorKind;

/// How long the proxy's last write to a client it is closing may take: the reply a
/// failure sends (an HTTP answer, a RESP error line), and for HTTP the close after a
/// complete response. One bound for both protocols: in each it only keeps a client that
/// reads nothing from holding the connection open.
pub(super) const ANSWER_WRITE: Duration = Duration::from_secs(2);

/// How an exchange, or the connection, ended badly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure<R> {
    /// Reply to the client with a proxy-made answer, then close.
    Answer(R, ErrorKind),
    /// Close both sides without an answer (part of a response was already forwarded, or
    /// the client is gone).
    Abort(ErrorKind),
    /// A stall past the transfer deadline after part of the response was forwarded:
    /// closed like `Abort`, and the exchange recorded as far as it got.
    Cut {
        kind: ErrorKind,
        status: u16,
        request_bytes: u64,
        response_bytes: u64,
    },
}

impl<R> Failure<R> {
    /// The `ErrorKind` the failure is counted under.
    pub(super) fn kind(&self) -> ErrorKind {
        match self {
            Failure::Answer(_, kind) | Failure::Abort(kind) | Failure::Cut { kind, .. } => *kind,
        }
    }
}

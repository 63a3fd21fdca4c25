//! The request being assembled: the next head on a client connection.
//!
//! A head may arrive in many reads, and a pipelined head may arrive while the previous
//! exchange is still in flight. Its timing starts with its first byte either way, and
//! the scan resumes where the previous read left it.

use std::time::Duration;

use super::Failure;
use crate::clock::{self, At, Tick};
use crate::config::Timeouts;
use crate::http1::{request, Answer, RequestError, RequestHead, RequestScanner};
use crate::recorder::ErrorKind;

/// Why a head could not be accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    Invalid(RequestError),
    TooLarge,
}

impl HeadError {
    pub fn answer(self) -> Answer {
        match self {
            HeadError::Invalid(e) => e.answer(),
            HeadError::TooLarge => Answer::HeaderTooLarge,
        }
    }

    pub fn kind(self) -> ErrorKind {
        match self.answer() {
            Answer::HeaderTooLarge => ErrorKind::HeaderTooLarge,
            _ => ErrorKind::BadRequest,
        }
    }
}

#[derive(Debug, Default)]
pub struct NextRequest {
    /// When its first byte arrived (0: no byte yet).
    pub t_first: At,
    scanner: RequestScanner,
    parse_ns: u64,
    ready: Option<(RequestHead, Tick)>,
    failed: Option<HeadError>,
}

/// The deadline of a wait for the next head: from `since`, `after` long. Its expiry ends
/// the connection with `expiry`, or quietly when that is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HeadDeadline {
    pub since: Tick,
    pub after: Duration,
    pub expiry: Option<Failure>,
}

impl NextRequest {
    /// The deadline of the wait for this head. Between requests the idle timeout applies
    /// from `idle_since` and its expiry closes quietly; once a head has begun, the head
    /// timeout from its first byte, answered 408. A new connection (`first`) is not idle
    /// between requests: its first request is owed from the accept, within the head
    /// timeout (as nginx's client_header_timeout), so that connections that never send a
    /// byte do not stay for `idle`; when none began, nothing is answered, but it is
    /// counted, since it is the client that held the connection.
    #[inline]
    pub(super) fn deadline(&self, first: bool, idle_since: Tick, t: &Timeouts) -> HeadDeadline {
        let late = Failure::Answer(Answer::RequestTimeout, ErrorKind::ClientTimeout);
        let (since, after, expiry) = match (self.t_first.get(), first) {
            (None, true) => (
                idle_since,
                t.head,
                Some(Failure::Abort(ErrorKind::ClientTimeout)),
            ),
            (None, false) => (idle_since, t.idle, None),
            (Some(t_first), true) => (idle_since.min(t_first), t.head, Some(late)),
            (Some(t_first), false) => (t_first, t.head, Some(late)),
        };
        HeadDeadline {
            since,
            after,
            expiry,
        }
    }

    pub fn started(&self) -> bool {
        self.t_first.is_set()
    }

    pub fn is_ready(&self) -> bool {
        self.ready.is_some()
    }

    /// A head error found while scanning ahead; reported when its turn comes.
    pub fn failed(&self) -> Option<HeadError> {
        self.failed
    }

    /// Marks the request as begun at `t` (its first byte arrived, or the proxy started on
    /// bytes already buffered).
    pub fn begin(&mut self, t: Tick) {
        self.t_first.set_once(t);
    }

    /// [`begin`](Self::begin) now, reading the clock only if the request has not begun.
    pub fn begin_now(&mut self) {
        if !self.t_first.is_set() {
            self.t_first = At::now();
        }
    }

    /// Looks for the complete head at the start of `buf`, resuming the scan. Returns
    /// whether it is ready. Time spent here is the request's `parse` phase.
    pub fn advance(
        &mut self,
        buf: &[u8],
        max_head: usize,
        max_headers: usize,
    ) -> Result<bool, HeadError> {
        if self.ready.is_some() {
            return Ok(true);
        }
        if let Some(e) = self.failed {
            return Err(e);
        }
        if buf.is_empty() {
            return Ok(false);
        }
        let t0 = clock::now();
        let outcome = match self.scanner.find_end(buf) {
            Ok(Some(len)) if len > max_head => Err(HeadError::TooLarge),
            Ok(Some(len)) => request::parse(&buf[..len], max_headers)
                .map(Some)
                .map_err(HeadError::Invalid),
            Ok(None) if buf.len() >= max_head => Err(HeadError::TooLarge),
            Ok(None) => Ok(None),
            Err(e) => Err(HeadError::Invalid(e)),
        };
        let t1 = clock::now();
        self.parse_ns += clock::nanos_between(t0, t1);
        match outcome {
            Ok(Some(head)) => {
                self.ready = Some((head, t1));
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                self.failed = Some(e);
                Err(e)
            }
        }
    }

    /// Hands over the ready head with its `t_first`, `t_head` and parse time, and resets
    /// for the request after it.
    pub fn take(&mut self) -> Option<(RequestHead, At, At, u64)> {
        let (head, t_head) = self.ready.take()?;
        let out = (head, self.t_first, At::tick(t_head), self.parse_ns);
        *self = NextRequest::default();
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wait_for_a_head_has_its_deadline_and_its_ending() {
        let t = Timeouts::default();
        let late = Some(Failure::Answer(
            Answer::RequestTimeout,
            ErrorKind::ClientTimeout,
        ));
        let mut next = NextRequest::default();
        // A new connection that sent nothing: the head timeout from the accept, counted.
        let d = next.deadline(true, 100, &t);
        assert_eq!((d.since, d.after), (100, t.head));
        assert_eq!(d.expiry, Some(Failure::Abort(ErrorKind::ClientTimeout)));
        // Idle between requests: the idle timeout, closed quietly.
        let d = next.deadline(false, 100, &t);
        assert_eq!((d.since, d.after, d.expiry), (100, t.idle, None));
        // A head has begun: 408 past the head timeout, from its first byte (from the
        // accept for a connection's first request).
        next.begin(150);
        assert_eq!(next.deadline(false, 100, &t).since, 150);
        assert_eq!(next.deadline(true, 100, &t).since, 100);
        let d = next.deadline(false, 100, &t);
        assert_eq!((d.after, d.expiry), (t.head, late));
    }
}

//! The response being framed: where the upstream's answer to the current request ends.
//!
//! The twin of [`next`](super::next), the request side. A response head may arrive in many
//! reads and is scanned where the last read left it; interim (1xx) responses come before
//! the final one; the body is framed as the head says (length, chunked, until close). The
//! limits are the relay's: upstreams are trusted more than clients, but not without bound.

use super::{MAX_RESPONSE_HEAD, MAX_RESPONSE_HEADERS};
use crate::clock::{self, At, Tick};
use crate::http1::{
    response, BodyFramer, BodyKind, Method, RequestHead, ResponseHead, ResponseScanner, Version,
};
use crate::recorder::ErrorKind;
use crate::relay::exchange::Exchange;

/// Where the response to the current request has got to.
#[derive(Debug)]
pub(super) struct ResponseProgress {
    method: Method,
    /// The request asked to switch protocols: only then may a 101 answer it.
    upgrade_asked: bool,
    /// The request is HTTP/1.0: a chunked response is one its client cannot read.
    http10: bool,
    scanner: ResponseScanner,
    /// The read that brought the first byte of the head being scanned.
    head_first: At,
    /// The last read that brought bytes of the final response (not taken before it
    /// began): the start of the pause the next read ends (`upstream_recv_gap`).
    last_read: At,
    parse_ns: u64,
    head: Option<ResponseHead>,
    body: BodyFramer,
    /// Bytes of interim (1xx) responses at the start of the last framed batch.
    pub(super) interim_in_batch: usize,
    /// A `100 Continue` came.
    pub(super) continued: bool,
    pub(super) status: u16,
    pub(super) done: bool,
    pub(super) tunnel: bool,
}

impl ResponseProgress {
    pub(super) fn new(head: &RequestHead) -> Self {
        Self {
            method: head.method,
            upgrade_asked: head.upgrade,
            http10: head.version == Version::Http10,
            scanner: ResponseScanner::new(),
            head_first: At::UNSET,
            last_read: At::UNSET,
            parse_ns: 0,
            head: None,
            body: BodyFramer::new(BodyKind::None),
            interim_in_batch: 0,
            continued: false,
            status: 0,
            done: false,
            tunnel: false,
        }
    }

    #[inline]
    pub(super) fn head_done(&self) -> bool {
        self.head.is_some()
    }

    #[inline]
    pub(super) fn close_delimited(&self) -> bool {
        self.head.is_some() && self.body.is_close_delimited()
    }

    #[inline]
    pub(super) fn keep_alive(&self) -> bool {
        self.head.is_some_and(|h| h.keep_alive)
    }

    /// A HEAD was answered with a length (or chunked) but no body: bytes the upstream
    /// sends later would read as the next request's answer, so its connection carries
    /// no next request (docs/security.md).
    #[inline]
    pub(super) fn announces_unsent_body(&self) -> bool {
        self.head.is_some_and(|h| h.announces_unsent_body)
    }

    /// Where the final response starts within a batch framed after `before` bytes that
    /// were already framed: interim responses come first.
    #[inline]
    pub(super) fn final_offset(&self, before: usize) -> usize {
        before + self.interim_in_batch
    }

    /// Frames `fresh` bytes (just read at `t`); returns how many belong to this response
    /// (interim responses included).
    pub(super) fn frame(
        &mut self,
        fresh: &[u8],
        t: Tick,
        ex: &mut Exchange,
    ) -> Result<usize, ErrorKind> {
        let mut used = 0;
        self.interim_in_batch = 0;
        self.pause_ended(t, ex);
        while used < fresh.len() && !self.done {
            let rest = &fresh[used..];
            if self.head.is_none() {
                self.head_first.set_once(t);
                let t0 = clock::now();
                let Ok(end) = self.scanner.find_end(rest) else {
                    return Err(ErrorKind::BadResponse);
                };
                let parsed = end.map(|len| {
                    response::parse_within(&rest[..len], self.method, MAX_RESPONSE_HEADERS)
                });
                self.parse_ns += clock::nanos_between(t0, clock::now());
                let head = match parsed {
                    None if rest.len() >= MAX_RESPONSE_HEAD => return Err(ErrorKind::BadResponse),
                    None => return Ok(used),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "bad response head");
                        return Err(ErrorKind::BadResponse);
                    }
                    Some(Ok(h)) => h,
                };
                // RFC 9110 §15.2.2: a 101 only answers a request that asked to upgrade.
                // Any other would turn the connection into a blind tunnel in which no
                // later request is checked.
                if head.status == 101 && !self.upgrade_asked {
                    tracing::debug!("101 to a request that did not ask to upgrade");
                    return Err(ErrorKind::BadResponse);
                }
                // RFC 9112 §6.1: a server must not send chunked to an HTTP/1.0 request,
                // whose client does not know the coding and would take the chunk sizes for
                // its body. The proxy forwards bytes as they are, so it cannot de-chunk:
                // such a response is one the client cannot read, answered 502 as any other.
                if self.http10 && !head.is_interim() && head.body == BodyKind::Chunked {
                    tracing::debug!("chunked response to an HTTP/1.0 request");
                    return Err(ErrorKind::BadResponse);
                }
                used += head.len;
                self.scanner.reset();
                if head.is_interim() {
                    self.continued |= head.status == 100;
                    self.head_first = At::UNSET;
                    self.interim_in_batch = used;
                    continue;
                }
                ex.t_resp_first = self.head_first;
                ex.response_parse_ns = self.parse_ns;
                self.status = head.status;
                self.tunnel = head.tunnel;
                self.body = BodyFramer::new(head.body);
                self.head = Some(head);
                if self.body.is_done() {
                    self.done = true;
                    ex.t_resp_last = At::now();
                }
            } else {
                let p = self
                    .body
                    .advance(rest)
                    .map_err(|_| ErrorKind::BadResponse)?;
                used += p.consumed;
                if p.done {
                    self.done = true;
                    ex.t_resp_last = At::tick(t);
                }
            }
        }
        // The final response has begun once its head has (a read of interim responses
        // only is not part of it).
        self.last_read = if self.head.is_some() || self.head_first.is_set() {
            At::tick(t)
        } else {
            At::UNSET
        };
        Ok(used)
    }

    /// A read of the final response returned at `t`: the pause since the previous one is
    /// the exchange's longest so far or not. Two comparisons per read, no clock read: a
    /// response read in one go never gets here with a previous read.
    #[inline]
    fn pause_ended(&self, t: Tick, ex: &mut Exchange) {
        if let Some(before) = self.last_read.get() {
            ex.response_paused(before, t);
        }
    }
}

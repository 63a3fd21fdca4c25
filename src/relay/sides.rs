//! The two halves of one HTTP exchange in flight, and every decision the relay makes.
//!
//! The request side goes client → upstream, the response side upstream → client (hyper's
//! h1 connection keeps its `Reading` and `Writing` states the same way). [`Sides`] holds
//! both and answers the relay's questions from bytes and ticks alone: what to wait for,
//! which deadline applies and whom it blames, what a read or a write changes, and when
//! the exchange ends. No sockets here: `http_relay` does the I/O and asks; the unit tests
//! below feed events the way the sockets would.

use std::time::Duration;

use super::exchange::Exchange;
use super::failure;
use super::response::ResponseProgress;
use crate::clock::Tick;
use crate::config::Timeouts;
use crate::http1::{Answer, BodyError, BodyFramer, RequestHead, Version};
use crate::recorder::ErrorKind;

/// The HTTP relay's failures: the client gets a proxy-made response.
pub(super) type Failure = failure::Failure<Answer>;

/// What a completed relay leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Relayed {
    pub status: u16,
    /// Both sides may carry on with another exchange.
    pub keep_alive: bool,
    /// The upstream connection may carry the next request.
    pub upstream_reusable: bool,
    /// Bytes the upstream sent past the end of the response.
    pub excess: usize,
    /// The exchange ended with the request body incomplete: the client's connection
    /// closes, after a linger so that the response is not lost to a reset.
    pub early_end: bool,
    /// The connection became a tunnel after this response.
    pub tunnel: bool,
    pub request_bytes: u64,
    pub response_bytes: u64,
}

/// What an event leaves the exchange at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Continue,
    Done(Relayed),
}

/// The request, client → upstream.
#[derive(Debug)]
pub(super) struct RequestSide {
    body: BodyFramer,
    /// The body has been read whole (framed to its end).
    read_done: bool,
    /// Bytes at the front of the client buffer owed to the upstream.
    pending: usize,
    /// Bytes the upstream accepted.
    sent: u64,
    /// A final response came before the request was all sent: the rest is never sent
    /// (docs/security.md), and the upstream connection is not reused.
    abandoned: bool,
    /// The upstream stopped taking the request after its response was complete.
    cut_short: bool,
    expect_continue: bool,
}

impl RequestSide {
    /// A request whose head and first `pending` bytes (framed by `body`) are buffered.
    fn new(head: &RequestHead, body: BodyFramer, pending: usize) -> Self {
        Self {
            read_done: body.is_done(),
            body,
            pending,
            sent: 0,
            abandoned: false,
            cut_short: false,
            expect_continue: head.expect_continue,
        }
    }

    /// Every byte of the request was read and handed on (or dropped).
    pub(super) fn is_sent(&self) -> bool {
        self.read_done && self.pending == 0
    }

    /// Bytes at the front of the client buffer to write upstream.
    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    /// More body is to be read from the client now. After an early answer to
    /// `Expect: 100-continue`, what the client sends next may be its body or its next
    /// request (RFC 9110 §10.1.1 allows both): it is not read, and the connection closes
    /// once the answer is out.
    pub(super) fn wants_body(&self) -> bool {
        !self.read_done && self.pending == 0 && !(self.abandoned && self.expect_continue)
    }

    /// Frames body bytes just read (`unframed`: the whole client buffer, since nothing
    /// was pending). Returns how many to drop from the buffer: the body of an abandoned
    /// request is framed, so that the client can carry on, and never sent.
    pub(super) fn body_read(&mut self, unframed: &[u8]) -> Result<usize, BodyError> {
        let p = self.body.advance(unframed)?;
        self.read_done = p.done;
        if self.abandoned {
            Ok(p.consumed)
        } else {
            self.pending = p.consumed;
            Ok(0)
        }
    }

    /// The final response began before the request was all sent: returns the pending
    /// bytes, to be dropped from the client buffer.
    fn abandon(&mut self) -> usize {
        self.abandoned = true;
        std::mem::take(&mut self.pending)
    }
}

/// The response, upstream → client.
#[derive(Debug)]
pub(super) struct ResponseSide {
    framing: ResponseProgress,
    /// Bytes at the front of the upstream buffer owed to the client.
    pending: usize,
    /// Bytes the client accepted.
    sent: u64,
    /// Where the final response starts in the bytes sent, once its head is in.
    final_from: Option<u64>,
    /// The tick the response deadline runs from: the request is all sent, the head not
    /// in (0: not owed).
    owed_since: Tick,
}

impl ResponseSide {
    /// Bytes at the front of the upstream buffer to write to the client.
    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    /// Bytes of the response the client has seen or is about to.
    fn forwarded(&self) -> u64 {
        self.sent + self.pending as u64
    }

    /// The response was read whole and written out.
    fn is_flushed(&self) -> bool {
        self.framing.done && self.pending == 0
    }

    /// The response head is in: its limit switches from the head's to the buffer's.
    pub(super) fn head_done(&self) -> bool {
        self.framing.head_done()
    }
}

/// What to wait for next, in order of preference: move bytes already here before
/// reading more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Interest {
    pub write_up: bool,
    pub write_client: bool,
    pub read_client: bool,
    pub read_up: bool,
}

/// The deadline of the current wait: from `since`, `after` long; its expiry is answered
/// `answer` and counted as `kind` (or, once the client has part of the response, cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Deadline {
    pub since: Tick,
    pub after: Duration,
    pub answer: Answer,
    pub kind: ErrorKind,
}

/// What one read from the upstream changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct ResponseRead {
    /// Interim responses to drop from the front of the upstream buffer (an HTTP/1.0
    /// client does not know them).
    pub drop_interim: usize,
    /// The final response head arrived with this read.
    pub began: bool,
    /// Request bytes to drop from the front of the client buffer: the request was
    /// abandoned by this read's early final response.
    pub drop_request: usize,
}

/// Both sides of the exchange in flight.
#[derive(Debug)]
pub(super) struct Sides {
    pub req: RequestSide,
    pub resp: ResponseSide,
    client_keep_alive: bool,
    http10: bool,
    /// The last time a byte moved either way: the transfer deadline runs from it.
    moved_at: Tick,
}

impl Sides {
    /// An exchange for `head`, with `pending` request bytes buffered (framed by `body`),
    /// once the upstream is ready at `t_up_ready`.
    pub(super) fn new(
        head: &RequestHead,
        body: BodyFramer,
        pending: usize,
        t_up_ready: Tick,
    ) -> Self {
        Self {
            req: RequestSide::new(head, body, pending),
            resp: ResponseSide {
                framing: ResponseProgress::new(head),
                pending: 0,
                sent: 0,
                final_from: None,
                owed_since: 0,
            },
            client_keep_alive: head.keep_alive,
            http10: head.version == Version::Http10,
            moved_at: t_up_ready,
        }
    }

    /// What the relay waits for. `ahead_allowed`: the next request's head may be read
    /// ahead (it is not complete, not failed, and the buffer holds less than a head).
    pub(super) fn interest(&self, ahead_allowed: bool) -> Interest {
        let read_ahead = self.req.is_sent() && ahead_allowed;
        Interest {
            write_up: self.req.pending > 0,
            write_client: self.resp.pending > 0,
            read_client: self.req.wants_body() || read_ahead,
            read_up: self.resp.pending == 0 && !self.resp.framing.done,
        }
    }

    /// Every wait has a deadline: the response timeout while the upstream owes the
    /// response head, else the transfer timeout since the last byte moved, blamed on the
    /// side that is holding things up.
    pub(super) fn deadline(&self, timeouts: &Timeouts) -> Deadline {
        if self.resp.owed_since != 0 && !self.resp.head_done() {
            return Deadline {
                since: self.resp.owed_since,
                after: timeouts.response,
                answer: Answer::GatewayTimeout,
                kind: ErrorKind::UpstreamTimeout,
            };
        }
        let client_holds = self.resp.pending > 0 || self.req.wants_body();
        let (answer, kind) = if client_holds {
            (Answer::RequestTimeout, ErrorKind::ClientTimeout)
        } else {
            (Answer::GatewayTimeout, ErrorKind::UpstreamTimeout)
        };
        Deadline {
            since: self.moved_at,
            after: timeouts.transfer,
            answer,
            kind,
        }
    }

    /// The deadline expired: an answer while the client has seen nothing of the
    /// response; after that the exchange is cut, and recorded with what was measured.
    pub(super) fn expired(&self, d: &Deadline) -> Failure {
        if self.resp.forwarded() == 0 {
            return Failure::Answer(d.answer, d.kind);
        }
        Failure::Cut {
            kind: d.kind,
            status: self.resp.framing.status,
            request_bytes: self.req.sent,
            response_bytes: self.resp.sent,
        }
    }

    /// The upstream connection failed or closed before the response was complete.
    pub(super) fn upstream_lost(&self) -> Failure {
        self.answer_or_abort(Answer::BadGateway, ErrorKind::UpstreamReset)
    }

    /// A proxy-made answer is only possible while the client has seen no byte of the
    /// response; after that, the connection can only be cut.
    pub(super) fn answer_or_abort(&self, answer: Answer, kind: ErrorKind) -> Failure {
        if self.resp.forwarded() == 0 {
            Failure::Answer(answer, kind)
        } else {
            Failure::Abort(kind)
        }
    }

    /// The upstream accepted `n` request bytes at `t` (the caller drops them from the
    /// client buffer).
    pub(super) fn up_accepted(&mut self, n: usize, t: Tick, ex: &mut Exchange) {
        self.moved_at = t;
        self.req.pending -= n;
        self.req.sent += n as u64;
        if self.req.is_sent() {
            ex.t_sent = t;
            self.resp.owed_since = t;
        }
    }

    /// A write to the upstream failed. Once the response is complete that only means the
    /// upstream will not read the rest of the request: the exchange ends early.
    pub(super) fn up_write_failed(&mut self) -> Result<(), Failure> {
        if !self.resp.framing.done {
            return Err(self.upstream_lost());
        }
        self.req.cut_short = true;
        self.req.pending = 0;
        self.req.read_done = true;
        Ok(())
    }

    /// The client accepted `n` response bytes at `t` (the caller drops them from the
    /// upstream buffer).
    pub(super) fn client_accepted(&mut self, n: usize, t: Tick, ex: &mut Exchange) {
        self.moved_at = t;
        if ex.t_write_first == 0
            && self
                .resp
                .final_from
                .is_some_and(|from| self.resp.sent + n as u64 > from)
        {
            ex.t_write_first = t;
        }
        self.resp.pending -= n;
        self.resp.sent += n as u64;
        if self.resp.is_flushed() {
            ex.t_write_last = t;
        }
    }

    /// Body bytes arrived at `t`; see [`RequestSide::body_read`].
    pub(super) fn body_read(&mut self, unframed: &[u8], t: Tick) -> Result<usize, Failure> {
        self.moved_at = t;
        self.req
            .body_read(unframed)
            .map_err(|_| self.answer_or_abort(Answer::BadRequest, ErrorKind::BadRequest))
    }

    /// Response bytes arrived at `t`: `fresh` is what follows the bytes already framed
    /// (nothing is pending when the upstream is read, so it is the whole buffer).
    pub(super) fn response_read(
        &mut self,
        fresh: &[u8],
        t: Tick,
        ex: &mut Exchange,
    ) -> Result<ResponseRead, Failure> {
        self.moved_at = t;
        let before = self.resp.pending;
        let framed = match self.resp.framing.frame(fresh, t, ex) {
            Ok(n) => n,
            Err(kind) => return Err(self.answer_or_abort(Answer::BadGateway, kind)),
        };
        self.resp.pending += framed;
        let mut read = ResponseRead::default();
        let framing = &mut self.resp.framing;
        // RFC 9110 §15.2: an HTTP/1.0 client does not know 1xx responses; a proxy drops
        // them. They lead the batch (the upstream is only read with nothing left to write).
        if self.http10 && framing.interim_in_batch > 0 {
            read.drop_interim = std::mem::take(&mut framing.interim_in_batch);
            self.resp.pending -= read.drop_interim;
        }
        if self.resp.final_from.is_none() && framing.head_done() {
            read.began = true;
            self.resp.final_from = Some(self.resp.sent + framing.final_offset(before) as u64);
            if !self.req.is_sent() {
                read.drop_request = self.req.abandon();
            }
        }
        if framing.head_done() {
            self.resp.owed_since = 0;
        }
        if self.resp.is_flushed() {
            ex.t_write_last = t;
        }
        Ok(read)
    }

    /// The upstream closed its side at `t`: the end of a close-delimited body, else a
    /// lost upstream.
    pub(super) fn upstream_closed(&mut self, t: Tick, ex: &mut Exchange) -> Result<(), Failure> {
        if !self.resp.framing.close_delimited() {
            return Err(self.upstream_lost());
        }
        self.resp.framing.done = true;
        ex.t_resp_last = t;
        if self.resp.pending == 0 {
            ex.t_write_last = t;
        }
        Ok(())
    }

    /// Whether the exchange is over, and what it leaves: `buffered` is what the upstream
    /// buffer still holds (bytes past the response's end, unless it became a tunnel).
    pub(super) fn step(&self, buffered: usize) -> Step {
        if !self.resp.is_flushed() {
            return Step::Continue;
        }
        let early_end = if self.req.is_sent() {
            self.req.cut_short
        } else if self.req.abandoned || !self.resp.framing.keep_alive() {
            // The upstream answered and will not read the rest of the body (or answered
            // before it, so the rest is not sent): stop.
            true
        } else {
            return Step::Continue;
        };
        Step::Done(self.relayed(buffered, early_end))
    }

    fn relayed(&self, buffered: usize, early_end: bool) -> Relayed {
        let resp = &self.resp.framing;
        // Bytes past the framed end of the response answer nothing that was asked: that
        // upstream connection cannot carry on (the client's can, on a new one).
        let excess = if resp.tunnel { 0 } else { buffered };
        Relayed {
            status: resp.status,
            keep_alive: self.client_keep_alive && resp.keep_alive() && !early_end,
            upstream_reusable: !self.req.abandoned && excess == 0 && resp.keep_alive(),
            excess,
            early_end,
            tunnel: resp.tunnel,
            request_bytes: self.req.sent,
            response_bytes: self.resp.sent,
        }
    }
}

//! The two halves of one HTTP exchange in flight, and every decision the relay makes.
//!
//! The request side goes client → upstream, the response side upstream → client (hyper's
//! h1 connection keeps its `Reading` and `Writing` states the same way). [`Sides`] holds
//! both and answers the relay's questions from bytes and ticks alone: what to wait for,
//! which deadline applies and whom it blames, what a read or a write changes, and when
//! the exchange ends. No sockets here: `http_relay` does the I/O and asks; the unit tests
//! below feed events the way the sockets would.

use std::time::Duration;

use super::response::ResponseProgress;
use super::{Failure, CONTINUE_WAIT};
use crate::clock::{At, Tick};
use crate::config::Timeouts;
use crate::http1::{Answer, BodyError, BodyFramer, RequestHead, Version};
use crate::recorder::ErrorKind;
use crate::relay::exchange::Exchange;

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
    /// The client shut its side down after its whole request (see
    /// [`Sides::client_finished`]): it reads on, sends nothing more.
    pub client_finished: bool,
    pub request_bytes: u64,
    pub response_bytes: u64,
}

/// What an event leaves the exchange at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Continue,
    /// Over; see [`Sides::relayed`] for what it leaves. `early_end`: the request body
    /// was left incomplete.
    Done {
        early_end: bool,
    },
    /// Nothing was sent on the upstream connection, and it must not carry this request:
    /// it had `n` bytes waiting, or its end (0). See `http_relay`.
    Stale(usize),
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
    /// `Expect: 100-continue` with a body: the body waits for a `100 Continue` or for
    /// [`CONTINUE_WAIT`] after the head. An upstream that answers without one has not
    /// read the body, and would read it as requests (docs/security.md).
    awaiting_continue: bool,
    /// Body bytes framed behind the head while the body waits: after `pending`.
    held: usize,
}

impl RequestSide {
    /// A request whose head and first `pending` bytes (framed by `body`) are buffered.
    fn new(head: &RequestHead, body: BodyFramer, pending: usize) -> Self {
        let read_done = body.is_done();
        let held = pending.saturating_sub(head.len);
        // RFC 9110 §10.1.1: a server ignores the expectation in an HTTP/1.0 request.
        let awaiting_continue =
            head.expect_continue && head.version == Version::Http11 && !(read_done && held == 0);
        let (pending, held) = if awaiting_continue {
            (pending - held, held)
        } else {
            (pending, 0)
        };
        Self {
            read_done,
            body,
            pending,
            sent: 0,
            abandoned: false,
            cut_short: false,
            expect_continue: head.expect_continue,
            awaiting_continue,
            held,
        }
    }

    /// Every byte of the request was read and handed on (or dropped).
    #[inline]
    pub(super) fn is_sent(&self) -> bool {
        self.read_done && self.pending == 0 && !self.awaiting_continue
    }

    /// The body may go: the upstream said `100 Continue`, or the wait is over.
    #[inline]
    fn release(&mut self) {
        self.awaiting_continue = false;
        self.pending += std::mem::take(&mut self.held);
    }

    /// Bytes at the front of the client buffer to write upstream.
    #[inline]
    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    /// More body is to be read from the client now. After an early answer to
    /// `Expect: 100-continue`, what the client sends next may be its body or its next
    /// request (RFC 9110 §10.1.1 allows both): it is not read, and the connection closes
    /// once the answer is out.
    #[inline]
    pub(super) fn wants_body(&self) -> bool {
        let refused_continue = self.abandoned && self.expect_continue;
        !self.read_done && self.pending == 0 && !self.awaiting_continue && !refused_continue
    }

    /// Frames body bytes just read (`unframed`: the whole client buffer, since nothing
    /// was pending). Returns how many to drop from the buffer: the body of an abandoned
    /// request is framed, so that the client can carry on, and never sent.
    #[inline]
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
    #[inline]
    fn abandon(&mut self) -> usize {
        self.abandoned = true;
        self.awaiting_continue = false;
        std::mem::take(&mut self.pending) + std::mem::take(&mut self.held)
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
    /// The instant the response deadline runs from: the request is all sent, the head not
    /// in (unset: not owed).
    owed_since: At,
}

impl ResponseSide {
    /// Bytes at the front of the upstream buffer to write to the client.
    #[inline]
    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    /// Bytes of the response the client has seen or is about to.
    #[inline]
    fn forwarded(&self) -> u64 {
        self.sent + self.pending as u64
    }

    /// The response was read whole and written out.
    #[inline]
    fn is_flushed(&self) -> bool {
        self.framing.done && self.pending == 0
    }

    /// The response head is in: its limit switches from the head's to the buffer's.
    #[inline]
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
    /// The client went away after its whole request went out; the response is read to
    /// its end and dropped (see [`Sides::client_gone`]).
    client_gone: bool,
    /// The client shut down its sending side after its whole request (see
    /// [`Sides::client_finished`]); the response still goes to it.
    client_finished: bool,
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
                owed_since: At::UNSET,
            },
            client_keep_alive: head.keep_alive,
            http10: head.version == Version::Http10,
            moved_at: t_up_ready,
            client_gone: false,
            client_finished: false,
        }
    }

    /// The client's read side ended (its FIN). With its whole request read, it has only
    /// finished sending: an HTTP/1.0-style client, or `shutdown(SHUT_WR)` after the
    /// request, waits for the answer, which it gets (HAProxy delivers it too); the client
    /// is not read again. With the body still owed, the request can never complete, and
    /// the client is gone (`false`).
    #[inline]
    pub(super) fn client_finished(&mut self) -> bool {
        if self.req.wants_body() {
            return false;
        }
        self.client_finished = true;
        true
    }

    /// The client went away mid-exchange. When its whole request went out and no
    /// response has begun, the upstream is working on it: the relay waits for the
    /// response (within the response timeout) and drops it before the upstream
    /// connection closes, so that the upstream is done with the request first. A server
    /// that writes a late answer to a descriptor it has meanwhile reused for a new
    /// connection (Webdis 0.1.9 does, when its client leaves while the Redis command is
    /// out) would otherwise give that answer to the next connection's request. A
    /// response already begun is not waited for (it may never end: a stream). Returns
    /// whether the relay drains; if not, the exchange ends now.
    #[inline]
    pub(super) fn client_gone(&mut self) -> bool {
        if !self.req.is_sent() || self.resp.head_done() {
            return false;
        }
        self.client_gone = true;
        true
    }

    /// Whether the relay is draining a response nobody will read.
    #[inline]
    pub(super) fn draining(&self) -> bool {
        self.client_gone
    }

    /// What the relay waits for. `ahead_allowed`: the next request's head may be read
    /// ahead (it is not complete, not failed, and the buffer holds less than a head).
    #[inline]
    pub(super) fn interest(&self, ahead_allowed: bool) -> Interest {
        if self.client_gone {
            return Interest {
                write_up: false,
                write_client: false,
                read_client: false,
                read_up: !self.resp.framing.done,
            };
        }
        let read_ahead = self.req.is_sent() && ahead_allowed;
        Interest {
            write_up: self.req.pending > 0,
            write_client: self.resp.pending > 0,
            read_client: !self.client_finished && (self.req.wants_body() || read_ahead),
            read_up: self.resp.pending == 0 && !self.resp.framing.done,
        }
    }

    /// Every wait has a deadline: the response timeout while the upstream owes the
    /// response head, else the transfer timeout since the last byte moved, blamed on the
    /// side that is holding things up.
    #[inline]
    pub(super) fn deadline(&self, timeouts: &Timeouts) -> Deadline {
        if self.req.awaiting_continue && self.req.pending == 0 {
            return Deadline {
                since: self.moved_at,
                after: CONTINUE_WAIT.min(timeouts.transfer),
                answer: Answer::GatewayTimeout,
                kind: ErrorKind::UpstreamTimeout,
            };
        }
        if let (Some(since), false) = (self.resp.owed_since.get(), self.resp.head_done()) {
            return Deadline {
                since,
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

    /// The deadline expired while the body of an `Expect: 100-continue` request waited
    /// after its head: the body goes now (as curl sends it after its wait). False when
    /// the deadline was another one.
    #[inline]
    pub(super) fn continue_wait_over(&mut self) -> bool {
        if !(self.req.awaiting_continue && self.req.pending == 0) {
            return false;
        }
        self.req.release();
        true
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
    #[inline]
    pub(super) fn upstream_lost(&self) -> Failure {
        self.answer_or_abort(Answer::UpstreamClosed, ErrorKind::UpstreamReset)
    }

    /// A proxy-made answer is only possible while the client has seen no byte of the
    /// response; after that, the connection can only be cut.
    #[inline]
    pub(super) fn answer_or_abort(&self, answer: Answer, kind: ErrorKind) -> Failure {
        if self.resp.forwarded() == 0 {
            Failure::Answer(answer, kind)
        } else {
            Failure::Abort(kind)
        }
    }

    /// The upstream accepted `n` request bytes at `t` (the caller drops them from the
    /// client buffer).
    #[inline]
    pub(super) fn up_accepted(&mut self, n: usize, t: Tick, ex: &mut Exchange) {
        self.moved_at = t;
        self.req.pending -= n;
        self.req.sent += n as u64;
        if self.req.is_sent() {
            ex.t_sent = At::tick(t);
            self.resp.owed_since = At::tick(t);
        }
    }

    /// A write to the upstream failed. Once the response is complete that only means the
    /// upstream will not read the rest of the request: the exchange ends early.
    #[inline]
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
    #[inline]
    pub(super) fn client_accepted(&mut self, n: usize, t: Tick, ex: &mut Exchange) {
        self.moved_at = t;
        if !ex.t_write_first.is_set()
            && self
                .resp
                .final_from
                .is_some_and(|from| self.resp.sent + n as u64 > from)
        {
            ex.t_write_first = At::tick(t);
        }
        self.resp.pending -= n;
        self.resp.sent += n as u64;
        if self.resp.is_flushed() {
            ex.t_write_last = At::tick(t);
        }
    }

    /// Body bytes arrived at `t`; see [`RequestSide::body_read`].
    #[inline]
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
            Err(kind) => return Err(self.answer_or_abort(Answer::NotHttp, kind)),
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
        // RFC 9110 §15.2.1: `100 Continue` asks for the body (a final response in the same
        // batch still abandons it, below).
        if framing.continued && self.req.awaiting_continue && !framing.head_done() {
            self.req.release();
        }
        if self.resp.final_from.is_none() && framing.head_done() {
            read.began = true;
            self.resp.final_from = Some(self.resp.sent + framing.final_offset(before) as u64);
            if !self.req.is_sent() {
                read.drop_request = self.req.abandon();
            }
        }
        if framing.head_done() {
            self.resp.owed_since = At::UNSET;
        }
        if self.resp.is_flushed() {
            ex.t_write_last = At::tick(t);
        }
        Ok(read)
    }

    /// The upstream closed its side at `t`: the end of a close-delimited body, else a
    /// lost upstream.
    #[inline]
    pub(super) fn upstream_closed(&mut self, t: Tick, ex: &mut Exchange) -> Result<(), Failure> {
        if !self.resp.framing.close_delimited() {
            return Err(self.upstream_lost());
        }
        self.resp.framing.done = true;
        ex.t_resp_last = At::tick(t);
        if self.resp.pending == 0 {
            ex.t_write_last = At::tick(t);
        }
        Ok(())
    }

    /// Whether the exchange is over.
    #[inline]
    pub(super) fn step(&self) -> Step {
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
        Step::Done { early_end }
    }

    /// What an exchange that is over leaves: `buffered` is what the upstream buffer still
    /// holds (bytes past the response's end, unless it became a tunnel).
    #[inline]
    pub(super) fn relayed(&self, buffered: usize, early_end: bool) -> Relayed {
        let resp = &self.resp.framing;
        // Bytes past the framed end of the response answer nothing that was asked: that
        // upstream connection cannot carry on (the client's can, on a new one).
        let excess = if resp.tunnel { 0 } else { buffered };
        Relayed {
            status: resp.status,
            keep_alive: self.client_keep_alive && resp.keep_alive() && !early_end,
            upstream_reusable: !self.req.abandoned
                && excess == 0
                && resp.keep_alive()
                && !resp.announces_unsent_body(),
            excess,
            early_end,
            tunnel: resp.tunnel,
            client_finished: self.client_finished,
            request_bytes: self.req.sent,
            response_bytes: self.resp.sent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::request;

    const T0: Tick = 1_000;
    const OK2: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

    /// An exchange as the relay starts it: `raw` is what the client buffer holds (the
    /// head and whatever of the body arrived with it).
    fn start(raw: &[u8]) -> (Sides, Exchange) {
        crate::clock::init();
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        let head = request::parse(&raw[..end], 100).expect("a valid head");
        let mut body = BodyFramer::new(head.body);
        let framed = body.advance(&raw[head.len..]).expect("a valid body");
        let ex = Exchange {
            t_up_ready: At::tick(T0),
            ..Exchange::default()
        };
        (Sides::new(&head, body, head.len + framed.consumed, T0), ex)
    }

    /// The upstream takes the whole pending request at `t`.
    fn send_all(s: &mut Sides, t: Tick, ex: &mut Exchange) {
        let n = s.req.pending();
        s.up_accepted(n, t, ex);
    }

    /// The client takes the whole pending response at `t`.
    fn flush(s: &mut Sides, t: Tick, ex: &mut Exchange) {
        let n = s.resp.pending();
        s.client_accepted(n, t, ex);
    }

    /// What the exchange leaves, with `buffered` bytes left in the upstream buffer.
    fn done(s: &Sides, buffered: usize) -> Relayed {
        match s.step() {
            Step::Done { early_end } => s.relayed(buffered, early_end),
            other => panic!("the exchange should be over: {other:?}"),
        }
    }

    #[test]
    fn a_plain_exchange_waits_for_each_side_in_turn_and_keeps_both_connections() {
        let (mut s, mut ex) = start(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let i = s.interest(true);
        assert!(i.write_up && !i.write_client && !i.read_client && i.read_up);
        send_all(&mut s, 2_000, &mut ex);
        assert_eq!(ex.t_sent, At::tick(2_000));
        // The request is sent: the next head may be read ahead, the response is owed.
        assert!(s.interest(true).read_client);
        assert!(!s.interest(false).read_client);
        assert_eq!(s.step(), Step::Continue);
        let read = s.response_read(OK2, 3_000, &mut ex).unwrap();
        assert!(read.began && read.drop_interim == 0 && read.drop_request == 0);
        assert_eq!(s.resp.pending(), OK2.len());
        assert!(s.interest(true).write_client && !s.interest(true).read_up);
        flush(&mut s, 4_000, &mut ex);
        assert_eq!(
            (ex.t_write_first, ex.t_write_last),
            (At::tick(4_000), At::tick(4_000))
        );
        let r = done(&s, 0);
        assert!(r.keep_alive && r.upstream_reusable && !r.early_end && !r.tunnel);
        assert_eq!((r.status, r.excess), (200, 0));
        assert_eq!(r.response_bytes, OK2.len() as u64);
    }

    #[test]
    fn an_early_final_response_abandons_the_body_and_the_upstream_connection() {
        // Ten bytes of body announced, three here; the upstream answers at once.
        let (mut s, mut ex) = start(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
        let sent_before = s.req.pending();
        // The upstream has not taken the request yet when its answer arrives.
        let read = s.response_read(OK2, 2_000, &mut ex).unwrap();
        assert!(read.began);
        assert_eq!(read.drop_request, sent_before, "the unsent rest is dropped");
        assert_eq!(s.req.pending(), 0);
        assert!(!s.interest(true).write_up, "nothing more goes upstream");
        // The rest of the body is still read (framed and dropped) while the response is
        // relayed, so the client's connection can carry on.
        assert!(s.interest(true).read_client);
        assert_eq!(s.body_read(b"defg", 2_500).unwrap(), 4);
        assert!(!s.interest(true).write_up);
        assert_eq!(s.body_read(b"hij", 2_600).unwrap(), 3);
        flush(&mut s, 3_000, &mut ex);
        let r = done(&s, 0);
        assert!(
            !r.upstream_reusable,
            "an upstream that answered early is not reused"
        );
        assert!(r.keep_alive && !r.early_end);
        assert_eq!(r.request_bytes, 0);
    }

    #[test]
    fn an_early_response_flushed_before_the_body_ends_closes_the_client_too() {
        let (mut s, mut ex) = start(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
        send_all(&mut s, 1_500, &mut ex);
        assert_eq!(ex.t_sent, At::UNSET, "the body is not all sent");
        s.response_read(OK2, 2_000, &mut ex).unwrap();
        flush(&mut s, 3_000, &mut ex);
        let r = done(&s, 0);
        assert!(r.early_end && !r.keep_alive && !r.upstream_reusable);
    }

    #[test]
    fn after_an_early_answer_to_expect_100_continue_the_client_is_not_read() {
        let (mut s, mut ex) = start(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 36\r\nExpect: 100-continue\r\n\r\n",
        );
        send_all(&mut s, 1_500, &mut ex);
        assert!(
            !s.interest(true).read_client,
            "the body waits for a 100 Continue"
        );
        s.response_read(
            b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n",
            2_000,
            &mut ex,
        )
        .unwrap();
        assert!(
            !s.interest(true).read_client,
            "body or next request: nobody can tell"
        );
        flush(&mut s, 3_000, &mut ex);
        let r = done(&s, 0);
        assert!(r.early_end && !r.keep_alive);
    }

    const EXPECT_WITH_BODY: &[u8] =
        b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello";

    #[test]
    fn a_body_sent_with_its_expect_head_waits_for_the_100_continue() {
        let (mut s, mut ex) = start(EXPECT_WITH_BODY);
        let head_len = EXPECT_WITH_BODY.len() - 5;
        assert_eq!(s.req.pending(), head_len, "only the head goes first");
        send_all(&mut s, 1_500, &mut ex);
        assert!(!s.interest(true).write_up && !s.interest(true).read_client);
        assert_eq!(ex.t_sent, At::UNSET, "the request is not all sent");
        let d = s.deadline(&Timeouts::default());
        assert_eq!((d.since, d.after), (1_500, CONTINUE_WAIT));
        s.response_read(b"HTTP/1.1 100 Continue\r\n\r\n", 2_000, &mut ex)
            .unwrap();
        assert_eq!(s.req.pending(), 5, "the 100 releases the body");
        send_all(&mut s, 2_100, &mut ex);
        assert_eq!(ex.t_sent, At::tick(2_100));
        s.response_read(OK2, 3_000, &mut ex).unwrap();
        flush(&mut s, 3_100, &mut ex);
        let r = done(&s, 0);
        assert!(r.upstream_reusable && r.keep_alive);
        assert_eq!(r.request_bytes, EXPECT_WITH_BODY.len() as u64);
    }

    #[test]
    fn a_held_body_goes_when_the_wait_passes_and_never_after_a_final_answer() {
        let (mut s, mut ex) = start(EXPECT_WITH_BODY);
        assert!(!s.continue_wait_over(), "the head is not out yet");
        send_all(&mut s, 1_500, &mut ex);
        assert!(s.continue_wait_over());
        assert_eq!(s.req.pending(), 5);
        assert!(!s.continue_wait_over(), "once");

        let (mut s, mut ex) = start(EXPECT_WITH_BODY);
        send_all(&mut s, 1_500, &mut ex);
        let read = s
            .response_read(
                b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n",
                2_000,
                &mut ex,
            )
            .unwrap();
        assert_eq!(read.drop_request, 5, "the held body is dropped, never sent");
        assert!(!s.interest(true).write_up);
        flush(&mut s, 3_000, &mut ex);
        let r = done(&s, 0);
        assert!(
            !r.upstream_reusable,
            "that upstream connection is not reused"
        );
        assert!(
            r.keep_alive && !r.early_end,
            "the body was here whole: the client carries on"
        );
        assert_eq!(r.request_bytes, (EXPECT_WITH_BODY.len() - 5) as u64);
    }

    #[test]
    fn bytes_past_a_complete_response_are_excess_and_close_the_upstream() {
        let (mut s, mut ex) = start(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        send_all(&mut s, 2_000, &mut ex);
        let late = [OK2, b"HTTP/1.1 200 OK\r\n"].concat();
        s.response_read(&late, 3_000, &mut ex).unwrap();
        assert_eq!(
            s.resp.pending(),
            OK2.len(),
            "only the response is forwarded"
        );
        flush(&mut s, 4_000, &mut ex);
        // The caller passes what the upstream buffer still holds: the late bytes.
        let r = done(&s, late.len() - OK2.len());
        assert_eq!(r.excess, 17);
        assert!(
            !r.upstream_reusable,
            "that upstream connection cannot carry on"
        );
        assert!(r.keep_alive, "the client's can, on a new one");
    }

    #[test]
    fn interim_responses_precede_the_final_one_and_http10_clients_never_see_them() {
        const INTERIM: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
        let batch = [INTERIM, OK2].concat();
        for (request, dropped) in [
            (&b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..], 0),
            (&b"GET / HTTP/1.0\r\nHost: a\r\n\r\n"[..], INTERIM.len()),
        ] {
            let (mut s, mut ex) = start(request);
            send_all(&mut s, 2_000, &mut ex);
            let read = s.response_read(&batch, 3_000, &mut ex).unwrap();
            assert!(read.began);
            assert_eq!(read.drop_interim, dropped);
            assert_eq!(s.resp.pending(), batch.len() - dropped);
            if dropped == 0 {
                // The interim response going out is not yet the final one's first byte.
                s.client_accepted(INTERIM.len(), 4_000, &mut ex);
                assert_eq!(ex.t_write_first, At::UNSET);
            }
            flush(&mut s, 5_000, &mut ex);
            assert_eq!(ex.t_write_first, At::tick(5_000));
            assert_eq!(done(&s, 0).status, 200);
        }
        // An interim response alone is not the response: the response deadline stays.
        let (mut s, mut ex) = start(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        send_all(&mut s, 2_000, &mut ex);
        let read = s.response_read(INTERIM, 3_000, &mut ex).unwrap();
        assert!(!read.began);
        assert_eq!(s.deadline(&Timeouts::default()).since, 2_000);
    }

    #[test]
    fn a_101_opens_a_tunnel_only_for_a_request_that_asked_to_upgrade() {
        const SWITCH: &[u8] =
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
        let (mut s, mut ex) = start(
            b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        );
        send_all(&mut s, 2_000, &mut ex);
        let tunnel_bytes = [SWITCH, b"frame"].concat();
        s.response_read(&tunnel_bytes, 3_000, &mut ex).unwrap();
        flush(&mut s, 4_000, &mut ex);
        let r = done(&s, 5);
        assert!(r.tunnel && r.status == 101);
        assert_eq!(r.excess, 0, "bytes after a 101 belong to the tunnel");

        for request in [
            &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        ] {
            let (mut s, mut ex) = start(request);
            send_all(&mut s, 2_000, &mut ex);
            let failure = s.response_read(SWITCH, 3_000, &mut ex).unwrap_err();
            assert_eq!(
                failure,
                Failure::Answer(Answer::NotHttp, ErrorKind::BadResponse)
            );
        }
    }

    #[test]
    fn a_head_response_ends_with_its_head_and_a_close_delimited_one_with_the_connection() {
        let (mut s, mut ex) = start(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n");
        send_all(&mut s, 2_000, &mut ex);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        s.response_read(head, 3_000, &mut ex).unwrap();
        flush(&mut s, 4_000, &mut ex);
        let r = done(&s, 0);
        // The five bytes it announced may still come, late: that upstream connection
        // carries no next request; the client's carries on.
        assert!(r.keep_alive && !r.upstream_reusable);

        let (mut s, mut ex) = start(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n");
        send_all(&mut s, 2_000, &mut ex);
        s.response_read(
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            3_000,
            &mut ex,
        )
        .unwrap();
        flush(&mut s, 4_000, &mut ex);
        assert!(done(&s, 0).upstream_reusable, "nothing was announced");

        let (mut s, mut ex) = start(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        send_all(&mut s, 2_000, &mut ex);
        s.response_read(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall",
            3_000,
            &mut ex,
        )
        .unwrap();
        flush(&mut s, 4_000, &mut ex);
        assert_eq!(
            s.step(),
            Step::Continue,
            "the body runs until the upstream closes"
        );
        s.upstream_closed(5_000, &mut ex).unwrap();
        assert_eq!(
            (ex.t_resp_last, ex.t_write_last),
            (At::tick(5_000), At::tick(5_000))
        );
        let r = done(&s, 0);
        assert!(!r.keep_alive && !r.upstream_reusable);
    }

    #[test]
    fn an_upstream_that_closes_mid_response_is_answered_until_the_client_saw_a_byte() {
        let (mut s, mut ex) = start(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        send_all(&mut s, 2_000, &mut ex);
        assert_eq!(
            s.upstream_closed(3_000, &mut ex),
            Err(Failure::Answer(
                Answer::UpstreamClosed,
                ErrorKind::UpstreamReset
            ))
        );
        s.response_read(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npart",
            3_000,
            &mut ex,
        )
        .unwrap();
        assert_eq!(
            s.upstream_closed(3_500, &mut ex),
            Err(Failure::Abort(ErrorKind::UpstreamReset))
        );
    }

    #[test]
    fn an_upstream_that_stops_reading_after_its_response_ends_the_exchange_early() {
        let (mut s, mut ex) = start(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
        assert_eq!(
            s.up_write_failed(),
            Err(Failure::Answer(
                Answer::UpstreamClosed,
                ErrorKind::UpstreamReset
            ))
        );
        send_all(&mut s, 1_500, &mut ex);
        s.response_read(OK2, 2_000, &mut ex).unwrap();
        s.body_read(b"defghij", 2_500).unwrap();
        flush(&mut s, 3_000, &mut ex);
        assert!(!done(&s, 0).early_end);
    }

    #[test]
    fn each_stall_has_its_deadline_and_the_side_to_blame() {
        let timeouts = Timeouts::default();
        let transfer = |since, answer, kind| Deadline {
            since,
            after: timeouts.transfer,
            answer,
            kind,
        };
        let client = (Answer::RequestTimeout, ErrorKind::ClientTimeout);
        let upstream = (Answer::GatewayTimeout, ErrorKind::UpstreamTimeout);

        // The upstream does not take the request: its fault, from the upstream's readiness.
        let (mut s, mut ex) = start(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nabc");
        let d = s.deadline(&timeouts);
        assert_eq!(d, transfer(T0, upstream.0, upstream.1));
        assert_eq!(s.expired(&d), Failure::Answer(upstream.0, upstream.1));
        // The client does not send the rest of its body: its fault, from the last byte.
        send_all(&mut s, 2_000, &mut ex);
        assert_eq!(s.deadline(&timeouts), transfer(2_000, client.0, client.1));
        s.body_read(b"def", 3_000).unwrap();
        send_all(&mut s, 3_100, &mut ex);
        // The upstream owes the head: the response timeout, from the request's last byte.
        let d = s.deadline(&timeouts);
        assert_eq!(
            (d.since, d.after, d.kind),
            (3_100, timeouts.response, upstream.1)
        );
        assert_eq!(
            s.expired(&d),
            Failure::Answer(Answer::GatewayTimeout, upstream.1)
        );
        // Head in, body stalls: the transfer timeout, blamed on the upstream; the client
        // has part of the response, so the exchange is cut and recorded as it got.
        s.response_read(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npart",
            4_000,
            &mut ex,
        )
        .unwrap();
        assert_eq!(
            s.deadline(&timeouts).kind,
            ErrorKind::ClientTimeout,
            "unflushed"
        );
        let sent = s.resp.pending();
        flush(&mut s, 4_100, &mut ex);
        let d = s.deadline(&timeouts);
        assert_eq!(d, transfer(4_100, upstream.0, upstream.1));
        assert_eq!(
            s.expired(&d),
            Failure::Cut {
                kind: ErrorKind::UpstreamTimeout,
                status: 200,
                request_bytes: s.req.sent,
                response_bytes: sent as u64,
            }
        );
        // The client does not take the rest of the response: its fault.
        s.response_read(b"more", 5_000, &mut ex).unwrap();
        s.client_accepted(1, 5_100, &mut ex);
        let d = s.deadline(&timeouts);
        assert_eq!(d, transfer(5_100, client.0, client.1));
        assert!(matches!(
            s.expired(&d),
            Failure::Cut {
                kind: ErrorKind::ClientTimeout,
                ..
            }
        ));
    }
}

//! One client connection of an HTTP tap, and the upstream connection that mirrors it.
//!
//! A connection runs exchanges one after another. Each exchange reads as named steps:
//!
//! 1. [`await_head`](HttpConnection::await_head): the next request head arrives and is
//!    parsed (or was already parsed while the previous response was in flight);
//! 2. the body bytes already buffered are framed, so a bad body is refused before the
//!    upstream sees a byte;
//! 3. [`upstream_ready`](HttpConnection::upstream_ready): the upstream is connected on the
//!    first request, and is by construction done with the previous exchange;
//! 4. [`relay`](HttpConnection::relay): head and buffered body go upstream in one write,
//!    the rest of the body follows, the response streams back as it arrives, and the next
//!    pipelined head is read ahead (but not sent) meanwhile;
//! 5. the exchange is recorded, and the connection lives on if both sides keep it alive.
//!
//! Steps 2 to 5 ([`exchange`](HttpConnection::exchange)) run in a pooled slot (`slot`)
//! taken when the head is ready, so that an idle connection's task holds none of their
//! state.
//!
//! Both sockets are driven by readiness (`poll_*_ready` + `try_*`), so one task can move
//! bytes in both directions without blocking one on the other. Each wait polls the
//! readiness of exactly the operations that can make progress, in one `poll_fn`: no
//! per-wait futures to build, register and drop (a `select!` over `readable()` futures
//! added and removed a waiter under a lock on every branch of every wait).

use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::net::TcpStream;
use tokio::sync::watch;

use super::http_relay::{BackendCommand, Outcome, Relay};
use super::next::NextRequest;
use super::sides::Sides;
use super::slot::Slot;
use super::tunnel;
use super::{Failure, ANSWER_LINGER, RESPONSE_BUFFER};
use crate::clock::{self, At, Tick};
use crate::correlate;
use crate::http1::{Answer, BodyError, BodyFramer, BodyKind, RequestHead};
use crate::recorder::{
    Direction, ErrorKind, Event, ExchangeId, ExchangeRecord, HeadShape, RouteId, Side,
};
use crate::relay::buffer::Buf;
use crate::relay::exchange::{Exchange, Wait};
use crate::relay::failure::ANSWER_WRITE;
use crate::relay::io::{pending_bytes, read_some};
use crate::relay::stop::{self, Stop};
use crate::relay::timer::{timeout, Timer};
use crate::relay::{ConnectFailure, TapContext};

/// Whether the connection carries on after an exchange.
enum Then {
    Next,
    Close,
}

enum HeadReady {
    Ready,
    /// The connection ends without an error (client closed, idle timeout, upstream
    /// closed between requests, shutdown).
    Closed,
}

pub(in crate::relay) struct HttpConnection {
    tap: Arc<TapContext>,
    client: TcpStream,
    upstream: Option<TcpStream>,
    cbuf: Buf,
    ubuf: Buf,
    next: NextRequest,
    /// When the previous exchange finished (its response was written).
    prev_end: At,
    /// A copy of the current target, kept only when a recorder asked for it.
    target: Vec<u8>,
    /// The backend command of the current request, when the tap is correlated, and the
    /// backend's report of it once found.
    corr: BackendCommand,
    /// Every deadline of the connection (see `timer`).
    timer: Timer,
    /// The task waited in the event loop since the upstream was last read, so the
    /// upstream's readiness flag is current (see `upstream_peek`).
    turned: bool,
    /// The client shut its sending side down after a whole request: the heads already
    /// buffered are served, then the connection closes instead of reading again.
    client_finished: bool,
}

impl HttpConnection {
    pub(in crate::relay) fn new(client: TcpStream, tap: Arc<TapContext>) -> Self {
        Self {
            tap,
            client,
            upstream: None,
            cbuf: Buf::new(),
            ubuf: Buf::new(),
            next: NextRequest::default(),
            prev_end: At::UNSET,
            target: Vec::new(),
            corr: BackendCommand::default(),
            timer: Timer::new(),
            turned: false,
            client_finished: false,
        }
    }

    /// Serves the connection until either side ends it. By reference: an `async fn`
    /// keeps a second copy of every argument it takes by value, and the connection is
    /// most of what an idle connection's task holds.
    pub(in crate::relay) async fn serve(&mut self, shutdown: watch::Receiver<bool>) {
        let changed = std::pin::pin!(stop::changed(shutdown.clone()));
        let mut stop = Stop::new(shutdown, changed);
        let outcome = self.exchanges(&mut stop).await;
        let rec = self.tap.recorder.clone();
        match outcome {
            Ok(()) => {}
            Err(Failure::Abort(kind) | Failure::Cut { kind, .. }) => {
                rec.event(Event::Error(kind));
                tracing::debug!(tap = %self.tap.config.name, kind = kind.name(), "connection aborted");
            }
            Err(Failure::Answer(answer, kind)) => {
                rec.event(Event::Error(kind));
                let peer = self
                    .client
                    .peer_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                tracing::info!(
                    tap = %self.tap.config.name,
                    peer = %peer,
                    status = answer.status(),
                    kind = kind.name(),
                    "proxy answered"
                );
                // Boxed, like every rare path below: an idle connection's task holds the
                // largest state any of its awaits may need, so what only a few
                // connections ever need lives on the heap, and only while it runs.
                Box::pin(self.answer(answer)).await;
            }
        }
        if self.upstream.take().is_some() {
            rec.event(Event::ConnectionClosed(Side::Upstream));
        }
    }

    /// Runs exchanges until the connection ends.
    async fn exchanges(&mut self, stop: &mut Stop<'_>) -> Result<(), Failure> {
        loop {
            if let HeadReady::Closed = self.await_head(stop).await? {
                return Ok(());
            }
            // Steps 2 to 5 run in a pooled slot taken now and given back when the exchange
            // is over (`slot`): their state is most of a connection's, and an idle
            // connection's task would otherwise hold it between requests.
            let then = Slot::new(|| self.exchange()).await?;
            if let Then::Close = then {
                return Ok(());
            }
            if stop.requested() {
                return Ok(());
            }
        }
    }

    /// Steps 2 to 5 of the exchange whose head is ready.
    async fn exchange(&mut self) -> Result<Then, Failure> {
        let Some((head, t_first, t_head, parse_ns)) = self.next.take() else {
            return Ok(Then::Close);
        };
        let mut ex = Exchange {
            t_first,
            t_head,
            parse_ns,
            ..Exchange::default()
        };
        let route = self.route(&head);

        // Frame the body bytes already here before anything goes upstream, so that
        // a malformed body is refused with the upstream having seen nothing.
        let mut body =
            BodyFramer::new(head.body).max_trailer_fields(self.tap.config.limits.max_headers);
        let buffered = &self.cbuf.filled()[head.len..];
        let progress = body
            .advance(buffered)
            .map_err(|e| self.bad_body(&head, e))?;
        let to_up = head.len + progress.consumed;

        let relayed = loop {
            if let Err(failure) = self.upstream_ready(&mut ex).await {
                break Err(failure);
            }
            // The relay's own future runs inline here: no wrapper to hold its arguments.
            let outcome = match self.relay(&mut ex, &head, body, to_up) {
                Ok(relay) => relay.run().await,
                Err(failure) => Err(failure),
            };
            match outcome {
                Ok(Outcome::Relayed(r)) => break Ok(r),
                // Nothing was sent: the request goes on a new upstream connection.
                Ok(Outcome::Stale(bytes)) => self.stale_upstream(bytes),
                Err(failure) => break Err(failure),
            }
        };
        let relayed = match relayed {
            Ok(r) => r,
            Err(failure) => {
                self.record_answer(&mut ex, route, &head, failure);
                return Err(failure);
            }
        };
        self.prev_end = ex.t_write_last;
        self.client_finished |= relayed.client_finished;
        self.record(
            &ex,
            route,
            &head,
            (relayed.status, None),
            relayed.request_bytes,
            relayed.response_bytes,
        );
        if relayed.tunnel {
            Box::pin(self.tunnel()).await;
            return Ok(Then::Close);
        }
        if relayed.excess > 0 {
            self.unsolicited(relayed.excess);
        } else if !relayed.upstream_reusable {
            self.close_upstream();
        }
        if relayed.early_end {
            Box::pin(self.linger()).await;
            return Ok(Then::Close);
        }
        Ok(if relayed.keep_alive {
            Then::Next
        } else {
            Then::Close
        })
    }

    /// Resolves the route, keeps a copy of the target if a recorder wants it, and derives
    /// the backend command this request makes (when a correlator will look for it), all
    /// while the head is still in the buffer.
    fn route(&mut self, head: &RequestHead) -> RouteId {
        let raw = self.cbuf.filled();
        let target = head.target(raw);
        if self.tap.wants_target {
            self.target.clear();
            self.target.extend_from_slice(target);
        }
        self.corr.found = None;
        self.corr.key = self.tap.correlator.as_ref().and_then(|_| {
            // The body counts only when it is already here whole (it usually is).
            let body = match head.body {
                BodyKind::Length(n) => raw.get(head.len..head.len.checked_add(n as usize)?),
                BodyKind::None => Some(&raw[..0]),
                _ => None,
            };
            correlate::webdis::command_key(head.method, target, body)
        });
        // The probe's requests get a route of their own (and stay out of the head shapes,
        // see `record`).
        if head.probe {
            return self.tap.routes.probe();
        }
        self.tap
            .routes
            .resolve(head.method.as_str().as_bytes(), target)
    }

    /// The upstream sent bytes that answer no request (while none was in flight, or past
    /// the framed end of a response). The client asked nothing, so it gets nothing: the
    /// upstream connection is dropped, counted, and the next request opens a new one.
    fn unsolicited(&mut self, bytes: usize) {
        tracing::warn!(
            tap = %self.tap.config.name,
            bytes,
            "upstream sent a response nobody asked for; reconnecting"
        );
        self.tap
            .recorder
            .event(Event::Error(ErrorKind::UnsolicitedResponse));
        self.close_upstream();
    }

    /// Drops the upstream connection; the next request opens a new one.
    fn close_upstream(&mut self) {
        if self.upstream.take().is_some() {
            self.tap
                .recorder
                .event(Event::ConnectionClosed(Side::Upstream));
        }
        self.ubuf = Buf::new();
    }

    /// A body refused before anything went upstream: no exchange is recorded, so the
    /// head's shape is recorded alone.
    fn bad_body(&self, head: &RequestHead, e: BodyError) -> Failure {
        tracing::debug!(tap = %self.tap.config.name, error = %e, "bad request body");
        self.head_unrecorded(head);
        Failure::Answer(Answer::BadRequest, ErrorKind::BadRequest)
    }

    /// Step 1: waits for the next complete request head. Between requests the connection
    /// is idle: it holds no buffers, the idle timeout applies, and an upstream that closes
    /// ends the client's connection too. Once a head has begun, the head timeout applies,
    /// and to the first request of a connection from the accept.
    async fn await_head(&mut self, stop: &mut Stop<'_>) -> Result<HeadReady, Failure> {
        // The previous response's last write is when the connection went idle (the first
        // request's deadline runs from the accept instead, see `NextRequest::deadline`).
        let idle_since = self.prev_end.get().unwrap_or_else(clock::now);
        // Buffers are taken again when bytes are readable.
        self.cbuf.release();
        self.ubuf.release();
        self.turned = false;
        loop {
            if let Some(ready) = self.head_progress(stop)? {
                return Ok(ready);
            }
            let idle = !self.next.started();
            // The client sent its last byte and every head it sent was served: a normal
            // end, unless it stopped inside a head (that request can never complete).
            if self.client_finished {
                return if idle {
                    self.tap.recorder.event(Event::ClientClosed);
                    Ok(HeadReady::Closed)
                } else {
                    Err(Failure::Abort(ErrorKind::ClientAbort))
                };
            }
            let first = !self.prev_end.is_set();
            let d = self
                .next
                .deadline(first, idle_since, &self.tap.config.timeouts);
            let at = self.timer.deadline(d.since, d.after);
            self.timer.arm(at);
            let event = poll_fn(|cx| {
                let event = self.poll_idle(cx, idle, stop);
                self.turned |= event.is_pending();
                event
            })
            .await;
            let ended = match event {
                IdleEvent::Client(r) => self.client_readable_idle(r, idle)?,
                IdleEvent::Upstream => self.upstream_readable_idle(idle),
                IdleEvent::Timer => self.head_deadline_fired(at, first, idle_since)?,
                IdleEvent::Stop => Some(HeadReady::Closed),
            };
            if let Some(ready) = ended {
                return Ok(ready);
            }
        }
    }

    /// Scans what the client buffer holds for the next head; `Some` once the wait is
    /// over (the head is ready, or shutdown came while idle).
    #[inline]
    fn head_progress(&mut self, stop: &mut Stop<'_>) -> Result<Option<HeadReady>, Failure> {
        let limits = &self.tap.config.limits;
        if !self.cbuf.is_empty() {
            self.next.begin_now();
        }
        match self.next.advance(
            self.cbuf.filled(),
            limits.max_head_bytes,
            limits.max_headers,
        ) {
            Ok(true) => return Ok(Some(HeadReady::Ready)),
            Ok(false) => {}
            Err(e) => return Err(Failure::Answer(e.answer(), e.kind())),
        }
        if !self.next.started() && stop.requested() {
            return Ok(Some(HeadReady::Closed));
        }
        Ok(None)
    }

    /// The first event of a wait for the next head, if one is ready.
    #[inline]
    fn poll_idle(
        &mut self,
        cx: &mut Context<'_>,
        idle: bool,
        stop: &mut Stop<'_>,
    ) -> Poll<IdleEvent> {
        if let Poll::Ready(r) = self.client.poll_read_ready(cx) {
            return Poll::Ready(IdleEvent::Client(r));
        }
        // No request is in flight, whether or not the next head has begun: any byte from
        // the upstream now answers nothing.
        if let Some(Poll::Ready(_)) = self.upstream.as_ref().map(|up| up.poll_read_ready(cx)) {
            return Poll::Ready(IdleEvent::Upstream);
        }
        if idle {
            stop.register(cx);
            if stop.requested() {
                return Poll::Ready(IdleEvent::Stop);
            }
        }
        self.timer.poll_fired(cx).map(|()| IdleEvent::Timer)
    }

    /// The client sent bytes of its next head (or closed) while no request is in flight.
    #[inline]
    fn client_readable_idle(
        &mut self,
        ready: io::Result<()>,
        idle: bool,
    ) -> Result<Option<HeadReady>, Failure> {
        // Between exchanges, a client's FIN or reset is how a connection ends (a load
        // generator's last act, a browser's idle close): counted as a close, not an
        // error. Inside a head it abandons that request.
        let gone = || {
            if idle {
                self.tap.recorder.event(Event::ClientClosed);
                Ok(Some(HeadReady::Closed))
            } else {
                Err(Failure::Abort(ErrorKind::ClientAbort))
            }
        };
        if ready.is_err() {
            return gone();
        }
        let max_head = self.tap.config.limits.max_head_bytes;
        match read_some(&self.client, self.cbuf.spare(max_head)) {
            Ok(0) => gone(),
            Ok(n) => {
                let t = clock::now();
                self.cbuf.commit(n);
                self.next.begin(t);
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(_) => gone(),
        }
    }

    /// The upstream sent bytes (or closed) while no request is in flight.
    #[inline]
    fn upstream_readable_idle(&mut self, idle: bool) -> Option<HeadReady> {
        let up = self.upstream.as_ref()?;
        match read_some(up, self.ubuf.spare(RESPONSE_BUFFER)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // The upstream closed between requests (Amphp does after 15 s idle): the
            // client's side closes too, as it would have without the proxy.
            Ok(0) | Err(_) if idle => return Some(HeadReady::Closed),
            // The same while the client's next head is arriving: that request goes on a
            // new connection.
            Ok(0) | Err(_) => self.close_upstream(),
            // A response nobody asked for (Webdis 0.1.9 sometimes writes a late answer
            // meant for a closed connection whose descriptor it reused). The client asked
            // nothing, so it gets nothing: the upstream connection is dropped, counted,
            // and the next request opens a new one.
            Ok(n) => self.unsolicited(n),
        }
        None
    }

    /// The timer fired. It may have fired for an earlier deadline than this wait's
    /// (`at`); then the loop arms it again.
    #[inline]
    fn head_deadline_fired(
        &mut self,
        at: Tick,
        first: bool,
        idle_since: Tick,
    ) -> Result<Option<HeadReady>, Failure> {
        if !self.timer.passed(at) {
            return Ok(None);
        }
        let timeouts = &self.tap.config.timeouts;
        match self.next.deadline(first, idle_since, timeouts).expiry {
            Some(failure) => Err(failure),
            None => Ok(Some(HeadReady::Closed)),
        }
    }

    /// Step 3: the upstream is connected and free. The first request of a connection
    /// opens it; a pipelined request whose head was complete before the previous exchange
    /// finished has queued behind it.
    async fn upstream_ready(&mut self, ex: &mut Exchange) -> Result<(), Failure> {
        if self.upstream.is_none() {
            let stream = match self.tap.connect_upstream().await {
                Ok(stream) => stream,
                Err(why) => {
                    let answer = match why {
                        ConnectFailure::Refused => Answer::UpstreamRefused,
                        ConnectFailure::TimedOut => Answer::UpstreamConnectTimeout,
                        ConnectFailure::Other => Answer::UpstreamConnectFailed,
                    };
                    return Err(Failure::Answer(answer, ErrorKind::UpstreamConnect));
                }
            };
            self.upstream = Some(stream);
            ex.wait = Wait::Connect;
            ex.t_up_ready = At::now();
        } else if let Some(bytes) = self.upstream_peek() {
            self.stale_upstream(bytes);
            return Box::pin(self.upstream_ready(ex)).await;
        } else if self.prev_end > ex.t_head {
            ex.wait = Wait::Queue;
            ex.t_up_ready = self.prev_end;
        } else {
            ex.t_up_ready = ex.t_head;
        }
        Ok(())
    }

    /// Bytes (or the end) waiting on a reused upstream connection with no request in
    /// flight: a system call (`recv` with `MSG_PEEK`), made only when the runtime's
    /// readiness flags may miss them. They are current when the task waited in the event
    /// loop since the last upstream read: the wake-up that ended the wait came from a turn
    /// of the runtime's poller, which saw the upstream too, and the relay then looks at
    /// the upstream's flag before its first write (`Relay::upstream_stale`). They
    /// are not when the request was pipelined (no wait since the previous response):
    /// then this looks.
    fn upstream_peek(&self) -> Option<usize> {
        if self.turned {
            return None;
        }
        self.upstream.as_ref().and_then(pending_bytes)
    }

    /// Bytes waiting on an upstream connection before a request went on it (a late or
    /// doubled response), or its end: whatever they are, they must not become the answer
    /// to this request. The connection is dropped; a new one carries the request.
    fn stale_upstream(&mut self, bytes: usize) {
        match bytes {
            0 => self.close_upstream(),
            n => self.unsolicited(n),
        }
    }

    /// Step 4: moves the request up and the response down until both are complete
    /// (see `http_relay`).
    fn relay<'c>(
        &'c mut self,
        ex: &'c mut Exchange,
        head: &RequestHead,
        body: BodyFramer,
        to_up: usize,
    ) -> Result<Relay<'c>, Failure> {
        let Some(up) = self.upstream.as_ref() else {
            return Err(Failure::Answer(
                Answer::UpstreamConnectFailed,
                ErrorKind::UpstreamConnect,
            ));
        };
        let up_ready = ex.t_up_ready.get().unwrap_or_else(clock::now);
        let sides = Sides::new(head, body, to_up, up_ready);
        Ok(Relay {
            tap: &self.tap,
            client: &self.client,
            up,
            cbuf: &mut self.cbuf,
            ubuf: &mut self.ubuf,
            next: &mut self.next,
            timer: &mut self.timer,
            ex,
            corr: &mut self.corr,
            sides,
        })
    }

    /// After a protocol switch: a byte tunnel until both sides close.
    async fn tunnel(&mut self) {
        let Some(mut up) = self.upstream.take() else {
            return;
        };
        let client_buffered = self.cbuf.filled().to_vec();
        let upstream_buffered = self.ubuf.filled().to_vec();
        match tunnel::run(
            &mut self.client,
            &mut up,
            &client_buffered,
            &upstream_buffered,
        )
        .await
        {
            Ok(moved) => {
                self.tap
                    .recorder
                    .event(Event::Bytes(Direction::Request, moved.to_upstream));
                self.tap
                    .recorder
                    .event(Event::Bytes(Direction::Response, moved.to_client));
            }
            Err(e) => tracing::debug!(tap = %self.tap.config.name, error = %e, "tunnel ended"),
        }
        self.tap
            .recorder
            .event(Event::ConnectionClosed(Side::Upstream));
    }

    fn record(
        &self,
        ex: &Exchange,
        route: RouteId,
        head: &RequestHead,
        (status, failure): (u16, Option<ErrorKind>),
        request_bytes: u64,
        response_bytes: u64,
    ) {
        let rec = &self.tap.recorder;
        // The correlator only found the backend command; its instants become phases with
        // the relay's own, in the exchange.
        let phases = ex.phases_with(self.corr.key.and(self.corr.found.as_ref()));
        if self.corr.key.is_some() && ex.t_sent.is_set() && ex.t_resp_first.is_set() {
            rec.event(Event::Correlated {
                matched: self.corr.found.is_some(),
            });
        }
        let record = ExchangeRecord {
            id: ExchangeId::next(),
            route,
            method: head.method.as_str(),
            target: &self.target,
            status,
            request_bytes,
            response_bytes,
            phases,
            failure,
            error_reply: false,
        };
        // The probe's requests stay out of the head shapes the probe reads back
        // (docs/probe.md). The byte counts travel with the record.
        let shape = (!head.probe).then_some(HeadShape {
            bytes: head.len,
            fields: head.fields,
        });
        rec.exchange_relayed(&record, shape);
    }

    /// Records the shape of a head whose exchange is not recorded (the connection was
    /// cut before any answer).
    fn head_unrecorded(&self, head: &RequestHead) {
        if !head.probe {
            self.tap.recorder.event(Event::RequestHead(HeadShape {
                bytes: head.len,
                fields: head.fields,
            }));
        }
    }

    /// An exchange the proxy answered itself is still an exchange the client saw; it is
    /// recorded with the proxy's status once the answer is written (see `serve`).
    fn record_answer(
        &mut self,
        ex: &mut Exchange,
        route: RouteId,
        head: &RequestHead,
        failure: Failure,
    ) {
        if let Failure::Abort(_) = failure {
            self.head_unrecorded(head);
        }
        if let Failure::Cut {
            kind,
            status,
            request_bytes,
            response_bytes,
        } = failure
        {
            self.record(
                ex,
                route,
                head,
                (status, Some(kind)),
                request_bytes,
                response_bytes,
            );
        }
        if let Failure::Answer(answer, kind) = failure {
            let t = clock::now();
            ex.t_write_first = At::tick(t);
            ex.t_write_last = At::tick(t);
            self.record(
                ex,
                route,
                head,
                (answer.status(), Some(kind)),
                // The upstream took none of it, but the client sent the whole head.
                head.len as u64,
                answer.bytes().len() as u64,
            );
        }
    }

    /// Writes a proxy-made answer, closes our side, and drains what the client still
    /// sends for a moment so that a reset does not destroy the answer in flight.
    async fn answer(&mut self, answer: Answer) {
        use tokio::io::AsyncWriteExt;
        let write = async {
            self.client.write_all(answer.bytes()).await?;
            self.client.shutdown().await
        };
        if timeout(ANSWER_WRITE, write).await.is_err() {
            return;
        }
        self.drain().await;
    }

    /// Closes our side of the client connection after a complete response, and drains
    /// what the client still sends for a moment so that a reset does not destroy the
    /// response in flight.
    async fn linger(&mut self) {
        use tokio::io::AsyncWriteExt;
        if timeout(ANSWER_WRITE, self.client.shutdown()).await.is_ok() {
            self.drain().await;
        }
    }

    async fn drain(&mut self) {
        use tokio::io::AsyncReadExt;
        let mut sink = [0u8; 1024];
        let drain = async {
            while let Ok(n) = self.client.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        };
        let _ = timeout(ANSWER_LINGER, drain).await;
    }
}

/// What ended an idle wait for the next request.
enum IdleEvent {
    Client(io::Result<()>),
    Upstream,
    Timer,
    Stop,
}

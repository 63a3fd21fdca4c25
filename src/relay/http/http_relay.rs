//! Step 4 of an HTTP exchange: moves the request up and the response down until both are
//! complete, one method per socket event (sozu's pipe has the same shape).
//!
//! Each event method does its one system call and hands what it got to [`Sides`], which
//! decides; it returns a [`Step`] or a [`Failure`]. [`Relay::run`] only asks `Sides` what
//! to wait for and which deadline applies, waits, and dispatches.
//!
//! Both sockets are driven by readiness (`poll_*_ready` + `try_*`), so one task moves
//! bytes in both directions without blocking one on the other. Each wait polls the
//! readiness of exactly the operations that can make progress, in one `poll_fn`: no
//! per-wait futures to build, register and drop.

use std::future::poll_fn;
use std::io;
use std::task::{Context, Poll};

use tokio::net::TcpStream;

use super::next::NextRequest;
use super::sides::{Interest, Relayed, Sides, Step};
use super::{Failure, MAX_RESPONSE_HEAD, REQUEST_BUFFER, RESPONSE_BUFFER};
use crate::clock::{self, At};
use crate::correlate;
use crate::recorder::ErrorKind;
use crate::relay::buffer::Buf;
use crate::relay::exchange::{Exchange, Wait};
use crate::relay::io::read_some;
use crate::relay::timer::Timer;
use crate::relay::TapContext;

/// How a relay ended, when it did not fail.
pub(super) enum Outcome {
    Relayed(Relayed),
    /// The reused upstream connection had bytes waiting (`n`), or its end (0), before
    /// the request's first byte went out: nothing was sent, and the request is to go on a
    /// new connection.
    Stale(usize),
}

/// What ended a wait during an exchange.
enum RelayEvent {
    UpWritable(io::Result<()>),
    ClientWritable(io::Result<()>),
    ClientReadable(io::Result<()>),
    UpReadable(io::Result<()>),
    Timer,
}

/// The backend command of the current request, when the tap is correlated, and the
/// backend's report of it once found.
#[derive(Debug, Default)]
pub(super) struct BackendCommand {
    pub key: Option<u64>,
    pub found: Option<correlate::Seen>,
}

/// The sockets, buffers and state one exchange is relayed with.
pub(super) struct Relay<'c> {
    pub tap: &'c TapContext,
    pub client: &'c TcpStream,
    pub up: &'c TcpStream,
    pub cbuf: &'c mut Buf,
    pub ubuf: &'c mut Buf,
    pub next: &'c mut NextRequest,
    pub timer: &'c mut Timer,
    pub ex: &'c mut Exchange,
    pub corr: &'c mut BackendCommand,
    pub sides: Sides,
}

impl Relay<'_> {
    /// Relays until the exchange is complete or fails.
    pub(super) async fn run(mut self) -> Result<Outcome, Failure> {
        // A reused upstream connection is looked at before the request goes on it; then
        // the request goes, without a wait (see `write_through`).
        let mut step = if self.ex.wait == Wait::Connect {
            Step::Continue
        } else {
            self.upstream_stale()
        };
        if step == Step::Continue {
            step = self.upstream_writable(Ok(()))?;
        }
        loop {
            match step {
                // Drained as far as it is waited for: the response began (or ended).
                Step::Continue | Step::Done { .. }
                    if self.sides.draining() && self.sides.resp.head_done() =>
                {
                    return Err(Failure::Abort(ErrorKind::ClientAbort))
                }
                Step::Continue => {}
                Step::Done { early_end } => {
                    let relayed = self.sides.relayed(self.ubuf.len(), early_end);
                    return Ok(Outcome::Relayed(relayed));
                }
                Step::Stale(bytes) => return Ok(Outcome::Stale(bytes)),
            }
            self.read_ahead();
            let interest = self.sides.interest(self.ahead_allowed());
            self.arm();
            let event = poll_fn(|cx| self.poll_event(cx, interest)).await;
            let next = match event {
                RelayEvent::UpWritable(r) => self.upstream_writable(r),
                RelayEvent::ClientWritable(r) => self.client_writable(r),
                RelayEvent::ClientReadable(r) => self
                    .client_readable(r)
                    .and_then(|step| self.write_through(step)),
                RelayEvent::UpReadable(r) => self
                    .upstream_readable(r)
                    .and_then(|step| self.write_through(step)),
                RelayEvent::Timer => self.deadline_fired(),
            };
            // While draining for a client that left, whatever ends the drain is still
            // the client's doing.
            step = next.map_err(|f| {
                if self.sides.draining() {
                    Failure::Abort(ErrorKind::ClientAbort)
                } else {
                    f
                }
            })?;
        }
    }

    /// After a read, the bytes it brought go on at once, without a wait for the other
    /// socket's readiness: that socket is almost always writable, and when its readiness
    /// flag says it is not, the write returns `WouldBlock` without a system call and the
    /// loop waits as usual. A blind relay does the same (read, then write), and the wait it
    /// saves is a whole turn of the loop.
    #[inline]
    fn write_through(&mut self, step: Step) -> Result<Step, Failure> {
        if step != Step::Continue {
            return Ok(step);
        }
        if self.sides.resp.pending() > 0 {
            return self.client_writable(Ok(()));
        }
        if self.sides.req.pending() > 0 {
            return self.upstream_writable(Ok(()));
        }
        Ok(step)
    }

    /// Bytes after this request belong to the next one: start on it (it is read ahead,
    /// but not sent, while the response is in flight).
    #[inline]
    fn read_ahead(&mut self) {
        if self.sides.req.is_sent() && !self.cbuf.is_empty() {
            let limits = &self.tap.config.limits;
            self.next.begin_now();
            let _ = self.next.advance(
                self.cbuf.filled(),
                limits.max_head_bytes,
                limits.max_headers,
            );
        }
    }

    #[inline]
    fn ahead_allowed(&self) -> bool {
        !self.next.is_ready()
            && self.next.failed().is_none()
            && self.cbuf.len() < self.tap.config.limits.max_head_bytes
    }

    /// Arms the timer for the current wait's deadline.
    #[inline]
    fn arm(&mut self) {
        let deadline = self.sides.deadline(&self.tap.config.timeouts);
        self.timer
            .arm(self.timer.deadline(deadline.since, deadline.after));
    }

    /// The first of the events `interest` asks for, or the timer, if one is ready. The
    /// upstream's bytes come before the client's: while the response is owed, they are
    /// what the exchange waits for (the client's next request is read on the next turn).
    #[inline]
    fn poll_event(&mut self, cx: &mut Context<'_>, interest: Interest) -> Poll<RelayEvent> {
        if interest.write_up {
            if let Poll::Ready(r) = self.up.poll_write_ready(cx) {
                return Poll::Ready(RelayEvent::UpWritable(r));
            }
        }
        if interest.write_client {
            if let Poll::Ready(r) = self.client.poll_write_ready(cx) {
                return Poll::Ready(RelayEvent::ClientWritable(r));
            }
        }
        if interest.read_up {
            if let Poll::Ready(r) = self.up.poll_read_ready(cx) {
                return Poll::Ready(RelayEvent::UpReadable(r));
            }
        }
        if interest.read_client {
            if let Poll::Ready(r) = self.client.poll_read_ready(cx) {
                return Poll::Ready(RelayEvent::ClientReadable(r));
            }
        }
        self.timer.poll_fired(cx).map(|()| RelayEvent::Timer)
    }

    /// Before the request's first byte goes out, a reused upstream connection that is
    /// readable has a late or doubled response, or its end. Whatever it is, it must not
    /// become the answer to this request. The read returns `WouldBlock` without a system
    /// call unless the runtime flagged the socket readable; a flag left from an earlier
    /// event reads nothing, and the relay carries on.
    #[inline]
    fn upstream_stale(&mut self) -> Step {
        match read_some(self.up, self.ubuf.spare(RESPONSE_BUFFER)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Step::Continue,
            Ok(n) => Step::Stale(n),
            Err(_) => Step::Stale(0),
        }
    }

    /// The upstream can take request bytes.
    #[inline]
    fn upstream_writable(&mut self, ready: io::Result<()>) -> Result<Step, Failure> {
        ready.map_err(|_| self.sides.upstream_lost())?;
        if !self.ex.t_up_write.is_set() {
            self.ex.t_up_write = At::now();
        }
        match self
            .up
            .try_write(&self.cbuf.filled()[..self.sides.req.pending()])
        {
            Ok(n) => {
                self.cbuf.consume(n);
                self.sides.up_accepted(n, clock::now(), self.ex);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => self.sides.up_write_failed()?,
        }
        Ok(self.step())
    }

    /// The client is gone (it closed, or its socket failed): the response is drained
    /// when the upstream is working on the request ([`Sides::client_gone`]), else the
    /// exchange ends.
    #[inline]
    fn client_left(&mut self) -> Result<Step, Failure> {
        if !self.sides.client_gone() {
            return Err(Failure::Abort(ErrorKind::ClientAbort));
        }
        self.drop_pending();
        Ok(self.step())
    }

    /// While draining, the response bytes read go nowhere.
    #[inline]
    fn drop_pending(&mut self) {
        let pending = self.sides.resp.pending();
        self.ubuf.consume(pending);
        self.sides.client_accepted(pending, clock::now(), self.ex);
    }

    /// The client can take response bytes.
    #[inline]
    fn client_writable(&mut self, ready: io::Result<()>) -> Result<Step, Failure> {
        if ready.is_err() {
            return self.client_left();
        }
        match self
            .client
            .try_write(&self.ubuf.filled()[..self.sides.resp.pending()])
        {
            Ok(n) => {
                self.ubuf.consume(n);
                let t = clock::now();
                self.ex.client_took(t);
                self.sides.client_accepted(n, t, self.ex);
            }
            // Response bytes wait for the client: from now until it takes some, the
            // exchange is blocked on it (`write_blocked`). One clock read, only here.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.ex.client_blocked(),
            Err(_) => return self.client_left(),
        }
        Ok(self.step())
    }

    /// The client sent body bytes, or the next request's.
    #[inline]
    fn client_readable(&mut self, ready: io::Result<()>) -> Result<Step, Failure> {
        if ready.is_err() {
            return self.client_left();
        }
        let limits = &self.tap.config.limits;
        let read_body = self.sides.req.wants_body();
        let limit = if read_body {
            REQUEST_BUFFER
        } else {
            limits.max_head_bytes
        };
        match read_some(self.client, self.cbuf.spare(limit)) {
            // A client that shuts its side after its whole request waits for the answer
            // (`Sides::client_finished`). One that closes with the body still owed is
            // gone; the response, if the upstream is working on it, is drained.
            Ok(0) if self.sides.client_finished() => {}
            Ok(0) => return self.client_left(),
            Ok(n) => {
                let t = clock::now();
                self.cbuf.commit(n);
                if read_body {
                    let drop = self.sides.body_read(self.cbuf.filled(), t)?;
                    self.cbuf.consume(drop);
                } else {
                    self.next.begin(t);
                    let _ = self.next.advance(
                        self.cbuf.filled(),
                        limits.max_head_bytes,
                        limits.max_headers,
                    );
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return self.client_left(),
        }
        Ok(self.step())
    }

    /// The upstream sent response bytes, or closed.
    #[inline]
    fn upstream_readable(&mut self, ready: io::Result<()>) -> Result<Step, Failure> {
        ready.map_err(|_| self.sides.upstream_lost())?;
        let limit = if self.sides.resp.head_done() {
            RESPONSE_BUFFER
        } else {
            MAX_RESPONSE_HEAD
        };
        match read_some(self.up, self.ubuf.spare(limit)) {
            Ok(0) => {
                self.sides.upstream_closed(clock::now(), self.ex)?;
                if self.sides.draining() {
                    self.drop_pending();
                }
            }
            Ok(n) => {
                let t = clock::now();
                self.ubuf.commit(n);
                let pending = self.sides.resp.pending();
                let read = self
                    .sides
                    .response_read(&self.ubuf.filled()[pending..], t, self.ex)?;
                self.ubuf.consume(read.drop_interim);
                self.cbuf.consume(read.drop_request);
                if read.began {
                    self.response_began();
                }
                if self.sides.draining() {
                    self.drop_pending();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(self.sides.upstream_lost()),
        }
        Ok(self.step())
    }

    /// The final response began: its backend command is now complete.
    #[inline]
    fn response_began(&mut self) {
        if let (Some(c), Some(key), Some(resp_first)) = (
            &self.tap.correlator,
            self.corr.key,
            self.ex.t_resp_first.get(),
        ) {
            self.corr.found = c.take(key, self.ex.t_up_write.get(), resp_first);
        }
    }

    /// The timer fired. It may have fired for an earlier deadline than the current one;
    /// then the loop arms it again. Nothing changed since the wait began, so the deadline
    /// is the one `arm` armed (computed again rather than held across the wait: the
    /// connection task stays smaller).
    #[inline]
    fn deadline_fired(&mut self) -> Result<Step, Failure> {
        let deadline = self.sides.deadline(&self.tap.config.timeouts);
        if self
            .timer
            .passed(self.timer.deadline(deadline.since, deadline.after))
        {
            if self.sides.continue_wait_over() {
                return self.upstream_writable(Ok(()));
            }
            return Err(self.sides.expired(&deadline));
        }
        Ok(Step::Continue)
    }

    #[inline]
    fn step(&self) -> Step {
        self.sides.step()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::config::{Protocol, TapConfig};
    use crate::http1::{request, BodyFramer};
    use crate::recorder::Discard;
    use crate::routes::RouteTable;

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

    /// A connected pair of loopback sockets.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (far, _) = listener.accept().await.unwrap();
        (near, far)
    }

    /// Relays `GET` on a reused upstream connection, after `late` bytes from the upstream
    /// arrived and the runtime's poller turned.
    async fn relay_after(late: &[u8]) -> (Result<Outcome, Failure>, Vec<u8>) {
        clock::init();
        let (client, _client_far) = pair().await;
        let (up, mut up_far) = pair().await;
        if !late.is_empty() {
            up_far.write_all(late).await.unwrap();
        }
        // A wait in the event loop, as between two keep-alive requests.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let cfg = TapConfig::new("t", Protocol::Http, "127.0.0.1:1".parse().unwrap(), "x:1");
        let routes = Arc::new(RouteTable::new(&cfg).unwrap());
        let tap = TapContext::new(cfg, Arc::new(Discard), routes);
        let mut cbuf = Buf::new();
        cbuf.spare(GET.len())[..GET.len()].copy_from_slice(GET);
        cbuf.commit(GET.len());
        let head = request::parse(GET, 100).unwrap();
        let (mut ubuf, mut next, mut timer) = (Buf::new(), NextRequest::default(), Timer::new());
        let mut corr = BackendCommand::default();
        let up_ready = clock::now();
        let mut ex = Exchange {
            t_up_ready: At::tick(up_ready),
            wait: Wait::None,
            ..Exchange::default()
        };
        let sides = Sides::new(&head, BodyFramer::new(head.body), head.len, up_ready);
        let relay = Relay {
            tap: &tap,
            client: &client,
            up: &up,
            cbuf: &mut cbuf,
            ubuf: &mut ubuf,
            next: &mut next,
            timer: &mut timer,
            ex: &mut ex,
            corr: &mut corr,
            sides,
        };
        // The fake upstream never answers: a relay that sent the request waits until the
        // timeout below.
        let outcome = tokio::time::timeout(Duration::from_millis(300), relay.run()).await;
        let outcome = outcome.unwrap_or(Err(Failure::Abort(ErrorKind::UpstreamTimeout)));
        let mut got = vec![0; 256];
        let n = tokio::time::timeout(Duration::from_millis(50), up_far.read(&mut got))
            .await
            .map_or(0, |r| r.unwrap_or(0));
        got.truncate(n);
        (outcome, got)
    }

    #[tokio::test]
    async fn a_late_response_waiting_on_a_reused_upstream_is_never_this_requests_answer() {
        let late = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil";
        let (outcome, sent) = relay_after(late).await;
        assert!(
            matches!(outcome, Ok(Outcome::Stale(n)) if n == late.len()),
            "the waiting bytes are found before the request goes out"
        );
        assert!(
            sent.is_empty(),
            "nothing was sent on that connection: {sent:?}"
        );
    }

    #[tokio::test]
    async fn a_clean_reused_upstream_gets_the_request() {
        let (outcome, sent) = relay_after(b"").await;
        assert!(matches!(
            outcome,
            Err(Failure::Abort(ErrorKind::UpstreamTimeout))
        ));
        assert_eq!(sent, GET);
    }
}

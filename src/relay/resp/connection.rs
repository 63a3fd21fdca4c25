//! A RESP connection's waits, deadlines and socket events: one `poll_fn` wait, then one
//! method per event (see the folder's `mod.rs` for the connection as a whole).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::task::Poll;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::{
    Failure, Mode, RespAnswer, RespConnection, COMMAND_BUFFER, MAX_IN_FLIGHT, REPLY_BUFFER,
};
use crate::clock::{self, At, Tick};
use crate::recorder::{self, Direction, ErrorKind, Side};
use crate::relay::buffer::Buf;
use crate::relay::failure::ANSWER_WRITE;
use crate::relay::io::read_some;
use crate::relay::stop::{self, Stop};
use crate::relay::timer::{timeout, Timer};
use crate::relay::TapContext;
use crate::resp::{Blocking, Scanner};

/// What a socket event leaves the connection to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Continue,
    /// The connection ends without an error: a side closed, the idle deadline, shutdown.
    Close,
}

/// What the next wait is for, worked out from the connection's state before each wait.
#[derive(Debug, Clone, Copy)]
struct Interest {
    /// Framed command bytes not yet written upstream, and reply bytes not yet written to
    /// the client.
    to_up: usize,
    to_client: usize,
    read_client: bool,
    read_up: bool,
    /// Nothing in flight either way: shutdown closes the connection now.
    idle: bool,
    due: Option<(Tick, Due)>,
}

/// What ended a wait.
enum Event {
    UpWritable(io::Result<()>),
    ClientWritable(io::Result<()>),
    ClientReadable(io::Result<()>),
    UpReadable(io::Result<()>),
    Timer,
    Stop,
}

/// Which of the connection's deadlines is due first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// Nothing in flight, in paired mode: `timeouts.idle`.
    Idle,
    /// A command has begun and is not complete: `timeouts.head` from its first byte.
    Command,
    /// The oldest command was sent and its reply is not complete: `timeouts.response`
    /// from its send or the reply's last byte.
    Reply,
    /// Bytes are waiting to be written and none moved: `timeouts.transfer`.
    Transfer,
}

impl RespConnection {
    pub(in crate::relay) fn new(client: TcpStream, tap: Arc<TapContext>) -> Self {
        Self {
            tap,
            client,
            upstream: None,
            cbuf: Buf::new(),
            ubuf: Buf::new(),
            commands: Scanner::new(Direction::Request),
            replies: Scanner::new(Direction::Response),
            up_read: 0,
            up_written: 0,
            up_forwardable: 0,
            cmd_first: At::UNSET,
            cmd_parse_ns: 0,
            cmd_streaming: None,
            pending: VecDeque::new(),
            down_read: 0,
            down_written: 0,
            up_counted: 0,
            down_counted: 0,
            reply_start: 0,
            reply_first: At::UNSET,
            reply_write_first: At::UNSET,
            prev_reply_done: At::UNSET,
            replied: VecDeque::new(),
            mode: Mode::Paired,
            resp3: false,
            subscriptions: super::Subscriptions::default(),
            transaction: super::Transaction::default(),
            last_moved: clock::now(),
            last_up_read: 0,
            up_refused: false,
            timer: Timer::new(),
        }
    }

    /// The deadline that applies now, if any. Subscribers and MONITOR wait for messages
    /// for as long as they like (Redis's own `timeout` spares them too); a command being
    /// streamed through, larger than the buffer, is under the transfer deadline.
    fn due(&self, to_up: usize, to_client: usize) -> Option<(Tick, Due)> {
        let t = &self.tap.config.timeouts;
        let mut best: Option<(Tick, Due)> = None;
        let mut consider = |since: Tick, after: std::time::Duration, due: Due| {
            let at = self.timer.deadline(since, after);
            if best.is_none_or(|(b, _)| at < b) {
                best = Some((at, due));
            }
        };
        if to_up > 0 || to_client > 0 || self.cmd_streaming.is_some() {
            consider(self.last_moved, t.transfer, Due::Transfer);
        }
        if let (Some(cmd_first), None) = (self.cmd_first.get(), &self.cmd_streaming) {
            consider(cmd_first, t.head, Due::Command);
        }
        if self.mode == Mode::Paired {
            match self.pending.front().map(|p| (p, p.ex.t_sent.get())) {
                // A blocking command is owed its reply after its own timeout; one that
                // blocks forever has no deadline but the client's leaving.
                Some((p, Some(t_sent))) => match p.block {
                    Some(Blocking::Forever) => {}
                    block => {
                        let after = match block {
                            Some(Blocking::For(d)) => t.response.saturating_add(d),
                            _ => t.response,
                        };
                        consider(t_sent.max(self.last_up_read), after, Due::Reply)
                    }
                },
                Some((_, None)) => {}
                None if to_up == 0
                    && to_client == 0
                    && !self.cmd_first.is_set()
                    && !self.subscriptions.any() =>
                {
                    consider(self.last_moved, t.idle, Due::Idle)
                }
                None => {}
            }
        }
        best
    }

    /// A deadline passed: how the connection ends.
    fn expired(&self, due: Due, to_client: usize) -> Result<Step, Failure> {
        match due {
            Due::Idle => Ok(Step::Close),
            Due::Command => Err(Failure::Abort(ErrorKind::ClientTimeout)),
            // An error reply for the oldest command, unless part of a reply is out.
            Due::Reply if to_client == 0 && !self.replies.in_message() => Err(Failure::Answer(
                RespAnswer::UpstreamTimeout,
                ErrorKind::UpstreamTimeout,
            )),
            Due::Reply => Err(Failure::Abort(ErrorKind::UpstreamTimeout)),
            Due::Transfer if to_client > 0 => Err(Failure::Abort(ErrorKind::ClientTimeout)),
            Due::Transfer => Err(Failure::Abort(ErrorKind::UpstreamTimeout)),
        }
    }

    /// Serves the connection until either side ends it, or shutdown finds it idle.
    pub(in crate::relay) async fn serve(mut self, shutdown: watch::Receiver<bool>) {
        let changed = std::pin::pin!(stop::changed(shutdown.clone()));
        let mut stop = Stop::new(shutdown, changed);
        let outcome = self.pump(&mut stop).await;
        let rec = self.tap.recorder.clone();
        if let Err(failure) = outcome {
            let kind = failure.kind();
            rec.event(recorder::Event::Error(kind));
            tracing::info!(tap = %self.tap.config.name, kind = kind.name(), "resp connection closed on error");
            if let Failure::Answer(answer, _) = failure {
                let line = answer.line();
                let _ = timeout(ANSWER_WRITE, self.client.write_all(line.as_bytes())).await;
            }
        }
        self.count_bytes();
        if self.upstream.take().is_some() {
            rec.event(recorder::Event::ConnectionClosed(Side::Upstream));
        }
    }

    /// Moves bytes both ways until either side closes: one readiness wait, then the one
    /// method for the event it found.
    async fn pump(&mut self, stop: &mut Stop<'_>) -> Result<(), Failure> {
        loop {
            let want = self.interest();
            if want.to_up > 0 && self.upstream.is_none() {
                self.connect().await?;
            }
            if let Some((at, _)) = want.due {
                self.timer.arm(at);
            }
            let step = match self.wait(&want, stop).await {
                Event::UpWritable(ready) => self.upstream_writable(ready, want.to_up)?,
                Event::ClientWritable(ready) => self.client_writable(ready, want.to_client)?,
                Event::ClientReadable(ready) => self.client_readable(ready)?,
                Event::UpReadable(ready) => self.upstream_readable(ready)?,
                Event::Timer => self.timer_fired(want.due, want.to_client)?,
                Event::Stop => Step::Close,
            };
            if step == Step::Close {
                return Ok(());
            }
        }
    }

    /// What the next wait is for.
    fn interest(&self) -> Interest {
        let to_up = if self.up_refused {
            0
        } else {
            (self.up_forwardable - self.up_written) as usize
        };
        let to_client = (self.down_read - self.down_written) as usize;
        Interest {
            to_up,
            to_client,
            // Stop reading commands while the buffer holds a whole one not yet sent, or
            // too many await replies.
            read_client: !self.up_refused
                && self.cbuf.len() < COMMAND_BUFFER
                && self.pending.len() < MAX_IN_FLIGHT
                && (self.cmd_streaming.is_none() || to_up == 0),
            // Replies are read only with nothing left to write, so a close from Redis
            // comes after everything it sent is out.
            read_up: to_client == 0,
            idle: self.pending.is_empty() && to_up == 0 && to_client == 0,
            due: self.due(to_up, to_client),
        }
    }

    /// Waits for the first of: a socket ready for what `want` asks of it (in order of
    /// preference: move bytes already here before reading more), shutdown while idle, the
    /// timer. One `poll_fn` over the sockets' readiness: no future per wait.
    async fn wait(&mut self, want: &Interest, stop: &mut Stop<'_>) -> Event {
        let (client, up, timer) = (&self.client, self.upstream.as_ref(), &mut self.timer);
        poll_fn(|cx| {
            if let Some(up) = up.filter(|_| want.to_up > 0) {
                if let Poll::Ready(r) = up.poll_write_ready(cx) {
                    return Poll::Ready(Event::UpWritable(r));
                }
            }
            if want.to_client > 0 {
                if let Poll::Ready(r) = client.poll_write_ready(cx) {
                    return Poll::Ready(Event::ClientWritable(r));
                }
            }
            if want.read_client {
                if let Poll::Ready(r) = client.poll_read_ready(cx) {
                    return Poll::Ready(Event::ClientReadable(r));
                }
            }
            if let Some(up) = up.filter(|_| want.read_up) {
                if let Poll::Ready(r) = up.poll_read_ready(cx) {
                    return Poll::Ready(Event::UpReadable(r));
                }
            }
            if want.idle {
                stop.register(cx);
                if stop.requested() {
                    return Poll::Ready(Event::Stop);
                }
            }
            if want.due.is_some() {
                return timer.poll_fired(cx).map(|()| Event::Timer);
            }
            Poll::Pending
        })
        .await
    }

    /// The timer fired. It may have fired for an earlier deadline than the current one;
    /// then the loop arms it again.
    fn timer_fired(&self, due: Option<(Tick, Due)>, to_client: usize) -> Result<Step, Failure> {
        match due {
            Some((at, which)) if self.timer.passed(at) => {
                tracing::debug!(tap = %self.tap.config.name, due = ?which, "resp deadline passed");
                self.expired(which, to_client)
            }
            _ => Ok(Step::Continue),
        }
    }

    async fn connect(&mut self) -> Result<(), Failure> {
        match self.tap.connect_upstream().await {
            Ok(stream) => {
                self.upstream = Some(stream);
                Ok(())
            }
            Err(why) => Err(Failure::Answer(
                RespAnswer::UpstreamUnreachable(why),
                ErrorKind::UpstreamConnect,
            )),
        }
    }

    /// The client sent bytes: frames the commands they complete.
    fn client_readable(&mut self, ready: io::Result<()>) -> Result<Step, Failure> {
        // With nothing in flight, a client's FIN or reset is how a connection ends: a
        // close, not an error. A reset with a command in flight abandons it.
        let in_flight = !self.pending.is_empty() || self.cmd_first.is_set();
        let gone = |reset: bool| {
            if reset && in_flight {
                return Err(Failure::Abort(ErrorKind::ClientAbort));
            }
            if !in_flight {
                self.tap.recorder.event(recorder::Event::ClientClosed);
            }
            Ok(Step::Close)
        };
        if ready.is_err() {
            return gone(true);
        }
        let n = match read_some(&self.client, self.cbuf.spare(COMMAND_BUFFER)) {
            Ok(0) => return gone(false),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Continue),
            Err(_) => return gone(true),
        };
        let t = clock::now();
        self.last_moved = t;
        self.cbuf.commit(n);
        self.up_read += n as u64;
        self.frame_commands(t)?;
        Ok(Step::Continue)
    }

    /// The upstream accepts bytes: forwards framed commands, and notes which are now sent.
    fn upstream_writable(&mut self, ready: io::Result<()>, to_up: usize) -> Result<Step, Failure> {
        let Some(up) = self.upstream.as_ref() else {
            return Ok(Step::Continue);
        };
        let n = match ready.and_then(|()| up.try_write(&self.cbuf.filled()[..to_up])) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Continue),
            // Redis may have answered before it closed (`-ERR Protocol error:
            // unauthenticated bulk length` while the bulk still streams): that answer is
            // read and relayed before the connection ends (`upstream_readable`).
            Err(e) => {
                tracing::debug!(tap = %self.tap.config.name, error = %e, "the upstream refused the command stream; relaying what it sent");
                self.up_refused = true;
                return Ok(Step::Continue);
            }
        };
        let t = clock::now();
        self.last_moved = t;
        self.cbuf.consume(n);
        self.up_written += n as u64;
        for p in self.pending.iter_mut().filter(|p| !p.ex.t_sent.is_set()) {
            if p.end <= self.up_written {
                p.ex.t_sent = At::tick(t);
            } else {
                break;
            }
        }
        Ok(Step::Continue)
    }

    /// The upstream sent bytes (or closed): frames the replies they complete.
    fn upstream_readable(&mut self, ready: io::Result<()>) -> Result<Step, Failure> {
        let Some(up) = self.upstream.as_ref() else {
            return Ok(Step::Continue);
        };
        let n = match ready.and_then(|()| read_some(up, self.ubuf.spare(REPLY_BUFFER))) {
            // Redis closed (QUIT, or it went away): what it sent is already written, since
            // it is read only with nothing left to write. After it refused the command
            // stream, the command cut short is a reset of the upstream's.
            Ok(0) if self.up_refused => return Err(Failure::Abort(ErrorKind::UpstreamReset)),
            Ok(0) => return Ok(Step::Close),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Continue),
            Err(_) if self.pending.is_empty() && !self.up_refused => return Ok(Step::Close),
            Err(_) => return Err(Failure::Abort(ErrorKind::UpstreamReset)),
        };
        let t = clock::now();
        self.last_moved = t;
        self.last_up_read = t;
        self.ubuf.commit(n);
        self.down_read += n as u64;
        if self.mode != Mode::PassThrough {
            self.frame_replies(self.ubuf.len() - n, t);
        }
        Ok(Step::Continue)
    }

    /// The client accepts bytes: forwards replies, and records those now written whole.
    fn client_writable(
        &mut self,
        ready: io::Result<()>,
        to_client: usize,
    ) -> Result<Step, Failure> {
        ready.map_err(|_| Failure::Abort(ErrorKind::ClientAbort))?;
        let n = match self.client.try_write(&self.ubuf.filled()[..to_client]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Continue),
            Err(_) => return Err(Failure::Abort(ErrorKind::ClientAbort)),
        };
        let t = clock::now();
        self.last_moved = t;
        self.ubuf.consume(n);
        self.down_written += n as u64;
        if !self.reply_write_first.is_set()
            && self.replies.in_message()
            && self.reply_start < self.down_written
        {
            self.reply_write_first = At::tick(t);
        }
        let mut recorded = false;
        while let Some(r) = self.replied.front_mut() {
            r.cmd.ex.t_write_first.set_once(t);
            if r.end > self.down_written {
                break;
            }
            let r = *r;
            self.replied.pop_front();
            self.record(&r, t);
            recorded = true;
        }
        if recorded {
            self.count_bytes();
        }
        Ok(Step::Continue)
    }

    /// Adds the bytes written each way since the last count to the tap's byte counters:
    /// once per write that completed replies (pipelined replies share it), and at the
    /// close for the rest (pushed messages, a reply cut short).
    fn count_bytes(&mut self) {
        let rec = &self.tap.recorder;
        let up = self.up_written - self.up_counted;
        let down = self.down_written - self.down_counted;
        if up > 0 {
            rec.event(recorder::Event::Bytes(Direction::Request, up));
        }
        if down > 0 {
            rec.event(recorder::Event::Bytes(Direction::Response, down));
        }
        self.up_counted = self.up_written;
        self.down_counted = self.down_written;
    }
}

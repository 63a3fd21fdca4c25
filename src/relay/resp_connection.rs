//! One client connection of a RESP (Redis) tap, and its upstream connection.
//!
//! Unlike HTTP, Redis lets a client send many commands before reading any reply, and
//! answers them in order. So the relay is a continuous pump in both directions: commands
//! are framed and forwarded as they complete, replies are framed and streamed back as they
//! arrive, and each reply is paired with the oldest command still waiting for one.
//!
//! A command's timeline: `t_first` (the read that brought its first byte) → `t_head` (its
//! last byte framed; `client_recv`) → sent upstream (`t_sent`) → the first byte of its
//! reply (`upstream_wait`, which for a pipelined command starts only when the previous
//! reply is complete, since Redis could not have answered it earlier; the time before
//! that is `queue`) → the reply's last byte (`upstream_recv`) → written to the client
//! (`write`). The instants go into an `Exchange`, and its `phases()` turns them into
//! phases as it does for HTTP (see `command_timeline` for how a command maps onto it).
//!
//! Pub/sub and MONITOR break the pairing: after them the server sends messages nobody
//! asked for. The connection then counts messages instead of timing commands, and in
//! RESP2 returns to pairing when the last subscription is gone. RESP3 push frames never
//! pair with a command.
//!
//! The sockets are driven as the HTTP connection drives them (see `connection`): one
//! `poll_fn` over the readiness of just the operations that can make progress, the
//! connection's one lazy `Timer` for every deadline, `Stop` for shutdown, `read_some` for
//! reads. Each event has its own method (`client_readable`, `upstream_writable`,
//! `upstream_readable`, `client_writable`, `timer_fired`) returning a `Step` or a
//! `Failure`, whose reply is a RESP error line.
//!
//! This file holds the connection, its waits and deadlines and the socket events;
//! `commands` frames what the client sends, `replies` pairs what Redis sends back and
//! records each exchange.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::timeout;

mod commands;
mod replies;

use super::buffer::Buf;
use super::exchange::Exchange;
use super::io::read_some;
use super::stop::{self, Stop};
use super::timer::Timer;
use super::TapContext;
use crate::clock::{self, Tick};
use crate::recorder::{Direction, ErrorKind, RouteId, Side};
use crate::resp::{Blocking, ModeSwitch, RespError, Scanner};

/// A command is assembled in the buffer up to this size before it is forwarded; larger
/// ones (big values) are streamed through as they arrive.
const COMMAND_BUFFER: usize = 64 * 1024;
const REPLY_BUFFER: usize = 16 * 1024;
/// Commands in flight whose replies are awaited, at most; past it the client is not read
/// until replies come back (Redis itself has no such limit, but a proxy's memory must).
const MAX_IN_FLIGHT: usize = 16 * 1024;
/// How long the error line sent before a close may take to write.
const ANSWER_WRITE: Duration = Duration::from_secs(2);

/// The RESP relay's failures: the client gets a RESP error line, or only the close.
type Failure = super::failure::Failure<RespAnswer>;

/// The error line a RESP tap sends the client before it closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RespAnswer {
    /// The oldest command's reply did not begin within `timeouts.response`.
    UpstreamTimeout,
    /// The upstream could not be connected.
    UpstreamUnreachable,
    /// A command the framer refused; Redis answers the same way and closes.
    ProtocolError(RespError),
}

impl RespAnswer {
    fn line(self) -> Cow<'static, str> {
        match self {
            RespAnswer::UpstreamTimeout => "-ERR phasescope: upstream timed out\r\n".into(),
            RespAnswer::UpstreamUnreachable => "-ERR phasescope: upstream unreachable\r\n".into(),
            RespAnswer::ProtocolError(e) => format!("-ERR Protocol error: {e}\r\n").into(),
        }
    }
}

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

/// A command sent (or being sent) whose reply has not completed.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Its timeline: `t_first`, `t_head` (framed; 0 while it streams through), `parse_ns`
    /// and `t_sent` (its last byte accepted by the upstream socket; 0: not yet) so far.
    ex: Exchange,
    /// Absolute offset, in the client→upstream stream, just past its last byte.
    end: u64,
    name: &'static str,
    route: RouteId,
    switch: Option<ModeSwitch>,
    /// Redis may hold it this long before replying (BLPOP, XREAD BLOCK, WAIT, …).
    block: Option<Blocking>,
    /// Its identity for the correlator, when the tap reports to one.
    key: Option<u64>,
}

/// What framing a complete command found out about it.
struct Seen {
    empty: bool,
    name: &'static str,
    switch: Option<ModeSwitch>,
    block: Option<Blocking>,
    key: Option<u64>,
}

/// A reply complete (or being written) on its way to the client.
#[derive(Debug, Clone, Copy)]
struct Replied {
    /// Its timeline is complete but for `t_write_first` (0 until a byte is written) and
    /// `t_write_last`.
    cmd: Pending,
    /// Absolute offset, in the upstream→client stream, just past its last byte.
    end: u64,
    bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every reply answers the oldest pending command.
    Paired,
    /// Pub/sub (RESP2): messages are counted; pairing resumes when the last
    /// subscription is gone.
    Subscribed,
    /// MONITOR, CLIENT REPLY OFF/SKIP, or a reply stream the scanner could not follow:
    /// bytes are relayed and nothing is paired for the rest of the connection.
    PassThrough,
}

pub(super) struct RespConnection {
    tap: Arc<TapContext>,
    client: TcpStream,
    upstream: Option<TcpStream>,
    cbuf: Buf,
    ubuf: Buf,
    commands: Scanner,
    replies: Scanner,
    /// Client→upstream stream offsets: bytes read, written, and framed as whole commands
    /// (or forwarded while still streaming).
    up_read: u64,
    up_written: u64,
    up_forwardable: u64,
    /// The current command's first byte arrived with the read at this tick.
    cmd_first: Tick,
    cmd_parse_ns: u64,
    /// The current command is larger than the buffer and is being streamed through.
    cmd_streaming: Option<Pending>,
    pending: VecDeque<Pending>,
    /// Upstream→client stream offsets.
    down_read: u64,
    down_written: u64,
    /// The offsets up to which `phasescope_bytes_total` has counted the bytes written each
    /// way: counted as replies complete, not only at the close a pooled connection may
    /// never reach.
    up_counted: u64,
    down_counted: u64,
    /// Where the reply being received started, and the tick of the read that brought its
    /// first byte, and of its first byte's write to the client.
    reply_start: u64,
    reply_first: Tick,
    reply_write_first: Tick,
    prev_reply_done: Tick,
    replied: VecDeque<Replied>,
    mode: Mode,
    resp3: bool,
    /// RESP3 subscriptions are open: the client waits for pushes, as a RESP2 subscriber
    /// does in `Mode::Subscribed`, and is spared the idle deadline.
    subscribed3: bool,
    /// The last read or write that moved a byte, either way, and the last read from the
    /// upstream: the idle, transfer and reply deadlines run from them.
    last_moved: Tick,
    last_up_read: Tick,
    timer: Timer,
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
    pub(super) fn new(client: TcpStream, tap: Arc<TapContext>) -> Self {
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
            cmd_first: 0,
            cmd_parse_ns: 0,
            cmd_streaming: None,
            pending: VecDeque::new(),
            down_read: 0,
            down_written: 0,
            up_counted: 0,
            down_counted: 0,
            reply_start: 0,
            reply_first: 0,
            reply_write_first: 0,
            prev_reply_done: 0,
            replied: VecDeque::new(),
            mode: Mode::Paired,
            resp3: false,
            subscribed3: false,
            last_moved: clock::now(),
            last_up_read: 0,
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
        if self.cmd_first != 0 && self.cmd_streaming.is_none() {
            consider(self.cmd_first, t.head, Due::Command);
        }
        if self.mode == Mode::Paired {
            match self.pending.front() {
                // A blocking command is owed its reply after its own timeout; one that
                // blocks forever has no deadline but the client's leaving.
                Some(p) if p.ex.t_sent != 0 => match p.block {
                    Some(Blocking::Forever) => {}
                    block => {
                        let after = match block {
                            Some(Blocking::For(d)) => t.response.saturating_add(d),
                            _ => t.response,
                        };
                        consider(p.ex.t_sent.max(self.last_up_read), after, Due::Reply)
                    }
                },
                Some(_) => {}
                None if to_up == 0
                    && to_client == 0
                    && self.cmd_first == 0
                    && !self.subscribed3 =>
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
    pub(super) async fn serve(mut self, shutdown: watch::Receiver<bool>) {
        let changed = std::pin::pin!(stop::changed(shutdown.clone()));
        let mut stop = Stop::new(shutdown, changed);
        let outcome = self.pump(&mut stop).await;
        let rec = self.tap.recorder.clone();
        if let Err(failure) = outcome {
            let kind = failure.kind();
            rec.error(kind);
            tracing::info!(tap = %self.tap.config.name, kind = kind.name(), "resp connection closed on error");
            if let Failure::Answer(answer, _) = failure {
                let line = answer.line();
                let _ = timeout(ANSWER_WRITE, self.client.write_all(line.as_bytes())).await;
            }
        }
        self.count_bytes();
        if self.upstream.take().is_some() {
            rec.connection_closed(Side::Upstream);
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
        let to_up = (self.up_forwardable - self.up_written) as usize;
        let to_client = (self.down_read - self.down_written) as usize;
        Interest {
            to_up,
            to_client,
            // Stop reading commands while the buffer holds a whole one not yet sent, or
            // too many await replies.
            read_client: self.cbuf.len() < COMMAND_BUFFER
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
            Some(stream) => {
                self.upstream = Some(stream);
                Ok(())
            }
            None => Err(Failure::Answer(
                RespAnswer::UpstreamUnreachable,
                ErrorKind::UpstreamConnect,
            )),
        }
    }

    /// The client sent bytes: frames the commands they complete.
    fn client_readable(&mut self, ready: io::Result<()>) -> Result<Step, Failure> {
        ready.map_err(|_| Failure::Abort(ErrorKind::ClientReset))?;
        let n = match read_some(&self.client, self.cbuf.spare(COMMAND_BUFFER)) {
            Ok(0) => return Ok(Step::Close),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Continue),
            Err(_) => return Err(Failure::Abort(ErrorKind::ClientReset)),
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
            Err(_) => return Err(Failure::Abort(ErrorKind::UpstreamReset)),
        };
        let t = clock::now();
        self.last_moved = t;
        self.cbuf.consume(n);
        self.up_written += n as u64;
        for p in self.pending.iter_mut().filter(|p| p.ex.t_sent == 0) {
            if p.end <= self.up_written {
                p.ex.t_sent = t;
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
            // it is read only with nothing left to write.
            Ok(0) => return Ok(Step::Close),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Continue),
            Err(_) if self.pending.is_empty() => return Ok(Step::Close),
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
        ready.map_err(|_| Failure::Abort(ErrorKind::ClientReset))?;
        let n = match self.client.try_write(&self.ubuf.filled()[..to_client]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Continue),
            Err(_) => return Err(Failure::Abort(ErrorKind::ClientReset)),
        };
        let t = clock::now();
        self.last_moved = t;
        self.ubuf.consume(n);
        self.down_written += n as u64;
        if self.reply_write_first == 0
            && self.replies.in_message()
            && self.reply_start < self.down_written
        {
            self.reply_write_first = t;
        }
        let mut recorded = false;
        while let Some(r) = self.replied.front_mut() {
            if r.cmd.ex.t_write_first == 0 {
                r.cmd.ex.t_write_first = t;
            }
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
            rec.bytes(Direction::Request, up);
        }
        if down > 0 {
            rec.bytes(Direction::Response, down);
        }
        self.up_counted = self.up_written;
        self.down_counted = self.down_written;
    }
}

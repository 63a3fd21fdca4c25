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
use tokio::time::{timeout, Instant};

use super::buffer::Buf;
use super::exchange::{Exchange, Wait};
use super::io::read_some;
use super::stop::{self, Stop};
use super::timer::Timer;
use super::TapContext;
use crate::clock::{self, nanos_between, Tick};
use crate::correlate::{self, key::CommandKey};
use crate::recorder::{Direction, ErrorKind, ExchangeRecord, RouteId, Side};
use crate::resp::{self, Kind, ModeSwitch, ReplyMode, RespError, Scanner};

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
pub(super) enum RespAnswer {
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
    due: Option<(Instant, Due)>,
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
    /// Its identity for the correlator, when the tap reports to one.
    key: Option<u64>,
}

/// What framing a complete command found out about it.
struct Seen {
    empty: bool,
    name: &'static str,
    switch: Option<ModeSwitch>,
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
    /// Where the reply being received started, and the tick of the read that brought its
    /// first byte, and of its first byte's write to the client.
    reply_start: u64,
    reply_first: Tick,
    reply_write_first: Tick,
    prev_reply_done: Tick,
    replied: VecDeque<Replied>,
    mode: Mode,
    resp3: bool,
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
            reply_start: 0,
            reply_first: 0,
            reply_write_first: 0,
            prev_reply_done: 0,
            replied: VecDeque::new(),
            mode: Mode::Paired,
            resp3: false,
            last_moved: clock::now(),
            last_up_read: 0,
            timer: Timer::new(),
        }
    }

    /// The deadline that applies now, if any. Subscribers and MONITOR wait for messages
    /// for as long as they like (Redis's own `timeout` spares them too); a command being
    /// streamed through, larger than the buffer, is under the transfer deadline.
    fn due(&self, to_up: usize, to_client: usize) -> Option<(tokio::time::Instant, Due)> {
        let t = &self.tap.config.timeouts;
        let mut best: Option<(tokio::time::Instant, Due)> = None;
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
                Some(p) if p.ex.t_sent != 0 => {
                    consider(p.ex.t_sent.max(self.last_up_read), t.response, Due::Reply)
                }
                Some(_) => {}
                None if to_up == 0 && to_client == 0 && self.cmd_first == 0 => {
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
        rec.bytes(Direction::Request, self.up_written);
        rec.bytes(Direction::Response, self.down_written);
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
    fn timer_fired(&self, due: Option<(Instant, Due)>, to_client: usize) -> Result<Step, Failure> {
        match due {
            Some((at, which)) if Instant::now() >= at => {
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

    /// Frames the commands that the bytes read at `t` complete.
    fn frame_commands(&mut self, t: Tick) -> Result<(), Failure> {
        loop {
            // The current command starts at `up_forwardable` (nothing after it is
            // forwardable yet), unless it is already streaming through.
            let start = (self.up_forwardable - self.up_written) as usize;
            let rest = &self.cbuf.filled()[start..];
            if rest.is_empty() {
                return Ok(());
            }
            if self.cmd_first == 0 {
                self.cmd_first = t;
            }
            let t0 = clock::now();
            let scanned = if self.cmd_streaming.is_some() {
                self.commands.feed(rest)
            } else {
                self.commands.scan(rest)
            };
            let t1 = clock::now();
            match scanned {
                Ok(Some(len)) => {
                    self.cmd_parse_ns += nanos_between(t0, t1);
                    let end = self.up_forwardable + len as u64;
                    let cmd = match self.cmd_streaming.take() {
                        Some(mut p) => {
                            p.ex.t_head = t1;
                            p.ex.t_up_ready = t1;
                            p.ex.parse_ns = self.cmd_parse_ns;
                            Some(Pending { end, ..p })
                        }
                        None => {
                            let seen = seen(&rest[..len], self.tap.correlator.is_some());
                            self.classify(seen, t1, end)
                        }
                    };
                    self.command_done(end, cmd);
                }
                Ok(None) => {
                    self.cmd_parse_ns += nanos_between(t0, t1);
                    self.command_incomplete(start);
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(tap = %self.tap.config.name, error = %e, "malformed command");
                    return Err(Failure::Answer(
                        RespAnswer::ProtocolError(e),
                        ErrorKind::BadRequest,
                    ));
                }
            }
        }
    }

    /// A command ends at stream offset `end`; `cmd` awaits its reply, if one will come.
    fn command_done(&mut self, end: u64, cmd: Option<Pending>) {
        self.up_forwardable = end;
        self.cmd_first = 0;
        self.cmd_parse_ns = 0;
        if let Some(cmd) = cmd {
            self.expect_reply(cmd);
        }
    }

    /// The command starting at `start` in the buffer is not complete. One larger than the
    /// buffer is forwarded as it arrives, and framing goes on.
    fn command_incomplete(&mut self, start: usize) {
        if self.cmd_streaming.is_none() && self.cbuf.len() >= COMMAND_BUFFER {
            let name = resp::command_name(&self.cbuf.filled()[start..])
                .and_then(resp::known_command)
                .unwrap_or("other");
            self.cmd_streaming = Some(Pending {
                ex: command_timeline(self.cmd_first, 0, 0),
                end: u64::MAX,
                name,
                route: self.tap.routes.resolve_command(name),
                switch: None,
                key: None,
            });
        }
        if self.cmd_streaming.is_some() {
            self.up_forwardable = self.up_read;
        }
    }

    /// What a complete command means for pairing; `None` when no reply will answer it.
    fn classify(&mut self, seen: Option<Seen>, t_head: Tick, end: u64) -> Option<Pending> {
        let Seen {
            empty,
            name,
            switch,
            key,
        } = seen?;
        if empty {
            return None;
        }
        match switch {
            Some(ModeSwitch::Monitor)
            | Some(ModeSwitch::ClientReply(ReplyMode::Off | ReplyMode::Skip)) => {
                // Replies will no longer follow commands one to one.
                self.mode = Mode::PassThrough;
            }
            // In RESP3 (un)subscribe confirmations are pushes, which never pair.
            Some(ModeSwitch::Subscribe(_) | ModeSwitch::Unsubscribe(_)) if self.resp3 => {
                return None
            }
            _ => {}
        }
        if self.mode != Mode::Paired {
            return None;
        }
        Some(Pending {
            ex: command_timeline(self.cmd_first, t_head, self.cmd_parse_ns),
            end,
            name,
            route: self.tap.routes.resolve_command(name),
            switch,
            key,
        })
    }

    fn expect_reply(&mut self, cmd: Pending) {
        self.pending.push_back(cmd);
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

    /// Frames the replies in the buffer from `at` on, read at `t`.
    fn frame_replies(&mut self, mut at: usize, t: Tick) {
        while at < self.ubuf.len() {
            if !self.replies.in_message() {
                self.reply_first = t;
                self.reply_start = self.down_written + at as u64;
                self.reply_write_first = 0;
            }
            // A message that began in an earlier read has its start already written out:
            // `msg` below then holds only its tail.
            let msg_start = at;
            match self.replies.feed(&self.ubuf.filled()[at..]) {
                Ok(Some(len)) => {
                    at += len;
                    let end = self.down_written + at as u64;
                    let kind = self.replies.kind();
                    let last_unsub = last_unsubscribe(&self.ubuf.filled()[msg_start..at]);
                    self.reply_done(kind, last_unsub, t, end);
                }
                Ok(None) => return,
                Err(e) => {
                    // Redis is trusted to speak RESP; if we cannot follow it, relay blindly
                    // rather than mis-pair everything that follows.
                    tracing::warn!(tap = %self.tap.config.name, error = %e, "unreadable reply stream; relaying without timing");
                    self.tap.recorder.error(ErrorKind::BadResponse);
                    self.mode = Mode::PassThrough;
                    self.pending.clear();
                    return;
                }
            }
        }
    }

    /// A reply ended at stream offset `end`, read at `t`. `last_unsub`: it confirms that
    /// no subscription is left (RESP2 pub/sub).
    fn reply_done(&mut self, kind: Option<Kind>, last_unsub: bool, t: Tick, end: u64) {
        if kind.is_some_and(Kind::is_push) {
            self.tap.recorder.pushed(1);
            return;
        }
        if self.mode == Mode::Subscribed {
            self.tap.recorder.pushed(1);
            if last_unsub {
                self.mode = Mode::Paired;
            }
            return;
        }
        let Some(mut cmd) = self.pending.pop_front() else {
            // A reply nobody is waiting for (e.g. after CLIENT REPLY ON): relay it.
            return;
        };
        match cmd.switch {
            Some(ModeSwitch::Hello { protover: Some(v) }) if !kind.is_some_and(Kind::is_error) => {
                self.resp3 = v == 3;
            }
            Some(ModeSwitch::Reset) => self.resp3 = false,
            Some(ModeSwitch::Subscribe(_)) if !self.resp3 && !kind.is_some_and(Kind::is_error) => {
                // Confirmations for every channel named, then messages: stop pairing.
                // Commands sent after SUBSCRIBE in RESP2 are subscriber commands whose
                // answers arrive as messages too.
                self.mode = Mode::Subscribed;
                self.pending.clear();
            }
            _ => {}
        }
        let ex = &mut cmd.ex;
        if self.prev_reply_done > ex.t_sent {
            // Sent while the previous reply was still arriving: Redis could not have
            // begun on it earlier.
            ex.wait = Wait::Behind;
            ex.t_up_free = self.prev_reply_done;
        }
        ex.t_resp_first = self.reply_first;
        ex.t_resp_last = t;
        ex.t_write_first = self.reply_write_first;
        if let (Some(correlator), Some(key)) = (&self.tap.correlator, cmd.key) {
            correlator.resp_seen(correlate::Seen {
                key,
                t_sent: ex.t_sent,
                t_reply: ex.t_resp_first,
                t_wait_from: ex.wait_from(),
            });
        }
        self.prev_reply_done = t;
        self.replied.push_back(Replied {
            cmd,
            end,
            bytes: end - self.reply_start,
        });
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
        }
        Ok(Step::Continue)
    }

    /// A reply was written whole at `t_write_last`: its exchange is recorded.
    fn record(&self, r: &Replied, t_write_last: Tick) {
        let c = &r.cmd;
        let ex = Exchange {
            t_write_last,
            ..c.ex
        };
        let phases = ex.phases();
        self.tap.recorder.exchange(&ExchangeRecord {
            route: c.route,
            method: c.name,
            target: &[],
            status: 0,
            request_bytes: 0,
            response_bytes: r.bytes,
            phases,
        });
    }
}

/// The timeline of a command whose first byte came at `t_first`, framed at `t_head`. It
/// is forwarded as soon as it is framed, so the upstream is ready for it then: no
/// `upstream_connect` and no wait before the send. Its first byte's write is not timed
/// apart from its last byte's (`t_up_write` stays 0: no `upstream_send`), and a reply
/// has no head to parse.
fn command_timeline(t_first: Tick, t_head: Tick, parse_ns: u64) -> Exchange {
    Exchange {
        t_first,
        t_head,
        t_up_ready: t_head,
        parse_ns,
        headless: true,
        ..Exchange::default()
    }
}

/// What a complete command `msg` says about itself; its correlator key only when the tap
/// reports to a correlator. `None`: the framer accepted it but it is not a command.
fn seen(msg: &[u8], correlated: bool) -> Option<Seen> {
    let c = resp::command(msg).ok()?;
    Some(Seen {
        empty: c.is_empty(),
        name: c.known_name().unwrap_or("other"),
        switch: c.mode_switch(),
        key: correlated.then(|| {
            c.args()
                .fold(CommandKey::new().name(c.name()), |k, a| k.arg(a))
                .finish()
        }),
    })
}

/// A RESP2 `unsubscribe`/`punsubscribe`/`sunsubscribe` confirmation whose subscription
/// count is 0: `*3\r\n$11\r\nunsubscribe\r\n$N\r\n<channel>\r\n:0\r\n`.
fn last_unsubscribe(msg: &[u8]) -> bool {
    if !msg.ends_with(b"\r\n:0\r\n") || !msg.starts_with(b"*3\r\n$") {
        return false;
    }
    let head = &msg[..msg.len().min(24)];
    [
        &b"unsubscribe\r\n"[..],
        b"punsubscribe\r\n",
        b"sunsubscribe\r\n",
    ]
    .iter()
    .any(|w| head.windows(w.len()).any(|x| x.eq_ignore_ascii_case(w)))
}

#[cfg(test)]
mod tests {
    use super::last_unsubscribe;

    #[test]
    fn recognizes_the_last_unsubscribe() {
        assert!(last_unsubscribe(
            b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n"
        ));
        assert!(last_unsubscribe(
            b"*3\r\n$12\r\npunsubscribe\r\n$2\r\np*\r\n:0\r\n"
        ));
        assert!(!last_unsubscribe(
            b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:1\r\n"
        ));
        assert!(!last_unsubscribe(
            b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n:0\r\n"
        ));
    }
}

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
//! The sockets are driven as the HTTP connection drives them (see `relay::http::connection`): one
//! `poll_fn` over the readiness of just the operations that can make progress, the
//! connection's one lazy `Timer` for every deadline, `Stop` for shutdown, `read_some` for
//! reads. Each event has its own method (`client_readable`, `upstream_writable`,
//! `upstream_readable`, `client_writable`, `timer_fired`) returning a `Step` or a
//! `Failure`, whose reply is a RESP error line.
//!
//! This folder holds what is RESP's alone: here the connection's state, its limits and
//! its failure type; `connection` its waits, deadlines and socket events; `commands`
//! frames what the client sends; `replies` pairs what Redis sends back and records each
//! exchange.

mod commands;
mod connection;
mod replies;
mod subscriptions;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::clock::{At, Tick};
use crate::recorder::RouteId;
use crate::relay::buffer::Buf;
use crate::relay::exchange::Exchange;
use crate::relay::failure;
use crate::relay::timer::Timer;
use crate::relay::TapContext;
use crate::resp::{Blocking, ModeSwitch, RespError, Scanner};
use subscriptions::{Subscriptions, Transaction};

/// A command is assembled in the buffer up to this size before it is forwarded; larger
/// ones (big values), and those whose headers announce they will be larger
/// (`Scanner::announced`), are streamed through as they arrive.
const COMMAND_BUFFER: usize = 64 * 1024;
const REPLY_BUFFER: usize = 16 * 1024;
/// Commands in flight whose replies are awaited, at most; past it the client is not read
/// until replies come back (Redis itself has no such limit, but a proxy's memory must).
const MAX_IN_FLIGHT: usize = 16 * 1024;

/// The RESP relay's failures: the client gets a RESP error line, or only the close.
type Failure = failure::Failure<RespAnswer>;

/// The error line a RESP tap sends the client before it closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RespAnswer {
    /// The oldest command's reply did not begin within `timeouts.response`.
    UpstreamTimeout,
    /// The upstream could not be connected, and why.
    UpstreamUnreachable(super::ConnectFailure),
    /// A command the framer refused; Redis answers the same way and closes.
    ProtocolError(RespError),
}

impl RespAnswer {
    fn line(self) -> Cow<'static, str> {
        match self {
            RespAnswer::UpstreamTimeout => "-ERR phasescope: upstream timed out\r\n".into(),
            RespAnswer::UpstreamUnreachable(why) => match why {
                super::ConnectFailure::Refused => {
                    "-ERR phasescope: upstream unreachable: connection refused (nothing listens on its address)\r\n"
                }
                super::ConnectFailure::TimedOut => {
                    "-ERR phasescope: upstream unreachable: the connect timed out\r\n"
                }
                super::ConnectFailure::Other => "-ERR phasescope: upstream unreachable\r\n",
            }
            .into(),
            RespAnswer::ProtocolError(e) => format!("-ERR Protocol error: {e}\r\n").into(),
        }
    }
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
    /// The reply was an error (`-ERR …`, a RESP3 bulk error): the server's own error
    /// answer, kept apart from the successes.
    error: bool,
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

pub(in crate::relay) struct RespConnection {
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
    /// The current command's first byte arrived with the read at this instant; unset
    /// between commands.
    cmd_first: At,
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
    reply_first: At,
    reply_write_first: At,
    /// When the previous reply was read whole (not taken before the first).
    prev_reply_done: At,
    replied: VecDeque<Replied>,
    mode: Mode,
    resp3: bool,
    /// The subscriptions Redis confirmed: while any is open the client waits for
    /// messages (a RESP2 one in `Mode::Subscribed`, a RESP3 one among its pushes) and is
    /// spared the idle deadline.
    subscriptions: Subscriptions,
    /// The MULTI the commands sent since are queued in, if any.
    transaction: Transaction,
    /// The last read or write that moved a byte, either way, and the last read from the
    /// upstream: the idle, transfer and reply deadlines run from them.
    last_moved: Tick,
    last_up_read: Tick,
    /// The upstream refused more of the command stream (a write failed: Redis closed after
    /// answering, as it does an unauthenticated client's huge bulk): nothing more is
    /// forwarded or read from the client, and what Redis sent before it closed is still
    /// read and relayed, so that its error line reaches the client.
    up_refused: bool,
    timer: Timer,
}

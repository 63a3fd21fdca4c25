//! The command side of a RESP connection: framing what the client sends into commands,
//! and what each command means for pairing replies with it.

use super::subscriptions::Queued;
use super::{Failure, Mode, Pending, RespAnswer, RespConnection, Seen, COMMAND_BUFFER};
use crate::clock::{self, nanos_between, At, Tick};
use crate::correlate::key::CommandKey;
use crate::recorder::ErrorKind;
use crate::relay::exchange::Exchange;
use crate::resp::{self, ModeSwitch, ReplyMode};

impl RespConnection {
    /// Frames the commands that the bytes read at `t` complete.
    pub(super) fn frame_commands(&mut self, t: Tick) -> Result<(), Failure> {
        loop {
            // The current command starts at `up_forwardable` (nothing after it is
            // forwardable yet), unless it is already streaming through.
            let start = (self.up_forwardable - self.up_written) as usize;
            let rest = &self.cbuf.filled()[start..];
            if rest.is_empty() {
                return Ok(());
            }
            self.cmd_first.set_once(t);
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
                            p.ex.t_head = At::tick(t1);
                            p.ex.t_up_ready = At::tick(t1);
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
        self.cmd_first = At::UNSET;
        self.cmd_parse_ns = 0;
        if let Some(cmd) = cmd {
            self.expect_reply(cmd);
        }
    }

    /// The command starting at `start` in the buffer is not complete. One larger than the
    /// buffer, or whose headers announce it will be, is forwarded as it arrives, and
    /// framing goes on. Redis answers some such announcements at once (an unauthenticated
    /// client's `$400000000` or `*2147483647`: `-ERR Protocol error: unauthenticated bulk
    /// length`, then it closes); held here, they would never reach it.
    fn command_incomplete(&mut self, start: usize) {
        let too_large =
            self.cbuf.len() >= COMMAND_BUFFER || self.commands.announced() > COMMAND_BUFFER as u64;
        if self.cmd_streaming.is_none() && too_large {
            let name = resp::command_name(&self.cbuf.filled()[start..])
                .and_then(resp::known_command)
                .unwrap_or("other");
            self.cmd_streaming = Some(Pending {
                ex: command_timeline(self.cmd_first, At::UNSET, 0),
                end: u64::MAX,
                name,
                route: self.tap.routes.resolve_command(name),
                switch: None,
                block: None,
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
            block,
            key,
        } = seen?;
        if empty {
            return None;
        }
        // A command queued in a transaction switches nothing now (Redis answers it
        // `+QUEUED`); an EXEC that runs a queued switch leaves replies that cannot be
        // paired with confidence.
        let switch = match self.transaction.sent(name, switch.is_some()) {
            Queued::No => switch,
            Queued::Yes => None,
            Queued::ExecWithSwitch => {
                self.mode = Mode::PassThrough;
                None
            }
        };
        if let Some(ModeSwitch::Reset) = switch {
            self.transaction.clear();
        }
        if let Some(ModeSwitch::ClientReply(ReplyMode::Off | ReplyMode::Skip)) = switch {
            // Replies will no longer follow commands one to one, and taking effect
            // leaves no reply to see it by.
            self.mode = Mode::PassThrough;
        }
        // MONITOR and (un)subscribe commands wait for their reply: they switch the mode
        // once it shows Redis carried them out (`+OK`, a confirmation), not on an error.
        // Whether a push or an array confirms a subscription is known only when it comes
        // (a HELLO 3 in the same write is answered after they are framed).
        if self.mode != Mode::Paired {
            return None;
        }
        Some(Pending {
            ex: command_timeline(self.cmd_first, At::tick(t_head), self.cmd_parse_ns),
            end,
            name,
            route: self.tap.routes.resolve_command(name),
            switch,
            block,
            key,
        })
    }

    fn expect_reply(&mut self, cmd: Pending) {
        self.pending.push_back(cmd);
    }
}

/// The timeline of a command whose first byte came at `t_first`, framed at `t_head`. It
/// is forwarded as soon as it is framed, so the upstream is ready for it then: no
/// `upstream_connect` and no wait before the send. Its first byte's write is not timed
/// apart from its last byte's (`t_up_write` is never taken: no `upstream_send`), and a reply
/// has no head to parse.
fn command_timeline(t_first: At, t_head: At, parse_ns: u64) -> Exchange {
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
        block: c.blocking(),
        key: correlated.then(|| {
            c.args()
                .fold(CommandKey::new().name(c.name()), |k, a| k.arg(a))
                .finish()
        }),
    })
}

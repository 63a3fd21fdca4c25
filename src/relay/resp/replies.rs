//! The reply side of a RESP connection: framing what Redis sends into replies, pairing
//! each with the oldest command waiting for one, and recording the exchange once the
//! reply is written.

use super::{Mode, Replied, RespConnection};
use crate::clock::Tick;
use crate::correlate;
use crate::recorder::{ErrorKind, Event, ExchangeId, ExchangeRecord};
use crate::relay::exchange::{Exchange, Wait};
use crate::resp::{Kind, ModeSwitch};

impl RespConnection {
    /// Frames the replies in the buffer from `at` on, read at `t`.
    pub(super) fn frame_replies(&mut self, mut at: usize, t: Tick) {
        while at < self.ubuf.len() {
            let from_start = !self.replies.in_message();
            if from_start {
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
                    let msg = &self.ubuf.filled()[msg_start..at];
                    let last_unsub = last_unsubscribe(msg);
                    if kind.is_some_and(Kind::is_push) {
                        let seen = if from_start {
                            push_seen(msg)
                        } else {
                            PushSeen::Unseen
                        };
                        if !self.push_answers(seen) {
                            self.tap.recorder.event(Event::Pushed(1));
                            continue;
                        }
                    }
                    self.reply_done(kind, last_unsub, t, end);
                }
                Ok(None) => return,
                Err(e) => {
                    // Redis is trusted to speak RESP; if we cannot follow it, relay blindly
                    // rather than mis-pair everything that follows.
                    tracing::warn!(tap = %self.tap.config.name, error = %e, "unreadable reply stream; relaying without timing");
                    self.tap
                        .recorder
                        .event(Event::Error(ErrorKind::BadResponse));
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
        let push = kind.is_some_and(Kind::is_push);
        if self.mode == Mode::Subscribed {
            self.tap.recorder.event(Event::Pushed(1));
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
            Some(ModeSwitch::Reset) => {
                self.resp3 = false;
                self.subscribed3 = false;
            }
            Some(ModeSwitch::Subscribe(_))
                if !self.resp3 && !push && !kind.is_some_and(Kind::is_error) =>
            {
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

    /// A RESP3 push arrived: whether it answers the oldest command (its first
    /// (un)subscribe confirmation; later ones, messages and invalidations answer none).
    /// Notes whether subscriptions remain, for the idle deadline.
    fn push_answers(&mut self, seen: PushSeen) -> bool {
        match seen {
            PushSeen::Subscribed => self.subscribed3 = true,
            PushSeen::Unsubscribed { last } => self.subscribed3 = !last,
            PushSeen::Other => return false,
            PushSeen::Unseen => {}
        }
        self.mode == Mode::Paired
            && self.pending.front().is_some_and(|p| {
                matches!(
                    p.switch,
                    Some(ModeSwitch::Subscribe(_) | ModeSwitch::Unsubscribe(_))
                )
            })
    }

    /// A reply was written whole at `t_write_last`: its exchange is recorded.
    pub(super) fn record(&self, r: &Replied, t_write_last: Tick) {
        let c = &r.cmd;
        let ex = Exchange {
            t_write_last,
            ..c.ex
        };
        let phases = ex.phases();
        self.tap.recorder.exchange(&ExchangeRecord {
            id: ExchangeId::next(),
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

/// What a RESP3 push (`>3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n`) is, read from its
/// first element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushSeen {
    /// A (p|s)subscribe confirmation.
    Subscribed,
    /// An (p|s)unsubscribe confirmation; `last`: no subscription is left.
    Unsubscribed { last: bool },
    /// A message, an invalidation, anything else.
    Other,
    /// Its start went out with an earlier read: it is not known which.
    Unseen,
}

fn push_seen(msg: &[u8]) -> PushSeen {
    let Some(rest) = msg.strip_prefix(b">3\r\n$") else {
        return PushSeen::Other;
    };
    let Some(crlf) = rest.iter().position(|&b| b == b'\r') else {
        return PushSeen::Other;
    };
    let Some(name) = std::str::from_utf8(&rest[..crlf])
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| rest.get(crlf + 2..crlf + 2 + n))
    else {
        return PushSeen::Other;
    };
    let is = |w: &[u8]| name.eq_ignore_ascii_case(w);
    if is(b"subscribe") || is(b"psubscribe") || is(b"ssubscribe") {
        PushSeen::Subscribed
    } else if is(b"unsubscribe") || is(b"punsubscribe") || is(b"sunsubscribe") {
        PushSeen::Unsubscribed {
            last: msg.ends_with(b"\r\n:0\r\n"),
        }
    } else {
        PushSeen::Other
    }
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
    use super::{last_unsubscribe, push_seen, PushSeen};

    #[test]
    fn reads_what_a_push_is() {
        assert_eq!(
            push_seen(b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"),
            PushSeen::Subscribed
        );
        assert_eq!(
            push_seen(b">3\r\n$10\r\npsubscribe\r\n$2\r\np*\r\n:2\r\n"),
            PushSeen::Subscribed
        );
        assert_eq!(
            push_seen(b">3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n"),
            PushSeen::Unsubscribed { last: true }
        );
        assert_eq!(
            push_seen(b">3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:3\r\n"),
            PushSeen::Unsubscribed { last: false }
        );
        assert_eq!(
            push_seen(b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n"),
            PushSeen::Other
        );
        assert_eq!(
            push_seen(b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"),
            PushSeen::Other
        );
        assert_eq!(push_seen(b">3\r\n$99\r\nsub"), PushSeen::Other);
    }

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

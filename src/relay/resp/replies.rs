//! The reply side of a RESP connection: framing what Redis sends into replies, pairing
//! each with the oldest command waiting for one, and recording the exchange once the
//! reply is written.

use super::subscriptions::Confirmation;
use super::{Mode, Replied, RespConnection};
use crate::clock::{At, Tick};
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
                self.reply_first = At::tick(t);
                self.reply_start = self.down_written + at as u64;
                self.reply_write_first = At::UNSET;
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
                    // Only a message read from its start can be told for what it is.
                    let confirmation = if from_start {
                        Confirmation::read(msg)
                    } else {
                        None
                    };
                    if let Some(c) = confirmation {
                        self.subscriptions.confirm(c);
                    }
                    if kind.is_some_and(Kind::is_push) {
                        let seen = match (from_start, confirmation) {
                            (false, _) => PushSeen::Unseen,
                            (true, Some(_)) => PushSeen::Confirmation,
                            (true, None) => PushSeen::Other,
                        };
                        if !self.push_answers(seen) {
                            self.tap.recorder.event(Event::Pushed(1));
                            continue;
                        }
                    }
                    self.reply_done(kind, confirmation, t, end);
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

    /// A reply ended at stream offset `end`, read at `t`; `confirmation`: it is a
    /// (un)subscribe confirmation (already counted in `subscriptions`).
    fn reply_done(
        &mut self,
        kind: Option<Kind>,
        confirmation: Option<Confirmation>,
        t: Tick,
        end: u64,
    ) {
        let push = kind.is_some_and(Kind::is_push);
        if self.mode == Mode::Subscribed {
            self.tap.recorder.event(Event::Pushed(1));
            // Out of pub/sub once Redis says no subscription of either count is left.
            if confirmation.is_some() && !self.subscriptions.any() {
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
                self.subscriptions.clear();
            }
            Some(ModeSwitch::Subscribe(_))
                if !self.resp3 && !push && confirmation.is_some_and(|c| c.subscribe) =>
            {
                // Confirmations for every channel named, then messages: stop pairing.
                // Commands sent after SUBSCRIBE in RESP2 are subscriber commands whose
                // answers arrive as messages too.
                self.mode = Mode::Subscribed;
                self.pending.clear();
            }
            Some(ModeSwitch::Monitor) if !kind.is_some_and(Kind::is_error) => {
                // `+OK`: Redis streams every command it runs from now on; nothing
                // follows commands one to one.
                self.mode = Mode::PassThrough;
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
        ex.t_resp_last = At::tick(t);
        ex.t_write_first = self.reply_write_first;
        // A reply follows its command's last byte out: both are taken.
        if let (Some(correlator), Some(key), Some(t_sent), Some(t_reply)) = (
            &self.tap.correlator,
            cmd.key,
            ex.t_sent.get(),
            ex.t_resp_first.get(),
        ) {
            correlator.resp_seen(correlate::Seen {
                key,
                t_sent,
                t_reply,
                t_wait_from: ex.wait_from().get().unwrap_or(t_sent),
            });
        }
        self.prev_reply_done = At::tick(t);
        self.replied.push_back(Replied {
            cmd,
            end,
            bytes: end - self.reply_start,
            error: kind.is_some_and(Kind::is_error),
        });
    }

    /// A RESP3 push arrived: whether it answers the oldest command (its first
    /// (un)subscribe confirmation; later ones, messages and invalidations answer none).
    /// Notes whether subscriptions remain, for the idle deadline.
    fn push_answers(&mut self, seen: PushSeen) -> bool {
        match seen {
            PushSeen::Other => return false,
            PushSeen::Confirmation | PushSeen::Unseen => {}
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
            t_write_last: At::tick(t_write_last),
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
            failure: None,
            error_reply: r.error,
        });
    }
}

/// What a RESP3 push (`>3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n`) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushSeen {
    /// A (un)subscribe confirmation of any namespace.
    Confirmation,
    /// A message, an invalidation, anything else.
    Other,
    /// Its start went out with an earlier read: it is not known which.
    Unseen,
}

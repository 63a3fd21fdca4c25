//! What Redis says a connection is subscribed to, read off its (un)subscribe
//! confirmations, and the transaction a command is queued in: a mode switch happens when
//! Redis carries it out, not when the command is sent.
//!
//! Redis keeps two counts apart. A `subscribe`, `psubscribe`, `unsubscribe` or
//! `punsubscribe` confirmation carries the number of channels and patterns left; an
//! `ssubscribe` or `sunsubscribe` one the number of shard channels left. A client leaves
//! pub/sub only once both are 0: after `SUBSCRIBE c`, `SSUBSCRIBE s`, `UNSUBSCRIBE c`
//! Redis answers `unsubscribe c :0` and the client is still subscribed to `s`.

/// Which count a confirmation gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Namespace {
    /// Channels and patterns together.
    Channels,
    Shard,
}

/// A (un)subscribe confirmation, RESP2 (`*3`) or RESP3 (`>3`):
/// `*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Confirmation {
    pub namespace: Namespace,
    /// A subscribe confirmation (else an unsubscribe one).
    pub subscribe: bool,
    /// Subscriptions of its namespace left after it.
    pub left: u64,
}

impl Confirmation {
    /// Reads a whole message; `None` for anything that is not a confirmation (a
    /// message, `+QUEUED`, an error, a reply of another command).
    pub fn read(msg: &[u8]) -> Option<Confirmation> {
        let rest = msg
            .strip_prefix(b"*3\r\n$")
            .or_else(|| msg.strip_prefix(b">3\r\n$"))?;
        let crlf = rest.iter().position(|&b| b == b'\r')?;
        let len: usize = std::str::from_utf8(&rest[..crlf]).ok()?.parse().ok()?;
        let name = rest.get(crlf + 2..crlf + 2 + len)?;
        let is = |w: &[u8]| name.eq_ignore_ascii_case(w);
        let (namespace, subscribe) = if is(b"subscribe") || is(b"psubscribe") {
            (Namespace::Channels, true)
        } else if is(b"unsubscribe") || is(b"punsubscribe") {
            (Namespace::Channels, false)
        } else if is(b"ssubscribe") {
            (Namespace::Shard, true)
        } else if is(b"sunsubscribe") {
            (Namespace::Shard, false)
        } else {
            return None;
        };
        // The count is the last element, `:N\r\n`; a channel name may hold `:`, so it is
        // found from the end.
        let body = msg.strip_suffix(b"\r\n")?;
        let at = body.windows(3).rposition(|w| w == b"\r\n:")?;
        let left = std::str::from_utf8(&body[at + 3..]).ok()?.parse().ok()?;
        Some(Confirmation {
            namespace,
            subscribe,
            left,
        })
    }
}

/// The subscriptions Redis has confirmed on a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Subscriptions {
    channels: u64,
    shard: u64,
}

impl Subscriptions {
    pub fn confirm(&mut self, c: Confirmation) {
        match c.namespace {
            Namespace::Channels => self.channels = c.left,
            Namespace::Shard => self.shard = c.left,
        }
    }

    /// Any subscription left: the client is in pub/sub.
    pub fn any(&self) -> bool {
        self.channels > 0 || self.shard > 0
    }

    /// RESET (or a new connection): none.
    pub fn clear(&mut self) {
        *self = Subscriptions::default();
    }
}

/// MULTI … EXEC or DISCARD, as sent. Redis answers the commands queued in between with
/// `+QUEUED` and runs them at EXEC, so none of them switches the connection's mode when
/// sent: `MULTI; SUBSCRIBE ch; DISCARD` never subscribes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Transaction {
    open: bool,
    /// A command that switches the mode was queued: EXEC may carry it out.
    switch_queued: bool,
}

/// What a command means for the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Queued {
    /// Not in a transaction: its mode switch, if any, applies as usual.
    No,
    /// Queued: it switches nothing now.
    Yes,
    /// An EXEC that runs a queued mode switch: what follows cannot be paired with
    /// confidence.
    ExecWithSwitch,
}

impl Transaction {
    /// `name` is the command's known name (upper case); `switches`: it is a mode switch.
    pub fn sent(&mut self, name: &str, switches: bool) -> Queued {
        match name {
            "MULTI" => {
                self.open = true;
                Queued::No
            }
            "EXEC" | "DISCARD" => {
                let ran_switch = name == "EXEC" && self.open && self.switch_queued;
                *self = Transaction::default();
                if ran_switch {
                    Queued::ExecWithSwitch
                } else {
                    Queued::No
                }
            }
            _ if self.open => {
                self.switch_queued |= switches;
                Queued::Yes
            }
            _ => Queued::No,
        }
    }

    /// RESET ends a transaction too.
    pub fn clear(&mut self) {
        *self = Transaction::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirmations_of_both_namespaces_and_both_protocols() {
        let c = Confirmation::read(b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n").unwrap();
        assert_eq!(
            (c.namespace, c.subscribe, c.left),
            (Namespace::Channels, false, 0)
        );
        let c = Confirmation::read(b">3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n").unwrap();
        assert_eq!(
            (c.namespace, c.subscribe, c.left),
            (Namespace::Shard, true, 1)
        );
        let c = Confirmation::read(b"*3\r\n$10\r\npsubscribe\r\n$4\r\na:b*\r\n:12\r\n").unwrap();
        assert_eq!(c.left, 12, "a channel with a colon");
        assert_eq!(Confirmation::read(b"+QUEUED\r\n"), None);
        assert_eq!(
            Confirmation::read(b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n"),
            None
        );
        assert_eq!(Confirmation::read(b"-NOPERM no\r\n"), None);
    }

    #[test]
    fn an_unsubscribe_to_zero_channels_leaves_the_shard_subscriptions() {
        let mut s = Subscriptions::default();
        for msg in [
            &b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"[..],
            b"*3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n",
            b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n",
        ] {
            s.confirm(Confirmation::read(msg).unwrap());
        }
        assert!(s.any(), "still subscribed to the shard channel");
        s.confirm(Confirmation::read(b"*3\r\n$12\r\nsunsubscribe\r\n$1\r\ns\r\n:0\r\n").unwrap());
        assert!(!s.any());
    }

    #[test]
    fn a_transaction_queues_switches_and_exec_runs_them() {
        let mut t = Transaction::default();
        assert_eq!(t.sent("MULTI", false), Queued::No);
        assert_eq!(t.sent("SUBSCRIBE", true), Queued::Yes);
        assert_eq!(t.sent("DISCARD", false), Queued::No);
        assert_eq!(t.sent("SUBSCRIBE", true), Queued::No, "out of it again");
        t.sent("MULTI", false);
        t.sent("GET", false);
        assert_eq!(t.sent("EXEC", false), Queued::No, "no switch queued");
        t.sent("MULTI", false);
        t.sent("MONITOR", true);
        assert_eq!(t.sent("EXEC", false), Queued::ExecWithSwitch);
    }
}

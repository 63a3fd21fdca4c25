//! Commands that change how the replies on a connection relate to the commands.
//!
//! A RESP tap pairs each reply with a command, in order. A few commands break that
//! one-to-one rhythm: after SUBSCRIBE or MONITOR the server sends messages nobody asked
//! for, HELLO and RESET change the protocol version, CLIENT REPLY suppresses replies, and
//! QUIT ends the connection. The tap must see these before it forwards them.

use super::Command;

/// Which pub/sub namespace a (un)subscribe command addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channels {
    /// SUBSCRIBE / UNSUBSCRIBE
    Plain,
    /// PSUBSCRIBE / PUNSUBSCRIBE
    Pattern,
    /// SSUBSCRIBE / SUNSUBSCRIBE
    Shard,
}

/// The argument of `CLIENT REPLY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyMode {
    On,
    Off,
    Skip,
}

/// A command that switches the connection's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModeSwitch {
    /// Enters pub/sub: the server then pushes messages (one reply per channel named, then
    /// any number of messages).
    Subscribe(Channels),
    /// May leave pub/sub once no subscription is left (one reply per channel).
    Unsubscribe(Channels),
    /// The server streams every command it runs until the connection closes or RESET.
    Monitor,
    /// `HELLO [protover ...]`. `protover` is `Some(2)` or `Some(3)` when the command asks
    /// for that version, `None` when it names none or one Redis refuses. The switch takes
    /// effect only if the reply is not an error (a wrong AUTH in the same HELLO refuses it).
    Hello { protover: Option<u8> },
    /// Back to RESP2, out of pub/sub and MONITOR, and replies on.
    Reset,
    /// The server replies and closes the connection.
    Quit,
    /// `CLIENT REPLY ON|OFF|SKIP`: OFF sends no replies until ON (whose own reply is sent);
    /// SKIP suppresses the reply of the next command (and sends none itself).
    ClientReply(ReplyMode),
}

impl ModeSwitch {
    /// Whether the server will send messages that answer no command (pub/sub or MONITOR),
    /// after which the tap counts messages instead of timing commands.
    pub const fn starts_unsolicited(self) -> bool {
        matches!(self, ModeSwitch::Subscribe(_) | ModeSwitch::Monitor)
    }
}

impl Command<'_> {
    /// Whether this command switches the connection's mode, and how.
    pub fn mode_switch(&self) -> Option<ModeSwitch> {
        let name = self.name();
        // Every name below is 4 to 12 bytes; skip the comparisons for anything else.
        if !(4..=12).contains(&name.len()) {
            return None;
        }
        let is = |upper: &str| name.eq_ignore_ascii_case(upper.as_bytes());
        let switch = if is("SUBSCRIBE") {
            ModeSwitch::Subscribe(Channels::Plain)
        } else if is("PSUBSCRIBE") {
            ModeSwitch::Subscribe(Channels::Pattern)
        } else if is("SSUBSCRIBE") {
            ModeSwitch::Subscribe(Channels::Shard)
        } else if is("UNSUBSCRIBE") {
            ModeSwitch::Unsubscribe(Channels::Plain)
        } else if is("PUNSUBSCRIBE") {
            ModeSwitch::Unsubscribe(Channels::Pattern)
        } else if is("SUNSUBSCRIBE") {
            ModeSwitch::Unsubscribe(Channels::Shard)
        } else if is("MONITOR") {
            ModeSwitch::Monitor
        } else if is("HELLO") {
            // Redis parses the version as a strict integer and accepts only 2 and 3.
            let protover = match self.args().next() {
                Some(b"2") => Some(2),
                Some(b"3") => Some(3),
                _ => None,
            };
            ModeSwitch::Hello { protover }
        } else if is("RESET") {
            ModeSwitch::Reset
        } else if is("QUIT") {
            ModeSwitch::Quit
        } else if is("CLIENT") {
            return self.client_reply().map(ModeSwitch::ClientReply);
        } else {
            return None;
        };
        Some(switch)
    }

    fn client_reply(&self) -> Option<ReplyMode> {
        let mut args = self.args();
        if !args.next()?.eq_ignore_ascii_case(b"REPLY") {
            return None;
        }
        let mode = args.next()?;
        if args.next().is_some() {
            // Redis answers a syntax error and changes nothing.
            return None;
        }
        if mode.eq_ignore_ascii_case(b"ON") {
            Some(ReplyMode::On)
        } else if mode.eq_ignore_ascii_case(b"OFF") {
            Some(ReplyMode::Off)
        } else if mode.eq_ignore_ascii_case(b"SKIP") {
            Some(ReplyMode::Skip)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::command;
    use super::*;

    fn switch(msg: &[u8]) -> Option<ModeSwitch> {
        command(msg).unwrap().mode_switch()
    }

    #[test]
    fn pubsub_commands() {
        assert_eq!(
            switch(b"*2\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n"),
            Some(ModeSwitch::Subscribe(Channels::Plain))
        );
        assert_eq!(
            switch(b"PSUBSCRIBE a*\r\n"),
            Some(ModeSwitch::Subscribe(Channels::Pattern))
        );
        assert_eq!(
            switch(b"ssubscribe s\r\n"),
            Some(ModeSwitch::Subscribe(Channels::Shard))
        );
        assert_eq!(
            switch(b"UNSUBSCRIBE\r\n"),
            Some(ModeSwitch::Unsubscribe(Channels::Plain))
        );
        assert_eq!(
            switch(b"punsubscribe\r\n"),
            Some(ModeSwitch::Unsubscribe(Channels::Pattern))
        );
        assert_eq!(
            switch(b"SUNSUBSCRIBE x\r\n"),
            Some(ModeSwitch::Unsubscribe(Channels::Shard))
        );
        assert!(switch(b"SUBSCRIBE c\r\n").is_some_and(ModeSwitch::starts_unsolicited));
        assert!(switch(b"MONITOR\r\n").is_some_and(ModeSwitch::starts_unsolicited));
        assert!(!switch(b"UNSUBSCRIBE\r\n").is_some_and(ModeSwitch::starts_unsolicited));
    }

    #[test]
    fn hello_versions() {
        let hello = |msg: &[u8]| match switch(msg) {
            Some(ModeSwitch::Hello { protover }) => protover,
            other => panic!("not HELLO: {other:?}"),
        };
        assert_eq!(hello(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"), Some(3));
        assert_eq!(hello(b"hello 2 AUTH u p\r\n"), Some(2));
        assert_eq!(hello(b"HELLO\r\n"), None);
        assert_eq!(hello(b"HELLO 4\r\n"), None);
        assert_eq!(hello(b"HELLO 03\r\n"), None);
        assert_eq!(hello(b"HELLO three\r\n"), None);
    }

    #[test]
    fn reset_quit_monitor() {
        assert_eq!(switch(b"reset\r\n"), Some(ModeSwitch::Reset));
        assert_eq!(switch(b"*1\r\n$4\r\nQUIT\r\n"), Some(ModeSwitch::Quit));
        assert_eq!(switch(b"Monitor\r\n"), Some(ModeSwitch::Monitor));
    }

    #[test]
    fn client_reply_modes() {
        assert_eq!(
            switch(b"CLIENT REPLY OFF\r\n"),
            Some(ModeSwitch::ClientReply(ReplyMode::Off))
        );
        assert_eq!(
            switch(b"client reply on\r\n"),
            Some(ModeSwitch::ClientReply(ReplyMode::On))
        );
        assert_eq!(
            switch(b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$4\r\nskip\r\n"),
            Some(ModeSwitch::ClientReply(ReplyMode::Skip))
        );
        assert_eq!(switch(b"CLIENT REPLY\r\n"), None);
        assert_eq!(switch(b"CLIENT REPLY MAYBE\r\n"), None);
        assert_eq!(switch(b"CLIENT REPLY ON extra\r\n"), None);
        assert_eq!(switch(b"CLIENT LIST\r\n"), None);
    }

    #[test]
    fn ordinary_commands_switch_nothing() {
        for msg in [
            &b"GET k\r\n"[..],
            b"PUBLISH c m\r\n",
            b"SUBSCRIBEX\r\n",
            b"\r\n",
            b"*0\r\n",
        ] {
            assert_eq!(switch(msg), None, "{:?}", String::from_utf8_lossy(msg));
        }
    }
}

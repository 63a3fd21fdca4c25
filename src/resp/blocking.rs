//! Blocking commands: how long Redis may hold a command before its reply, by the
//! command's own timeout argument.
//!
//! BLPOP with a timeout of 6 s is answered `*-1` after 6 s; a proxy that gives up at its
//! response timeout (5 s) cuts the client off, and an element popped as it gives up is
//! lost. So a tap waits for a blocking command's own timeout on top of the response
//! timeout, and for a timeout of 0 ("block forever") sets no deadline of its own.

use std::time::Duration;

use super::Command;

/// How long a command may block before Redis answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    /// At most this long (the command's timeout).
    For(Duration),
    /// Until something arrives: a timeout of 0.
    Forever,
}

/// Where a command keeps its timeout, and in which unit.
enum Place {
    /// The last argument, in seconds (a decimal number: BLPOP accepts `0.5`).
    LastSeconds,
    /// The first argument, in seconds (BLMPOP, BZMPOP).
    FirstSeconds,
    /// The last argument, in milliseconds (WAIT, WAITAOF).
    LastMillis,
    /// The argument after `BLOCK`, in milliseconds, before `STREAMS` (XREAD, XREADGROUP).
    BlockOption,
}

fn place(name: &[u8]) -> Option<Place> {
    let is = |upper: &str| name.eq_ignore_ascii_case(upper.as_bytes());
    if is("BLPOP")
        || is("BRPOP")
        || is("BLMOVE")
        || is("BRPOPLPUSH")
        || is("BZPOPMIN")
        || is("BZPOPMAX")
    {
        Some(Place::LastSeconds)
    } else if is("BLMPOP") || is("BZMPOP") {
        Some(Place::FirstSeconds)
    } else if is("WAIT") || is("WAITAOF") {
        Some(Place::LastMillis)
    } else if is("XREAD") || is("XREADGROUP") {
        Some(Place::BlockOption)
    } else {
        None
    }
}

impl Command<'_> {
    /// Whether Redis may hold this command before replying, and for how long. `None`
    /// for every other command, and for a blocking one whose timeout Redis refuses (it
    /// answers an error at once).
    pub fn blocking(&self) -> Option<Blocking> {
        let name = self.name();
        // Every name above is 4 to 10 bytes.
        if !(4..=10).contains(&name.len()) {
            return None;
        }
        let (arg, millis) = match place(name)? {
            Place::LastSeconds => (self.args().last()?, false),
            Place::FirstSeconds => (self.args().next()?, false),
            Place::LastMillis => (self.args().last()?, true),
            Place::BlockOption => {
                let mut args = self.args();
                let _ = args
                    .by_ref()
                    .take_while(|a| !a.eq_ignore_ascii_case(b"STREAMS"))
                    .find(|a| a.eq_ignore_ascii_case(b"BLOCK"))?;
                (args.next()?, true)
            }
        };
        timeout(arg, millis)
    }
}

/// A timeout argument as Redis reads it: a non-negative number of seconds (decimals
/// allowed) or of milliseconds (an integer).
fn timeout(arg: &[u8], millis: bool) -> Option<Blocking> {
    let text = std::str::from_utf8(arg).ok()?;
    let seconds = if millis {
        text.parse::<u64>().ok()? as f64 / 1000.0
    } else {
        text.parse::<f64>().ok().filter(|s| s.is_finite())?
    };
    if seconds < 0.0 {
        return None;
    }
    if seconds == 0.0 {
        return Some(Blocking::Forever);
    }
    Some(Blocking::For(
        Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::command;
    use super::*;

    fn blocking(msg: &str) -> Option<Blocking> {
        command(msg.as_bytes()).unwrap().blocking()
    }

    #[test]
    fn each_blocking_command_has_its_timeout_where_redis_reads_it() {
        let secs = |s: f64| Some(Blocking::For(Duration::from_secs_f64(s)));
        assert_eq!(blocking("BLPOP q 6\r\n"), secs(6.0));
        assert_eq!(blocking("brpop a b 0.5\r\n"), secs(0.5));
        assert_eq!(blocking("BLMOVE a b LEFT RIGHT 2\r\n"), secs(2.0));
        assert_eq!(blocking("BRPOPLPUSH a b 3\r\n"), secs(3.0));
        assert_eq!(blocking("BZPOPMIN z 1.5\r\n"), secs(1.5));
        assert_eq!(blocking("BZPOPMAX z y 4\r\n"), secs(4.0));
        assert_eq!(blocking("BLMPOP 7 2 a b LEFT\r\n"), secs(7.0));
        assert_eq!(blocking("BZMPOP 8 1 z MIN COUNT 2\r\n"), secs(8.0));
        assert_eq!(blocking("WAIT 1 2500\r\n"), secs(2.5));
        assert_eq!(blocking("WAITAOF 1 0 100\r\n"), secs(0.1));
        assert_eq!(
            blocking("XREAD COUNT 2 BLOCK 1500 STREAMS s 0\r\n"),
            secs(1.5)
        );
        assert_eq!(
            blocking("XREADGROUP GROUP g c BLOCK 10 NOACK STREAMS s >\r\n"),
            secs(0.01)
        );
        assert_eq!(
            blocking("*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n6\r\n"),
            secs(6.0)
        );
    }

    #[test]
    fn zero_blocks_forever() {
        for msg in [
            "BLPOP q 0\r\n",
            "BLMPOP 0 1 a LEFT\r\n",
            "WAIT 1 0\r\n",
            "XREAD BLOCK 0 STREAMS s $\r\n",
        ] {
            assert_eq!(blocking(msg), Some(Blocking::Forever), "{msg}");
        }
    }

    #[test]
    fn other_commands_and_refused_timeouts_do_not_block() {
        for msg in [
            "GET k\r\n",
            "LPOP q\r\n",
            "XREAD STREAMS s 0\r\n",
            // A key named BLOCK after STREAMS is no option.
            "XREAD STREAMS BLOCK 5\r\n",
            "BLPOP q -1\r\n",
            "BLPOP q x\r\n",
            "BLPOP q inf\r\n",
            "WAIT 1 1.5\r\n",
            "BLPOP\r\n",
        ] {
            assert_eq!(blocking(msg), None, "{msg}");
        }
        assert_eq!(
            blocking("BLPOP q 1e30\r\n"),
            Some(Blocking::For(Duration::MAX))
        );
    }
}

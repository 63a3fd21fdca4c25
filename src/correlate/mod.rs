//! Correlation: splitting an HTTP request's wait on Webdis into Webdis and Redis.
//!
//! With an HTTP tap in front of Webdis and a RESP tap between Webdis and Redis, each HTTP
//! request `/CMD/a/b` makes Webdis send `CMD a b` to Redis. The RESP tap reports every
//! command it sees with its instants; the HTTP tap, as its response begins, takes the
//! first pending report of the same command inside its own wait, and hands its instants
//! to the exchange, whose `phases_with` (`relay::exchange`, the one place instants become
//! phases) splits the `upstream_wait` (t_sent → t_resp_first) at the two RESP instants:
//!
//! ```text
//!  HTTP t_sent ──backend_in──► RESP t_sent ──backend──► RESP t_resp_first ──backend_out──► HTTP t_resp_first
//!   (Webdis reads and parses HTTP,        (Redis)            (Webdis formats the reply)
//!    builds the command)
//! ```
//!
//! The three add up to `upstream_wait` exactly, so their sums and means are exact even
//! when identical concurrent commands make individual pairings ambiguous (then only the
//! percentiles, and `backend` where a swapped pair's span exceeds the other's wait, are
//! approximate). The RESP tap's own relay time (microseconds) falls in
//! `backend_in` and `backend_out`.

pub mod key;
pub mod webdis;

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::clock::{self, nanos_between, Tick};

/// Reports older than this are dropped unmatched (Webdis's own commands, other clients').
const WINDOW_NS: u64 = 10_000_000_000;
/// Reports kept at most; past it the oldest go.
const MAX_PENDING: usize = 65_536;

/// A Redis command seen by the RESP tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub key: u64,
    /// Its last byte was accepted by Redis's socket.
    pub t_sent: Tick,
    /// The first byte of its reply arrived.
    pub t_reply: Tick,
    /// When Redis could start on it: `t_sent`, or the end of the previous reply on the
    /// connection if that came later (the RESP tap's `queue` ends here).
    pub t_wait_from: Tick,
}

/// Matches the commands of one RESP tap to the requests of one HTTP tap.
#[derive(Debug, Default)]
pub struct Correlator {
    pending: Mutex<VecDeque<Seen>>,
}

impl Correlator {
    pub fn new() -> Self {
        Self::default()
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, VecDeque<Seen>> {
        crate::sync::lock(&self.pending)
    }

    /// The RESP side: a command's reply has begun.
    pub fn resp_seen(&self, seen: Seen) {
        let now = clock::now();
        let mut q = self.pending();
        while let Some(front) = q.front() {
            if q.len() >= MAX_PENDING || nanos_between(front.t_reply, now) > WINDOW_NS {
                q.pop_front();
            } else {
                break;
            }
        }
        q.push_back(seen);
    }

    /// The HTTP side, called as soon as Webdis's response begins: takes the first pending
    /// command with this key that was sent to Redis after the request began to go to
    /// Webdis (`t_up_write`: Webdis can act on a request before the proxy, descheduled
    /// after its write, reads the clock for `t_sent`) and was answered before Webdis's
    /// response began.
    ///
    /// When identical requests overlap, Webdis's threads can answer them in another order
    /// than Redis did, and an earlier request may already have taken this one's command.
    /// The command left over is then the other one's: the oldest pending command with
    /// this key answered before this response is taken instead. The pair is swapped, so
    /// each of the two gets the other's instants; their sums (and the means) stay exact,
    /// only a phase that would come out negative is clamped at zero.
    pub fn take(&self, key: u64, t_up_write: Option<Tick>, t_resp_first: Tick) -> Option<Seen> {
        let mut q = self.pending();
        let answered = |s: &Seen| s.key == key && s.t_reply <= t_resp_first;
        let at = q
            .iter()
            .position(|s| answered(s) && t_up_write.is_none_or(|w| s.t_sent >= w))
            .or_else(|| q.iter().position(answered))?;
        q.remove(at)
    }

    pub fn pending_len(&self) -> usize {
        self.pending().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_pending_match_inside_the_window_wins() {
        let c = Correlator::new();
        let base = clock::now();
        let t = |n: u64| base + n;
        // Same command twice, and another one.
        c.resp_seen(Seen {
            key: 1,
            t_sent: t(10),
            t_reply: t(20),
            t_wait_from: t(14),
        });
        c.resp_seen(Seen {
            key: 2,
            t_sent: t(11),
            t_reply: t(21),
            t_wait_from: t(11),
        });
        c.resp_seen(Seen {
            key: 1,
            t_sent: t(30),
            t_reply: t(40),
            t_wait_from: t(30),
        });
        // A request sent after the first report cannot own it.
        let second = c.take(1, Some(t(25)), t(50)).unwrap();
        assert_eq!(second.t_sent, t(30));
        let first = c.take(1, Some(t(5)), t(22)).unwrap();
        assert_eq!(first.t_sent, t(10));
        assert_eq!(c.take(1, Some(t(0)), t(100)), None);
        assert_eq!(c.pending_len(), 1);
        // How the match's instants split the request's wait: `relay::exchange`'s
        // `a_matched_backend_command_splits_the_wait_exactly`.
    }
}

//! Correlation: splitting an HTTP request's wait on Webdis into Webdis and Redis.
//!
//! With an HTTP tap in front of Webdis and a RESP tap between Webdis and Redis, each HTTP
//! request `/CMD/a/b` makes Webdis send `CMD a b` to Redis. The RESP tap reports every
//! command it sees with its instants; the HTTP tap, when its exchange completes, takes the
//! first pending report of the same command inside its own wait, and splits its
//! `upstream_wait` (t_sent → t_resp_first) at the two RESP instants:
//!
//! ```text
//!  HTTP t_sent ──backend_in──► RESP t_sent ──backend──► RESP t_resp_first ──backend_out──► HTTP t_resp_first
//!   (Webdis reads and parses HTTP,        (Redis)            (Webdis formats the reply)
//!    builds the command)
//! ```
//!
//! The three add up to `upstream_wait` exactly, so their sums and means are exact even
//! when identical concurrent commands make individual pairings ambiguous (then only the
//! percentiles are approximate). The RESP tap's own relay time (microseconds) falls in
//! `backend_in` and `backend_out`.

pub mod key;
pub mod webdis;

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::clock::{self, nanos_between, Tick};
use crate::phase::{Phase, Phases};

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
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    /// The HTTP side: takes the first pending command with this key that was sent to
    /// Redis after the request was sent to Webdis and answered before Webdis answered.
    pub fn take(&self, key: u64, t_sent: Tick, t_resp_first: Tick) -> Option<Seen> {
        let mut q = self.pending();
        let at = q
            .iter()
            .position(|s| s.key == key && s.t_sent >= t_sent && s.t_reply <= t_resp_first)?;
        q.remove(at)
    }

    pub fn pending_len(&self) -> usize {
        self.pending().len()
    }
}

/// Adds `backend_in`, `backend` and `backend_out` for a request sent at `t_sent` whose
/// response began at `t_resp_first`, given its Redis command.
pub fn decompose(phases: &mut Phases, t_sent: Tick, t_resp_first: Tick, redis: &Seen) {
    phases.set(Phase::BackendIn, nanos_between(t_sent, redis.t_sent));
    phases.set(Phase::Backend, nanos_between(redis.t_sent, redis.t_reply));
    phases.set(
        Phase::BackendOut,
        nanos_between(redis.t_reply, t_resp_first),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_pending_match_inside_the_window_wins_and_sums_are_exact() {
        let c = Correlator::new();
        let base = clock::now();
        let t = |n: u64| base + n;
        // Same command twice, and another one.
        c.resp_seen(Seen {
            key: 1,
            t_sent: t(10),
            t_reply: t(20),
        });
        c.resp_seen(Seen {
            key: 2,
            t_sent: t(11),
            t_reply: t(21),
        });
        c.resp_seen(Seen {
            key: 1,
            t_sent: t(30),
            t_reply: t(40),
        });
        // A request sent after the first report cannot own it.
        let second = c.take(1, t(25), t(50)).unwrap();
        assert_eq!(second.t_sent, t(30));
        let first = c.take(1, t(5), t(22)).unwrap();
        assert_eq!(first.t_sent, t(10));
        assert_eq!(c.take(1, t(0), t(100)), None);
        assert_eq!(c.pending_len(), 1);

        let mut p = Phases::default();
        decompose(&mut p, t(5), t(22), &first);
        let sum: u64 = [Phase::BackendIn, Phase::Backend, Phase::BackendOut]
            .iter()
            .map(|&ph| p.get(ph).unwrap())
            .sum();
        // Exact up to the rounding of each tick difference to whole nanoseconds.
        assert!(sum.abs_diff(nanos_between(t(5), t(22))) <= 3);
    }
}

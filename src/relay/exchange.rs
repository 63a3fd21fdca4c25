//! The Exchange timeline: the instants of one request and its response.
//!
//! ```text
//!  t_first   t_head   t_up_ready  t_up_write   t_sent   t_resp_first   t_resp_last
//!     │ client │ connect │ proxy      │ upstream │ upstream  │ upstream     │
//!     │  recv  │ or queue│ overhead   │  send    │  wait     │  recv        │
//!     ▼        ▼         ▼            ▼          ▼           ▼              ▼
//!     ├────────┼─────────┼────────────┼──────────┼───────────┼──────────────┤
//!                                                            ├─ proxy ─┼── write ───┤
//!                                                                   t_write_first  t_write_last
//! ```
//!
//! `docs/phases.md` defines each instant and phase and states which overlap. Instants are
//! raw clock ticks, each an [`At`] that may not be taken yet; they become nanoseconds only in
//! [`Exchange::phases_with`] (and [`Exchange::phases`], the same without a backend
//! command): the relay's own instants, and those the correlator matched to the request.

use crate::clock::{nanos_between, At, Tick};
use crate::correlate::Seen;
use crate::phase::{Phase, Phases};
use crate::stalls;

/// What the request waited for between its complete head and a ready upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Nothing: the upstream connection was open and idle.
    #[default]
    None,
    /// A new upstream connection was opened for it.
    Connect,
    /// It was pipelined behind the previous exchange on this connection, and held by the
    /// proxy until that one was done (HTTP).
    Queue,
    /// It was forwarded at once, and waited in the upstream behind the previous
    /// exchange's response until `t_up_free` (RESP: Redis answers in order).
    Behind,
}

/// The instants of one exchange, taken as it happens.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exchange {
    /// The read that brought the request's first byte returned (for a pipelined request
    /// already buffered: when the proxy started on it).
    pub t_first: At,
    /// The request head is complete and parsed.
    pub t_head: At,
    /// The upstream is connected and done with the previous exchange.
    pub t_up_ready: At,
    /// The first request byte was handed to the upstream socket.
    pub t_up_write: At,
    /// The last request byte was accepted by the upstream socket.
    pub t_sent: At,
    /// The read that brought the final response's first byte returned.
    pub t_resp_first: At,
    /// The response's last byte was read from the upstream.
    pub t_resp_last: At,
    /// The first response byte was accepted by the client socket.
    pub t_write_first: At,
    /// The last response byte was accepted by the client socket.
    pub t_write_last: At,
    /// CPU time in the request-head scanner and parser, summed over attempts.
    pub parse_ns: u64,
    /// CPU time in the response-head scanner and parser.
    pub response_parse_ns: u64,
    pub wait: Wait,
    /// With [`Wait::Behind`]: the upstream was done with the previous exchange's response,
    /// so its work on this one could begin.
    pub t_up_free: At,
    /// The longest pause between two reads of the final response: the read before it and
    /// the read after it returned (HTTP; not taken when the response came in one read).
    pub t_gap_start: At,
    pub t_gap_end: At,
    /// Since when response bytes wait for the client's socket to take them (not taken:
    /// they do not), and the time they waited so far: `write_blocked`.
    pub t_client_blocked: At,
    pub client_blocked_ns: u64,
    /// The response has no head to parse (a RESP reply is framed, and its framing is not
    /// timed): there is no `response_parse`.
    pub headless: bool,
}

impl Exchange {
    /// Starts the timeline of a request whose first byte arrived at `t_first`.
    pub fn starting_at(t_first: Tick) -> Self {
        Self {
            t_first: At::tick(t_first),
            ..Self::default()
        }
    }

    /// The client's socket would not take the response bytes pending: they wait from now,
    /// unless they already did.
    #[inline]
    pub fn client_blocked(&mut self) {
        if !self.t_client_blocked.is_set() {
            self.t_client_blocked = At::now();
        }
    }

    /// The client took response bytes at `t`: a wait for it, if one ran, is over.
    #[inline]
    pub fn client_took(&mut self, t: Tick) {
        if let Some(since) = self.t_client_blocked.get() {
            self.client_blocked_ns += nanos_between(since, t);
            self.t_client_blocked = At::UNSET;
        }
    }

    /// Reads of the final response returned at `before` and then at `after`, with
    /// nothing read in between: the pause is kept if it is the longest so far.
    #[inline]
    pub fn response_paused(&mut self, before: Tick, after: Tick) {
        let longest = match (self.t_gap_start.get(), self.t_gap_end.get()) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            _ => 0,
        };
        if after.saturating_sub(before) > longest {
            self.t_gap_start = At::tick(before);
            self.t_gap_end = At::tick(after);
        }
    }

    /// When the upstream could begin on the request: its last byte was sent, or, for a
    /// request sent while the upstream was still answering the previous one, when that
    /// answer was complete. `upstream_wait` runs from here.
    pub fn wait_from(&self) -> At {
        match self.wait {
            Wait::Behind => self.t_up_free.max(self.t_sent),
            _ => self.t_sent,
        }
    }

    /// The phases of an exchange no backend command was matched to: every RESP exchange,
    /// and HTTP on a tap without a correlator. See [`Exchange::phases_with`].
    #[inline]
    pub fn phases(&self) -> Phases {
        self.phases_with(None)
    }

    /// The phases, converted to nanoseconds: the one place instants become phases, for
    /// both protocols. Phases whose instants were not all taken (no response, no connect;
    /// on a RESP tap no `t_up_write`, so no `upstream_send`) are absent. With `backend`,
    /// the Redis command the correlator matched to this request (Webdis in front of Redis),
    /// `upstream_wait` is also split into `backend_in`, `backend` (and its
    /// `backend_queue`) and `backend_out`.
    pub fn phases_with(&self, backend: Option<&Seen>) -> Phases {
        let mut p = Phases::default();
        let mut set = |phase, v: Option<u64>| {
            if let Some(v) = v {
                p.set(phase, v);
            }
        };
        set(Phase::ClientRecv, self.t_first.to(self.t_head));
        if self.t_head.is_set() {
            set(Phase::Parse, Some(self.parse_ns));
        }
        match self.wait {
            Wait::Connect => set(Phase::UpstreamConnect, self.t_head.to(self.t_up_ready)),
            Wait::Queue => set(Phase::Queue, self.t_head.to(self.t_up_ready)),
            Wait::Behind => set(Phase::Queue, self.t_sent.to(self.t_up_free)),
            Wait::None => {}
        }
        set(Phase::UpstreamSend, self.t_up_write.to(self.t_sent));
        // The part of the wait the proxy itself did not run is its own (`stalls`).
        let stalled = self.stalled();
        let wait = self.wait_from().to(self.t_resp_first);
        set(Phase::UpstreamWait, wait.map(|w| w - stalled));
        set(Phase::UpstreamRecv, self.t_resp_first.to(self.t_resp_last));
        set(Phase::UpstreamRecvGap, self.t_gap_start.to(self.t_gap_end));
        if self.t_resp_first.is_set() && !self.headless {
            set(Phase::ResponseParse, Some(self.response_parse_ns));
        }
        set(Phase::Write, self.t_write_first.to(self.t_write_last));
        if self.client_blocked_ns > 0 {
            set(Phase::WriteBlocked, Some(self.client_blocked_ns));
        }
        // Up to the first byte's write; where that write is not timed apart from the
        // last byte's (RESP forwards commands as one stream), up to `t_sent`.
        let first_write = if self.t_up_write.is_set() {
            self.t_up_write
        } else {
            self.t_sent
        };
        if let (Some(before), Some(after)) = (
            self.t_up_ready.to(first_write),
            self.t_resp_first.to(self.t_write_first),
        ) {
            set(Phase::ProxyOverhead, Some(before + after + stalled));
        }
        if stalled > 0 {
            set(Phase::ProxyStalled, Some(stalled));
        }
        set(Phase::Total, self.t_first.to(self.t_write_last));
        if let Some(redis) = backend {
            if let (Some(sent), Some(resp_first)) = (self.t_sent.get(), self.t_resp_first.get()) {
                split_wait(&mut p, sent, resp_first, redis, stalled);
            }
        }
        p
    }

    /// Nanoseconds of the wait for the upstream during which the proxy did not run: at
    /// most the wait (both from the same two instants).
    fn stalled(&self) -> u64 {
        match (self.wait_from().get(), self.t_resp_first.get()) {
            (Some(from), Some(to)) => stalls::overlap(from, to).min(nanos_between(from, to)),
            _ => 0,
        }
    }
}

/// Adds `backend_in`, `backend` and `backend_out` for a request sent at `t_sent` whose
/// response began at `t_resp_first`, given its Redis command. The three always add up to
/// the request's `upstream_wait`: for a true pair they are the three spans between the
/// four instants; for a swapped pair (see `Correlator::take`) Redis's span is kept and
/// what would fall outside the wait is taken from `backend_in`, then `backend_out`. The
/// `stalled` part of the wait, the proxy's own, is taken from `backend_out` first (the
/// answer waiting to be read), then from the others.
fn split_wait(phases: &mut Phases, t_sent: Tick, t_resp_first: Tick, redis: &Seen, stalled: u64) {
    let wait = nanos_between(t_sent, t_resp_first).saturating_sub(stalled);
    let backend = nanos_between(redis.t_sent, redis.t_reply).min(wait);
    let backend_in = nanos_between(t_sent, redis.t_sent).min(wait - backend);
    phases.set(Phase::BackendIn, backend_in);
    phases.set(Phase::Backend, backend);
    // Inside `backend`: the command queued behind earlier replies (Webdis pipelines on its
    // pooled connections), so that "Redis queue" and "Redis" add up to `backend`.
    phases.set(
        Phase::BackendQueue,
        nanos_between(redis.t_sent, redis.t_wait_from).min(backend),
    );
    phases.set(Phase::BackendOut, wait - backend - backend_in);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;

    /// `N` clock readings 200 µs apart.
    fn spaced_ticks<const N: usize>() -> [u64; N] {
        clock::init();
        let mut t = [0u64; N];
        for slot in t.iter_mut() {
            *slot = clock::now();
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        t
    }

    #[test]
    fn a_stall_of_the_proxy_moves_from_upstream_wait_to_proxy_overhead() {
        // Ticks long before now, apart from any other test's (the stall record is the
        // process's): a stall of 300 ms inside a wait of 500 ms.
        let t0 = clock::after(1_000, std::time::Duration::from_secs(100));
        let at = |ms: u64| clock::after(t0, std::time::Duration::from_millis(ms));
        crate::stalls::record(at(100), at(400));
        let ex = Exchange {
            t_first: At::tick(at(0)),
            t_head: At::tick(at(0)),
            t_up_ready: At::tick(at(0)),
            t_up_write: At::tick(at(0)),
            t_sent: At::tick(at(0)),
            t_resp_first: At::tick(at(500)),
            t_resp_last: At::tick(at(500)),
            t_write_first: At::tick(at(500)),
            t_write_last: At::tick(at(500)),
            ..Exchange::default()
        };
        let p = ex.phases();
        let ms = |phase| p.get(phase).map(|n| (n as f64 / 1e6).round() as u64);
        assert_eq!(ms(Phase::UpstreamWait), Some(200));
        assert_eq!(ms(Phase::ProxyStalled), Some(300));
        assert_eq!(ms(Phase::ProxyOverhead), Some(300));
        assert_eq!(ms(Phase::Total), Some(500));
    }

    #[test]
    fn sequential_phases_add_up_to_total() {
        let t = spaced_ticks::<9>();
        let ex = Exchange {
            t_first: At::tick(t[0]),
            t_head: At::tick(t[1]),
            t_up_ready: At::tick(t[2]),
            t_up_write: At::tick(t[3]),
            t_sent: At::tick(t[4]),
            t_resp_first: At::tick(t[5]),
            t_resp_last: At::tick(t[5]),
            t_write_first: At::tick(t[6]),
            t_write_last: At::tick(t[7]),
            parse_ns: 300,
            response_parse_ns: 200,
            wait: Wait::Connect,
            ..Exchange::default()
        };
        let p = ex.phases();
        let sum: u64 = [
            Phase::ClientRecv,
            Phase::UpstreamConnect,
            Phase::UpstreamSend,
            Phase::UpstreamWait,
            Phase::ProxyOverhead,
            Phase::Write,
        ]
        .iter()
        .map(|&ph| p.get(ph).unwrap())
        .sum();
        let total = p.get(Phase::Total).unwrap();
        assert!(sum.abs_diff(total) <= 1_000, "sum {sum} total {total}");
        assert_eq!(p.get(Phase::Queue), None);
        assert_eq!(p.get(Phase::Parse), Some(300));
    }

    #[test]
    fn a_resp_command_behind_a_reply_has_queue_and_no_send_or_response_parse() {
        let t = spaced_ticks::<8>();
        // As the RESP tap records a pipelined command: ready when framed, no t_up_write,
        // sent at t[2], the previous reply complete at t[3].
        let ex = Exchange {
            t_first: At::tick(t[0]),
            t_head: At::tick(t[1]),
            t_up_ready: At::tick(t[1]),
            t_sent: At::tick(t[2]),
            wait: Wait::Behind,
            t_up_free: At::tick(t[3]),
            t_resp_first: At::tick(t[4]),
            t_resp_last: At::tick(t[4]),
            t_write_first: At::tick(t[5]),
            t_write_last: At::tick(t[6]),
            parse_ns: 100,
            headless: true,
            ..Exchange::default()
        };
        let p = ex.phases();
        let ns = |a: usize, b: usize| clock::nanos_between(t[a], t[b]);
        assert_eq!(p.get(Phase::Queue), Some(ns(2, 3)));
        assert_eq!(p.get(Phase::UpstreamWait), Some(ns(3, 4)));
        assert_eq!(p.get(Phase::ProxyOverhead), Some(ns(1, 2) + ns(4, 5)));
        assert_eq!(p.get(Phase::UpstreamSend), None);
        assert_eq!(p.get(Phase::ResponseParse), None);
        assert_eq!(p.get(Phase::UpstreamConnect), None);
        let sum: u64 = [
            Phase::ClientRecv,
            Phase::Queue,
            Phase::UpstreamWait,
            Phase::ProxyOverhead,
            Phase::Write,
        ]
        .iter()
        .map(|&ph| p.get(ph).unwrap())
        .sum();
        let total = p.get(Phase::Total).unwrap();
        assert!(sum.abs_diff(total) <= 1_000, "sum {sum} total {total}");
        // Not behind anything: no queue, and the wait runs from the send.
        let alone = Exchange {
            wait: Wait::None,
            t_up_free: At::UNSET,
            ..ex
        };
        assert_eq!(alone.phases().get(Phase::Queue), None);
        assert_eq!(alone.phases().get(Phase::UpstreamWait), Some(ns(2, 4)));
    }

    /// The first command of `correlate`'s matching test, matched to a request sent at 5
    /// whose response began at 22: the three backend phases add up to its wait.
    #[test]
    fn a_matched_backend_command_splits_the_wait_exactly() {
        clock::init();
        let base = clock::now();
        let t = |n: u64| base + n;
        let first = Seen {
            key: 1,
            t_sent: t(10),
            t_reply: t(20),
            t_wait_from: t(14),
        };
        let ex = Exchange {
            t_sent: At::tick(t(5)),
            t_resp_first: At::tick(t(22)),
            ..Exchange::default()
        };
        let p = ex.phases_with(Some(&first));
        let sum: u64 = [Phase::BackendIn, Phase::Backend, Phase::BackendOut]
            .iter()
            .map(|&ph| p.get(ph).unwrap())
            .sum();
        assert_eq!(sum, nanos_between(t(5), t(22)));
        // The command waited 4 ticks behind an earlier reply: that much of `backend`.
        assert_eq!(
            p.get(Phase::BackendQueue),
            Some(nanos_between(t(10), t(14)))
        );
        assert!(p.get(Phase::BackendQueue) <= p.get(Phase::Backend));
        // Without a match, or without the instants to split, no backend phases.
        assert_eq!(ex.phases().get(Phase::Backend), None);
        let unsent = Exchange {
            t_sent: At::UNSET,
            ..ex
        };
        assert_eq!(unsent.phases_with(Some(&first)).get(Phase::Backend), None);
    }

    #[test]
    fn missing_instants_leave_phases_out() {
        let ex = Exchange::starting_at(clock::now());
        let p = ex.phases();
        assert_eq!(p.iter().count(), 0);
    }
}

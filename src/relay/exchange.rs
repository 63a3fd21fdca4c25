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
//! raw clock ticks (0 = not taken); they become nanoseconds only in [`Exchange::phases`].

use crate::clock::{nanos_between, Tick};
use crate::phase::{Phase, Phases};

/// What the request waited for between its complete head and a ready upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Nothing: the upstream connection was open and idle.
    #[default]
    None,
    /// A new upstream connection was opened for it.
    Connect,
    /// It was pipelined behind the previous exchange on this connection.
    Queue,
}

/// The instants of one exchange, taken as it happens.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exchange {
    /// The read that brought the request's first byte returned (for a pipelined request
    /// already buffered: when the proxy started on it).
    pub t_first: Tick,
    /// The request head is complete and parsed.
    pub t_head: Tick,
    /// The upstream is connected and done with the previous exchange.
    pub t_up_ready: Tick,
    /// The first request byte was handed to the upstream socket.
    pub t_up_write: Tick,
    /// The last request byte was accepted by the upstream socket.
    pub t_sent: Tick,
    /// The read that brought the final response's first byte returned.
    pub t_resp_first: Tick,
    /// The response's last byte was read from the upstream.
    pub t_resp_last: Tick,
    /// The first response byte was accepted by the client socket.
    pub t_write_first: Tick,
    /// The last response byte was accepted by the client socket.
    pub t_write_last: Tick,
    /// CPU time in the request-head scanner and parser, summed over attempts.
    pub parse_ns: u64,
    /// CPU time in the response-head scanner and parser.
    pub response_parse_ns: u64,
    pub wait: Wait,
}

/// `end - start` in ns, when both instants were taken.
fn span(start: Tick, end: Tick) -> Option<u64> {
    (start != 0 && end != 0).then(|| nanos_between(start, end))
}

impl Exchange {
    /// Starts the timeline of a request whose first byte arrived at `t_first`.
    pub fn starting_at(t_first: Tick) -> Self {
        Self {
            t_first,
            ..Self::default()
        }
    }

    /// The phases, converted to nanoseconds. Phases whose instants were not all taken
    /// (no response, no connect) are absent.
    pub fn phases(&self) -> Phases {
        let mut p = Phases::default();
        let mut set = |phase, v: Option<u64>| {
            if let Some(v) = v {
                p.set(phase, v);
            }
        };
        set(Phase::ClientRecv, span(self.t_first, self.t_head));
        if self.t_head != 0 {
            set(Phase::Parse, Some(self.parse_ns));
        }
        match self.wait {
            Wait::Connect => set(Phase::UpstreamConnect, span(self.t_head, self.t_up_ready)),
            Wait::Queue => set(Phase::Queue, span(self.t_head, self.t_up_ready)),
            Wait::None => {}
        }
        set(Phase::UpstreamSend, span(self.t_up_write, self.t_sent));
        set(Phase::UpstreamWait, span(self.t_sent, self.t_resp_first));
        set(
            Phase::UpstreamRecv,
            span(self.t_resp_first, self.t_resp_last),
        );
        if self.t_resp_first != 0 {
            set(Phase::ResponseParse, Some(self.response_parse_ns));
        }
        set(Phase::Write, span(self.t_write_first, self.t_write_last));
        if let (Some(before), Some(after)) = (
            span(self.t_up_ready, self.t_up_write),
            span(self.t_resp_first, self.t_write_first),
        ) {
            set(Phase::ProxyOverhead, Some(before + after));
        }
        set(Phase::Total, span(self.t_first, self.t_write_last));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;

    #[test]
    fn sequential_phases_add_up_to_total() {
        clock::init();
        let mut t = [0u64; 9];
        for slot in t.iter_mut() {
            *slot = clock::now();
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let ex = Exchange {
            t_first: t[0],
            t_head: t[1],
            t_up_ready: t[2],
            t_up_write: t[3],
            t_sent: t[4],
            t_resp_first: t[5],
            t_resp_last: t[5],
            t_write_first: t[6],
            t_write_last: t[7],
            parse_ns: 300,
            response_parse_ns: 200,
            wait: Wait::Connect,
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
    fn missing_instants_leave_phases_out() {
        let ex = Exchange::starting_at(clock::now());
        let p = ex.phases();
        assert_eq!(p.iter().count(), 0);
    }
}

//! The names of the phases an exchange is split into.
//!
//! These names are a contract: they are the `phase` label of
//! `phasescope_phase_duration_seconds`, the keys of the access log and of `/api/snapshot`,
//! and what the dashboards and reports query. `docs/phases.md` defines each one.

use std::fmt;

/// One phase of an exchange. The discriminant indexes [`Phases`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    ClientRecv = 0,
    Parse,
    UpstreamConnect,
    Queue,
    UpstreamSend,
    UpstreamWait,
    UpstreamRecv,
    ResponseParse,
    Write,
    ProxyOverhead,
    Total,
    BackendIn,
    Backend,
    BackendOut,
    /// The part of `backend` the matched Redis command spent queued behind earlier
    /// replies on its connection (the RESP tap's `queue`).
    BackendQueue,
    /// The longest pause between two reads of one response, inside `upstream_recv`: what
    /// a response written in pieces waited between them (Nagle's algorithm against a
    /// delayed ACK shows here as ~40 ms).
    UpstreamRecvGap,
    /// The time response bytes waited for the client's socket to take them, inside
    /// `write`: a client reading slowly (or a network in its way).
    WriteBlocked,
    /// The part of the wait for the upstream during which phasescope itself did not run
    /// (stopped, throttled, given no CPU), inside `proxy_overhead`: taken out of
    /// `upstream_wait`, where it would blame the backend for the proxy's stall.
    ProxyStalled,
}

impl Phase {
    pub const COUNT: usize = 18;

    /// Every phase, in timeline order (the derived ones last). This is also the order
    /// readers show them in: the text report, the SVG and (through the snapshot's
    /// `phase_order`) the live page all list phases in it, so a new phase takes its place
    /// in each by being put here.
    pub const ALL: [Phase; Phase::COUNT] = [
        Phase::ClientRecv,
        Phase::Parse,
        Phase::UpstreamConnect,
        Phase::Queue,
        Phase::UpstreamSend,
        Phase::UpstreamWait,
        Phase::UpstreamRecv,
        Phase::ResponseParse,
        Phase::Write,
        Phase::ProxyOverhead,
        Phase::Total,
        Phase::BackendIn,
        Phase::Backend,
        Phase::BackendOut,
        Phase::BackendQueue,
        Phase::UpstreamRecvGap,
        Phase::WriteBlocked,
        Phase::ProxyStalled,
    ];

    /// The phase this one lies inside, for those that are not laid end to end along the
    /// exchange (docs/phases.md): CPU time inside the span it was spent in, and the Webdis
    /// decomposition inside the `upstream_wait` it splits. `total` lies inside nothing and
    /// is not laid end to end either: it is the whole.
    pub const fn within(self) -> Option<Phase> {
        match self {
            Phase::Parse => Some(Phase::ClientRecv),
            Phase::ResponseParse | Phase::UpstreamRecvGap => Some(Phase::UpstreamRecv),
            Phase::WriteBlocked => Some(Phase::Write),
            Phase::ProxyStalled => Some(Phase::ProxyOverhead),
            Phase::BackendIn | Phase::Backend | Phase::BackendOut => Some(Phase::UpstreamWait),
            Phase::BackendQueue => Some(Phase::Backend),
            _ => None,
        }
    }

    /// The label value.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::ClientRecv => "client_recv",
            Phase::Parse => "parse",
            Phase::UpstreamConnect => "upstream_connect",
            Phase::Queue => "queue",
            Phase::UpstreamSend => "upstream_send",
            Phase::UpstreamWait => "upstream_wait",
            Phase::UpstreamRecv => "upstream_recv",
            Phase::ResponseParse => "response_parse",
            Phase::Write => "write",
            Phase::ProxyOverhead => "proxy_overhead",
            Phase::Total => "total",
            Phase::BackendIn => "backend_in",
            Phase::Backend => "backend",
            Phase::BackendOut => "backend_out",
            Phase::BackendQueue => "backend_queue",
            Phase::UpstreamRecvGap => "upstream_recv_gap",
            Phase::WriteBlocked => "write_blocked",
            Phase::ProxyStalled => "proxy_stalled",
        }
    }

    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }

    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// How every reader draws and describes a phase: the one table the live page (through the
/// snapshot's `phase_styles`: colours, stacking, tooltips, the notes of its table), the
/// report's SVG and the dashboard's test take their colours, order and words from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// `#rrggbb`.
    pub colour: &'static str,
    /// What a legend calls it, short.
    pub label: &'static str,
    /// The phase it is drawn inside ([`Phase::within`]).
    pub parent: Option<Phase>,
    /// Its place in the stacked bar of where the time goes, from the left; `None` for a
    /// phase that is not stacked (it lies inside another, or is the whole). The report's
    /// SVG draws this bar.
    pub stack: Option<u8>,
    /// Its place, from the bottom, in the stack of the phases that add up to `total`
    /// (docs/phases.md's sequential phases: `upstream_recv`, which overlaps `write`, is
    /// left out), with `parse` and the Webdis parts drawn apart just before the phase
    /// they lie in, whose rest follows them. The live page draws this stack.
    pub sum_stack: Option<u8>,
    /// What it measures in a line, the short form of docs/phases.md (a tooltip).
    pub description: &'static str,
    /// What a table of phases says beside its name when it is not laid end to end with
    /// the others: the phase it lies in or overlaps.
    pub note: Option<&'static str>,
}

impl Phase {
    /// The phase's [`Style`].
    ///
    /// The colours start from the Okabe–Ito palette (Okabe & Ito 2008, made to stay apart
    /// under colour-vision deficiency): each phase keeps an Okabe–Ito hue (within 18°:
    /// blue for the client side, bluish green for connecting and receiving, orange and
    /// vermillion for the upstream's wait and the Webdis parts inside it, reddish purple
    /// for the proxy's overhead, yellow darkened to olive for the write), darkened until it
    /// has at least 4.5:1 contrast against white, so that thin curves stay visible (WCAG
    /// asks 3:1 of graphics). The lightness and saturation were then chosen so that
    /// every two colours shown together — the stacked phases, the phases inside others,
    /// each against `total` — stay at least 8 CIELAB ΔE apart for normal vision and under
    /// simulated protanopia, deuteranopia and tritanopia (Machado et al. 2009);
    /// tests/phase_colours.rs checks both bounds.
    pub const fn style(self) -> Style {
        let (colour, label, stack) = match self {
            Phase::ClientRecv => ("#0a46bd", "client_recv", Some(0)),
            Phase::Parse => ("#003399", "parse", None),
            Phase::UpstreamConnect => ("#0f3d25", "upstream_connect", Some(1)),
            Phase::Queue => ("#9f5828", "queue", Some(2)),
            Phase::UpstreamSend => ("#257d93", "upstream_send", Some(3)),
            Phase::UpstreamWait => ("#8a1c00", "upstream_wait", Some(4)),
            Phase::UpstreamRecv => ("#2a6f58", "upstream_recv", Some(5)),
            Phase::ResponseParse => ("#531862", "response_parse", None),
            Phase::Write => ("#594e22", "write", Some(6)),
            Phase::ProxyOverhead => ("#903766", "proxy_overhead", Some(7)),
            Phase::Total => ("#000000", "total", None),
            Phase::BackendIn => ("#502c0b", "backend_in (Webdis)", None),
            Phase::Backend => ("#c70d00", "backend (Redis)", None),
            Phase::BackendOut => ("#97289f", "backend_out (Webdis)", None),
            Phase::BackendQueue => ("#7a0029", "backend_queue (Redis queue)", None),
            Phase::UpstreamRecvGap => ("#07837b", "upstream_recv_gap", None),
            Phase::WriteBlocked => ("#6a5acd", "write_blocked", None),
            Phase::ProxyStalled => ("#5c1040", "proxy_stalled", None),
        };
        let (description, note) = self.about();
        Style {
            colour,
            label,
            parent: self.within(),
            stack,
            sum_stack: self.sum_stack(),
            description,
            note,
        }
    }

    /// [`Style::sum_stack`]: the order of the live page's stack, bottom to top.
    const fn sum_stack(self) -> Option<u8> {
        match self {
            Phase::Parse => Some(0),
            Phase::ClientRecv => Some(1),
            Phase::UpstreamConnect => Some(2),
            Phase::Queue => Some(3),
            Phase::UpstreamSend => Some(4),
            Phase::BackendIn => Some(5),
            Phase::Backend => Some(6),
            Phase::BackendOut => Some(7),
            Phase::UpstreamWait => Some(8),
            Phase::ProxyOverhead => Some(9),
            Phase::Write => Some(10),
            _ => None,
        }
    }

    /// [`Style::description`] and [`Style::note`].
    const fn about(self) -> (&'static str, Option<&'static str>) {
        match self {
            Phase::ClientRecv => (
                "first request byte → head complete: the client and the network delivering the head",
                None,
            ),
            Phase::Parse => (
                "CPU time in the request-head parser (inside client_recv)",
                Some("in client_recv"),
            ),
            Phase::UpstreamConnect => (
                "connecting to the upstream, for the request that opened the connection",
                None,
            ),
            Phase::Queue => (
                "a pipelined request waiting for the previous response (head-of-line blocking)",
                None,
            ),
            Phase::UpstreamSend => (
                "sending the request (and streaming its body) to the upstream",
                None,
            ),
            Phase::UpstreamWait => (
                "request sent → first response byte: the backend's own time",
                None,
            ),
            Phase::UpstreamRecv => (
                "first → last response byte from the upstream (overlaps write when streamed)",
                Some("overlaps write"),
            ),
            Phase::ResponseParse => ("CPU time in the response-head parser", Some("CPU")),
            Phase::Write => ("writing the response to the client", None),
            Phase::ProxyOverhead => ("latency phasescope itself adds", None),
            Phase::Total => (
                "first request byte → last response byte written: what the client saw",
                None,
            ),
            Phase::BackendIn => (
                "Webdis reading the HTTP request and building its Redis command",
                Some("in upstream_wait"),
            ),
            Phase::Backend => ("Redis itself: command → reply", Some("in upstream_wait")),
            Phase::BackendOut => (
                "Webdis turning the Redis reply into its HTTP response",
                Some("in upstream_wait"),
            ),
            Phase::BackendQueue => (
                "Redis queue: the part of backend the command waited behind earlier replies on Webdis's pooled connection",
                Some("in backend"),
            ),
            Phase::UpstreamRecvGap => (
                "the longest pause between two reads of one response (Nagle's algorithm against a delayed ACK shows as ~40 ms)",
                Some("in upstream_recv"),
            ),
            Phase::WriteBlocked => (
                "the time response bytes waited for the client's socket to take them (a client reading slowly)",
                Some("in write"),
            ),
            Phase::ProxyStalled => (
                "the part of the wait for the upstream during which phasescope itself did not run (stopped, throttled, given no CPU)",
                Some("in proxy_overhead"),
            ),
        }
    }

    /// The colour as its red, green and blue bytes.
    pub fn rgb(self) -> (u8, u8, u8) {
        let hex = self.style().colour.trim_start_matches('#');
        let byte = |i: usize| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .unwrap_or(0x59)
        };
        (byte(0), byte(2), byte(4))
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The measured phases of one exchange, in nanoseconds. A phase that did not happen (no
/// connect, no queueing, no body) is absent rather than zero, so that it does not drag a
/// histogram towards zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Phases {
    nanos: [u64; Phase::COUNT],
    present: u32,
}

impl Phases {
    #[inline]
    pub fn set(&mut self, phase: Phase, nanos: u64) {
        self.nanos[phase.index()] = nanos;
        self.present |= 1 << phase.index();
    }

    #[inline]
    pub fn get(&self, phase: Phase) -> Option<u64> {
        (self.present & (1 << phase.index()) != 0).then_some(self.nanos[phase.index()])
    }

    /// The phases that were measured, in timeline order.
    pub fn iter(&self) -> impl Iterator<Item = (Phase, u64)> + '_ {
        Phase::ALL
            .into_iter()
            .filter_map(move |p| self.get(p).map(|n| (p, n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_indexes_are_dense() {
        for (i, p) in Phase::ALL.into_iter().enumerate() {
            assert_eq!(p.index(), i);
            assert_eq!(Phase::from_name(p.name()), Some(p));
        }
    }

    #[test]
    fn a_phase_lies_inside_one_listed_before_it() {
        for p in Phase::ALL {
            if let Some(outer) = p.within() {
                assert!(outer.index() < p.index(), "{p} within {outer}");
            }
        }
    }

    #[test]
    fn styles_agree_with_the_phases() {
        let mut stacked: Vec<(u8, Phase)> = Vec::new();
        for p in Phase::ALL {
            let st = p.style();
            assert_eq!(st.parent, p.within(), "{p}");
            assert!(st.label.starts_with(p.name()), "{p}: {}", st.label);
            assert_eq!(st.colour.len(), 7, "{p}");
            assert_eq!(
                format!("#{:02x}{:02x}{:02x}", p.rgb().0, p.rgb().1, p.rgb().2),
                st.colour
            );
            if let Some(at) = st.stack {
                assert!(p.within().is_none() && p != Phase::Total, "{p} is stacked");
                stacked.push((at, p));
            }
        }
        // The stack is in timeline order, one place each.
        let order: Vec<u8> = stacked.iter().map(|(at, _)| *at).collect();
        assert_eq!(order, (0..stacked.len() as u8).collect::<Vec<_>>());
    }

    /// The live page's stack holds the sequential phases of docs/phases.md (every phase of
    /// the SVG's bar but `upstream_recv`, which overlaps `write`), each phase drawn apart
    /// from the one it lies in just before that one, one place each.
    #[test]
    fn the_sum_stack_is_the_sequential_phases_with_their_parts_before_them() {
        let mut places: Vec<(u8, Phase)> = Phase::ALL
            .into_iter()
            .filter_map(|p| p.style().sum_stack.map(|at| (at, p)))
            .collect();
        places.sort();
        let at: Vec<u8> = places.iter().map(|(at, _)| *at).collect();
        assert_eq!(at, (0..places.len() as u8).collect::<Vec<_>>());
        let mut whole: Vec<Phase> = places
            .iter()
            .map(|&(_, p)| p)
            .filter(|p| p.within().is_none())
            .collect();
        whole.sort();
        let sequential: Vec<Phase> = Phase::ALL
            .into_iter()
            .filter(|p| p.style().stack.is_some() && *p != Phase::UpstreamRecv)
            .collect();
        assert_eq!(whole, sequential);
        for &(at, p) in &places {
            let Some(outer) = p.within() else { continue };
            let outer_at = outer.style().sum_stack.expect("its phase is stacked");
            assert!(at < outer_at, "{p} is drawn before the rest of {outer}");
            // Nothing but other parts of the same phase between the two.
            assert!(places[at as usize..outer_at as usize]
                .iter()
                .all(|(_, q)| q.within() == Some(outer)));
        }
    }

    #[test]
    fn every_phase_is_described_and_those_inside_another_say_where() {
        for p in Phase::ALL {
            let st = p.style();
            assert!(!st.description.is_empty(), "{p}");
            if let Some(outer) = p.within() {
                let note = st.note.unwrap_or_default();
                assert!(
                    note == format!("in {outer}") || note == "CPU",
                    "{p}: {note:?}"
                );
            }
        }
    }

    #[test]
    fn absent_phases_stay_absent() {
        let mut ph = Phases::default();
        ph.set(Phase::Total, 5);
        assert_eq!(ph.get(Phase::Total), Some(5));
        assert_eq!(ph.get(Phase::Queue), None);
        assert_eq!(ph.iter().count(), 1);
    }
}

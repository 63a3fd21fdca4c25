//! Every count a tap keeps besides its phase series and request counts: one
//! [`Counters`] struct, the same in each thread's shard and in the totals a scrape adds
//! up, and one table, [`FAMILIES`], of the exposition families read from it, which the
//! snapshot's totals read too.
//!
//! A new counter is a field here, the arm of [`Counters::record`] that counts its
//! [`Event`], and its row in [`FAMILIES`]. `record`, `add` and `since` match or
//! destructure exhaustively, so the compiler names each of them until the field is in.

use prometheus::proto::MetricType;

use crate::metrics::heads::HeadShapes;
use crate::recorder::{ConnectFailure, Direction, ErrorKind, Event, Side};

/// The counts of one tap: per thread in its shard, or added up over the threads. Plain
/// integers, so counting an event is one addition on a line the thread already holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Indexed by [`ErrorKind::ALL`] position.
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Indexed by [`SIDES`] position.
    pub opened: [u64; 2],
    pub closed: [u64; 2],
    /// Indexed by [`DIRECTIONS`] position.
    pub bytes: [u64; 2],
    /// Messages that answered no request (pub/sub, MONITOR, RESP3 pushes).
    pub pushed: u64,
    /// Client connections the client ended between exchanges: normal ends, not errors.
    pub client_closes: u64,
    /// Failed upstream connects, indexed by [`ConnectFailure::ALL`] position.
    pub connect_failures: [u64; ConnectFailure::ALL.len()],
    /// Correlated requests: [matched, unmatched].
    pub correlations: [u64; 2],
    pub heads: HeadShapes,
}

pub(crate) const SIDES: [Side; 2] = [Side::Client, Side::Upstream];
pub(crate) const DIRECTIONS: [Direction; 2] = [Direction::Request, Direction::Response];

fn side_index(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Upstream => 1,
    }
}

fn direction_index(direction: Direction) -> usize {
    match direction {
        Direction::Request => 0,
        Direction::Response => 1,
    }
}

fn error_index(kind: ErrorKind) -> usize {
    // ALL lists every variant, so the fallback is never taken.
    ErrorKind::ALL.iter().position(|&k| k == kind).unwrap_or(0)
}

impl Counters {
    /// Counts one event. Every event is counted: a new variant of [`Event`] does not
    /// compile until it has its arm here.
    #[inline]
    pub fn record(&mut self, event: Event) {
        match event {
            Event::Error(kind) => self.errors[error_index(kind)] += 1,
            Event::ClientClosed => self.client_closes += 1,
            Event::ConnectFailed(why) => {
                // ALL lists every reason, so the fallback is never taken.
                let i = ConnectFailure::ALL
                    .iter()
                    .position(|&w| w == why)
                    .unwrap_or(0);
                self.connect_failures[i] += 1;
            }
            Event::ConnectionOpened(side) => self.opened[side_index(side)] += 1,
            Event::ConnectionClosed(side) => self.closed[side_index(side)] += 1,
            Event::Bytes(direction, n) => self.bytes[direction_index(direction)] += n,
            Event::Pushed(n) => self.pushed += n,
            Event::Correlated { matched } => self.correlations[usize::from(!matched)] += 1,
            Event::RequestHead(head) => self.heads.record(head.bytes, head.fields),
        }
    }

    /// Adds another thread's counts to these.
    pub fn add(&mut self, other: &Counters) {
        let Counters {
            errors,
            opened,
            closed,
            bytes,
            pushed,
            client_closes,
            connect_failures,
            correlations,
            heads,
        } = other;
        add(&mut self.errors, errors);
        add(&mut self.opened, opened);
        add(&mut self.closed, closed);
        add(&mut self.bytes, bytes);
        self.pushed += pushed;
        self.client_closes += client_closes;
        add(&mut self.connect_failures, connect_failures);
        add(&mut self.correlations, correlations);
        self.heads.add(heads);
    }

    /// What was counted since `earlier` (an older reading of the same counters).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let Counters {
            errors,
            opened,
            closed,
            bytes,
            pushed,
            client_closes,
            connect_failures,
            correlations,
            heads,
        } = earlier;
        Counters {
            errors: sub(&self.errors, errors),
            opened: sub(&self.opened, opened),
            closed: sub(&self.closed, closed),
            bytes: sub(&self.bytes, bytes),
            pushed: self.pushed.saturating_sub(*pushed),
            client_closes: self.client_closes.saturating_sub(*client_closes),
            connect_failures: sub(&self.connect_failures, connect_failures),
            correlations: sub(&self.correlations, correlations),
            heads: self.heads.since(heads),
        }
    }
}

fn add<const N: usize>(acc: &mut [u64; N], v: &[u64; N]) {
    for (a, n) in acc.iter_mut().zip(v) {
        *a += n;
    }
}

fn sub<const N: usize>(now: &[u64; N], then: &[u64; N]) -> [u64; N] {
    let mut out = *now;
    for (a, b) in out.iter_mut().zip(then) {
        *a = a.saturating_sub(*b);
    }
    out
}

/// One exposition family read from [`Counters`]. The exposition writes every row of
/// [`FAMILIES`], in order, one sample per tap and label value; the snapshot's totals take
/// their values from the same rows.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    /// `COUNTER` or `GAUGE`.
    pub kind: MetricType,
    /// The name of the label beside `tap`; `None` for one sample per tap.
    pub label: Option<&'static str>,
    /// The label values and their counts (one pair with an empty value without a label).
    pub samples: fn(&Counters) -> Vec<(&'static str, u64)>,
}

impl Family {
    /// The count of one label value; 0 for a value the family does not have.
    pub fn value(&self, counters: &Counters, label_value: &str) -> u64 {
        (self.samples)(counters)
            .into_iter()
            .find(|(v, _)| *v == label_value)
            .map_or(0, |(_, n)| n)
    }
}

pub const ERRORS: Family = Family {
    name: "phasescope_errors_total",
    help: "Failed exchanges and connections, by kind.",
    kind: MetricType::COUNTER,
    label: Some("kind"),
    samples: |c| {
        ErrorKind::ALL
            .iter()
            .zip(c.errors)
            .map(|(k, n)| (k.name(), n))
            .collect()
    },
};

pub const CONNECTIONS: Family = Family {
    name: "phasescope_connections",
    help: "Connections open now, by side.",
    kind: MetricType::GAUGE,
    label: Some("side"),
    samples: |c| {
        // Opens and closes are read from each shard at slightly different moments, so a
        // close can be seen before its open: never show a negative count.
        SIDES
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name(), c.opened[i].saturating_sub(c.closed[i])))
            .collect()
    },
};

pub const CONNECTIONS_TOTAL: Family = Family {
    name: "phasescope_connections_total",
    help: "Connections opened, by side.",
    kind: MetricType::COUNTER,
    label: Some("side"),
    samples: |c| {
        SIDES
            .iter()
            .zip(c.opened)
            .map(|(s, n)| (s.name(), n))
            .collect()
    },
};

pub const BYTES: Family = Family {
    name: "phasescope_bytes_total",
    help: "Bytes relayed, by direction (request: client to upstream).",
    kind: MetricType::COUNTER,
    label: Some("direction"),
    samples: |c| {
        DIRECTIONS
            .iter()
            .zip(c.bytes)
            .map(|(d, n)| (d.name(), n))
            .collect()
    },
};

pub const PUSHED: Family = Family {
    name: "phasescope_pushed_messages_total",
    help: "Messages that answered no request: pub/sub messages, MONITOR lines, RESP3 pushes.",
    kind: MetricType::COUNTER,
    label: None,
    samples: |c| vec![("", c.pushed)],
};

pub const CLIENT_CLOSES: Family = Family {
    name: "phasescope_client_closes_total",
    help: "Client connections the client ended between exchanges (a normal end, not an error; one that leaves mid-exchange is errors_total{kind=\"client_abort\"}).",
    kind: MetricType::COUNTER,
    label: None,
    samples: |c| vec![("", c.client_closes)],
};

pub const CONNECT_FAILURES: Family = Family {
    name: "phasescope_upstream_connect_failures_total",
    help: "Failed connects to the upstream, by reason (refused: nothing listens; timeout; other).",
    kind: MetricType::COUNTER,
    label: Some("reason"),
    samples: |c| {
        ConnectFailure::ALL
            .iter()
            .zip(c.connect_failures)
            .map(|(w, n)| (w.name(), n))
            .collect()
    },
};

pub const CORRELATIONS: Family = Family {
    name: "phasescope_correlations_total",
    help: "Correlated HTTP requests that found (matched) or did not find (unmatched) their backend command.",
    kind: MetricType::COUNTER,
    label: Some("result"),
    samples: |c| {
        vec![
            ("matched", c.correlations[0]),
            ("unmatched", c.correlations[1]),
        ]
    },
};

/// The families of the exposition read from [`Counters`], in exposition order (after the
/// phase histograms and the requests, before the build info).
pub const FAMILIES: [Family; 8] = [
    ERRORS,
    CONNECT_FAILURES,
    CONNECTIONS,
    CONNECTIONS_TOTAL,
    BYTES,
    PUSHED,
    CLIENT_CLOSES,
    CORRELATIONS,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::HeadShape;

    #[test]
    fn every_event_lands_in_its_field_and_adds_and_subtracts_whole() {
        let mut c = Counters::default();
        for event in [
            Event::Error(ErrorKind::ClientAbort),
            Event::ClientClosed,
            Event::ConnectFailed(ConnectFailure::Refused),
            Event::ConnectionOpened(Side::Upstream),
            Event::ConnectionOpened(Side::Upstream),
            Event::ConnectionClosed(Side::Upstream),
            Event::Bytes(Direction::Response, 7),
            Event::Pushed(3),
            Event::Correlated { matched: false },
            Event::RequestHead(HeadShape {
                bytes: 100,
                fields: 4,
            }),
        ] {
            c.record(event);
        }
        assert_eq!(ERRORS.value(&c, "client_abort"), 1);
        assert_eq!(CLIENT_CLOSES.value(&c, ""), 1);
        assert_eq!(CONNECT_FAILURES.value(&c, "refused"), 1);
        assert_eq!(CONNECTIONS.value(&c, "upstream"), 1);
        assert_eq!(CONNECTIONS_TOTAL.value(&c, "upstream"), 2);
        assert_eq!(BYTES.value(&c, "response"), 7);
        assert_eq!(PUSHED.value(&c, ""), 3);
        assert_eq!(CORRELATIONS.value(&c, "unmatched"), 1);
        assert_eq!(c.heads.count, 1);

        let mut twice = c;
        twice.add(&c);
        assert_eq!(twice.since(&c), c);
        assert_eq!(c.since(&twice), Counters::default());
    }
}

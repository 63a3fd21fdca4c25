//! Where completed exchanges go.
//!
//! The relay knows nothing about Prometheus, HDR histograms or log files: it hands each
//! completed exchange, and every other [`Event`] (errors, connections, bytes, …), to the
//! tap's [`Recorder`]. The metrics registry, the access log and the slow log are
//! recorders; [`Fanout`] sends each exchange and event to several.

mod event;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::phase::Phases;

pub use event::{ConnectFailure, Culprit, Direction, ErrorKind, Event, HeadShape, Side};

/// A bounded route label, resolved once per request by the tap's route table while the
/// request head is still in the read buffer. `RouteId(0)` is always the fallback route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RouteId(pub u16);

/// The id of one exchange, unique within the process: the exemplars of the OpenMetrics
/// exposition name it (`exchange_id`) and so do the access and slow log lines, so that a
/// slow bucket leads to the exact request. The high 16 bits number the thread that
/// recorded it, the low 48 count that thread's exchanges: taking one is a thread-local
/// increment, with no shared cache line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ExchangeId(pub u64);

impl ExchangeId {
    /// No id (records made outside the relay, such as fixtures).
    pub const NONE: ExchangeId = ExchangeId(0);

    /// A new id, from this thread's counter.
    #[inline]
    pub fn next() -> ExchangeId {
        thread_local! {
            static NEXT: Cell<u64> = const { Cell::new(0) };
        }
        static THREADS: AtomicU64 = AtomicU64::new(0);
        NEXT.with(|next| {
            let mut id = next.get();
            if id & SEQUENCE_MASK == 0 {
                // First use on this thread (or its 2^48 ids are spent): a new thread number.
                let thread = (THREADS.fetch_add(1, Ordering::Relaxed) + 1) & 0xffff;
                id = (thread << 48) | 1;
            }
            next.set(id + 1);
            ExchangeId(id)
        })
    }

    /// The label value: 16 lowercase hex digits, without allocating.
    pub fn hex(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            let nibble = (self.0 >> (60 - 4 * i)) & 0xf;
            *b = b"0123456789abcdef"[nibble as usize];
        }
        out
    }
}

const SEQUENCE_MASK: u64 = (1 << 48) - 1;

impl std::fmt::Display for ExchangeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// One completed exchange as the recorders see it.
#[derive(Debug, Clone, Copy)]
pub struct ExchangeRecord<'a> {
    /// Named by the exemplars and the log lines.
    pub id: ExchangeId,
    pub route: RouteId,
    /// The request method (`GET`), or for RESP the command name.
    pub method: &'a str,
    /// The request target. Empty unless some recorder asked for it with
    /// [`Recorder::wants_target`] (keeping it costs a copy per request).
    pub target: &'a [u8],
    /// The final response status; 0 when no response was received.
    pub status: u16,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub phases: Phases,
    /// Why the exchange failed, when it did: the proxy answered it itself (a 502, a 504,
    /// a 400) or cut it short. Its phases are then kept apart from the answered
    /// exchanges' (a 502's latency is not the server's).
    pub failure: Option<ErrorKind>,
    /// RESP: the reply was an error (`-ERR …`, `-WRONGTYPE …`, a RESP3 bulk error), the
    /// server's own error answer, as an HTTP 5xx is. Always false for HTTP, whose status
    /// says it.
    pub error_reply: bool,
}

/// Receives what happens on one tap. Implementations must be cheap and must not block:
/// they run on the connection tasks.
pub trait Recorder: Send + Sync + 'static {
    /// Whether [`ExchangeRecord::target`] should be filled in.
    fn wants_target(&self) -> bool {
        false
    }
    fn exchange(&self, record: &ExchangeRecord<'_>);
    /// Everything else that happens on the tap. Implementations match the event
    /// exhaustively, naming the variants they ignore, so that a new variant is a compile
    /// error in every recorder until it decides.
    fn event(&self, event: Event);
    /// A completed HTTP exchange, in one call so that a recorder can take everything under
    /// one lock: the bytes it moved (`record.request_bytes` and `record.response_bytes`,
    /// counted as if sent as [`Event::Bytes`]), its request head's shape (`None` for a
    /// head that stays out of the head shapes), and the exchange. The same as an
    /// `Event::Bytes` for each direction, an `Event::RequestHead`, then `exchange`.
    fn exchange_relayed(&self, record: &ExchangeRecord<'_>, head: Option<HeadShape>) {
        self.event(Event::Bytes(Direction::Request, record.request_bytes));
        self.event(Event::Bytes(Direction::Response, record.response_bytes));
        if let Some(head) = head {
            self.event(Event::RequestHead(head));
        }
        self.exchange(record);
    }
    /// Called on shutdown, after the last exchange: flush whatever is buffered.
    fn flush(&self) {}
}

/// A recorder that keeps nothing (for `--no-metrics` with no logs).
#[derive(Debug, Default)]
pub struct Discard;

impl Recorder for Discard {
    fn exchange(&self, _: &ExchangeRecord<'_>) {}
    /// Every event, whatever its kind, is dropped: that is this recorder's whole job.
    fn event(&self, _: Event) {}
}

/// Sends every exchange and event to each of several recorders, in order. Events are
/// forwarded whole, so a new kind of event needs no change here.
#[derive(Default, Clone)]
pub struct Fanout {
    sinks: Vec<Arc<dyn Recorder>>,
}

impl Fanout {
    pub fn new(sinks: Vec<Arc<dyn Recorder>>) -> Self {
        Self { sinks }
    }
}

impl Recorder for Fanout {
    fn wants_target(&self) -> bool {
        self.sinks.iter().any(|s| s.wants_target())
    }
    fn exchange(&self, record: &ExchangeRecord<'_>) {
        self.sinks.iter().for_each(|s| s.exchange(record));
    }
    fn event(&self, event: Event) {
        self.sinks.iter().for_each(|s| s.event(event));
    }
    fn exchange_relayed(&self, record: &ExchangeRecord<'_>, head: Option<HeadShape>) {
        self.sinks
            .iter()
            .for_each(|s| s.exchange_relayed(record, head));
    }
    fn flush(&self) {
        self.sinks.iter().for_each(|s| s.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_ids_are_distinct_across_threads_and_print_as_sixteen_hex_digits() {
        let mine: Vec<ExchangeId> = (0..3).map(|_| ExchangeId::next()).collect();
        let theirs: Vec<ExchangeId> =
            std::thread::spawn(|| (0..3).map(|_| ExchangeId::next()).collect())
                .join()
                .unwrap();
        let mut all: Vec<u64> = mine.iter().chain(&theirs).map(|id| id.0).collect();
        assert!(all.iter().all(|&id| id != 0));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6);
        assert_eq!(mine[1].0, mine[0].0 + 1);
        assert_ne!(mine[0].0 >> 48, theirs[0].0 >> 48);
        let id = ExchangeId(0x0001_0000_0000_00af);
        assert_eq!(id.to_string(), "00010000000000af");
        assert_eq!(&id.hex(), b"00010000000000af");
    }
}

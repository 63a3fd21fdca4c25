//! What happens on a tap besides its exchanges, as one [`Event`] type.
//!
//! Every recorder consumes events with one exhaustive `match`: a new event is a new
//! variant, and the compiler then names every recorder that must decide what to do with
//! it (count it, or ignore it explicitly). With one defaulted trait method per event, a
//! recorder that forgot one, or a [`Fanout`](super::Fanout) that forgot to forward it,
//! dropped it silently.

/// One thing that happened on a tap, other than a completed exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// An exchange or a connection failed.
    Error(ErrorKind),
    /// The client ended its connection between exchanges (a FIN or a reset with no
    /// request begun): a normal end, not an error. A client that leaves with an exchange
    /// in flight is [`ErrorKind::ClientAbort`] instead.
    ClientClosed,
    ConnectionOpened(Side),
    ConnectionClosed(Side),
    /// Connecting to the upstream failed, and why (sent beside the exchange's
    /// `Error(UpstreamConnect)`).
    ConnectFailed(ConnectFailure),
    /// Bytes relayed outside a recorded exchange (an HTTP exchange's bytes come with it,
    /// in [`Recorder::exchange_relayed`](super::Recorder::exchange_relayed)).
    Bytes(Direction, u64),
    /// Messages that answer no request (pub/sub messages, MONITOR lines, RESP3 pushes).
    Pushed(u64),
    /// A correlated HTTP request found (or did not find) its backend command.
    Correlated {
        matched: bool,
    },
    /// A request head was read; not sent for the probe's own requests. Sent alone only
    /// for a request that records no exchange; otherwise the shape comes with the
    /// exchange ([`Recorder::exchange_relayed`](super::Recorder::exchange_relayed)).
    RequestHead(HeadShape),
}

/// Why the upstream could not be connected: what the proxy's answer and the report name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectFailure {
    /// Refused: nothing listens on the address.
    Refused,
    /// No answer within the connect timeout (or the kernel's).
    TimedOut,
    /// Anything else: no route, a name that does not resolve, …
    Other,
}

impl ConnectFailure {
    pub const ALL: [ConnectFailure; 3] = [
        ConnectFailure::Refused,
        ConnectFailure::TimedOut,
        ConnectFailure::Other,
    ];

    /// The `reason` label.
    pub const fn name(self) -> &'static str {
        match self {
            ConnectFailure::Refused => "refused",
            ConnectFailure::TimedOut => "timeout",
            ConnectFailure::Other => "other",
        }
    }
}

/// Which side of the proxy a connection or byte count belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Client,
    Upstream,
}

impl Side {
    pub const fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Upstream => "upstream",
        }
    }
}

/// The direction bytes travel: `request` (client → upstream) or `response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Request,
    Response,
}

impl Direction {
    pub const fn name(self) -> &'static str {
        match self {
            Direction::Request => "request",
            Direction::Response => "response",
        }
    }
}

/// Why an exchange or a connection failed: the `kind` label of `phasescope_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// Malformed or ambiguous request framing (answered 400).
    BadRequest,
    /// Request head over the size or header-count limit (answered 431).
    HeaderTooLarge,
    /// The client took longer than the head timeout to send a head (answered 408), or
    /// stalled while sending a body.
    ClientTimeout,
    /// The upstream could not be reached (answered 502).
    UpstreamConnect,
    /// The upstream did not answer within the response timeout (answered 504).
    UpstreamTimeout,
    /// The upstream closed or reset the connection before the response was complete.
    UpstreamReset,
    /// The upstream sent something that is not a valid response (answered 502).
    BadResponse,
    /// The client left (closed or reset) with an exchange in flight: inside its request,
    /// or before the response was complete. Leaving between exchanges is
    /// [`Event::ClientClosed`], not an error.
    ClientAbort,
    /// The upstream sent a response between requests, when none was asked for.
    UnsolicitedResponse,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::BadRequest,
        ErrorKind::HeaderTooLarge,
        ErrorKind::ClientTimeout,
        ErrorKind::UpstreamConnect,
        ErrorKind::UpstreamTimeout,
        ErrorKind::UpstreamReset,
        ErrorKind::BadResponse,
        ErrorKind::ClientAbort,
        ErrorKind::UnsolicitedResponse,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::HeaderTooLarge => "header_too_large",
            ErrorKind::ClientTimeout => "client_timeout",
            ErrorKind::UpstreamConnect => "upstream_connect",
            ErrorKind::UpstreamTimeout => "upstream_timeout",
            ErrorKind::UpstreamReset => "upstream_reset",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::ClientAbort => "client_abort",
            ErrorKind::UnsolicitedResponse => "unsolicited_response",
        }
    }

    /// Who the failure is on: the upstream (the server behind the tap), or the client
    /// (what it sent, how slowly, or that it left mid-exchange).
    pub const fn culprit(self) -> Culprit {
        match self {
            ErrorKind::BadRequest | ErrorKind::HeaderTooLarge | ErrorKind::ClientTimeout => {
                Culprit::Client
            }
            ErrorKind::ClientAbort => Culprit::ClientAbort,
            ErrorKind::UpstreamConnect
            | ErrorKind::UpstreamTimeout
            | ErrorKind::UpstreamReset
            | ErrorKind::BadResponse
            | ErrorKind::UnsolicitedResponse => Culprit::Upstream,
        }
    }

    /// The kind named `name` (the `kind` label), if any.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

/// Whose doing a failure is: what the report, the live page and the dashboard keep
/// apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Culprit {
    /// The server behind the tap failed the exchange: the failures a report leads with.
    Upstream,
    /// The client sent something the proxy refused, or too slowly.
    Client,
    /// The client left with an exchange in flight (`client_abort`).
    ClientAbort,
}

/// The shape of a request head: its size (empty line included) and its header fields,
/// for the tap's head-shape statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadShape {
    pub bytes: usize,
    pub fields: usize,
}

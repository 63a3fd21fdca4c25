//! The HTTP/1.x relay: what is HTTP's alone, beside the shared layer of `relay` (buffers,
//! pages, reads, the timer, shutdown, the failure type, the exchange timeline).
//!
//! `connection` is one client connection's task, exchange after exchange; `next` and
//! `response` frame the request and the response being relayed; `http_relay` and `sides`
//! are one exchange in flight (an event per method, the decisions in plain state); `slot`
//! is the pooled page an exchange runs in; `tunnel` carries the bytes after an upgrade or
//! a `CONNECT`. The protocol's limits and its failure type live here, in one place.

mod connection;
mod http_relay;
mod next;
mod response;
mod sides;
mod slot;
mod tunnel;

use std::time::Duration;

use crate::http1::Answer;
use crate::relay::failure;

pub(super) use connection::HttpConnection;
pub(super) use slot::trim as trim_slots;

/// The HTTP relay's failures: the client gets a proxy-made response.
type Failure = failure::Failure<Answer>;

/// Largest chunk of a response body buffered before it is written to the client.
const RESPONSE_BUFFER: usize = 16 * 1024;
/// Largest chunk of a request body buffered before it is written to the upstream.
const REQUEST_BUFFER: usize = 16 * 1024;

/// Largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Most header fields accepted in a response head.
const MAX_RESPONSE_HEADERS: usize = 4096;

/// How long the body of an `Expect: 100-continue` request is held back when the upstream
/// says nothing: curl's wait for the `100 Continue` (RFC 9110 §10.1.1 lets a client send
/// the body after waiting "for some indefinite period").
const CONTINUE_WAIT: Duration = Duration::from_secs(1);

/// How long the client's remaining bytes are drained after a proxy-made answer or the
/// close after a complete response, so that the answer is not lost to a reset (the write
/// itself is bounded by `failure::ANSWER_WRITE`, shared with RESP).
const ANSWER_LINGER: Duration = Duration::from_millis(500);

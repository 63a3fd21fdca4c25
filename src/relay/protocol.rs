//! Which connection serves a tap's client: the relay's half of what differs per protocol.
//!
//! `config::Protocol` answers what the metrics, the snapshot and the routes ask about a
//! protocol; the relay's one question, which connection type drives a client socket, is
//! answered here, so that the listener never names a protocol. A new protocol adds its
//! arm to `Connection::new` and `Connection::task` (the compiler asks for both).

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::http::HttpConnection;
use super::resp::RespConnection;
use super::TapContext;
use crate::config::Protocol;
use crate::recorder::{Event, Side};

/// A connection as its task holds it. The HTTP one inline: it is the common case, and
/// boxing it would add an allocation per connection for no memory saved.
#[allow(clippy::large_enum_variant)]
pub(super) enum Connection {
    Http(HttpConnection),
    /// Built when its task runs (`serve`), boxed, so that an HTTP connection's task is
    /// not sized for the RESP state too.
    Resp(Option<TcpStream>),
}

impl Connection {
    /// The connection that serves a client of a tap speaking `protocol`.
    pub(super) fn new(protocol: Protocol, stream: TcpStream, ctx: &Arc<TapContext>) -> Self {
        match protocol {
            Protocol::Http => Connection::Http(HttpConnection::new(stream, ctx.clone())),
            Protocol::Resp => Connection::Resp(Some(stream)),
        }
    }

    /// The connection's task: serves the client until either side ends the connection,
    /// or shutdown finds it idle, counting the client connection open meanwhile and
    /// holding the tap's concurrency permit. Not an `async fn`, and not a future nested
    /// in the listener's: either keeps a second copy of what it takes, for the life of
    /// the connection, where one `async move` block uses what it captured in place (a
    /// test in `relay::listener` holds the task to its budget).
    #[allow(clippy::manual_async_fn)]
    pub(super) fn task(
        mut self,
        ctx: Arc<TapContext>,
        shutdown: watch::Receiver<bool>,
        permit: OwnedSemaphorePermit,
    ) -> impl Future<Output = ()> + Send {
        async move {
            ctx.recorder.event(Event::ConnectionOpened(Side::Client));
            match &mut self {
                Connection::Http(http) => http.serve(shutdown).await,
                Connection::Resp(stream) => {
                    if let Some(stream) = stream.take() {
                        Box::pin(RespConnection::new(stream, ctx.clone()).serve(shutdown)).await
                    }
                }
            }
            drop(self);
            ctx.recorder.event(Event::ConnectionClosed(Side::Client));
            drop(permit);
        }
    }
}

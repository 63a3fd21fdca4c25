//! The relay: a listener per tap, a task per client connection, the exchange timeline.

// The layer both protocols share: buffers and the pages under them, reads, the one timer,
// shutdown, the failure type, the exchange timeline, the listener and the workers, and
// which protocol's connection serves a client.
mod buffer;
pub mod exchange;
mod failure;
mod io;
mod listener;
mod pages;
mod protocol;
mod stop;
mod timer;
mod workers;

// One folder per protocol: its connection and what only it needs.
mod http;
mod resp;

use std::sync::Arc;

use crate::config::TapConfig;
use crate::correlate::Correlator;
pub(crate) use crate::recorder::ConnectFailure;
use crate::recorder::{Event, Recorder};
use crate::routes::RouteTable;

pub use exchange::{Exchange, Wait};
pub use listener::Tap;
pub use workers::{WorkerThreads, Workers};

/// What every connection of a tap shares.
pub struct TapContext {
    pub config: TapConfig,
    pub recorder: Arc<dyn Recorder>,
    pub routes: Arc<RouteTable>,
    /// Some recorder wants the request target (the access log).
    pub wants_target: bool,
    /// The correlator this tap reports to (RESP) or asks (HTTP), if any.
    pub correlator: Option<Arc<Correlator>>,
}

impl TapContext {
    pub fn new(config: TapConfig, recorder: Arc<dyn Recorder>, routes: Arc<RouteTable>) -> Self {
        let wants_target = recorder.wants_target();
        Self {
            config,
            recorder,
            routes,
            wants_target,
            correlator: None,
        }
    }

    /// Opens the tap's upstream connection (with the connect timeout, TCP_NODELAY, logged
    /// and counted). When it cannot be reached, why: the caller answers as its protocol
    /// does (a 502 naming the cause, or a RESP error) and counts `upstream_connect`.
    pub(crate) async fn connect_upstream(&self) -> Result<tokio::net::TcpStream, ConnectFailure> {
        let cfg = &self.config;
        // Boxed: the connect future is large and only the first request of a connection
        // needs it, so it must not make every connection task bigger.
        let connect = Box::pin(timer::timeout(
            cfg.timeouts.connect,
            tokio::net::TcpStream::connect(&cfg.upstream),
        ));
        match connect.await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                self.recorder
                    .event(Event::ConnectionOpened(crate::recorder::Side::Upstream));
                Ok(stream)
            }
            Ok(Err(e)) => {
                tracing::warn!(tap = %cfg.name, upstream = %cfg.upstream, error = %e, "upstream connect failed");
                let why = match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => ConnectFailure::Refused,
                    std::io::ErrorKind::TimedOut => ConnectFailure::TimedOut,
                    _ => ConnectFailure::Other,
                };
                self.recorder.event(Event::ConnectFailed(why));
                Err(why)
            }
            Err(_) => {
                tracing::warn!(tap = %cfg.name, upstream = %cfg.upstream, "upstream connect timed out");
                self.recorder
                    .event(Event::ConnectFailed(ConnectFailure::TimedOut));
                Err(ConnectFailure::TimedOut)
            }
        }
    }

    /// Joins the tap to a correlator.
    pub fn with_correlator(mut self, correlator: Option<Arc<Correlator>>) -> Self {
        self.correlator = correlator;
        self
    }
}

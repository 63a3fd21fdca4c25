//! The relay: a listener per tap, a task per client connection, the exchange timeline.

mod buffer;
mod connection;
pub mod exchange;
mod listener;
mod next;
mod resp_connection;
mod stop;
mod timer;
mod tunnel;
mod workers;

use std::sync::Arc;

use crate::config::TapConfig;
use crate::correlate::Correlator;
use crate::metrics::routes::RouteTable;
use crate::recorder::Recorder;

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

    /// Joins the tap to a correlator.
    pub fn with_correlator(mut self, correlator: Option<Arc<Correlator>>) -> Self {
        self.correlator = correlator;
        self
    }
}

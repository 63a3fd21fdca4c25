//! The signals that stop the demo: SIGINT (Ctrl-C), SIGTERM and SIGHUP, caught from the
//! moment the demo starts, so that none of them kills it with its upstream process
//! running: each ends the load or the wait, and the demo stops in order.

use anyhow::Context;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The handlers, installed when this is made (not when first awaited).
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Installs the handlers; needs a tokio runtime.
    pub fn install() -> anyhow::Result<Signals> {
        let on =
            |kind: SignalKind, name: &str| signal(kind).with_context(|| format!("catching {name}"));
        Ok(Signals {
            interrupt: on(SignalKind::interrupt(), "SIGINT")?,
            terminate: on(SignalKind::terminate(), "SIGTERM")?,
            hangup: on(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Completes when one of them arrives.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            _ = self.hangup.recv() => {}
        }
    }
}

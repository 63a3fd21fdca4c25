//! The admin server: `/metrics`, `/healthz`, `/api/snapshot`, `/api/reset` and `/`.
//!
//! One server per process, on its own listener and its own tasks. Scrapes and snapshots
//! format on tokio's blocking pool, so a large exposition never occupies a worker thread
//! that connection tasks need.

mod handlers;
mod page;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::metrics::Registry;

pub use handlers::handle;

/// A client that has not sent a complete request head by then is dropped.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long requests in progress may finish after shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Pause after a failed accept (out of file descriptors, say) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A bound, not yet serving, admin server.
#[derive(Debug)]
pub struct AdminServer {
    listener: std::net::TcpListener,
    local_addr: SocketAddr,
    registry: Arc<Registry>,
    token: Option<Arc<str>>,
}

/// Binds the admin listener now, so that a taken port fails at start-up with a clear
/// error rather than later inside the runtime. Port 0 picks a free port.
pub fn bind(addr: SocketAddr, registry: Arc<Registry>) -> anyhow::Result<AdminServer> {
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("binding the admin server to {addr}"))?;
    listener
        .set_nonblocking(true)
        .context("making the admin listener non-blocking")?;
    let local_addr = listener
        .local_addr()
        .context("reading the admin listener's address")?;
    Ok(AdminServer {
        listener,
        local_addr,
        registry,
        token: None,
    })
}

impl AdminServer {
    /// Requires `Authorization: Bearer <token>` on `/metrics` and `/api/*`.
    pub fn with_token(mut self, token: Option<&str>) -> Self {
        self.token = token.map(Arc::from);
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes, then stops accepting, lets requests in progress
    /// finish for up to two seconds, and returns. Must run inside a tokio runtime.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::from_std(self.listener)
            .context("registering the admin listener with the runtime")?;
        tracing::info!(addr = %self.local_addr, "admin server listening");
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        conns.spawn(connection(
                            stream,
                            Arc::clone(&self.registry),
                            self.token.clone(),
                            stop_rx.clone(),
                        ));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "admin server: accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        drop(listener);
        // Receivers may all be gone already; nothing to tell then.
        let _ = stop_tx.send(true);
        let drain = async { while conns.join_next().await.is_some() {} };
        if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
            tracing::debug!("admin server: aborting connections still open after the grace");
            conns.abort_all();
        }
        tracing::info!("admin server stopped");
        Ok(())
    }
}

async fn connection(
    stream: TcpStream,
    registry: Arc<Registry>,
    token: Option<Arc<str>>,
    mut stop: watch::Receiver<bool>,
) {
    // The only change ever sent is the stop; a dropped sender means stop too.
    // Replies are one small write each; waiting for Nagle only adds latency.
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| {
        let registry = Arc::clone(&registry);
        let token = token.clone();
        async move { Ok::<_, Infallible>(handle(req, registry, token.as_deref()).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        }
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        }
    }
}

//! The admin server: `/metrics`, `/healthz`, `/api/snapshot`, `/api/reset` and `/`.
//!
//! One server per process, on its own listener and its own tasks. Scrapes and snapshots
//! format on tokio's blocking pool, so a large exposition never occupies a worker thread
//! that connection tasks need.

mod guard;
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
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::metrics::Registry;

use handlers::handle;
pub use handlers::served;

/// A client that has not sent a complete request head by then is dropped.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long requests in progress may finish after shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Pause after a failed accept (out of file descriptors, say) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// At most this share of the process's descriptors goes to admin connections, whatever
/// `[admin] max_connections` says: the data path keeps the rest.
const ADMIN_SHARE_OF_DESCRIPTORS: u64 = 8;

/// What the admin server answers with, shared by its connections.
#[derive(Debug)]
pub(crate) struct Shared {
    registry: Arc<Registry>,
    token: Option<Arc<str>>,
    /// Host names besides IP addresses and `localhost` (see `guard`).
    allowed_hosts: Vec<String>,
    /// Scrapes, snapshots and resets running at once, on the blocking pool.
    scrapes: Semaphore,
    /// The last minute's snapshots, for the findings gauge (refreshed by scrapes).
    recent: crate::findings::Recent,
    /// The CPU per route `/api/snapshot` serves, estimated at most every few seconds.
    route_cpu: crate::findings::route_cpu::Cached,
}

/// The admin server's limits (`[admin]` in docs/config.md).
#[derive(Debug, Clone)]
pub struct AdminLimits {
    pub allowed_hosts: Vec<String>,
    pub max_connections: usize,
    pub max_scrapes: usize,
}

impl Default for AdminLimits {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            max_connections: 64,
            max_scrapes: 4,
        }
    }
}

/// A bound, not yet serving, admin server.
#[derive(Debug)]
pub struct AdminServer {
    listener: std::net::TcpListener,
    local_addr: SocketAddr,
    registry: Arc<Registry>,
    token: Option<Arc<str>>,
    limits: AdminLimits,
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
        limits: AdminLimits::default(),
    })
}

/// How many admin connections may be open: the configured cap, within an eighth of the
/// process's descriptor limit.
fn connection_cap(configured: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    let share = if ok {
        usize::try_from(lim.rlim_cur / ADMIN_SHARE_OF_DESCRIPTORS).unwrap_or(usize::MAX)
    } else {
        configured
    };
    configured.min(share).max(1)
}

impl AdminServer {
    /// Requires `Authorization: Bearer <token>` on `/metrics` and `/api/*`.
    pub fn with_token(mut self, token: Option<&str>) -> Self {
        self.token = token.map(Arc::from);
        self
    }

    /// Caps connections and concurrent scrapes and names the hosts it is known by.
    pub fn with_limits(mut self, limits: AdminLimits) -> Self {
        self.limits = limits;
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
        let cap = connection_cap(self.limits.max_connections);
        let shared = Arc::new(Shared {
            registry: self.registry,
            token: self.token,
            allowed_hosts: self.limits.allowed_hosts,
            scrapes: Semaphore::new(self.limits.max_scrapes.max(1)),
            recent: crate::findings::Recent::default(),
            route_cpu: crate::findings::route_cpu::Cached::default(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    // Past the cap the connection is closed at once: its descriptor is
                    // the data path's.
                    Ok((stream, peer)) if conns.len() >= cap => {
                        tracing::debug!(%peer, cap, "admin server: connection refused, at its cap");
                        drop(stream);
                    }
                    Ok((stream, _)) => {
                        conns.spawn(connection(stream, Arc::clone(&shared), stop_rx.clone()));
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

async fn connection(stream: TcpStream, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // The only change ever sent is the stop; a dropped sender means stop too.
    // Replies are one small write each; waiting for Nagle only adds latency.
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, Infallible>(handle(req, shared).await) }
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

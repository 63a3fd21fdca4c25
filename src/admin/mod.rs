//! The admin server: `/metrics`, `/healthz`, `/api/snapshot`, `/api/reset` and `/`.
//!
//! One server per process, on its own listener and its own tasks. Scrapes and snapshots
//! format on tokio's blocking pool, so a large exposition never occupies a worker thread
//! that connection tasks need.
//!
//! Its probes are never starved (docs/deploy.md): `/healthz` takes no turn of any pool;
//! `/metrics` and the snapshots have a pool each, so snapshot readers never make a scrape
//! wait (`pool`); an answer holds its turn until it is sent, so the copies in memory are
//! bounded (`body`); a client that stops reading is cut (`stall`); and at the connection
//! cap the connection idle the longest gives way to a newcomer (`slots`).

mod body;
mod guard;
mod handlers;
pub mod history;
mod page;
mod pool;
mod slots;
mod stall;

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

use handlers::handle;
pub use handlers::served;

/// A client that has not sent a complete request head by then is dropped, and so is a
/// keep-alive connection with no next request by then (hyper times both). Short: an idle
/// connection holds a descriptor of the data path's share for nothing (a probe or a
/// scrape sends its head at once).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A client that reads nothing of its answer for this long is cut (`stall`).
const SEND_STALL: Duration = Duration::from_secs(10);
/// How long a scrape may wait for a turn when `max_scrapes` are being formatted: under
/// Prometheus's default `scrape_timeout` (10 s).
const SCRAPE_WAIT: Duration = Duration::from_secs(5);
/// How long a snapshot or reset may wait for a turn; the live page polls every second,
/// and `phasescope snapshot` retries a 503 after its `Retry-After`.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(2);
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
    /// `/metrics` formatted at once, on the blocking pool.
    scrapes: pool::Pool,
    /// Snapshots and resets built at once, on the blocking pool: a pool apart, so that
    /// snapshot readers never make a scrape wait.
    snapshots: pool::Pool,
    /// The last minute's snapshots, for the findings gauge (refreshed by scrapes).
    recent: crate::findings::Recent,
    /// The CPU per route `/api/snapshot` serves, estimated at most every few seconds.
    route_cpu: crate::findings::route_cpu::Cached,
    /// The window second by second, for `/api/history` (the live page's charts).
    history: Arc<history::History>,
}

/// The admin server's limits (`[admin]` in docs/config.md).
#[derive(Debug, Clone)]
pub struct AdminLimits {
    pub allowed_hosts: Vec<String>,
    pub max_connections: usize,
    pub max_scrapes: usize,
    pub max_snapshots: usize,
}

impl Default for AdminLimits {
    fn default() -> Self {
        // `[admin]`'s defaults (docs/config.md).
        Self {
            allowed_hosts: Vec::new(),
            max_connections: 64,
            max_scrapes: 4,
            max_snapshots: 1,
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
        let history = history::History::start(Arc::clone(&self.registry));
        let shared = Arc::new(Shared {
            registry: self.registry,
            token: self.token,
            allowed_hosts: self.limits.allowed_hosts,
            scrapes: pool::Pool::new(self.limits.max_scrapes, SCRAPE_WAIT),
            snapshots: pool::Pool::new(self.limits.max_snapshots, SNAPSHOT_WAIT),
            recent: crate::findings::Recent::default(),
            route_cpu: crate::findings::route_cpu::Cached::default(),
            history,
        });
        if cap <= shared.scrapes.most_in_progress() + shared.snapshots.most_in_progress() {
            tracing::warn!(
                cap,
                max_scrapes = self.limits.max_scrapes,
                max_snapshots = self.limits.max_snapshots,
                "admin server: max_connections is no more than the scrapes and snapshots that may run or wait (twice max_scrapes, plus max_snapshots and as many waiting, at least 2): they can fill it, and /healthz is then refused"
            );
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        let mut slots = slots::Slots::new(cap);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let slot = match slots.admit() {
                            slots::Admitted::Room(slot) => slot,
                            slots::Admitted::Evicted(slot) => {
                                tracing::debug!(%peer, cap, "admin server: at its cap, the connection idle the longest closed for a new one");
                                slot
                            }
                            // Its descriptor is the data path's: closed at once.
                            slots::Admitted::Full => {
                                tracing::debug!(%peer, cap, "admin server: connection refused, every one at the cap busy");
                                continue;
                            }
                        };
                        conns.spawn(connection(stream, Arc::clone(&shared), slot, stop_rx.clone()));
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
    shared: Arc<Shared>,
    slot: Arc<slots::Slot>,
    mut stop: watch::Receiver<bool>,
) {
    // The only change ever sent is the stop; a dropped sender means stop too.
    // Replies are one small write each; waiting for Nagle only adds latency.
    let _ = stream.set_nodelay(true);
    let in_service = Arc::clone(&slot);
    let service = service_fn(move |req| {
        let shared = Arc::clone(&shared);
        // Busy from the head until the answer is sent: not a connection to close for a
        // newcomer meanwhile.
        let busy = in_service.begin();
        async move {
            let mut r = handle(req, shared).await;
            r.body_mut().hold_busy(busy);
            Ok::<_, Infallible>(r)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stall::Stall::new(stream, SEND_STALL)), service);
    tokio::pin!(conn);
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        }
        () = slot.evicted() => {
            tracing::debug!("admin connection closed for a newcomer, idle the longest at the cap");
        }
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        }
    }
}

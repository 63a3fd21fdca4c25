//! A tap's listener: accepts clients, bounds how many are served at once, and drains
//! them on shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::protocol::Connection;
use super::workers::Workers;
use super::TapContext;

/// One listening tap.
pub struct Tap {
    listener: TcpListener,
    ctx: Arc<TapContext>,
    /// Where connections run: on these worker runtimes, or (when `None`) as tasks of the
    /// runtime the tap runs on.
    workers: Option<Arc<Workers>>,
}

impl Tap {
    /// Binds the tap's listen address.
    pub async fn bind(ctx: TapContext) -> anyhow::Result<Tap> {
        let listener = TcpListener::bind(ctx.config.listen)
            .await
            .with_context(|| {
                format!(
                    "tap {:?}: cannot listen on {}",
                    ctx.config.name, ctx.config.listen
                )
            })?;
        Ok(Tap {
            listener,
            ctx: Arc::new(ctx),
            workers: None,
        })
    }

    /// Runs the tap's connections on `workers` instead of the runtime the tap runs on.
    pub fn on_workers(mut self, workers: Arc<Workers>) -> Tap {
        self.workers = Some(workers);
        self
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn name(&self) -> &str {
        &self.ctx.config.name
    }

    /// Accepts connections until `shutdown` turns true, then waits up to `grace` for the
    /// connections in progress to finish their exchanges.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>, grace: Duration) {
        let Tap {
            listener,
            ctx,
            workers,
        } = self;
        let max = ctx.config.limits.max_connections;
        let slots = Arc::new(Semaphore::new(max));
        let mut backoff = Backoff::default();
        loop {
            // At the limit, stop accepting: new clients wait in the listen backlog and
            // the connections already established are unaffected.
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
                _ = shutdown.changed() => break,
            };
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.changed() => break,
            };
            let (stream, peer) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    accept_error(&ctx.config.name, &e, &mut backoff).await;
                    continue;
                }
            };
            let conn_ctx = ctx.clone();
            let shutdown = shutdown.clone();
            tracing::trace!(tap = %ctx.config.name, %peer, "accepted");
            let connection = move |stream| serve(stream, conn_ctx, shutdown, permit);
            match &workers {
                None => {
                    tokio::spawn(connection(stream));
                }
                Some(workers) => {
                    if let Err(e) = workers.spawn(stream, connection) {
                        tracing::warn!(tap = %ctx.config.name, error = %e, "cannot hand a connection to a worker");
                    }
                }
            }
        }
        // Closing the listener refuses new clients at once instead of leaving them in
        // the backlog for the length of the drain.
        drop(listener);
        tracing::info!(tap = %ctx.config.name, "stopped accepting; draining connections");
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        if tokio::time::timeout(grace, slots.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!(
                tap = %ctx.config.name,
                open = max - slots.available_permits(),
                "shutdown grace elapsed with connections still open"
            );
        }
        ctx.recorder.flush();
    }
}

/// A connection's task (see `Connection::task`). The connection is built here, before its
/// task runs, within the runtime that is to run it (see `Workers::spawn`).
fn serve(
    stream: TcpStream,
    ctx: Arc<TapContext>,
    shutdown: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) -> impl Future<Output = ()> + Send {
    let _ = stream.set_nodelay(true);
    Connection::new(ctx.config.protocol, stream, &ctx).task(ctx, shutdown, permit)
}

/// How long accepting pauses after a failure for lack of resources.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// At most one warning about such failures per this interval, with the count since the
/// last one: out of descriptors, the back-off alone would log ten lines a second.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

/// Failures to accept for lack of resources, for the rate-limited warning.
#[derive(Debug, Default)]
struct Backoff {
    last_warned: Option<tokio::time::Instant>,
    since_warned: u64,
}

impl Backoff {
    /// Counts a failure; `Some(failures since the last warning)` when this one is logged.
    fn count(&mut self, now: tokio::time::Instant) -> Option<u64> {
        self.since_warned += 1;
        match self.last_warned {
            Some(at) if now.duration_since(at) < ACCEPT_WARN_EVERY => None,
            _ => {
                self.last_warned = Some(now);
                Some(std::mem::take(&mut self.since_warned))
            }
        }
    }
}

/// Out of file descriptors (or memory), accepting again at once would spin: back off.
/// Other errors concern one connection only.
async fn accept_error(tap: &str, e: &io::Error, backoff: &mut Backoff) {
    let resource = matches!(e.raw_os_error(), Some(23 | 24 | 105 | 12));
    if resource {
        if let Some(failures) = backoff.count(tokio::time::Instant::now()) {
            tracing::warn!(
                tap,
                error = %e,
                failures,
                "accept failed for lack of resources; pausing 100 ms per failure (at most one warning per 10 s, with the count of failures since the last)"
            );
        }
        tokio::time::sleep(ACCEPT_PAUSE).await;
    } else {
        tracing::debug!(tap, error = %e, "accept failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Protocol, TapConfig};
    use crate::recorder::Discard;
    use crate::routes::RouteTable;

    #[test]
    fn resource_warnings_are_one_per_interval_with_a_count() {
        let mut b = Backoff::default();
        let t0 = tokio::time::Instant::now();
        assert_eq!(b.count(t0), Some(1));
        for i in 1..100 {
            assert_eq!(b.count(t0 + ACCEPT_PAUSE * i), None);
        }
        // The next line, an interval later, counts every failure since the last one.
        assert_eq!(b.count(t0 + ACCEPT_WARN_EVERY), Some(100));
        assert_eq!(b.count(t0 + ACCEPT_WARN_EVERY + ACCEPT_PAUSE), None);
    }

    /// An idle keep-alive connection costs its task (this future, plus the worker's
    /// wrapper and tokio's task header and trailer, in one allocation aligned to 128
    /// bytes), its two sockets' registrations (256 bytes each) and its timer (112): the
    /// budget is 2 KiB in all (`docs/BENCHMARKS.md`), of which the future may take 896
    /// bytes. What only an exchange in flight needs lives in a pooled slot (`slot`), and
    /// rare paths (connect, answers, tunnels, the RESP protocol) are boxed, to stay out
    /// of it.
    #[tokio::test]
    async fn a_connection_task_stays_within_its_memory_budget() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let cfg = TapConfig::new("t", Protocol::Http, addr, "127.0.0.1:1");
        let routes = Arc::new(RouteTable::new(&cfg).unwrap());
        let ctx = Arc::new(TapContext::new(cfg, Arc::new(Discard), routes));
        let (_tx, rx) = watch::channel(false);
        let permit = Arc::new(Semaphore::new(1)).acquire_owned().await.unwrap();
        let task = serve(stream, ctx, rx, permit);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 896, "a connection task's state is {size} bytes");
    }
}

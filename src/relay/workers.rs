//! Connection tasks spread over one single-threaded runtime per core.
//!
//! A connection's task is spawned on one worker runtime and stays there: its sockets are
//! polled by that thread's own epoll, and its wake-ups never cross threads. Under tokio's
//! work-stealing runtime, the thread that polled epoll was often not the one that then ran
//! the task, so every readiness event paid a wake-up of another thread and a migration of
//! the task's memory; its scheduler also keeps per-poll statistics that cost a few hundred
//! instructions per request. `docs/BENCHMARKS.md` has the measurements.
//!
//! The listeners stay on the control thread. Each accepted connection goes to the worker
//! with the fewest open connections: a balance that `SO_REUSEPORT` hashing only gives on
//! average, and without letting another process bind the same port.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use tokio::net::TcpStream;
use tokio::runtime::{Builder, Handle};
use tokio::sync::watch;

/// The worker runtimes, to spawn connections on.
pub struct Workers {
    workers: Vec<Worker>,
}

struct Worker {
    handle: Handle,
    /// Connections open on this worker; each on a cache line of its own, since the worker
    /// decrements it while the control thread reads and increments it.
    open: Padded,
}

#[repr(align(128))]
struct Padded(AtomicUsize);

/// The worker threads; [`WorkerThreads::stop`] ends them.
pub struct WorkerThreads {
    done: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts `n` worker threads (at least one), each driving its own runtime.
    pub fn start(n: usize) -> anyhow::Result<(Arc<Workers>, WorkerThreads)> {
        let (done, done_rx) = watch::channel(false);
        let mut workers = Vec::new();
        let mut threads = Vec::new();
        super::timer::start_keeper()?;
        for i in 0..n.max(1) {
            // I/O only: every timer a connection needs is on the time keeper's thread
            // (`relay::timer`), so that parking here costs no clock reads or wheel walks.
            let runtime = Builder::new_current_thread()
                .enable_io()
                .build()
                .context("cannot start a worker runtime")?;
            workers.push(Worker {
                handle: runtime.handle().clone(),
                open: Padded(AtomicUsize::new(0)),
            });
            let mut done_rx = done_rx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("phasescope-worker-{i}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        tokio::select! {
                            _ = done_rx.wait_for(|done| *done) => {}
                            () = trim_buffers() => {}
                        }
                    });
                })
                .context("cannot start a worker thread")?;
            threads.push(thread);
        }
        Ok((
            Arc::new(Workers { workers }),
            WorkerThreads { done, threads },
        ))
    }

    /// Moves `stream` to the worker with the fewest open connections and runs `serve` on
    /// it there.
    pub(super) fn spawn<F, Fut>(self: &Arc<Self>, stream: TcpStream, serve: F) -> io::Result<()>
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let index = self.least_loaded();
        // The socket leaves this thread's poller and joins the worker's.
        let stream = stream.into_std()?;
        let worker = &self.workers[index];
        worker.open.0.fetch_add(1, Ordering::Relaxed);
        let open = Open {
            workers: Arc::clone(self),
            index,
        };
        // The socket is registered, and the connection built, on the worker: what it
        // allocates then stays with that thread's allocator arena. (Built on the accepting
        // thread, an idle connection cost 800 bytes more, docs/BENCHMARKS.md.)
        worker.handle.spawn(async move {
            let stream = match TcpStream::from_std(stream) {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register a connection with its worker");
                    return;
                }
            };
            serve(stream).await;
            drop(open);
        });
        Ok(())
    }

    fn least_loaded(&self) -> usize {
        let mut best = 0;
        let mut least = usize::MAX;
        for (i, w) in self.workers.iter().enumerate() {
            let open = w.open.0.load(Ordering::Relaxed);
            if open < least {
                best = i;
                least = open;
            }
        }
        best
    }
}

/// Gives this worker's unused pooled buffers back, once a second, so that the memory a
/// burst took returns when it is over (`buffer::trim`).
async fn trim_buffers() {
    let mut tick = super::timer::interval(super::buffer::TRIM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        super::buffer::trim();
        super::http::trim_slots();
    }
}

/// Counts a connection as open on its worker until dropped, however its task ends
/// (a panic included).
struct Open {
    workers: Arc<Workers>,
    index: usize,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.workers.workers[self.index]
            .open
            .0
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl WorkerThreads {
    /// Ends every worker: tasks still running are dropped. Call it after the taps have
    /// drained.
    pub fn stop(self) {
        let _ = self.done.send(true);
        for t in self.threads {
            if t.join().is_err() {
                tracing::warn!("a worker thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn connections_run_on_the_least_loaded_worker_and_stop_with_it() {
        let (workers, threads) = Workers::start(2).unwrap();
        let control = Builder::new_current_thread().enable_all().build().unwrap();
        control.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (names_tx, mut names_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut clients = Vec::new();
            for _ in 0..4 {
                clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
                let (stream, _) = listener.accept().await.unwrap();
                let names = names_tx.clone();
                workers
                    .spawn(stream, move |mut stream| async move {
                        let name = std::thread::current().name().unwrap_or("").to_owned();
                        let _ = names.send(name);
                        // Echo one byte, then hold the connection until the client closes.
                        let mut b = [0u8; 1];
                        while stream.read(&mut b).await.unwrap_or(0) > 0 {
                            let _ = stream.write_all(&b).await;
                        }
                    })
                    .unwrap();
                let name = names_rx.recv().await.unwrap();
                assert!(name.starts_with("phasescope-worker-"), "{name}");
            }
            let open: Vec<usize> = workers
                .workers
                .iter()
                .map(|w| w.open.0.load(Ordering::Relaxed))
                .collect();
            assert_eq!(open, [2, 2], "spread evenly");
            for c in &mut clients {
                c.write_all(b"x").await.unwrap();
                let mut b = [0u8; 1];
                tokio::time::timeout(Duration::from_secs(10), c.read_exact(&mut b))
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(&b, b"x");
            }
            drop(clients);
            let drained = tokio::time::timeout(Duration::from_secs(10), async {
                while workers
                    .workers
                    .iter()
                    .any(|w| w.open.0.load(Ordering::Relaxed) > 0)
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            drained.await.unwrap();
        });
        threads.stop();
    }
}

//! The built-in load generator.
//!
//! Closed loop by default, like wrk: each of `connections` keep-alive connections sends a
//! request as soon as the previous answer is in. With a rate, open loop like wrk2: each
//! connection has its own schedule (one request every `connections / rate` seconds), and
//! the latency of a request is counted from when it was *due*, not from when it was sent,
//! so a stall does not hide the requests it delayed (coordinated omission). The proxy
//! measures the phases; the generator only needs to count and, in open loop, to say how
//! late it ran.
//!
//! Requests are prepared once; a connection reuses its buffer; counters are flushed to
//! the shared atomics every few requests. Nothing is allocated per request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::Conn;

/// Requests a connection counts locally before adding them to the shared counters.
const FLUSH_EVERY: u64 = 32;
/// After a failed connect or exchange, wait this long before reconnecting.
const BACKOFF: Duration = Duration::from_millis(20);

/// What to send, how hard, how long.
#[derive(Debug, Clone)]
pub struct Plan {
    pub connections: usize,
    pub duration: Duration,
    /// Requests per second over all connections (open loop); `None`: closed loop.
    pub rate: Option<f64>,
    /// The prepared requests, sent round-robin.
    pub requests: Arc<Vec<Vec<u8>>>,
    /// An interleaved bench: the plan sends only on its turns; `None`: all the time.
    pub turn: Option<Turn>,
}

/// Whose turn it is to send, for an interleaved bench (`--design interleave`): the
/// connections of the plan whose `me` is not the current turn finish the exchange they
/// are in and wait, connected, until it is. The turns end when the sender is dropped.
#[derive(Debug, Clone)]
pub struct Turn {
    pub whose: watch::Receiver<usize>,
    pub me: usize,
}

impl Turn {
    fn mine(&self) -> bool {
        *self.whose.borrow() == self.me
    }

    /// Waits for this plan's turn; false when the turns ended or `deadline` came first.
    async fn wait(&mut self, deadline: Instant) -> bool {
        let me = self.me;
        tokio::select! {
            turn = self.whose.wait_for(|w| *w == me) => turn.is_ok(),
            () = tokio::time::sleep_until(deadline) => false,
        }
    }
}

/// Live counts, for the progress line, and the flag that ends a plan before its
/// duration (a duet that reached its `--until-mde`).
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    /// Exchanges sent and not yet answered (or failed), for an interleave's turn to wait
    /// out before it passes.
    in_flight: AtomicU64,
    stop: AtomicBool,
}

impl Counters {
    /// Every connection of the plan ends after the exchange it is in.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Exchanges in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// One exchange counted in [`Counters::in_flight`] from its turn to its answer.
pub(super) struct InFlight<'c>(&'c Counters);

impl<'c> InFlight<'c> {
    pub(super) fn count(counters: &'c Counters) -> Self {
        counters.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(counters)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What one run of the generator did.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    /// Responses with a status of 400 or more.
    pub error_statuses: u64,
    pub seconds: f64,
    /// Open loop only: latency from each request's due time to its answer, seconds.
    pub due_p50: Option<f64>,
    pub due_p99: Option<f64>,
}

/// The HTTP/1.1 request for `path` to `host`, once.
pub fn request(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: phasescope-bench\r\n\r\n")
        .into_bytes()
}

struct Tally {
    requests: u64,
    errors: u64,
    error_statuses: u64,
    due: Option<Histogram<u64>>,
}

/// Runs the plan on `threads` OS threads of its own, each a single-threaded runtime with
/// its share of the connections (as wrk's `-t`): the generator then neither competes with
/// the proxy's tasks inside one scheduler nor gets fewer threads of the machine than an
/// external tool would. Blocks until every thread is done.
pub fn drive_on_threads(
    target: SocketAddr,
    plan: &Plan,
    counters: &Arc<Counters>,
    threads: usize,
) -> anyhow::Result<Outcome> {
    let threads = threads.clamp(1, plan.connections.max(1));
    let mut handles = Vec::new();
    for t in 0..threads {
        let sub = share(plan, t, threads);
        let counters = Arc::clone(counters);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        handles.push(
            std::thread::Builder::new()
                .name(format!("phasescope-load-{t}"))
                .spawn(move || runtime.block_on(drive(target, &sub, &counters)))?,
        );
    }
    let mut total: Option<Outcome> = None;
    for h in handles {
        let o = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load generator thread panicked"))?;
        total = Some(match total {
            None => o,
            Some(acc) => add(acc, o),
        });
    }
    total.ok_or_else(|| anyhow::anyhow!("no load generator thread ran"))
}

/// Two plans at once, for a duet: each of the `threads` threads drives its share of
/// both, so a thread the machine starves slows A's and B's connections alike instead of
/// one side's (with a thread pool per side, one side's starved thread looked like a
/// difference between the servers). Blocks until every thread is done.
pub fn drive_pair_on_threads(
    sides: [(SocketAddr, &Plan, &Arc<Counters>); 2],
    threads: usize,
) -> anyhow::Result<[Outcome; 2]> {
    let fewest = sides.iter().map(|s| s.1.connections).min().unwrap_or(1);
    let threads = threads.clamp(1, fewest.max(1));
    let mut handles = Vec::new();
    for t in 0..threads {
        let [a, b] = sides.map(|(target, plan, counters)| {
            (target, share(plan, t, threads), Arc::clone(counters))
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        handles.push(
            std::thread::Builder::new()
                .name(format!("phasescope-load-{t}"))
                .spawn(move || {
                    runtime.block_on(async {
                        tokio::join!(drive(a.0, &a.1, &a.2), drive(b.0, &b.1, &b.2))
                    })
                })?,
        );
    }
    let mut totals: [Option<Outcome>; 2] = [None, None];
    for h in handles {
        let (a, b) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load generator thread panicked"))?;
        for (total, o) in totals.iter_mut().zip([a, b]) {
            *total = Some(match total.take() {
                None => o,
                Some(acc) => add(acc, o),
            });
        }
    }
    let [Some(a), Some(b)] = totals else {
        anyhow::bail!("no load generator thread ran");
    };
    Ok([a, b])
}

/// Thread `t`'s share of `plan` over `threads` threads: connections t, t + threads, ….
fn share(plan: &Plan, t: usize, threads: usize) -> Plan {
    let share = (plan.connections + threads - 1 - t) / threads;
    let mut sub = plan.clone();
    sub.connections = share;
    sub.rate = plan
        .rate
        .map(|r| r * share as f64 / plan.connections.max(1) as f64);
    sub
}

/// Two threads' outcomes as one.
fn add(acc: Outcome, o: Outcome) -> Outcome {
    Outcome {
        requests: acc.requests + o.requests,
        errors: acc.errors + o.errors,
        error_statuses: acc.error_statuses + o.error_statuses,
        seconds: acc.seconds.max(o.seconds),
        // the worse thread's lateness: a conservative summary
        due_p50: worse(acc.due_p50, o.due_p50),
        due_p99: worse(acc.due_p99, o.due_p99),
    }
}

fn worse(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Runs the plan against `target` and waits for every connection to finish its last
/// exchange.
pub async fn drive(target: SocketAddr, plan: &Plan, counters: &Arc<Counters>) -> Outcome {
    let started = Instant::now();
    let deadline = started + plan.duration;
    let connections = plan.connections.max(1);
    let mut tasks = JoinSet::new();
    for id in 0..connections {
        let counters = Arc::clone(counters);
        let requests = Arc::clone(&plan.requests);
        let turn = plan.turn.clone();
        // Open loop: this connection's share of the rate, staggered so that the
        // connections do not all fire at once.
        let schedule = plan.rate.map(|rate| {
            let interval = Duration::from_secs_f64(connections as f64 / rate.max(1e-3));
            let offset = interval.mul_f64(id as f64 / connections as f64);
            (started + offset, interval)
        });
        tasks.spawn(async move {
            connection(target, id, &requests, schedule, turn, deadline, &counters).await
        });
    }
    let mut total = Tally {
        requests: 0,
        errors: 0,
        error_statuses: 0,
        due: None,
    };
    while let Some(done) = tasks.join_next().await {
        let Ok(t) = done else {
            total.errors += 1;
            continue;
        };
        total.requests += t.requests;
        total.errors += t.errors;
        total.error_statuses += t.error_statuses;
        if let Some(h) = t.due {
            match &mut total.due {
                None => total.due = Some(h),
                Some(acc) => {
                    let _ = acc.add(&h);
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let q = |q: f64| {
        total
            .due
            .as_ref()
            .map(|h| h.value_at_quantile(q) as f64 / 1e9)
    };
    Outcome {
        requests: total.requests,
        errors: total.errors,
        error_statuses: total.error_statuses,
        seconds,
        due_p50: q(0.5),
        due_p99: q(0.99),
    }
}

async fn connection(
    target: SocketAddr,
    id: usize,
    requests: &[Vec<u8>],
    schedule: Option<(Instant, Duration)>,
    mut turn: Option<Turn>,
    deadline: Instant,
    counters: &Counters,
) -> Tally {
    let mut tally = Tally {
        requests: 0,
        errors: 0,
        error_statuses: 0,
        // 1 µs to 1 h at 3 significant figures; allocated once per connection.
        due: schedule.and_then(|_| Histogram::new_with_bounds(1_000, 3_600_000_000_000, 3).ok()),
    };
    let mut next = id;
    let mut unflushed = 0u64;
    let mut due = schedule.map(|(first, _)| first);
    'connect: while Instant::now() < deadline && !counters.stopped() {
        let mut conn = match Conn::connect(target).await {
            Ok(c) => c,
            Err(_) => {
                tally.errors += 1;
                counters.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(BACKOFF).await;
                continue;
            }
        };
        loop {
            if counters.stopped() {
                break 'connect;
            }
            // With turns, counted in flight before the turn is looked at: a turn that is
            // passing sees either this exchange or a connection that will wait. Without
            // turns nobody waits for it, and nothing is counted.
            let mut flying = turn.as_ref().map(|_| InFlight::count(counters));
            if let Some(turn) = turn.as_mut().filter(|t| !t.mine()) {
                drop(flying);
                if !turn.wait(deadline).await {
                    break 'connect;
                }
                flying = Some(InFlight::count(counters));
                // Open loop: the schedule resumes with the turn; the requests that fell
                // due while the other side had it were never this side's to send.
                if let Some(at) = due.as_mut() {
                    *at = (*at).max(Instant::now());
                }
            }
            if let Some(at) = due {
                if at >= deadline {
                    break 'connect;
                }
                // Late requests go at once: the schedule is not shifted, so their lateness
                // shows in the due-time latency.
                tokio::time::sleep_until(at).await;
            } else if Instant::now() >= deadline {
                break 'connect;
            }
            let request = &requests[next % requests.len()];
            next += 1;
            let answer = conn.exchange(request).await;
            drop(flying);
            match answer {
                Ok(status) => {
                    tally.requests += 1;
                    if status >= 400 {
                        tally.error_statuses += 1;
                    }
                    unflushed += 1;
                    if unflushed == FLUSH_EVERY {
                        counters.requests.fetch_add(unflushed, Ordering::Relaxed);
                        unflushed = 0;
                    }
                    if let (Some(at), Some((_, interval))) = (due.as_mut(), schedule) {
                        if let Some(h) = tally.due.as_mut() {
                            let late = Instant::now().saturating_duration_since(*at);
                            let _ = h.record(late.as_nanos().max(1_000) as u64);
                        }
                        *at += interval;
                    }
                }
                Err(_) => {
                    tally.errors += 1;
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    if let (Some(at), Some((_, interval))) = (due.as_mut(), schedule) {
                        *at += interval;
                    }
                    tokio::time::sleep(BACKOFF).await;
                    continue 'connect;
                }
            }
        }
    }
    counters.requests.fetch_add(unflushed, Ordering::Relaxed);
    tally
}

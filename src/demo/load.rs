//! The demo's load: a few keep-alive client connections sending a mix of requests through
//! the proxy for a bounded time.
//!
//! The mix is chosen so that every phase shows up: API reads that wait on the backend, a
//! POST with a body, a streamed (chunked) response, a large static file, a client that
//! pipelines two requests at a time (the second one queues), and connections that are
//! closed and reopened now and then (each new one pays `upstream_connect`). One request
//! in a hundred goes to the older API whose answers stall on Nagle's algorithm: enough
//! for its finding, few enough that the backend's wait stays the main story.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::http1::{Advance, Method, ResponseReader};
use crate::rng::Rng;

/// Requests on one connection before the client closes it and opens a new one.
const REQUESTS_PER_CONNECTION: u64 = 100;
/// A response that takes longer than this counts as an error.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const ORDER_BODY_BYTES: usize = 420;

/// How much load, for how long.
#[derive(Debug, Clone, Copy)]
pub struct LoadPlan {
    pub connections: usize,
    pub duration: Duration,
    /// Pause between requests on each connection (`None`: as fast as answers come).
    pub pace: Option<Duration>,
    pub seed: u64,
}

/// What the load saw, updated as it runs (the progress line reads it).
#[derive(Debug, Default)]
pub struct LoadCounters {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
}

/// Runs the plan against `target` until its duration is over or `stop` turns true.
pub async fn drive(
    target: SocketAddr,
    plan: LoadPlan,
    counters: Arc<LoadCounters>,
    stop: watch::Receiver<bool>,
) {
    let start = Instant::now();
    let deadline = start + plan.duration;
    let mut workers = tokio::task::JoinSet::new();
    for id in 0..plan.connections.max(1) {
        let counters = Arc::clone(&counters);
        let mut stop = stop.clone();
        let rng = Rng::new(plan.seed ^ (id as u64 + 1).wrapping_mul(0xd134_2543_de82_ef95));
        workers.spawn(async move {
            let pipelining = id == 0 && plan.connections > 1;
            tokio::select! {
                () = worker(target, pipelining, plan.pace, rng, &counters, start, deadline) => {}
                () = super::upstream::stopped(&mut stop) => {}
            }
        });
    }
    while workers.join_next().await.is_some() {}
}

async fn worker(
    target: SocketAddr,
    pipelining: bool,
    pace: Option<Duration>,
    mut rng: Rng,
    counters: &LoadCounters,
    start: Instant,
    deadline: Instant,
) {
    while Instant::now() < deadline {
        let mut client = match Client::connect(target).await {
            Ok(c) => c,
            Err(_) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let mut sent = 0;
        while sent < REQUESTS_PER_CONNECTION && Instant::now() < deadline {
            let last = sent + 1 == REQUESTS_PER_CONNECTION;
            let result = if pipelining {
                let both = [users(&mut rng, false), users(&mut rng, last)].concat();
                client.send_and_read(&both, 2).await
            } else {
                let t = start.elapsed().as_secs_f64();
                client.send_and_read(&pick(&mut rng, last, t), 1).await
            };
            match result {
                Ok(n) => {
                    counters.requests.fetch_add(n, Ordering::Relaxed);
                }
                Err(_) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
            sent += 1;
            if let Some(pace) = pace {
                tokio::time::sleep(pace).await;
            }
        }
    }
}

/// One request of the mix, as bytes; `close` asks for the connection to end after it.
/// The legacy route is 2 % of it: a finding needs 20 requests of a route, and on a
/// machine loaded enough to halve the demo's rate 1 % gave about 20 in its 5 s. The
/// others drift in waves of a few seconds (`t`, seconds since the load began), as real
/// traffic's mix drifts over a day: the CPU per route is told apart by how the server's
/// CPU follows the mix from one slice to the next, which a mix that never varies
/// cannot show (docs/report.md, "CPU per route").
fn pick(rng: &mut Rng, close: bool, t: f64) -> Vec<u8> {
    let wave =
        |period: f64, phase: f64| 0.5 + 0.5 * (std::f64::consts::TAU * (t / period + phase)).sin();
    // Per mille: the report 2–20 %, orders 5–30 %, the static file 5–20 %.
    let report = 20 + (180.0 * wave(2.3, 0.0)) as usize;
    let orders = 50 + (250.0 * wave(3.1, 0.25)) as usize;
    let statics = 50 + (150.0 * wave(1.7, 0.5)) as usize;
    let x = rng.below(1000);
    if x < 20 {
        get(&format!("/api/legacy/{}", 1 + rng.below(5000)), close)
    } else if x < 20 + report {
        get("/api/report", close)
    } else if x < 20 + report + orders {
        order(rng, close)
    } else if x < 20 + report + orders + statics {
        get("/static/app.js", close)
    } else {
        users(rng, close)
    }
}

fn users(rng: &mut Rng, close: bool) -> Vec<u8> {
    get(&format!("/api/users/{}", 1 + rng.below(5000)), close)
}

fn get(path: &str, close: bool) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: demo.local\r\nUser-Agent: phasescope-demo\r\nAccept: */*\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

fn order(rng: &mut Rng, close: bool) -> Vec<u8> {
    let item = rng.below(1000);
    let mut body = format!("{{\"item\":{item},\"quantity\":1,\"note\":\"");
    while body.len() < ORDER_BODY_BYTES - 3 {
        body.push('x');
    }
    body.push_str("\"}\n");
    let mut request = format!(
        "POST /api/orders HTTP/1.1\r\nHost: demo.local\r\nUser-Agent: phasescope-demo\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n",
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes();
    request.extend_from_slice(body.as_bytes());
    request
}

/// A client connection that reads whole responses.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(target: SocketAddr) -> io::Result<Client> {
        let stream = TcpStream::connect(target).await?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            buf: Vec::with_capacity(32 * 1024),
        })
    }

    /// Writes `requests` (one or more, pipelined) and reads `count` responses.
    async fn send_and_read(&mut self, requests: &[u8], count: u64) -> io::Result<u64> {
        self.stream.write_all(requests).await?;
        for _ in 0..count {
            tokio::time::timeout(RESPONSE_TIMEOUT, self.read_response())
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response"))??;
        }
        Ok(count)
    }

    /// Reads one response (interim 1xx skipped); its status. A close-delimited body ends
    /// with the connection; a close anywhere else is an error.
    async fn read_response(&mut self) -> io::Result<u16> {
        let mut reader = ResponseReader::new(Method::Get);
        loop {
            let step = reader
                .advance(&self.buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            self.buf.drain(..step.consumed());
            if let Advance::Complete { head, .. } = step {
                return Ok(head.status);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return reader.closed().map(|head| head.status).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed in the middle of a response",
                    )
                });
            }
        }
    }
}

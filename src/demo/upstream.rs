//! The demo's upstream: a small HTTP/1.1 server with a simulated parser and backend, run
//! in a process of its own (`phasescope demo-upstream`, [`super::serve`]) so that the
//! demo's tap watches it as it would a real server.
//!
//! It stands in for the application a user would put phasescope in front of, with a few
//! kinds of request whose phases look different: API calls that wait for a backend,
//! a POST with a body, a response streamed in chunks, a large static file that needs
//! no backend at all, and an older API whose handler writes the head and the body of its
//! answer in two sends without `TCP_NODELAY`, as many servers do by default (each of its
//! responses then waits for the proxy's delayed ACK: the `nagle_delayed_ack` finding).
//! Every request costs the parser's CPU, every backend call the backend's
//! ([`super::burn`]).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::burn::Burn;
use super::latency::Latency;
use crate::http1::{request, BodyFramer, HeadScanner};
use crate::rng::Rng;

const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 100;
/// The static file's size: large enough to take several writes.
const STATIC_SIZE: usize = 24 * 1024;
/// Chunks of the streamed report, and the backend's pause before each.
const REPORT_CHUNKS: usize = 4;
const REPORT_CHUNK_PAUSE: Duration = Duration::from_micros(300);

/// A bound, not yet serving, upstream.
pub struct DemoUpstream {
    listener: TcpListener,
    backend: Arc<Backend>,
}

struct Backend {
    latency: Latency,
    burn: Burn,
    seed: u64,
    connections: AtomicU64,
    static_body: Vec<u8>,
}

impl DemoUpstream {
    /// Binds a free loopback port.
    pub async fn bind(latency: Latency, burn: Burn, seed: u64) -> anyhow::Result<DemoUpstream> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding the demo upstream on loopback")?;
        let static_body = (0..STATIC_SIZE)
            .map(|i| b"/* phasescope demo */\n"[i % 22])
            .collect();
        Ok(DemoUpstream {
            listener,
            backend: Arc::new(Backend {
                latency,
                burn,
                seed,
                connections: AtomicU64::new(0),
                static_body,
            }),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` turns true; connections in progress end with the runtime.
    pub async fn serve(self, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let backend = Arc::clone(&self.backend);
                        tokio::spawn(async move {
                            if let Err(e) = serve_connection(stream, backend).await {
                                tracing::debug!(error = %e, "demo upstream connection ended");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "demo upstream: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                () = stopped(&mut stop) => break,
            }
        }
    }
}

/// Completes once `stop` turns true (or its sender is gone).
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not be held across an await; drop it here.
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// One request as the server reads it: what it asks for, not its bytes.
struct Request {
    method: Vec<u8>,
    path: String,
    body_len: usize,
    close: bool,
}

/// One client connection: its socket, what it has read ahead, and its request stream.
struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
    scanner: HeadScanner,
    rng: Rng,
    /// Whether `TCP_NODELAY` is on now: each response sets what its handler wants.
    nodelay: bool,
}

/// One client connection: requests one after another, keep-alive unless asked otherwise.
async fn serve_connection(stream: TcpStream, backend: Arc<Backend>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let n = backend.connections.fetch_add(1, Ordering::Relaxed);
    let mut c = Connection {
        stream,
        buf: Vec::with_capacity(8 * 1024),
        scanner: HeadScanner::new(),
        rng: Rng::new(backend.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        nodelay: true,
    };
    while let Some(request) = c.read_request(&backend.burn).await? {
        c.handle(&request, &backend).await?;
        if request.close {
            let _ = c.stream.shutdown().await;
            return Ok(());
        }
    }
    Ok(())
}

impl Connection {
    /// The next request, its head parsed (the parser's CPU spent) and its body read;
    /// `None` once the client is gone or was answered an error.
    async fn read_request(&mut self, burn: &Burn) -> io::Result<Option<Request>> {
        let head_len = loop {
            if let Some(end) = self.scanner.find_end(&self.buf) {
                break end;
            }
            if self.buf.len() > MAX_HEAD {
                answer(&mut self.stream, 431, "Request Header Fields Too Large").await?;
                return Ok(None);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        };
        self.scanner.reset();
        std::hint::black_box(burn.parse(head_len));
        let head = match request::parse(&self.buf[..head_len], MAX_HEADERS) {
            Ok(head) => head,
            Err(_) => {
                answer(&mut self.stream, 400, "Bad Request").await?;
                return Ok(None);
            }
        };
        let method = self.buf[..head_len]
            .split(|&b| b == b' ')
            .next()
            .unwrap_or_default()
            .to_vec();
        let target = String::from_utf8_lossy(head.target(&self.buf[..head_len])).into_owned();
        let path = target.split('?').next().unwrap_or("/").to_owned();
        self.buf.drain(..head_len);

        // The body is read and counted, not kept.
        let mut body_len = 0usize;
        let mut framer = BodyFramer::new(head.body);
        while !framer.is_done() {
            if self.buf.is_empty() && self.stream.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
            let progress = framer
                .advance(&self.buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            body_len += progress.consumed;
            self.buf.drain(..progress.consumed);
        }
        Ok(Some(Request {
            method,
            path,
            body_len,
            close: !head.keep_alive,
        }))
    }

    /// Answers one request as its route does.
    async fn handle(&mut self, r: &Request, backend: &Backend) -> io::Result<()> {
        let close = r.close;
        let p = r.path.as_str();
        match r.method.as_slice() {
            b"GET" if p.starts_with("/api/users/") => {
                backend.wait(&mut self.rng, USERS_CALLS).await;
                let id = &p["/api/users/".len()..];
                let body =
                    format!("{{\"id\":\"{id}\",\"name\":\"user {id}\",\"plan\":\"free\"}}\n");
                self.respond("200 OK", "application/json", body.as_bytes(), close)
                    .await
            }
            b"GET" if p.starts_with("/api/legacy/") => {
                backend.wait(&mut self.rng, USERS_CALLS).await;
                let id = &p["/api/legacy/".len()..];
                let body = format!("{{\"id\":\"{id}\",\"status\":\"active\"}}\n");
                self.respond_in_two_sends("200 OK", "application/json", body.as_bytes(), close)
                    .await
            }
            b"POST" if p == "/api/orders" => {
                backend.wait(&mut self.rng, ORDERS_CALLS).await;
                let body = format!("{{\"accepted\":true,\"bytes\":{}}}\n", r.body_len);
                self.respond("200 OK", "application/json", body.as_bytes(), close)
                    .await
            }
            b"GET" if p == "/api/report" => {
                backend.wait(&mut self.rng, REPORT_CALLS).await;
                self.set_nodelay(true)?;
                stream_report(&mut self.stream, close).await
            }
            b"GET" if p == "/static/app.js" => {
                self.respond("200 OK", "text/javascript", &backend.static_body, close)
                    .await
            }
            _ => {
                self.respond("404 Not Found", "text/plain", b"not found\n", close)
                    .await
            }
        }
    }

    fn set_nodelay(&mut self, on: bool) -> io::Result<()> {
        if self.nodelay != on {
            self.stream.set_nodelay(on)?;
            self.nodelay = on;
        }
        Ok(())
    }

    /// The whole response in one send, `TCP_NODELAY` on.
    async fn respond(
        &mut self,
        status: &str,
        content_type: &str,
        body: &[u8],
        close: bool,
    ) -> io::Result<()> {
        self.set_nodelay(true)?;
        let head = response_head(status, content_type, body.len(), close);
        let mut message = Vec::with_capacity(head.len() + body.len());
        message.extend_from_slice(head.as_bytes());
        message.extend_from_slice(body);
        self.stream.write_all(&message).await
    }

    /// The head, then the body, in two sends with `TCP_NODELAY` off: Nagle's algorithm
    /// holds the body back until the proxy acknowledges the head, which it does only
    /// when its delayed-ACK timer fires (40 ms on Linux).
    async fn respond_in_two_sends(
        &mut self,
        status: &str,
        content_type: &str,
        body: &[u8],
        close: bool,
    ) -> io::Result<()> {
        self.set_nodelay(false)?;
        let head = response_head(status, content_type, body.len(), close);
        self.stream.write_all(head.as_bytes()).await?;
        self.stream.write_all(body).await
    }
}

/// The backend's CPU burns per request of each route (the static file calls none), so
/// that the routes cost the server visibly different CPU and the demo's first report has
/// a CPU per route to show: a report five times a user's, an order twice.
pub(super) const USERS_CALLS: u32 = 1;
pub(super) const ORDERS_CALLS: u32 = 2;
pub(super) const REPORT_CALLS: u32 = 5;

impl Backend {
    /// The simulated backend call: the application's CPU around it (`calls` times the
    /// backend's burn), then the wait. On
    /// the blocking pool rather than a timer: tokio's timer rounds up to whole
    /// milliseconds, which would quantize a latency distribution of a few milliseconds
    /// into a few bars.
    async fn wait(&self, rng: &mut Rng, calls: u32) {
        let d = self.latency.sample(rng);
        let (burn, key) = (self.burn, rng.below(1 << 20) as u64);
        let _ = tokio::task::spawn_blocking(move || {
            for call in 0..u64::from(calls) {
                std::hint::black_box(burn.backend(key ^ call));
            }
            if !d.is_zero() {
                std::thread::sleep(d);
            }
        })
        .await;
    }
}

fn response_head(status: &str, content_type: &str, len: usize, close: bool) -> String {
    let connection = if close { "close" } else { "keep-alive" };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nConnection: {connection}\r\n\r\n"
    )
}

/// A chunked response produced piece by piece, the way a backend streams a result set.
async fn stream_report(stream: &mut TcpStream, close: bool) -> io::Result<()> {
    let connection = if close { "close" } else { "keep-alive" };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\nTransfer-Encoding: chunked\r\nConnection: {connection}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    for i in 0..REPORT_CHUNKS {
        let _ = tokio::task::spawn_blocking(|| std::thread::sleep(REPORT_CHUNK_PAUSE)).await;
        let rows: String = (0..20)
            .map(|r| format!("{i},{r},{}\n", i * 20 + r))
            .collect();
        stream
            .write_all(format!("{:x}\r\n{rows}\r\n", rows.len()).as_bytes())
            .await?;
    }
    stream.write_all(b"0\r\n\r\n").await
}

/// An error answer that closes the connection.
async fn answer(stream: &mut TcpStream, status: u16, reason: &str) -> io::Result<()> {
    let head =
        format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.shutdown().await
}

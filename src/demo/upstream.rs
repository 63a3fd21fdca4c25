//! The demo's embedded upstream: a small HTTP/1.1 server with a simulated backend.
//!
//! It stands in for the application a user would put phasescope in front of, with a few
//! kinds of request whose phases look different: API calls that wait for a backend,
//! a POST with a body, a response streamed in chunks, and a large static file that needs
//! no backend at all.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

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
    seed: u64,
    connections: AtomicU64,
    static_body: Vec<u8>,
}

impl DemoUpstream {
    /// Binds a free loopback port.
    pub async fn bind(latency: Latency, seed: u64) -> anyhow::Result<DemoUpstream> {
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

/// One client connection: requests one after another, keep-alive unless asked otherwise.
async fn serve_connection(mut stream: TcpStream, backend: Arc<Backend>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let n = backend.connections.fetch_add(1, Ordering::Relaxed);
    let mut rng = Rng::new(backend.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut buf: Vec<u8> = Vec::with_capacity(8 * 1024);
    let mut scanner = HeadScanner::new();
    loop {
        let head_len = loop {
            if let Some(end) = scanner.find_end(&buf) {
                break end;
            }
            if buf.len() > MAX_HEAD {
                return answer(&mut stream, 431, "Request Header Fields Too Large").await;
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        scanner.reset();
        let head = match request::parse(&buf[..head_len], MAX_HEADERS) {
            Ok(head) => head,
            Err(_) => return answer(&mut stream, 400, "Bad Request").await,
        };
        let method = buf[..head_len]
            .split(|&b| b == b' ')
            .next()
            .unwrap_or_default()
            .to_vec();
        let target = String::from_utf8_lossy(head.target(&buf[..head_len])).into_owned();
        buf.drain(..head_len);

        // The body is read and counted, not kept.
        let mut body_len = 0usize;
        let mut framer = BodyFramer::new(head.body);
        while !framer.is_done() {
            if buf.is_empty() && stream.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
            let progress = framer
                .advance(&buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            body_len += progress.consumed;
            buf.drain(..progress.consumed);
        }

        let path = target.split('?').next().unwrap_or("/");
        let close = !head.keep_alive;
        match (method.as_slice(), path) {
            (b"GET", p) if p.starts_with("/api/users/") => {
                backend.wait(&mut rng).await;
                let id = &p["/api/users/".len()..];
                let body =
                    format!("{{\"id\":\"{id}\",\"name\":\"user {id}\",\"plan\":\"free\"}}\n");
                respond(
                    &mut stream,
                    "200 OK",
                    "application/json",
                    body.as_bytes(),
                    close,
                )
                .await?;
            }
            (b"POST", "/api/orders") => {
                backend.wait(&mut rng).await;
                let body = format!("{{\"accepted\":true,\"bytes\":{body_len}}}\n");
                respond(
                    &mut stream,
                    "200 OK",
                    "application/json",
                    body.as_bytes(),
                    close,
                )
                .await?;
            }
            (b"GET", "/api/report") => {
                backend.wait(&mut rng).await;
                stream_report(&mut stream, close).await?;
            }
            (b"GET", "/static/app.js") => {
                respond(
                    &mut stream,
                    "200 OK",
                    "text/javascript",
                    &backend.static_body,
                    close,
                )
                .await?;
            }
            _ => {
                respond(
                    &mut stream,
                    "404 Not Found",
                    "text/plain",
                    b"not found\n",
                    close,
                )
                .await?;
            }
        }
        if close {
            let _ = stream.shutdown().await;
            return Ok(());
        }
    }
}

impl Backend {
    /// The simulated backend call. A blocking sleep on the blocking pool rather than a
    /// timer: tokio's timer rounds up to whole milliseconds, which would quantize a
    /// latency distribution of a few milliseconds into a few bars.
    async fn wait(&self, rng: &mut Rng) {
        let d = self.latency.sample(rng);
        if !d.is_zero() {
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(d)).await;
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let connection = if close { "close" } else { "keep-alive" };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        body.len()
    );
    let mut message = Vec::with_capacity(head.len() + body.len());
    message.extend_from_slice(head.as_bytes());
    message.extend_from_slice(body);
    stream.write_all(&message).await
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

//! In-process fakes for exact framing and timing cases: a proxy tap on a free port, a
//! recorder that keeps what it is given, and scripted upstreams.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use phasescope::config::{Protocol, TapConfig};
use phasescope::phase::Phases;
use phasescope::recorder::{ErrorKind, Event, ExchangeRecord, Recorder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy recorded.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub status: u16,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub phases: Phases,
}

#[derive(Default)]
pub struct Capture {
    pub exchanges: Mutex<Vec<Seen>>,
    pub errors: Mutex<Vec<ErrorKind>>,
}

impl Capture {
    pub fn exchanges(&self) -> Vec<Seen> {
        self.exchanges.lock().unwrap().clone()
    }
    pub fn errors(&self) -> Vec<ErrorKind> {
        self.errors.lock().unwrap().clone()
    }
    /// Waits until `n` exchanges were recorded (they are recorded after the response
    /// was written, so a client can see its answer a moment before).
    pub async fn wait_exchanges(&self, n: usize) -> Vec<Seen> {
        for _ in 0..200 {
            let ex = self.exchanges();
            if ex.len() >= n {
                return ex;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} exchanges, got {:?}", self.exchanges());
    }
    pub async fn wait_errors(&self, n: usize) -> Vec<ErrorKind> {
        for _ in 0..200 {
            let e = self.errors();
            if e.len() >= n {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} errors, got {:?}", self.errors());
    }
}

impl Recorder for Capture {
    fn exchange(&self, r: &ExchangeRecord<'_>) {
        self.exchanges.lock().unwrap().push(Seen {
            method: r.method.to_owned(),
            status: r.status,
            request_bytes: r.request_bytes,
            response_bytes: r.response_bytes,
            phases: r.phases,
        });
    }
    fn event(&self, event: Event) {
        match event {
            Event::Error(kind) => self.errors.lock().unwrap().push(kind),
            Event::ClientClosed
            | Event::ConnectFailed(_)
            | Event::ConnectionOpened(_)
            | Event::ConnectionClosed(_)
            | Event::Bytes(..)
            | Event::Pushed(_)
            | Event::Correlated { .. }
            | Event::RequestHead(_) => {}
        }
    }
}

/// A running in-process proxy tap.
pub struct Proxy {
    pub addr: SocketAddr,
    pub capture: Arc<Capture>,
    /// Stops the tap (dropping the proxy does too).
    pub stop: watch::Sender<bool>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub async fn proxy(upstream: SocketAddr) -> Proxy {
    proxy_with(upstream, |_| {}).await
}

pub async fn proxy_with(upstream: SocketAddr, tune: impl FnOnce(&mut TapConfig)) -> Proxy {
    proxy_draining(upstream, Duration::from_secs(1), tune)
        .await
        .0
}

/// Like [`proxy_with`], draining for up to `drain` once stopped; also the running tap,
/// which ends when the drain does.
pub async fn proxy_draining(
    upstream: SocketAddr,
    drain: Duration,
    tune: impl FnOnce(&mut TapConfig),
) -> (Proxy, tokio::task::JoinHandle<()>) {
    let mut cfg = TapConfig::new(
        "test",
        Protocol::Http,
        "127.0.0.1:0".parse().unwrap(),
        &upstream.to_string(),
    );
    tune(&mut cfg);
    let capture = Arc::new(Capture::default());
    let tap = phasescope::app::bind_tap(&cfg, capture.clone())
        .await
        .unwrap();
    let addr = tap.local_addr().unwrap();
    let (stop, rx) = watch::channel(false);
    let running = tokio::spawn(tap.run(rx, drain));
    (
        Proxy {
            addr,
            capture,
            stop,
        },
        running,
    )
}

/// Bytes an upstream received, per connection.
#[derive(Default, Clone)]
pub struct Received(Arc<Mutex<Vec<Vec<u8>>>>);

impl Received {
    pub fn all(&self) -> Vec<Vec<u8>> {
        self.0.lock().unwrap().clone()
    }
    pub fn total_bytes(&self) -> usize {
        self.all().iter().map(Vec::len).sum()
    }
    pub fn connections(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// An upstream connection under a script: reads are logged into `Received`.
pub struct UpConn {
    pub stream: TcpStream,
    idx: usize,
    received: Received,
    pub buf: Vec<u8>,
}

impl UpConn {
    /// Reads until `buf` holds `n` bytes from the start (cumulative), or EOF.
    pub async fn read_at_least(&mut self, n: usize) -> usize {
        let mut chunk = [0u8; 65536];
        while self.buf.len() < n {
            let r = self.stream.read(&mut chunk).await.unwrap_or(0);
            if r == 0 {
                break;
            }
            self.buf.extend_from_slice(&chunk[..r]);
            self.received.0.lock().unwrap()[self.idx].extend_from_slice(&chunk[..r]);
        }
        self.buf.len()
    }
    /// Reads until `buf` contains `needle` `count` times in all.
    pub async fn read_until(&mut self, needle: &[u8], count: usize) -> bool {
        let mut chunk = [0u8; 65536];
        loop {
            if occurrences(&self.buf, needle) >= count {
                return true;
            }
            let r = self.stream.read(&mut chunk).await.unwrap_or(0);
            if r == 0 {
                return false;
            }
            self.buf.extend_from_slice(&chunk[..r]);
            self.received.0.lock().unwrap()[self.idx].extend_from_slice(&chunk[..r]);
        }
    }
    /// Reads a whole request head (and nothing is assumed about a body).
    pub async fn read_head(&mut self) -> bool {
        let n = occurrences(&self.buf, b"\r\n\r\n");
        self.read_until(b"\r\n\r\n", n + 1).await
    }
    pub async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }
}

pub fn occurrences(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Starts an upstream that runs `script` on each accepted connection.
pub async fn upstream<F, Fut>(script: F) -> (SocketAddr, Received)
where
    F: Fn(UpConn) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let rec = received.clone();
    let script = Arc::new(script);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let idx = {
                let mut all = rec.0.lock().unwrap();
                all.push(Vec::new());
                all.len() - 1
            };
            let conn = UpConn {
                stream,
                idx,
                received: rec.clone(),
                buf: Vec::new(),
            };
            tokio::spawn(script(conn));
        }
    });
    (addr, received)
}

/// Sends `req` and reads until `expect_len` bytes came back or the connection closed.
pub async fn exchange(addr: SocketAddr, req: &[u8], expect_len: usize) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    read_n(&mut s, expect_len).await
}

pub async fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(r)) => out.extend_from_slice(&chunk[..r]),
            Err(_) => panic!("timed out reading; got {:?}", String::from_utf8_lossy(&out)),
        }
    }
    out
}

/// Reads until the peer closes.
pub async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    read_n(s, usize::MAX).await
}

/// A listener whose accept queue is full and never drained: the kernel drops further
/// SYNs, so a connect to it hangs until the connector gives up. The streams that fill the
/// queue come back with it and must be kept alive.
pub fn black_hole() -> (
    std::net::SocketAddr,
    socket2::Socket,
    Vec<std::net::TcpStream>,
) {
    use socket2::{Domain, Socket, Type};
    let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    l.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    l.listen(0).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    // Fill the queue: connects that complete without an accept, until one does not.
    let mut fill = Vec::new();
    loop {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&addr.into());
        // A loopback handshake completes within microseconds when the queue has room.
        let until = std::time::Instant::now() + Duration::from_millis(300);
        let mut done = false;
        while !done && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
            done = s.peer_addr().is_ok();
        }
        fill.push(std::net::TcpStream::from(s));
        if !done || fill.len() > 16 {
            break;
        }
    }
    (addr, l, fill)
}

/// Reads until the peer closes or `limit` passes; returns the bytes and whether it closed.
pub async fn read_until_close_within(
    s: &mut tokio::net::TcpStream,
    limit: Duration,
) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    let end = std::time::Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        match tokio::time::timeout(left, tokio::io::AsyncReadExt::read(s, &mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&chunk[..n]),
            Err(_) => return (out, false),
        }
    }
}

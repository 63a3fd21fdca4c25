//! Traffic for the tests that look at what the proxy exports (the dashboard's queries, the
//! live page): an in-test HTTP/1.1 upstream that answers every request after a fixed
//! delay, and client threads that send requests through the proxy and count the answers.
//!
//! The delay makes `upstream_wait` the largest phase by far, as it is in front of a real
//! backend, so a query or a page that mixed up phases would show it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::support::{find, parse_head};

/// Paths the load cycles through; with the root config's `routes = "webdis"` they are the
/// routes `GET`, `SET` and `INCR`.
pub const PATHS: [&str; 4] = ["/GET/k", "/SET/k/v", "/GET/other", "/INCR/n"];

/// A keep-alive HTTP/1.1 server on a free loopback port: each request is answered
/// `200 ok`, in one write, `delay` after its head arrived. Stops on drop.
pub struct Upstream {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Upstream {
    pub fn start(delay: Duration) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let acceptor = thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                thread::spawn(move || serve(stream, delay));
            }
        });
        Upstream {
            addr,
            stop,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve(mut stream: TcpStream, delay: Duration) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = find(&buf, b"\r\n\r\n") {
            buf.drain(..end + 4);
            thread::sleep(delay);
            let answer =
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
            if stream.write_all(answer).is_err() {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Client threads, one keep-alive connection each, sending GETs through the proxy back to
/// back until stopped. Every request must be answered `200 ok`; [`Load::stop`] returns
/// exactly the number of exchanges the proxy completed, or what went wrong.
pub struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Result<(), String>>>,
    started: Instant,
}

impl Load {
    pub fn start(proxy: SocketAddr, connections: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let threads = (0..connections)
            .map(|c| {
                let stop = Arc::clone(&stop);
                let answered = Arc::clone(&answered);
                thread::spawn(move || {
                    let mut conn = Client::connect(proxy)
                        .map_err(|e| format!("connection {c}: connecting: {e}"))?;
                    let mut i = c;
                    while !stop.load(Ordering::SeqCst) {
                        let path = PATHS[i % PATHS.len()];
                        i += 1;
                        conn.get(path).map_err(|e| {
                            format!(
                                "connection {c}, request {i} ({path}), {:?} after the start: {e}",
                                started.elapsed()
                            )
                        })?;
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(())
                })
            })
            .collect();
        Load {
            stop,
            answered,
            threads,
            started,
        }
    }

    /// Exchanges answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::SeqCst)
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops every client after its current exchange; returns the exchanges answered, or
    /// the first client's failure.
    pub fn stop(mut self) -> Result<u64, String> {
        self.stop.store(true, Ordering::SeqCst);
        let mut failures = Vec::new();
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(e),
                Err(_) => failures.push("a client thread panicked".to_owned()),
            }
        }
        if failures.is_empty() {
            Ok(self.answered())
        } else {
            Err(failures.join("\n"))
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A keep-alive client for the upstream's fixed answer.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(15)))?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    /// One GET; Ok when the answer is the upstream's `200 ok`.
    fn get(&mut self, path: &str) -> Result<(), String> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        self.stream
            .write_all(request.as_bytes())
            .map_err(|e| format!("writing: {e}"))?;
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = parse_head(&self.buf[..end + 4]);
                let len: usize = head
                    .header("content-length")
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("no Content-Length in {head:?}"))?;
                if self.buf.len() >= end + 4 + len {
                    let body: Vec<u8> = self.buf.drain(..end + 4 + len).skip(end + 4).collect();
                    if head.status != 200 || body != b"ok" {
                        return Err(format!(
                            "answered {head:?} {:?}",
                            String::from_utf8_lossy(&body)
                        ));
                    }
                    return Ok(());
                }
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(format!(
                        "closed by the proxy; had {:?}",
                        String::from_utf8_lossy(&self.buf)
                    ))
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading: {e}")),
            }
        }
    }
}

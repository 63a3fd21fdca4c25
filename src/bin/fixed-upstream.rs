//! The benchmarks' upstream: answers every request head with the same small `200`, keeps
//! connections alive, and does as little else as possible, so that what a benchmark
//! measures in front of it is the proxy.
//!
//! `fixed-upstream --listen 127.0.0.1:PORT [--threads N]`: one single-threaded runtime
//! per thread, each with its own `SO_REUSEPORT` listener, so the kernel spreads
//! connections and no task ever migrates. Request bodies are not expected (the load
//! generators send `GET`); a head ends at the empty line.
//!
//! `--delay-ms D` holds each answer D ms, so that a burst of requests is all in flight
//! through the proxy at once (the memory-after-a-burst measurement).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use memchr::memmem;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// `--delay-ms`: how long each answer is held.
static DELAY_MS: AtomicU64 = AtomicU64::new(0);

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, world!";

fn main() -> anyhow::Result<()> {
    let mut listen: Option<SocketAddr> = None;
    let mut threads = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().context("every option takes a value")?;
        match arg.as_str() {
            "--listen" => listen = Some(value.parse().context("--listen ADDR")?),
            "--threads" => threads = value.parse().context("--threads N")?,
            "--delay-ms" => {
                DELAY_MS.store(value.parse().context("--delay-ms D")?, Ordering::Relaxed)
            }
            other => anyhow::bail!("unknown option {other}"),
        }
    }
    let listen = listen.context("--listen ADDR is required")?;
    let handles: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let listener = bind(listen)?;
            Ok(std::thread::spawn(move || serve(listener)))
        })
        .collect::<anyhow::Result<_>>()?;
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a server thread panicked"))??;
    }
    Ok(())
}

fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("cannot bind {addr}"))?;
    socket.listen(4096)?;
    Ok(socket.into())
}

fn serve(listener: std::net::TcpListener) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(pair) => pair,
                Err(_) => {
                    // Out of descriptors: let connections close before trying again.
                    tokio::task::yield_now().await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(connection(stream));
        }
    })
}

/// Answers each complete head; pipelined heads get their answers in one write.
async fn connection(mut stream: TcpStream) {
    let mut buf = vec![0u8; 4096];
    let mut out = Vec::new();
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            // A head larger than the buffer: nothing the benchmarks send.
            return;
        }
        let n = match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        filled += n;
        let mut consumed = 0;
        out.clear();
        while let Some(end) = memmem::find(&buf[consumed..filled], b"\r\n\r\n") {
            consumed += end + 4;
            out.extend_from_slice(RESPONSE);
        }
        buf.copy_within(consumed..filled, 0);
        filled -= consumed;
        let delay = DELAY_MS.load(Ordering::Relaxed);
        if delay > 0 && !out.is_empty() {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

//! The benchmarks' own client, for the two figures wrk cannot give.
//!
//! Memory per idle connection: `bench-client --connect 127.0.0.1:PORT --hold N` opens N
//! keep-alive connections and makes one request on each; it prints `ready N` once every
//! connection has had its answer, then holds them until standard input closes (or the
//! process is killed). The caller raises `ulimit -n` to fit N.
//!
//! Memory after a burst: `bench-client --connect 127.0.0.1:PORT --burst N` opens N
//! connections and sends one request on each as soon as it is open (all in flight at
//! once in front of a slow upstream), reads every answer, prints `ready N`, and holds the
//! connections idle like `--hold`. Each request goes out with its connection, not after
//! the last connect: a proxy owes a new connection's first request nothing but the head
//! timeout, and opening thousands of connections on a busy machine can take longer.
//!
//! An exact request count, for the instruction-count profile:
//! `bench-client --connect 127.0.0.1:PORT --sequential K` makes K requests one after
//! another on one keep-alive connection and exits.

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Context;
use memchr::memmem;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";

fn main() -> anyhow::Result<()> {
    let mut connect: Option<SocketAddr> = None;
    let mut count = 1000usize;
    let mut sequential = None;
    let mut burst = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().context("every option takes a value")?;
        match arg.as_str() {
            "--connect" => connect = Some(value.parse().context("--connect ADDR")?),
            "--hold" => count = value.parse().context("--hold N")?,
            "--burst" => {
                count = value.parse().context("--burst N")?;
                burst = true;
            }
            "--sequential" => sequential = Some(value.parse().context("--sequential K")?),
            other => anyhow::bail!("unknown option {other}"),
        }
    }
    let addr = connect.context("--connect ADDR is required")?;
    if let Some(k) = sequential {
        return in_sequence(addr, k);
    }
    let mut held = Vec::with_capacity(count);
    if burst {
        for i in 0..count {
            let mut stream =
                self::connect(addr).with_context(|| format!("connection {i} of {count}"))?;
            stream
                .write_all(REQUEST)
                .with_context(|| format!("request {i} of {count}"))?;
            held.push(stream);
        }
        println!("sent {count}");
        std::io::stdout().flush()?;
        for (i, stream) in held.iter_mut().enumerate() {
            read_answer(stream).with_context(|| format!("answer {i} of {count}"))?;
        }
    } else {
        for i in 0..count {
            let stream = exchange(addr).with_context(|| format!("connection {i} of {count}"))?;
            held.push(stream);
        }
    }
    println!("ready {}", held.len());
    std::io::stdout().flush()?;
    // Hold until the caller closes our standard input.
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line)? > 0 {
        line.clear();
    }
    drop(held);
    Ok(())
}

fn in_sequence(addr: SocketAddr, k: u64) -> anyhow::Result<()> {
    let mut stream = connect(addr)?;
    for i in 0..k {
        answer(&mut stream).with_context(|| format!("request {i} of {k}"))?;
    }
    println!("done {k}");
    Ok(())
}

fn connect(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(stream)
}

/// One request on a new connection; returns the connection once the whole answer (a
/// `Content-Length` body) has arrived.
fn exchange(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let mut stream = connect(addr)?;
    answer(&mut stream)?;
    Ok(stream)
}

/// Sends one request and reads its whole answer.
fn answer(stream: &mut TcpStream) -> anyhow::Result<()> {
    stream.write_all(REQUEST)?;
    read_answer(stream)
}

/// Reads one whole answer (a `Content-Length` body).
fn read_answer(stream: &mut TcpStream) -> anyhow::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        let n = stream.read(&mut chunk)?;
        anyhow::ensure!(n > 0, "closed before the answer was complete");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = memmem::find(&buf, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .context("the answer has no Content-Length")?;
        if buf.len() >= end + 4 + length {
            return Ok(());
        }
    }
}

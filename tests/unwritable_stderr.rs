//! phasescope's own log on a standard error that takes nothing: a full disk behind
//! `2>/dev/full`, or a pipe whose reader has gone. The lines are dropped; the proxy goes on
//! answering (a refused upstream still gets its 502) and drains on SIGTERM with exit 0.
//! Before, the first log line made the process exit 101, and a task that logged panicked.

mod support;

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{accepts, free_port, loopback, wait_for};

/// Starts `run` in front of a port nothing listens on, its standard error `stderr`.
fn start(stderr: Stdio) -> (Child, SocketAddr) {
    let listen = loopback(free_port());
    let refused = loopback(free_port());
    let admin = loopback(free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["run", "--listen", &listen.to_string()])
        .args(["--upstream", &refused.to_string()])
        .args(["--admin", &admin.to_string()])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    (child, listen)
}

/// A request through the proxy; the answer's bytes (the proxy's 502 here).
fn ask(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

/// Serves three requests, then SIGTERM: each gets the 502 and the exit is clean.
fn serves_and_drains(mut child: Child, addr: SocketAddr) {
    assert!(
        wait_for(Duration::from_secs(20), || accepts(addr)
            || child.try_wait().unwrap().is_some()),
        "the proxy never listened"
    );
    for _ in 0..3 {
        let answer = ask(addr);
        assert!(
            answer.starts_with("HTTP/1.1 502 ") && answer.contains("Connection: close"),
            "a refused upstream's answer: {answer:?} (exit {:?})",
            child.try_wait().unwrap()
        );
    }
    // SAFETY: kill sends a signal to the child we started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit {status:?}");
}

#[test]
fn a_full_disk_behind_standard_error_drops_the_log_and_keeps_serving() {
    let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
    let (child, addr) = start(Stdio::from(full));
    serves_and_drains(child, addr);
}

#[test]
fn a_log_reader_that_goes_away_does_not_take_the_proxy_with_it() {
    let (mut child, addr) = start(Stdio::piped());
    let mut reader = child.stderr.take().unwrap();
    // Read the start-up lines, then close the pipe: every later line meets EPIPE.
    let mut first = [0u8; 256];
    let _ = reader.read(&mut first);
    drop(reader);
    serves_and_drains(child, addr);
}

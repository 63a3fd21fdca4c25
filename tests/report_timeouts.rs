//! `snapshot --from` and `report --from` against an admin server that is not well: one
//! that accepts and then stalls, or trickles a byte at a time, fails at `--timeout` with a
//! message that names it (before, a trickling server held them forever: each read came
//! within the per-read timeout); an address where nothing listens says that no phasescope
//! runs there and how to point at one (before: "Connection refused"); a whole answer is
//! read at its end, not at the close (before: a server that kept the connection open held
//! the command until the deadline).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A server that reads each connection's request and hands the connection to `then`, on
/// a thread of its own.
fn serve_each(then: impl Fn(TcpStream) + Send + Sync + Clone + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let then = then.clone();
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                then(conn);
            });
        }
    });
    addr
}

/// A server that reads the request, then either says nothing or sends one byte of a
/// never-ending head every 50 ms, on every connection.
fn stalling_server(trickle: bool) -> SocketAddr {
    serve_each(move |mut conn| {
        let started = Instant::now();
        // Bounded: the test's clients give up long before.
        while started.elapsed() < Duration::from_secs(60) {
            if trickle && conn.write_all(b"X").is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    })
}

/// Runs the command to its end, at most 30 s; its exit code and standard error.
fn run(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{args:?} still waiting after 30 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_stalling_or_trickling_admin_server_fails_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    for trickle in [false, true] {
        let url = format!("http://{}", stalling_server(trickle));
        let (code, stderr) = run(&[
            "snapshot",
            "--from",
            &url,
            "-o",
            out.to_str().unwrap(),
            "--timeout",
            "1s",
        ]);
        assert_eq!(code, Some(1), "trickle {trickle}: {stderr}");
        assert!(
            stderr.contains("no whole answer within 1s (--timeout)"),
            "trickle {trickle}: {stderr}"
        );
        assert!(!out.exists(), "nothing saved");
        let (code, stderr) = run(&["report", "--from", &url, "--timeout", "1s"]);
        assert_eq!(code, Some(1), "trickle {trickle}: {stderr}");
        assert!(
            stderr.contains("no whole answer within 1s (--timeout)"),
            "trickle {trickle}: {stderr}"
        );
    }
}

#[test]
fn nothing_listening_says_no_phasescope_runs_there_and_how_to_point_at_one() {
    // A port that was free a moment ago: nothing listens on it.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let url = format!("http://{addr}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    for args in [
        vec!["report", "--from", &url],
        vec!["snapshot", "--from", &url, "-o", out.to_str().unwrap()],
    ] {
        let (code, stderr) = run(&args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("no phasescope is running at {addr}"))
                && stderr.contains("--from"),
            "{args:?}: {stderr}"
        );
    }
}

/// A server that answers every connection with `body` in chunks of 1000 bytes, then keeps
/// the connection open for a minute, as a server that ignores `Connection: close` would.
fn chunked_server_that_stays_open(body: Vec<u8>) -> SocketAddr {
    let mut answer =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for piece in body.chunks(1000) {
        answer.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        answer.extend_from_slice(piece);
        answer.extend_from_slice(b"\r\n");
    }
    answer.extend_from_slice(b"0\r\n\r\n");
    let answer = std::sync::Arc::new(answer);
    serve_each(move |mut conn| {
        if conn.write_all(&answer).is_ok() {
            thread::sleep(Duration::from_secs(60));
        }
    })
}

#[test]
fn a_whole_answer_ends_the_read_though_the_server_keeps_the_connection() {
    let fixture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/snapshots/fixture.json"
    ))
    .unwrap();
    let url = format!("http://{}", chunked_server_that_stays_open(fixture.clone()));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    let started = Instant::now();
    let (code, stderr) = run(&[
        "snapshot",
        "--from",
        &url,
        "-o",
        out.to_str().unwrap(),
        "--timeout",
        "20s",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    // Read at the last chunk, not at the deadline: the server never closes.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    // What was saved is the served snapshot, the chunk framing taken out.
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let served: serde_json::Value = serde_json::from_slice(&fixture).unwrap();
    assert_eq!(saved, served);
}

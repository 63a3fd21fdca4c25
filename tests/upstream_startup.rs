//! Sampling starts within a second of finding the process, whatever the size of its
//! binaries (issue 51's third item). node is one of the largest a server runs (99 MB, V8's
//! symbols exported): before, its sampler started 2.2 s after the process was found (the
//! PHP check read the whole binary's symbols, the unwind tables were read before the
//! first sample), and a short load got no samples.

mod support;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// An HTTP server whose handler burns CPU in `computeReport`.
const SERVER: &str = r#"
const http = require('http');
function computeReport(n) { let x = 0; for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003; return x; }
http.createServer((req, res) => res.end(String(computeReport(2e6)))).listen(+process.argv[1], '127.0.0.1');
"#;

/// The instant of the log line holding `needle` (its RFC 3339 timestamp), as seconds of
/// the day.
fn logged_at(log: &str, needle: &str) -> Option<f64> {
    let line = log.lines().find(|l| l.contains(needle))?;
    let time = line.split_whitespace().next()?.split('T').nth(1)?;
    let time = time.trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

#[test]
fn a_large_binary_is_sampled_within_a_second_of_being_found() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut c = Command::new(require_tool("node"));
    c.current_dir(dir.path())
        .args(["-e", SERVER, &port.to_string()]);
    let _server = Managed::spawn("node", &mut c, &dir.path().join("node.log"));
    assert!(
        wait_for(STARTUP_DEADLINE, || accepts(loopback(port))),
        "node did not start"
    );
    // Under load from before it is found: each request burns milliseconds in JS.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut s) = std::net::TcpStream::connect(loopback(port)) {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                    let _ = s.read_to_end(&mut Vec::new());
                }
            }
        })
    };
    let mut proxy = Proxy::in_front_of(loopback(port), &["--profile-upstream"]);
    let log_path = proxy.process().log_path().to_owned();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let started = wait_for(STARTUP_DEADLINE, || {
        log().contains("sampling the upstream's CPU")
    });
    assert!(started, "never sampled\n{}", log());
    let text = log();
    let found = logged_at(&text, "watching the upstream process").unwrap();
    let sampling = logged_at(&text, "sampling the upstream's CPU").unwrap();
    eprintln!(
        "sampling began {:.3} s after the process was found",
        sampling - found
    );
    assert!(
        sampling - found < 1.0,
        "sampling began {:.3} s after the process was found\n{text}",
        sampling - found
    );
    // And its samples reach the snapshot while the load goes on.
    let since = Instant::now();
    let sampled = wait_for(Duration::from_secs(15), || {
        let snap: Value =
            serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap();
        let u = &snap["taps"]["webdis"]["upstream"];
        u["samples"]
            .as_object()
            .is_some_and(|m| m.values().filter_map(Value::as_u64).sum::<u64>() > 0)
    });
    eprintln!(
        "first samples in the snapshot {:.1} s after that",
        since.elapsed().as_secs_f64()
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    loader.join().unwrap();
    assert!(sampled, "no samples in 15 s of load\n{}", log());
}

//! The admin server against a hostile web page and a careless operator
//! (docs/security.md, "third round"): a cross-site reset is refused, a rebound name gets
//! no answer, and admin connections cannot take the descriptors the data path needs.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, http_exchange, loopback, parse_response, wait_for, Proxy, Response};

/// Sends `head_fields` (each ending in CRLF) to the admin server and parses the answer.
fn admin(proxy: &Proxy, method: &str, path: &str, head_fields: &str) -> Response {
    let _ = proxy.admin_get("/healthz");
    let req = format!(
        "{method} {path} HTTP/1.1\r\n{head_fields}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    parse_response(&http_exchange(proxy.admin_addr(), req.as_bytes()))
}

/// The snapshot window's start, which a reset moves.
fn since(proxy: &Proxy) -> String {
    let r = admin(proxy, "GET", "/api/snapshot", "Host: 127.0.0.1\r\n");
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&r.body_text()).unwrap();
    v["since"].to_string()
}

/// An upstream that answers every request head with `ok`.
fn ok_upstream() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { return };
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                let mut line = String::new();
                while r.read_line(&mut line).unwrap_or(0) > 0 {
                    if line == "\r\n" {
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if w.write_all(ok).is_err() {
                            return;
                        }
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

#[test]
fn a_cross_site_reset_is_refused_and_a_same_origin_json_one_is_not() {
    let proxy = Proxy::in_front_of(ok_upstream(), &[]);
    let before = since(&proxy);
    let admin_origin = format!("http://{}", proxy.admin_addr());
    // What Chromium sends for a no-cors `fetch(…, {method: "POST", body: "x"})` from a
    // page on another site, and for a form posted from one.
    for fields in [
        "Host: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: text/plain;charset=UTF-8\r\nSec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: empty\r\n".to_string(),
        "Host: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: application/x-www-form-urlencoded\r\nSec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: navigate\r\n".to_string(),
        // A simple request without any Origin (an old browser, a form with a referrer
        // policy): still not JSON.
        "Host: 127.0.0.1\r\nContent-Type: text/plain\r\n".to_string(),
        // JSON, but from elsewhere (after a preflight the server never granted).
        "Host: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n".to_string(),
    ] {
        let r = admin(&proxy, "POST", "/api/reset", &fields);
        assert_eq!(r.status, 403, "{fields}");
    }
    assert_eq!(since(&proxy), before, "no refused reset moved the window");
    // The live page's own reset: same origin, JSON.
    let own = format!(
        "Host: {}\r\nOrigin: {admin_origin}\r\nContent-Type: application/json\r\nSec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: cors\r\n",
        proxy.admin_addr()
    );
    assert_eq!(admin(&proxy, "POST", "/api/reset", &own).status, 200);
    assert_ne!(since(&proxy), before);
}

#[test]
fn a_rebound_host_name_gets_no_snapshot_and_no_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admin.toml");
    std::fs::write(
        &config,
        format!(
            "[admin]\nallowed_hosts = [\"phasescope.internal\"]\n\n[[tap]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nupstream = \"{}\"\n",
            ok_upstream()
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let port = proxy.admin_port();
    for path in ["/api/snapshot", "/metrics", "/"] {
        for host in ["attacker.example", &format!("attacker.example:{port}")] {
            let r = admin(&proxy, "GET", path, &format!("Host: {host}\r\n"));
            assert_eq!(r.status, 421, "{path} for {host}");
            assert!(!r.body_text().contains("\"taps\""), "{path}");
        }
        for host in [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("phasescope.internal:{port}"),
        ] {
            let r = admin(&proxy, "GET", path, &format!("Host: {host}\r\n"));
            assert_eq!(r.status, 200, "{path} for {host}");
        }
    }
}

/// Opens `n` keep-alive admin connections, each with one answered request; returns
/// those still open.
fn keep_alive_admin_connections(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut open = Vec::new();
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect(addr) else {
            continue;
        };
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .is_err()
        {
            continue;
        }
        let mut buf = [0u8; 512];
        if matches!(s.read(&mut buf), Ok(n) if n > 0) {
            open.push(s);
        }
    }
    open
}

/// Whether the server still holds `s` open: a read finds neither an end nor an error.
fn still_open(s: &mut TcpStream) -> bool {
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn admin_connections_never_take_the_descriptors_the_data_path_needs() {
    let upstream = ok_upstream();
    let (listen, admin) = (loopback(free_port()), loopback(free_port()));
    let mut child = Command::new("prlimit")
        .arg("--nofile=96:96")
        .arg(env!("CARGO_BIN_EXE_phasescope"))
        .args(["run", "--listen", &listen.to_string()])
        .args(["--upstream", &upstream.to_string()])
        .args(["--admin", &admin.to_string()])
        .current_dir(std::env::temp_dir())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prlimit (util-linux) runs the binary");
    let started = wait_for(Duration::from_secs(20), || {
        TcpStream::connect(listen).is_ok() && TcpStream::connect(admin).is_ok()
    });
    assert!(started, "the proxy did not start");
    // Far more keep-alive admin connections than the process has descriptors: each is
    // answered (the longest idle one closed to make room), and at most an eighth of 96
    // stay open.
    let mut held = keep_alive_admin_connections(admin, 150);
    assert_eq!(held.len(), 150, "every admin connection was answered");
    // The closes for room are sent as the next connection is accepted.
    std::thread::sleep(Duration::from_millis(200));
    held.retain_mut(still_open);
    assert!(
        !held.is_empty() && held.len() <= 96 / 8,
        "{} admin connections were kept (an eighth of 96 at most)",
        held.len()
    );
    // Meanwhile clients are served, concurrently.
    let started = Instant::now();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            std::thread::spawn(move || {
                let req = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
                std::panic::catch_unwind(|| parse_response(&http_exchange(listen, req)).status)
                    .unwrap_or(0)
            })
        })
        .collect();
    let statuses: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap_or(0)).collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        statuses.iter().all(|&s| s == 200),
        "statuses {statuses:?} after {:?}",
        started.elapsed()
    );
    drop(held);
}

/// Sends `GET path` on a keep-alive connection and reads the whole answer: its status
/// and body length; `None` when the connection failed or closed.
fn keep_alive_get(s: &mut TcpStream, path: &str) -> Option<(u16, usize)> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let r = parse_response(&head);
    let len: usize = r.header("content-length")?.parse().ok()?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some((r.status, len))
}

/// The resident set of `pid`, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// One probe on a new connection, as the kubelet or Prometheus sends it: its status
/// (0: refused, reset or no answer) and how long it took.
fn probe(addr: std::net::SocketAddr, path: &str, deadline: Duration) -> (u16, Duration) {
    let started = Instant::now();
    let status = (|| {
        let mut s = TcpStream::connect_timeout(&addr, deadline).ok()?;
        s.set_read_timeout(Some(deadline)).ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).ok()?;
        (!raw.is_empty()).then(|| parse_response(&raw).status)
    })()
    .unwrap_or(0);
    (status, started.elapsed())
}

/// The kubelet's default probe timeout, and Prometheus's default scrape timeout.
const HEALTHZ_DEADLINE: Duration = Duration::from_secs(1);
const METRICS_DEADLINE: Duration = Duration::from_secs(10);

/// Readers of `/api/snapshot` on keep-alive connections, each asking again as soon as
/// it has its answer, until `stop`: the counts of 200 and of other answers.
fn snapshot_readers(
    admin: std::net::SocketAddr,
    n: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<(u64, u64)>> {
    use std::sync::atomic::Ordering;
    (0..n)
        .map(|_| {
            let stop = std::sync::Arc::clone(stop);
            std::thread::spawn(move || {
                let (mut served, mut other) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(admin) else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                    while let Some((status, _)) = keep_alive_get(&mut s, "/api/snapshot") {
                        *if status == 200 {
                            &mut served
                        } else {
                            &mut other
                        } += 1;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
                (served, other)
            })
        })
        .collect()
}

/// The largest RSS of `pid` seen over `span`, sampled every 50 ms.
fn rss_peak_over(pid: u32, span: Duration) -> u64 {
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < span {
        peak = peak.max(rss_bytes(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    peak
}

/// 64 snapshot readers, 64 connections that never send a byte and 8 that ask for a
/// snapshot and never read it: `/healthz` and `/metrics` are still answered every time
/// within the kubelet's and Prometheus's default timeouts, and the readers cost the
/// memory of one snapshot at a time. Before, past `max_connections` every new connection
/// was closed at once (`/healthz` failed 37 of 38 times beside 64 readers, and for 10 s
/// beside 64 idle connections) and every reader's snapshot was held in memory (468 MB).
#[test]
fn probes_are_answered_whatever_snapshot_readers_and_idle_connections_do() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admin.toml");
    std::fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nupstream = \"{}\"\nroutes = \"prefix\"\nmax_routes = 64\n",
            ok_upstream()
        ),
    )
    .unwrap();
    let mut proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let pid = proxy.process().pid();
    let admin = proxy.admin_addr();
    let mut client = TcpStream::connect(proxy.addr()).unwrap();
    for i in 0..64 {
        assert_eq!(
            keep_alive_get(&mut client, &format!("/r{i}")).map(|r| r.0),
            Some(200)
        );
    }
    // The reference: what one reader costs.
    let rss_before = rss_bytes(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let one = snapshot_readers(admin, 1, &stop);
    let rss_one = rss_peak_over(pid, Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (served_one, _) = one
        .into_iter()
        .map(|r| r.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert!(served_one > 0);
    stop.store(false, Ordering::Relaxed);
    let readers = snapshot_readers(admin, 64, &stop);
    let idle: Vec<TcpStream> = (0..64)
        .filter_map(|_| TcpStream::connect(admin).ok())
        .collect();
    let unread: Vec<TcpStream> = (0..8)
        .filter_map(|_| {
            let mut s = TcpStream::connect(admin).ok()?;
            s.write_all(b"GET /api/snapshot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .ok()?;
            Some(s)
        })
        .collect();
    let mut failures = Vec::new();
    let mut rss_siege = 0;
    let (mut slowest_healthz, mut slowest_metrics) = (Duration::ZERO, Duration::ZERO);
    let siege = Instant::now();
    let mut probes = 0;
    while siege.elapsed() < Duration::from_secs(5) {
        let (h, th) = probe(admin, "/healthz", HEALTHZ_DEADLINE);
        let (m, tm) = probe(admin, "/metrics", METRICS_DEADLINE);
        probes += 1;
        if h != 200 || th > HEALTHZ_DEADLINE {
            failures.push(format!("/healthz {h} in {th:?}"));
        }
        if m != 200 || tm > METRICS_DEADLINE {
            failures.push(format!("/metrics {m} in {tm:?}"));
        }
        slowest_healthz = slowest_healthz.max(th);
        slowest_metrics = slowest_metrics.max(tm);
        rss_siege = rss_siege.max(rss_peak_over(pid, Duration::from_millis(100)));
    }
    stop.store(true, Ordering::Relaxed);
    drop((idle, unread));
    let (served, busy) = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let (one_grew, siege_grew) = (
        rss_one.saturating_sub(rss_before),
        rss_siege.saturating_sub(rss_before),
    );
    eprintln!(
        "{probes} probe rounds; slowest /healthz {slowest_healthz:?}, /metrics {slowest_metrics:?}; snapshots served {served}, busy {busy}; RSS {rss_before} B, +{one_grew} B with one reader, +{siege_grew} B with 64"
    );
    assert!(
        failures.is_empty(),
        "{} of {probes} rounds failed: {failures:?}",
        failures.len()
    );
    assert!(
        served > 0 && busy > 0,
        "the readers were served, and told to come back"
    );
    // One snapshot is built at a time (`max_snapshots`) and held until it is sent: 64
    // readers cost about what one does, not 64 times it. The 16 MiB are the 136
    // connections' own buffers.
    assert!(
        siege_grew <= 2 * one_grew + (16 << 20),
        "RSS grew {siege_grew} B with 64 readers, {one_grew} B with one"
    );
}

/// `phasescope snapshot --reset` into `out`; the exchanges of the window it saved.
fn snapshot_reset(admin: std::net::SocketAddr, out: &std::path::Path) -> u64 {
    let status = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args([
            "snapshot",
            "--from",
            &format!("http://{admin}"),
            "--reset",
            "-o",
        ])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "snapshot --reset failed");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    v["taps"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|t| t["phases"]["total"].as_object())
        .flat_map(|routes| routes.values())
        .map(|s| s["count"].as_u64().unwrap())
        .sum()
}

#[test]
fn two_reset_loops_under_load_lose_no_exchange() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let proxy = Proxy::in_front_of(ok_upstream(), &[]);
    let (addr, admin) = (proxy.addr(), proxy.admin_addr());
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    // The load generator counts every answer it read whole.
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, answered) = (Arc::clone(&stop), Arc::clone(&answered));
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(keep_alive_get(&mut s, "/x").map(|r| r.0), Some(200));
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Two `snapshot --reset` loops at once, each summing the windows it saved.
    let loops: Vec<_> = (0..2)
        .map(|i| {
            let stop = Arc::clone(&stop);
            let out = dir.path().join(format!("loop-{i}.json"));
            std::thread::spawn(move || {
                let (mut windows, mut exchanges) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    exchanges += snapshot_reset(admin, &out);
                    windows += 1;
                }
                (windows, exchanges)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.join().unwrap();
    }
    let mut windows = 0;
    let mut in_windows = 0;
    for l in loops {
        let (w, e) = l.join().unwrap();
        windows += w;
        in_windows += e;
    }
    // The last exchanges are recorded once their answer is written: a moment after the
    // client read it. The window after everything stopped holds what is left.
    let sent = answered.load(Ordering::Relaxed);
    let last = dir.path().join("last.json");
    let mut rest = 0;
    wait_for(Duration::from_secs(5), || {
        rest += snapshot_reset(admin, &last);
        in_windows + rest >= sent
    });
    eprintln!(
        "{sent} exchanges answered; {windows} windows hold {in_windows}, the last one {rest}"
    );
    assert!(windows >= 4, "the loops reset {windows} times");
    assert_eq!(
        in_windows + rest,
        sent,
        "every exchange in exactly one window"
    );
}

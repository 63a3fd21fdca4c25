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
    // Far more keep-alive admin connections than the process has descriptors.
    let held = keep_alive_admin_connections(admin, 150);
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

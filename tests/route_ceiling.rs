//! At the routes ceiling `check-config` warns past (docs/deploy.md, Memory), `/metrics`
//! is still scrapable: within the size the ceiling states and Prometheus's default scrape
//! timeout, and the process within the RSS it states.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use phasescope::config::ceiling::{METRICS_BYTES_PER_ROUTE, PROCESS_RSS_CEILING, ROUTES_CEILING};
use support::Proxy;

/// Prometheus's default `scrape_timeout`.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

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
                    if line == "\r\n"
                        && w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .is_err()
                    {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn metrics_stays_scrapable_with_every_route_of_the_ceiling_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("routes.toml");
    std::fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nupstream = \"{}\"\nroutes = \"prefix\"\nmax_routes = {ROUTES_CEILING}\n",
            ok_upstream()
        ),
    )
    .unwrap();
    let mut proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let pid = proxy.process().pid();
    // Every route, on two connections (each worker keeps the series it served).
    let mut conns: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(proxy.addr()).unwrap())
        .collect();
    for i in 0..ROUTES_CEILING {
        for c in &mut conns {
            c.write_all(format!("GET /r{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
                .unwrap();
            let mut buf = Vec::new();
            let mut byte = [0u8; 64];
            while !buf.ends_with(b"ok") {
                let n = c.read(&mut byte).unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&byte[..n]);
            }
        }
    }
    let mut peak = 0;
    let mut sizes = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let r = proxy.admin_get("/metrics");
        let took = started.elapsed();
        assert_eq!(r.status, 200);
        assert!(took < SCRAPE_TIMEOUT, "a scrape took {took:?}");
        sizes.push(r.body.len() as u64);
        peak = peak.max(rss_bytes(pid));
    }
    assert_eq!(proxy.admin_get("/api/snapshot").status, 200);
    peak = peak.max(rss_bytes(pid));
    let routes = String::from_utf8_lossy(&proxy.admin_get("/metrics").body)
        .lines()
        .filter(|l| l.starts_with("phasescope_requests_total{") && !l.contains("route=\"other\""))
        .count();
    eprintln!("{routes} routes: /metrics {sizes:?} B, RSS peak {peak} B");
    assert!(
        routes >= ROUTES_CEILING,
        "{routes} routes in the exposition"
    );
    let stated = ROUTES_CEILING as u64 * METRICS_BYTES_PER_ROUTE;
    assert!(
        sizes.iter().all(|&s| s <= stated + (1 << 20)),
        "{sizes:?} against {stated}"
    );
    assert!(
        peak <= PROCESS_RSS_CEILING,
        "RSS peaked at {peak} B, the ceiling states {PROCESS_RSS_CEILING} B"
    );
}

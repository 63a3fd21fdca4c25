//! Webdis restarted under load: requests in flight fail cleanly (a proxy-made 502 or a
//! closed connection, never a hang), and new requests succeed once it is back.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{free_port, Proxy, RedisServer, Webdis};

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    bad_gateway: AtomicU64,
    closed: AtomicU64,
    other: AtomicU64,
}

/// One request on a fresh connection; what came back. A read timeout is a hang, which
/// fails the test.
fn one(addr: SocketAddr, tally: &Tally) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        tally.closed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET /GET/k HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            panic!("a request hung while Webdis restarted")
        }
        _ => {}
    }
    let counter = if out.starts_with(b"HTTP/1.1 200") {
        &tally.ok
    } else if out.starts_with(b"HTTP/1.1 502") {
        &tally.bad_gateway
    } else if out.is_empty() {
        &tally.closed
    } else {
        &tally.other
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn in_flight_requests_fail_cleanly_and_new_ones_succeed_after_a_restart() {
    let redis = RedisServer::start();
    let port = free_port();
    let mut webdis = Webdis::start_at(redis.port(), port);
    let proxy = Proxy::in_front_of(webdis.addr(), &[]);
    assert_eq!(support::http_get(proxy.addr(), "/SET/k/v").status, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let addr = proxy.addr();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, tally) = (Arc::clone(&stop), Arc::clone(&tally));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    one(addr, &tally);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    webdis.process().kill();
    let down_at = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let bad_while_down = tally.bad_gateway.load(Ordering::Relaxed);
    drop(webdis);
    let webdis = Webdis::start_at(redis.port(), port);
    let ok_before = tally.ok.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let ok_after = tally.ok.load(Ordering::Relaxed) - ok_before;
    eprintln!(
        "down {:?}: ok {}, 502 {}, closed {}, other {}",
        down_at.elapsed(),
        tally.ok.load(Ordering::Relaxed),
        tally.bad_gateway.load(Ordering::Relaxed),
        tally.closed.load(Ordering::Relaxed),
        tally.other.load(Ordering::Relaxed)
    );
    assert!(bad_while_down > 0, "no 502 while Webdis was down");
    assert!(ok_after > 0, "no success after Webdis came back");
    assert_eq!(tally.other.load(Ordering::Relaxed), 0, "unexpected answers");

    let metrics = String::from_utf8(proxy.admin_get("/metrics").body).unwrap();
    let count = |kind: &str| -> f64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("phasescope_errors_total") && l.contains(&format!("kind=\"{kind}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        count("upstream_connect") + count("upstream_reset") > 0.0,
        "{metrics}"
    );
    drop(webdis);
}

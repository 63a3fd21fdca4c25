//! Signals against the real binary: SIGHUP and SIGQUIT drain in-flight work like SIGTERM
//! (they used to kill the process, their default action, and every request in flight got
//! nothing), and SIGUSR1, SIGUSR2 and SIGALRM are ignored (a logrotate `kill -USR1` took
//! the proxy down).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use support::{wait_for, Proxy};

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
/// How long the upstream takes to answer: the signal arrives well inside it.
const SLOW: Duration = Duration::from_millis(600);
const IN_FLIGHT: usize = 5;

/// An upstream that answers every request `SLOW` after it arrived.
fn slow_upstream() -> SocketAddr {
    support::slow_upstream(SLOW, |_| OK.to_vec())
}

fn drains_on(signal: libc::c_int) {
    let mut proxy = Proxy::in_front_of(slow_upstream(), &[]);
    let addr = proxy.addr();
    let clients: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
                    .unwrap();
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                got
            })
        })
        .collect();
    // Every request is in flight (the upstream holds it for SLOW) when the signal comes.
    thread::sleep(SLOW / 3);
    let signalled = Instant::now();
    proxy.process().signal(signal);
    for c in clients {
        let got = c.join().unwrap();
        assert_eq!(
            got,
            OK,
            "an in-flight request got {:?}\n{}",
            String::from_utf8_lossy(&got),
            proxy.log_tail()
        );
    }
    assert!(
        wait_for(Duration::from_secs(10), || proxy
            .process()
            .exited()
            .is_some()),
        "still running after the drain\n{}",
        proxy.log_tail()
    );
    let status = proxy.process().exited().unwrap();
    assert!(status.success(), "{status:?}\n{}", proxy.log_tail());
    // Relative to the drain's grace (10 s by default): the drain ended with the requests
    // in flight (SLOW), not at the grace.
    assert!(signalled.elapsed() < Duration::from_secs(8));
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting after the drain"
    );
}

#[test]
fn sighup_drains_in_flight_requests_like_sigterm() {
    drains_on(libc::SIGHUP);
}

#[test]
fn sigterm_drains_in_flight_requests() {
    drains_on(libc::SIGTERM);
}

#[test]
fn sigquit_drains_in_flight_requests_like_sigterm() {
    drains_on(libc::SIGQUIT);
}

/// Each of SIGUSR1, SIGUSR2 and SIGALRM arrives with requests in flight: every one is
/// answered, the proxy keeps running and serves the next request, and says it ignored it.
#[test]
fn sigusr1_sigusr2_and_sigalrm_are_ignored_and_nothing_in_flight_is_lost() {
    let mut proxy = Proxy::in_front_of(slow_upstream(), &[]);
    let addr = proxy.addr();
    for signal in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM] {
        let client = thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            got
        });
        thread::sleep(SLOW / 3);
        proxy.process().signal(signal);
        let got = client.join().unwrap();
        assert!(
            got.ends_with(b"\r\n\r\nok"),
            "signal {signal}: the request in flight got {:?}\n{}",
            String::from_utf8_lossy(&got),
            proxy.log_tail()
        );
        assert!(
            proxy.process().exited().is_none(),
            "signal {signal} stopped the proxy\n{}",
            proxy.log_tail()
        );
    }
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /after HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.ends_with(b"ok"), "{:?}", String::from_utf8_lossy(&got));
    let log = proxy.log_tail();
    for name in ["SIGUSR1", "SIGUSR2", "SIGALRM"] {
        assert!(log.contains(&format!("{name} ignored")), "{name}:\n{log}");
    }
}

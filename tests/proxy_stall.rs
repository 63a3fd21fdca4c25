//! The proxy's own stalls (docs/phases.md, "The proxy's own stalls"): phasescope stopped
//! with SIGSTOP under load, then continued. The time it did not run is the proxy's
//! (`proxy_stalled`, inside `proxy_overhead`), not the upstream's wait, and the finding
//! `proxy_stalled` says so; before, the whole stop was read as `upstream_wait` (a 5 s
//! stop: 5.003 s of it) and the findings blamed the upstream.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use phasescope::snapshot::Snapshot;
use support::{HttpConn, Proxy};

/// What the upstream takes to answer: each connection spends most of its time waiting for
/// the upstream, so the stop lands on exchanges in that wait.
const UPSTREAM_DELAY: Duration = Duration::from_millis(20);
/// How long the proxy is stopped.
const STOP: Duration = Duration::from_secs(2);
const CONNECTIONS: usize = 4;

fn ok(_: &str) -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
}

fn snapshot(proxy: &Proxy) -> Snapshot {
    let r = proxy.admin_get("/api/snapshot");
    assert_eq!(r.status, 200, "{}", r.body_text());
    Snapshot::from_json(&r.body_text()).unwrap()
}

/// `phase` over every route of the tap: (exchanges that had it, its sum, its largest).
fn phase(s: &Snapshot, phase: &str) -> (u64, f64, f64) {
    let tap = s.taps.values().next().expect("one tap");
    tap.phases
        .get(phase)
        .into_iter()
        .flatten()
        .fold((0, 0.0, 0.0_f64), |(n, sum, max), (_, x)| {
            (n + x.count, sum + x.sum, max.max(x.max))
        })
}

/// Keep-alive clients sending requests one after another until `stop`.
fn load(proxy: &Proxy, stop: &Arc<AtomicBool>) -> Vec<thread::JoinHandle<u64>> {
    (0..CONNECTIONS)
        .map(|_| {
            let (addr, stop) = (proxy.addr(), stop.clone());
            thread::spawn(move || {
                let mut conn = HttpConn::connect(addr);
                let request = b"GET /stall HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
                let mut answered = 0;
                while !stop.load(Ordering::Relaxed) {
                    assert!(!conn.exchange(request).is_empty());
                    answered += 1;
                }
                answered
            })
        })
        .collect()
}

#[test]
fn a_stopped_proxy_is_its_own_wait_not_the_upstreams() {
    let upstream = support::slow_upstream(UPSTREAM_DELAY, ok);
    let mut proxy = Proxy::in_front_of(upstream, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(&proxy, &stop);
    thread::sleep(Duration::from_secs(1));

    // The control: load without a stop has no stall that matters.
    let before = snapshot(&proxy);
    let control = before.proxy.as_ref().expect("the proxy's own part").stalls;
    assert!(
        control.longest_seconds < 0.5,
        "a stall of {} s with nothing stopping the proxy",
        control.longest_seconds
    );

    let stopped = Instant::now();
    proxy.process().signal(libc::SIGSTOP);
    thread::sleep(STOP);
    proxy.process().signal(libc::SIGCONT);
    let paused = stopped.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let answered: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();

    let s = snapshot(&proxy);
    let stalls = s.proxy.as_ref().expect("the proxy's own part").stalls;
    let (stalled_n, stalled_sum, stalled_max) = phase(&s, "proxy_stalled");
    let (_, _, wait_max) = phase(&s, "upstream_wait");
    let (_, _, overhead_max) = phase(&s, "proxy_overhead");
    let (_, _, total_max) = phase(&s, "total");
    eprintln!(
        "stopped {paused:.3} s; {answered} answered; stalls {stalls:?}; proxy_stalled on \
         {stalled_n} exchanges, sum {stalled_sum:.3} s, max {stalled_max:.3} s; largest \
         upstream_wait {wait_max:.3} s, proxy_overhead {overhead_max:.3} s, total {total_max:.3} s"
    );
    // The stop, measured by the thread that watches for stalls: within the 10 ms it
    // sleeps and the signals' delivery.
    assert!(
        stalls.longest_seconds >= paused - 0.1 && stalls.longest_seconds <= paused + 0.1,
        "longest stall {} s for a stop of {paused:.3} s",
        stalls.longest_seconds
    );
    assert!(stalls.seconds >= stalls.longest_seconds);
    // The clients saw it; the exchanges waiting on the upstream then count it as the
    // proxy's.
    assert!(
        total_max >= paused - 0.1,
        "no exchange lasted the stop: {total_max} s"
    );
    assert!(
        stalled_n >= 1 && stalled_max >= paused - 0.15,
        "proxy_stalled on {stalled_n} exchanges, the largest {stalled_max} s, for a stop of {paused:.3} s"
    );
    assert!(overhead_max >= stalled_max);
    // The upstream answered in 20 ms throughout: no wait near the stop is its.
    assert!(
        wait_max < paused / 4.0,
        "upstream_wait reached {wait_max} s with an upstream that answers in {UPSTREAM_DELAY:?}"
    );
    let finding = s
        .findings
        .iter()
        .find(|f| f.id == "proxy_stalled")
        .unwrap_or_else(|| panic!("no proxy_stalled finding: {:?}", s.findings));
    assert_eq!(
        finding.severity,
        phasescope::snapshot::Severity::Critical,
        "{finding:?}"
    );
    assert!(finding.impact.seconds_per_request > 0.0, "{finding:?}");
}

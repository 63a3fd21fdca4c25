//! What share of the server's CPU the samples cover, against the server's own truth: a
//! thread-per-connection server (the burn upstream) whose every thread lives for one
//! request, the case where per-thread events opened on the threads found covered 5 %.

mod support;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use support::{
    http_exchange, parse_response, wait_for, BurnUpstream, Proxy, IO_TIMEOUT, STARTUP_DEADLINE,
};

/// Clients that open a connection per request: each request is served by a thread of its
/// own in the burn upstream, which exits when the client closes.
fn one_request_per_connection(
    addr: SocketAddr,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<u64>> {
    (0..clients)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut served = 0;
                let mut buf = [0u8; 512];
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect_timeout(&addr, IO_TIMEOUT) else {
                        continue;
                    };
                    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                    s.write_all(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
                    let mut got = Vec::new();
                    // The answer ends with its 2-byte body `ok`.
                    while !got.ends_with(b"\r\n\r\nok") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    served += u64::from(got.ends_with(b"ok"));
                }
                served
            })
        })
        .collect()
}

fn snapshot(proxy: &Proxy) -> Value {
    serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap_or_default()
}

fn reset(proxy: &Proxy) {
    let raw = http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(parse_response(&raw).status, 200, "reset failed");
}

/// What one window of the thread-per-connection load read.
struct Covered {
    /// Samples × period ÷ the process's user + system time.
    share: f64,
    /// The burns' CPU by the threads' own clocks, and the process's user + system.
    burned: f64,
    cpu: f64,
    /// The process's nanosecond CPU figure.
    precise: f64,
    served: u64,
    report: String,
    sampler_cpu: Option<f64>,
}

/// 4 s of three clients opening a connection a request to the burn upstream (400 µs of
/// CPU a request, all in backend_query, a thread a connection), behind a proxy sampling
/// it with `process` (the lines of `[tap.process]` besides `profile = true`).
fn thread_per_connection_window(process: &str) -> Covered {
    let mut up = BurnUpstream::start(0, 400);
    let pid = u64::from(up.process().pid());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"webdis\"\nlisten = \"127.0.0.1:1\"\nupstream = \"{}\"\n\
             [tap.process]\nprofile = true\n{process}\n",
            up.addr()
        ),
    )
    .unwrap();
    let proxy = Proxy::in_front_of(up.addr(), &["--config", config.to_str().unwrap()]);
    assert!(
        wait_for(STARTUP_DEADLINE, || {
            let s = snapshot(&proxy);
            s["taps"]["webdis"]["upstream"]["pid"].as_u64() == Some(pid)
                && s["taps"]["webdis"]["upstream"]["frequency_hz"]
                    .as_u64()
                    .is_some()
        }),
        "the proxy never sampled pid {pid}\n{}",
        proxy.log_tail()
    );
    reset(&proxy);
    let before = up.truth();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = one_request_per_connection(proxy.addr(), 3, stop.clone());
    thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let served: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    // The last samples are in once a collect began after the load ended.
    thread::sleep(Duration::from_millis(2500));
    let after = up.truth();
    let text = proxy.admin_get("/api/snapshot").body_text();
    let u = &serde_json::from_str::<Value>(&text).unwrap()["taps"]["webdis"]["upstream"];

    // The truth: the CPU its burns took, by its threads' own clocks.
    let burned = (after.backend_ns - before.backend_ns) as f64 / 1e9;
    let cpu = u["cpu_user_seconds"].as_f64().unwrap() + u["cpu_system_seconds"].as_f64().unwrap();
    let samples: u64 = u["samples"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_u64)
        .sum();
    let hz = u["frequency_hz"].as_f64().unwrap();
    let covered = samples as f64 / hz;
    let precise = u["cpu_seconds"].as_f64().unwrap_or(0.0);
    eprintln!(
        "[tap.process] {process:?}: served {served} (upstream {}), burned {burned:.3} s, \
         user+system {cpu:.3} s, cpu_seconds {precise:.3} s, {samples} samples at {hz} Hz = \
         {covered:.3} s: {:.1} % covered, sampler CPU {:?} s",
        after.requests - before.requests,
        covered / cpu * 100.0,
        u["sampler_cpu_seconds"]
    );

    let saved = dir.path().join("snapshot.json");
    fs::write(&saved, &text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["report", "--from", saved.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Covered {
        share: covered / cpu,
        burned,
        cpu,
        precise,
        served,
        report: String::from_utf8_lossy(&out.stdout).into_owned(),
        sampler_cpu: u["sampler_cpu_seconds"].as_f64(),
    }
}

/// The report's coverage line says the window's share, and warns below 80 %; the hot
/// path leads with the burn (every thread sampled from its first instruction: events
/// opened only on the threads found at each collect caught the acceptor alone, and the
/// hot path read `__pthread_create_2_1 62 %`).
fn check_report(c: &Covered) {
    let report = &c.report;
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with("samples: "))
        .unwrap_or_else(|| panic!("no coverage line:\n{report}"));
    let said = format!("cover {:.0} % of its CPU", c.share * 100.0);
    assert!(line.contains(&said), "{said:?} not in {line:?}");
    let warned = report.contains("warning: the samples cover only");
    // Either the samples cover the server, or the report says they do not.
    if c.share < 0.8 {
        assert!(warned, "coverage {:.2} not warned:\n{report}", c.share);
    } else {
        assert!(!warned, "{report}");
    }
    let hot = report
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("hot path"))
        .nth(1)
        .unwrap_or_default();
    // The burn is named alone or as the end of the chain that only leads to it
    // (`serve → backend_query`: serve does nothing else of note).
    let name: Vec<&str> = hot
        .split_whitespace()
        .take_while(|w| !w.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(name.last(), Some(&"backend_query"), "{report}");
    assert!(
        c.sampler_cpu.is_some_and(|s| s > 0.0),
        "the sampler's own CPU is not counted: {:?}",
        c.sampler_cpu
    );
}

#[test]
fn a_thread_per_connection_server_is_covered_or_says_it_is_not() {
    // At the full rate (`sample_budget = 0`): what is asked is what inherited events cover
    // of threads that each run under a period. Under the default budget a period is up
    // to 16 of them, and the coverage is lower (15.6 % measured), which the warning says.
    let c = thread_per_connection_window("sample_budget = 0");
    assert!(c.served > 200, "too little load to judge: {}", c.served);
    // user + system counts the exited threads: it holds at least the burns.
    assert!(
        c.cpu >= 0.9 * c.burned,
        "user+system {:.3} s below the burns' {:.3} s: exited threads lost",
        c.cpu,
        c.burned
    );
    // So does the nanosecond figure a comparison's cpu rows divide (it was the live
    // threads' schedstat, which loses an exited thread's time: 0.15 ms a request against
    // 2.26 ms of user and system time).
    assert!(
        c.precise >= 0.9 * c.burned,
        "cpu_seconds {:.3} s below the burns' {:.3} s: exited threads lost",
        c.precise,
        c.burned
    );
    check_report(&c);
    // Each thread runs about 0.5 ms, under one period (1 ms) of its own CPU clock, which
    // starts at zero in a new thread: the samples cannot cover it all, but they cover the
    // threads they catch (a quarter or more, where 7 % were before).
    assert!(
        c.share >= 0.15,
        "the samples cover {:.1} % of a thread-per-connection server's CPU:\n{}",
        c.share * 100.0,
        c.report
    );
}

#[test]
fn per_cpu_events_cover_a_thread_per_connection_server() {
    // At the same full rate as above, where per-thread events cover a quarter or so: an
    // event per CPU has one clock for all that the CPU runs, so a thread that lives half
    // a period is sampled half the time rather than never. (At the full rate the samples
    // are thousands, so the share is within a few points of what it estimates.)
    let c = thread_per_connection_window("sample_budget = 0\nevents = \"per-cpu\"");
    assert!(c.served > 200, "too little load to judge: {}", c.served);
    check_report(&c);
    assert!(
        c.share >= 0.9,
        "per-CPU samples cover {:.1} % of a thread-per-connection server's CPU:\n{}",
        c.share * 100.0,
        c.report
    );
    // And no more than the server's: the samples of the proxy, the clients and every
    // other process the CPUs ran are dropped.
    assert!(
        c.share <= 1.15,
        "per-CPU samples count {:.1} % of the server's CPU: other processes' kept\n{}",
        c.share * 100.0,
        c.report
    );
}

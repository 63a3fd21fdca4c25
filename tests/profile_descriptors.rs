//! The profiler's file descriptors: one perf event per sampled thread, on the busiest
//! threads only and within a share of RLIMIT_NOFILE, so that profiling an upstream of
//! many threads never takes the descriptors the data path needs (docs/security.md, item
//! 10 of the third round). Real perf events on a real process (a Python HTTP server of
//! 300 threads), the proxy under `prlimit --nofile`.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use support::{
    accepts, free_port, http_exchange, loopback, parse_response, require_tool, wait_for, HttpConn,
    Managed,
};

/// Threads of the upstream: more than the descriptor limit below could give events to.
const UPSTREAM_THREADS: usize = 300;
/// The proxy's RLIMIT_NOFILE: one event per thread leaves it fewer descriptors than
/// `CLIENTS` need (a client connection and an upstream one each), a sixteenth of it
/// leaves plenty.
const NOFILE: u64 = 384;
/// Clients served at once, each with its upstream connection.
const CLIENTS: usize = 60;

fn start_upstream(dir: &std::path::Path) -> (Managed, SocketAddr) {
    let python = require_tool("python3");
    let port = free_port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/many-threads-upstream.py"
    );
    let mut command = Command::new(python);
    command
        .arg(script)
        .arg(port.to_string())
        .arg(UPSTREAM_THREADS.to_string());
    let process = Managed::spawn("many-threads-upstream", &mut command, &dir.join("up.log"));
    let addr = loopback(port);
    assert!(
        wait_for(Duration::from_secs(20), || accepts(addr)),
        "the upstream did not start\n{}",
        process.log_tail()
    );
    (process, addr)
}

fn start_proxy(dir: &std::path::Path, upstream: SocketAddr) -> (Managed, SocketAddr, SocketAddr) {
    let (listen, admin) = (loopback(free_port()), loopback(free_port()));
    let mut command = Command::new(require_tool("prlimit"));
    command
        .arg(format!("--nofile={NOFILE}:{NOFILE}"))
        .arg(env!("CARGO_BIN_EXE_phasescope"))
        .args(["run", "--listen", &listen.to_string()])
        .args(["--upstream", &upstream.to_string()])
        .args(["--admin", &admin.to_string()])
        .arg("--profile-upstream")
        .current_dir(dir)
        .env("RUST_LOG", "info");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PHASESCOPE_") {
            command.env_remove(key);
        }
    }
    let process = Managed::spawn("phasescope", &mut command, &dir.join("proxy.log"));
    assert!(
        wait_for(Duration::from_secs(20), || accepts(listen)
            && accepts(admin)),
        "the proxy did not start\n{}",
        process.log_tail()
    );
    (process, listen, admin)
}

/// The first tap's `upstream` object of `/api/snapshot`.
fn upstream_snapshot(admin: SocketAddr) -> serde_json::Value {
    let req = b"GET /api/snapshot HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let response = parse_response(&http_exchange(admin, req));
    assert_eq!(response.status, 200, "{}", response.body_text());
    let snapshot: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    let taps = snapshot["taps"].as_object().expect("taps").clone();
    taps.into_iter()
        .next()
        .map(|(_, tap)| tap["upstream"].clone())
        .unwrap_or_default()
}

fn reset(admin: SocketAddr) {
    let req = b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let response = parse_response(&http_exchange(admin, req));
    assert!(response.status < 300, "reset: {}", response.status);
}

/// The perf events among the descriptors of `pid`.
fn perf_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|target| target.to_string_lossy().contains("perf_event"))
                .count()
        })
        .unwrap_or(0)
}

/// `CLIENTS` keep-alive clients, each holding its connection (and so the proxy's pooled
/// upstream connection) until all were answered; their statuses (0: no answer).
fn serve_clients(listen: SocketAddr) -> Vec<u16> {
    let all_answered = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let all_answered = all_answered.clone();
            std::thread::spawn(move || {
                let answered = std::panic::catch_unwind(|| {
                    let mut conn = HttpConn::connect(listen);
                    let status =
                        parse_response(&conn.exchange(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")).status;
                    (conn, status)
                });
                all_answered.wait();
                answered.map_or(0, |(_conn, status)| status)
            })
        })
        .collect();
    clients.into_iter().map(|c| c.join().unwrap_or(0)).collect()
}

#[test]
fn profiling_an_upstream_of_many_threads_leaves_the_data_path_its_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let (mut up, upstream) = start_upstream(dir.path());
    let (mut proxy, listen, admin) = start_proxy(dir.path(), upstream);
    // Sampling has started once a collect added its samples.
    let started = wait_for(Duration::from_secs(30), || {
        let u = upstream_snapshot(admin);
        u["threads"].as_u64().unwrap_or(0) >= UPSTREAM_THREADS as u64 && u["samples"].is_object()
    });
    assert!(started, "no sampling figures\n{}", proxy.log_tail());
    let events = perf_descriptors(proxy.pid());
    let statuses = serve_clients(listen);
    assert!(
        statuses.iter().all(|&s| s == 200),
        "statuses {statuses:?} with {events} perf events\n{}",
        proxy.log_tail()
    );
    // The profiler keeps to a sixteenth of the limit.
    assert!(
        events > 0 && events as u64 <= NOFILE / 16,
        "{events} perf events at nofile {NOFILE}\n{}",
        proxy.log_tail()
    );

    // Move the spinning to a thread that had been idle: the events follow it, and the
    // CPU of the threads left out stays a small part of the process's.
    let moved = parse_response(&http_exchange(upstream, &support::get_request("/spin/250")));
    assert_eq!(moved.status, 200);
    std::thread::sleep(Duration::from_secs(3));
    reset(admin);
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let u = upstream_snapshot(admin);
    let cpu = u["cpu_user_seconds"].as_f64().unwrap_or(0.0)
        + u["cpu_system_seconds"].as_f64().unwrap_or(0.0);
    let unsampled_cpu = u["unsampled_cpu_seconds"].as_f64().unwrap_or(f64::NAN);
    let unsampled = u["unsampled_threads"].as_u64().unwrap_or(0);
    let threads = u["threads"].as_u64().unwrap_or(0);
    let samples: u64 = u["samples"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0);
    let described = format!("after {:?}: {u:#}\n{}", window.elapsed(), proxy.log_tail());
    assert!(cpu > 0.2, "the spinning thread ran: {described}");
    assert!(
        unsampled_cpu < 0.5 * cpu,
        "the spinning thread is sampled: {described}"
    );
    assert!(
        threads >= UPSTREAM_THREADS as u64 && unsampled >= threads - NOFILE / 16,
        "{unsampled} of {threads} threads without an event: {described}"
    );
    assert!(samples > 0, "samples were taken: {described}");
    assert!(
        serve_clients(listen).iter().all(|&s| s == 200),
        "the second round was served\n{}",
        proxy.log_tail()
    );
    proxy.stop(Duration::from_secs(5));
    up.kill();
}

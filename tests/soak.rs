//! Soak: load through phasescope to a real Webdis for a while, in rounds, and check that
//! nothing accumulates: open descriptors return to their baseline after every round, RSS
//! stays flat after the first round, every request the client completed was recorded, and
//! no error occurred that a direct connection would not have had.
//!
//! `PHASESCOPE_SOAK_SECS` sets the length (default 60 s, as in CI; the documented long run
//! is 600 s: `PHASESCOPE_SOAK_SECS=600 cargo test --release --test soak -- --nocapture`).

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{run_wrk, Proxy, RedisServer, Webdis};

const ROUND_SECS: u32 = 10;
const CONNECTIONS: u32 = 20;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn totals(proxy: &Proxy) -> Value {
    let r = proxy.admin_get("/api/snapshot");
    let snap: Value = serde_json::from_slice(&r.body).unwrap();
    snap["taps"]["webdis"]["totals"].clone()
}

/// Waits until the proxy has closed the connections of a finished round.
fn settle(pid: u32, baseline: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = fds(pid);
        if n <= baseline || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_long_run_leaks_nothing_and_loses_nothing() {
    let secs: u32 = std::env::var("PHASESCOPE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let rounds = (secs / ROUND_SECS).max(2);
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port());
    let mut proxy = Proxy::in_front_of(webdis.addr(), &["--access-log", "/dev/null"]);
    let pid = proxy.process().pid();
    assert_eq!(
        support::http_get(proxy.addr(), "/SET/soak/value").status,
        200
    );
    // The admin server and the first scrape allocate once; take the baseline after them,
    // once the connections of the requests above have closed (the count holds still).
    let _ = totals(&proxy);
    let mut fd_baseline = fds(pid);
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let now = fds(pid);
        if now == fd_baseline {
            break;
        }
        fd_baseline = now;
    }

    let mut completed = 0u64;
    let mut rss_after_first = 0;
    let mut rss = Vec::new();
    for round in 0..rounds {
        let url = proxy.url(if round % 2 == 0 {
            "/GET/soak"
        } else {
            "/INCR/counter"
        });
        let report = run_wrk(&url, ROUND_SECS, CONNECTIONS, 2);
        assert_eq!(report.non_2xx_3xx, 0, "round {round}: {}", report.output);
        assert_eq!(
            report.socket_errors, [0; 4],
            "round {round}: {}",
            report.output
        );
        completed += report.requests;
        let open = settle(pid, fd_baseline);
        assert!(
            open <= fd_baseline,
            "round {round}: {open} descriptors open, {fd_baseline} before"
        );
        let now = rss_kib(pid);
        if round == 0 {
            rss_after_first = now;
        }
        rss.push(now);
        eprintln!(
            "round {round}: {} requests, {open} fds, {now} KiB RSS",
            report.requests
        );
    }

    let t = totals(&proxy);
    let recorded = t["requests"].as_u64().unwrap() - 1; // the SET above
                                                        // wrk stops mid-request on each connection at the end of a round: those exchanges
                                                        // are cut on the client's side, so they may be recorded (response written, not read)
                                                        // or counted as client aborts, but never both, never lost.
    let cut = u64::from(rounds * CONNECTIONS);
    assert!(
        recorded >= completed && recorded <= completed + cut,
        "client completed {completed}, proxy recorded {recorded}"
    );
    let errors = &t["errors"];
    for (kind, n) in errors.as_object().unwrap() {
        let n = n.as_u64().unwrap();
        match kind.as_str() {
            "client_abort" => assert!(n <= cut, "{n} client aborts for {cut} cut requests"),
            // Webdis's late answers on reused descriptors, see docs/webdis.md.
            "unsolicited_response" => {}
            _ => assert_eq!(n, 0, "{kind} errors: {errors}"),
        }
    }
    let last = *rss.last().unwrap();
    assert!(
        last <= rss_after_first + 1024,
        "RSS grew from {rss_after_first} KiB to {last} KiB over {rounds} rounds: {rss:?}"
    );
    eprintln!(
        "soak: {rounds} rounds, {completed} requests completed, {recorded} recorded, fds {fd_baseline} → {}, RSS {rss_after_first} → {last} KiB, errors {errors}",
        fds(pid)
    );
    assert!(proxy.stop().success());
    drop(webdis);
}

//! `phasescope demo`: the one-command first run, non-interactively and until Ctrl-C.

mod support;

use std::fs;
use std::process::Command;
use std::time::Duration;

use support::{http_get, wait_for, Managed};

/// Every phase the demo's traffic produces: API calls, a POST with a body, a chunked
/// stream, a static file, a pipelining client (queue) and reconnecting clients (connect).
const PHASES: [&str; 11] = [
    "client_recv",
    "parse",
    "upstream_connect",
    "queue",
    "upstream_send",
    "upstream_wait",
    "upstream_recv",
    "response_parse",
    "write",
    "proxy_overhead",
    "total",
];

fn demo(args: &[&str], log: &std::path::Path) -> Managed {
    let mut command = Command::new(env!("CARGO_BIN_EXE_phasescope"));
    command.arg("demo").args(args).env_remove("RUST_LOG");
    Managed::spawn("phasescope demo", &mut command, log)
}

/// The count column of a phase's row in the report, if the row is there.
fn row_count(text: &str, phase: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut cols = line.split_whitespace();
        (cols.next()? == phase).then(|| cols.next()?.parse().ok())?
    })
}

#[test]
fn runs_to_completion_and_reports_every_phase() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("demo.log");
    let mut process = demo(&["--duration", "3", "--no-wait"], &log);
    assert!(
        wait_for(Duration::from_secs(90), || process.exited().is_some()),
        "the demo did not finish\n{}",
        process.log_tail()
    );
    let status = process.exited().unwrap();
    let text = fs::read_to_string(&log).unwrap();
    assert!(status.success(), "exit {status}\n{text}");
    for phase in PHASES {
        let count = row_count(&text, phase).unwrap_or_else(|| panic!("no {phase} row in\n{text}"));
        assert!(count > 0, "{phase} has no observations\n{text}");
    }
    // parse happens once per request, as does total.
    assert_eq!(
        row_count(&text, "parse"),
        row_count(&text, "total"),
        "{text}"
    );
    for route in ["/api/users", "/api/orders", "/api/report", "/static/app.js"] {
        assert!(text.contains(route), "no route {route} in\n{text}");
    }
    assert!(text.contains(", 0 client errors"), "{text}");
    assert!(
        text.contains("errors 0,"),
        "the proxy counted errors:\n{text}"
    );
    assert!(text.contains("live page   http://127.0.0.1:"), "{text}");
    assert!(!text.contains("Ctrl-C"), "--no-wait must not wait:\n{text}");
}

#[test]
fn keeps_the_live_page_up_until_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("demo.log");
    let mut process = demo(
        &[
            "--duration",
            "1",
            "--admin",
            "127.0.0.1:0",
            "--connections",
            "2",
            "--latency",
            "fixed:1ms",
        ],
        &log,
    );
    let mut text = String::new();
    assert!(
        wait_for(Duration::from_secs(60), || {
            text = fs::read_to_string(&log).unwrap_or_default();
            text.contains("press Ctrl-C")
        }),
        "the demo never got to waiting\n{}",
        process.log_tail()
    );
    let admin: std::net::SocketAddr = text
        .lines()
        .find_map(|line| line.strip_prefix("live page   http://")?.strip_suffix('/'))
        .unwrap_or_else(|| panic!("no live page URL in\n{text}"))
        .parse()
        .unwrap();
    let page = http_get(admin, "/");
    assert_eq!(page.status, 200);
    // The trickle of requests keeps the numbers moving after the report.
    let requests = |admin| {
        let snapshot: serde_json::Value =
            serde_json::from_slice(&http_get(admin, "/api/snapshot").body).unwrap();
        snapshot["taps"]["demo"]["totals"]["requests"]
            .as_u64()
            .unwrap()
    };
    let before = requests(admin);
    assert!(
        wait_for(Duration::from_secs(20), || requests(admin) > before),
        "no requests after the report"
    );
    process.signal(libc::SIGINT);
    assert!(
        wait_for(Duration::from_secs(20), || process.exited().is_some()),
        "Ctrl-C did not stop the demo\n{}",
        process.log_tail()
    );
    assert!(
        process.exited().unwrap().success(),
        "{}",
        process.log_tail()
    );
}

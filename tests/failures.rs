//! Failures first (docs/report.md, "Failures"): an upstream that refuses, resets, answers
//! garbage or never answers makes a report that leads with the failed exchanges by kind
//! and cause, keeps their phases apart from the answered ones, holds the critical
//! `upstream_errors` finding, and exits 1 under `--fail-on critical`; a working upstream
//! makes none of it. And clients: one that closes between exchanges (wrk at the end of a
//! run) is counted as a close, not an error; one that leaves mid-response is an abort.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use support::Proxy;

/// Requests each test sends: past the finding's minimum of 5 failures.
const REQUESTS: usize = 12;

/// A local address nothing listens on (bound, then closed).
fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

/// An upstream that runs `serve` on each connection, in a thread of its own.
fn upstream(serve: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            thread::spawn(move || serve(conn));
        }
    });
    addr
}

/// Reads until the request head's end (or the client's close).
fn read_head(conn: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads the request, then resets the connection (SO_LINGER 0 makes the close an RST).
fn resets(mut conn: TcpStream) {
    read_head(&mut conn);
    let _ = socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO));
}

/// Reads the request, then answers with something that is not HTTP.
fn garbage(mut conn: TcpStream) {
    read_head(&mut conn);
    let _ = conn.write_all(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n");
    thread::sleep(Duration::from_millis(200));
}

/// Reads the request, then says nothing until the proxy gives up.
fn stalls(mut conn: TcpStream) {
    read_head(&mut conn);
    let mut sink = [0u8; 64];
    while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
}

fn ok(_: &str) -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
}

/// A proxy in front of `upstream` whose response timeout is `response`.
fn proxy_with_response_timeout(upstream: SocketAddr, response: &str) -> (Proxy, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("failures.toml");
    std::fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n\n[tap.timeouts]\nresponse = \"{response}\"\n"
        ),
    )
    .unwrap();
    (Proxy::start(&["--config", config.to_str().unwrap()]), dir)
}

/// Sends `REQUESTS` requests, one per connection; the responses' bytes.
fn send_requests(proxy: &Proxy) -> Vec<Vec<u8>> {
    (0..REQUESTS)
        .map(|_| support::http_exchange(proxy.addr(), &support::get_request("/x")))
        .collect()
}

/// `phasescope report --from the proxy ARGS`: exit code, stdout, stderr.
fn report(proxy: &Proxy, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .arg("report")
        .args(["--from", &format!("http://{}", proxy.admin_addr())])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_report(proxy: &Proxy) -> Value {
    let (code, out, err) = report(proxy, &["--format", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn snapshot(proxy: &Proxy) -> Value {
    serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap()
}

/// The tap's window figure at `path` of the snapshot (0 when absent).
fn tap_figure(snap: &Value, path: &[&str]) -> u64 {
    let tap = snap["taps"].as_object().unwrap().values().next().unwrap();
    path.iter().fold(tap, |v, k| &v[*k]).as_u64().unwrap_or(0)
}

/// What every failing upstream's report must say: the failures by `kind` and `cause` in
/// the text headline and the JSON, the failed exchanges' table apart, the critical
/// finding naming `cause`, and `--fail-on critical` exiting 1 (0 without it).
fn assert_reported(proxy: &Proxy, kind: &str, cause: &str) {
    let failed = REQUESTS as u64;
    assert!(
        support::wait_for(Duration::from_secs(10), || {
            tap_figure(&snapshot(proxy), &["errors", kind]) >= failed
        }),
        "{kind} never reached {failed}: {}\n{}",
        snapshot(proxy)["taps"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()["errors"],
        proxy.log_tail()
    );
    let (code, text, err) = report(proxy, &[]);
    assert_eq!(code, 0, "without --fail-on the report exits 0: {err}");
    let headline = text
        .lines()
        .find(|l| l.trim_start().starts_with("failed "))
        .unwrap_or_else(|| panic!("no failures in the headline:\n{text}"));
    assert!(
        headline.contains(&format!("{kind} {failed} ({cause}")),
        "{headline}"
    );
    assert!(headline.contains("(100 %)"), "{headline}");
    assert!(
        text.contains("failed exchanges (the proxy's own answers"),
        "the failed exchanges' phases are a table of their own:\n{text}"
    );
    assert!(
        text.contains("critical upstream_errors"),
        "the finding is in the text:\n{text}"
    );

    let json = json_report(proxy);
    let all = &json["taps"][0]["all"];
    assert_eq!(all["failures"]["by_kind"][kind], failed, "{all}");
    assert_eq!(all["failures"]["failed"], failed);
    assert_eq!(all["failures"]["share"], 1.0);
    assert!(
        all["rows"].as_array().unwrap().is_empty(),
        "no exchange was answered, so no answered phase: {all}"
    );
    let failed_total = all["failures"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == "total")
        .unwrap_or_else(|| panic!("the failed exchanges have their total: {all}"));
    assert!(failed_total["count"].as_u64().unwrap() > 0);
    let finding = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "upstream_errors")
        .unwrap_or_else(|| panic!("no upstream_errors finding: {}", json["findings"]));
    assert_eq!(finding["severity"], "critical");
    assert!(
        finding["summary"].as_str().unwrap().contains(cause),
        "{finding}"
    );
    assert!(!finding["fix"].as_str().unwrap().is_empty());

    let (code, _, err) = report(proxy, &["--fail-on", "critical"]);
    assert_eq!(code, 1, "--fail-on critical exits 1: {err}");
    assert!(err.contains("critical upstream_errors"), "{err}");
}

#[test]
fn an_upstream_port_with_nothing_listening_is_reported_as_refused() {
    let addr = closed_port();
    let proxy = Proxy::in_front_of(addr, &[]);
    for got in send_requests(&proxy) {
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
        assert!(text.contains("refused the connection"), "{text}");
        assert!(text.contains("Connection: close"), "{text}");
    }
    assert_reported(&proxy, "upstream_connect", "connection refused");
    let json = json_report(&proxy);
    assert_eq!(
        json["taps"][0]["all"]["failures"]["connect"]["refused"],
        REQUESTS as u64
    );
    let (_, text, _) = report(&proxy, &[]);
    // The tap looks for the process behind the upstream's port by default: the inside
    // section says why it has nothing, instead of a line of zeros.
    let why = json["taps"][0]["no_process"]
        .as_str()
        .unwrap_or_else(|| panic!("no no_process in {}", json["taps"][0]));
    assert!(
        why.contains(&format!("no process listens on {addr}")),
        "{why}"
    );
    assert!(
        text.contains(&format!(
            "inside the upstream: no process listens on {addr}"
        )),
        "{text}"
    );
    assert!(!text.contains("per request 0.0 µs"), "{text}");
}

#[test]
fn an_upstream_that_resets_is_reported_as_closed_or_reset() {
    let proxy = Proxy::in_front_of(upstream(resets), &[]);
    for got in send_requests(&proxy) {
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
        assert!(
            text.contains("closed the connection before it answered"),
            "{text}"
        );
    }
    assert_reported(&proxy, "upstream_reset", "closed or reset");
}

#[test]
fn an_upstream_that_answers_garbage_is_reported_as_not_http() {
    let proxy = Proxy::in_front_of(upstream(garbage), &[]);
    for got in send_requests(&proxy) {
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
        assert!(text.contains("not HTTP/1.x"), "{text}");
    }
    assert_reported(&proxy, "bad_response", "not HTTP");
}

#[test]
fn an_upstream_that_never_answers_is_reported_as_timed_out() {
    let (proxy, _dir) = proxy_with_response_timeout(upstream(stalls), "200ms");
    // In parallel: twelve timeouts one after another would take as long as twelve.
    let sent: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let addr = proxy.addr();
            thread::spawn(move || support::http_exchange(addr, &support::get_request("/x")))
        })
        .collect();
    for got in sent {
        let got = got.join().unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 504 "), "{text}");
        assert!(text.contains("did not answer in time"), "{text}");
    }
    assert_reported(&proxy, "upstream_timeout", "no answer in time");
}

#[test]
fn a_working_upstream_shows_no_failure_and_passes_the_gate() {
    let proxy = Proxy::in_front_of(support::slow_upstream(Duration::ZERO, ok), &[]);
    for got in send_requests(&proxy) {
        assert!(got.starts_with(b"HTTP/1.1 200 "));
    }
    assert!(support::wait_for(Duration::from_secs(10), || {
        let json = json_report(&proxy);
        json["taps"][0]["all"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["phase"] == "total" && r["count"] == REQUESTS as u64)
    }));
    let (code, text, err) = report(&proxy, &["--fail-on", "critical"]);
    assert_eq!(code, 0, "{err}\n{text}");
    assert!(!text.contains("failed "), "{text}");
    assert!(
        text.contains(&format!("over {REQUESTS} requests")),
        "{text}"
    );
    let json = json_report(&proxy);
    let all = &json["taps"][0]["all"];
    assert_eq!(all["failures"]["failed"], 0, "{all}");
    assert!(all["failures"]["rows"].as_array().unwrap().is_empty());
    assert!(json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["id"] != "upstream_errors"));
}

#[test]
fn wrk_closing_its_connections_at_the_end_counts_closes_not_errors() {
    let wrk = support::require_tool("wrk");
    // A slow answer keeps every connection's request in flight when wrk stops.
    let proxy = Proxy::in_front_of(support::slow_upstream(Duration::from_millis(20), ok), &[]);
    const CONNECTIONS: u64 = 8;
    let out = Command::new(wrk)
        .args(["-t1", &format!("-c{CONNECTIONS}"), "-d1s"])
        .arg(proxy.url("/x"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        support::wait_for(Duration::from_secs(10), || {
            tap_figure(&snapshot(&proxy), &["client_closes"]) >= CONNECTIONS
        }),
        "wrk's closes were not counted: {}",
        snapshot(&proxy)["taps"]["webdis"]["totals"]
    );
    // Every client connection (wrk's, and the start-up check's) ended as a close.
    thread::sleep(Duration::from_millis(300));
    let snap = snapshot(&proxy);
    let tap = snap["taps"].as_object().unwrap().values().next().unwrap();
    assert_eq!(
        tap_figure(&snap, &["client_closes"]),
        tap_figure(&snap, &["totals", "connections", "client"]),
        "{}",
        tap["totals"]
    );
    for (kind, n) in tap["errors"].as_object().unwrap() {
        assert_eq!(n, 0, "{kind}: wrk's end is no error: {}", tap["errors"]);
    }
    let (code, text, err) = report(&proxy, &["--fail-on", "critical"]);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains("failed "), "{text}");
}

#[test]
fn a_client_that_leaves_mid_response_is_an_abort_not_a_failure() {
    // A response sent in two parts, 300 ms apart: the client leaves between them.
    let up = upstream(|mut conn| {
        read_head(&mut conn);
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nfirst half");
        thread::sleep(Duration::from_millis(300));
        let _ = conn.write_all(b"secondhalf");
        thread::sleep(Duration::from_millis(300));
    });
    let proxy = Proxy::in_front_of(up, &[]);
    let mut client = TcpStream::connect(proxy.addr()).unwrap();
    client.write_all(&support::get_request("/x")).unwrap();
    let mut first = [0u8; 16];
    client.read_exact(&mut first).unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"));
    socket2::SockRef::from(&client)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(client);
    assert!(
        support::wait_for(Duration::from_secs(10), || {
            tap_figure(&snapshot(&proxy), &["errors", "client_abort"]) == 1
        }),
        "the client's leaving was not counted as an abort: {}",
        snapshot(&proxy)["taps"]["webdis"]["errors"]
    );
    let snap = snapshot(&proxy);
    let tap = &snap["taps"]["webdis"];
    assert_eq!(
        tap_figure(&snap, &["client_closes"]),
        tap_figure(&snap, &["totals", "connections", "client"]) - 1,
        "every connection but the one that left closed normally: {}",
        tap["totals"]
    );
    let json = json_report(&proxy);
    let failures = &json["taps"][0]["all"]["failures"];
    assert_eq!(failures["client_aborts"], 1, "{failures}");
    assert_eq!(
        failures["failed"], 0,
        "an abort is not the server's failure"
    );
    let (code, text, _) = report(&proxy, &["--fail-on", "critical"]);
    assert_eq!(code, 0);
    assert!(text.contains("clients abandoned 1 in flight"), "{text}");
}

/// Serves `n` connections on `listener` (each answered 200 with `Connection: close`, so
/// the proxy connects anew for every request), then closes it: connects are refused.
fn serve_then_close(listener: TcpListener, n: usize) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for conn in listener.incoming().take(n) {
            let Ok(mut conn) = conn else { return };
            read_head(&mut conn);
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    })
}

#[test]
fn two_refused_connects_in_hundreds_of_requests_are_an_info_finding_with_their_count() {
    const OK: usize = 150;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = serve_then_close(listener, OK);
    let proxy = Proxy::in_front_of(addr, &[]);
    let send = |n: usize, want: &str| {
        for _ in 0..n {
            let got = support::http_exchange(proxy.addr(), &support::get_request("/x"));
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with(want), "{text}");
        }
    };
    send(OK, "HTTP/1.1 200 ");
    serving.join().unwrap();
    // Nothing listens for a moment (a restart): two requests find the port closed.
    send(2, "HTTP/1.1 502 ");
    let serving = serve_then_close(TcpListener::bind(addr).unwrap(), OK);
    send(OK, "HTTP/1.1 200 ");
    serving.join().unwrap();
    assert!(
        support::wait_for(Duration::from_secs(10), || {
            tap_figure(&snapshot(&proxy), &["connect_failures", "refused"]) == 2
        }),
        "the refused connects were not counted: {}",
        snapshot(&proxy)["taps"]
    );
    let json = json_report(&proxy);
    let finding = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "upstream_errors")
        .unwrap_or_else(|| panic!("a small share is named too: {}", json["findings"]));
    assert_eq!(finding["severity"], "info", "{finding}");
    let summary = finding["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!("(2 of {}: upstream_connect 2)", 2 * OK + 2))
            && summary.contains("connection refused 2 times"),
        "{summary}"
    );
    // Information does not fail a gate set at critical.
    let (code, text, err) = report(&proxy, &["--fail-on", "critical"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("info upstream_errors"), "{text}");
}

//! `phasescope probe` against upstreams whose time to first byte is known: one that grows
//! by 100 ns per head byte, one that does not grow at all; and real servers: the Amphp-like
//! PHP fixture and Webdis.

mod amp;
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::Value;

use amp::AmpServer;

/// An upstream on its own threads that answers each request exactly `fixed + per_byte ×
/// head length` after the request's first bytes arrived (see [`wait_until`]).
fn timed_upstream(fixed: Duration, per_byte_ns: u64) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            thread::spawn(move || serve(stream, fixed, per_byte_ns));
        }
    });
    addr
}

/// Returns at `due`, to within a microsecond or so. The last stretch is spun, because a
/// sleep wakes tens of microseconds late, and late by a varying amount. Only the last
/// stretch: a thread that spins for the whole wait is preempted more often the longer the
/// wait is, so on a busy machine its delays would grow with the head size and pass for a
/// steeper slope. Sleeping through the early part and spinning a fixed stretch keeps
/// the exposure the same for every size.
fn wait_until(due: Instant) {
    const SPIN: Duration = Duration::from_micros(200);
    if let Some(left) = due.checked_duration_since(Instant::now()) {
        if left > SPIN {
            thread::sleep(left - SPIN);
        }
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

fn serve(mut stream: TcpStream, fixed: Duration, per_byte_ns: u64) {
    stream.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        // The clock starts when the first byte is there to read, before any of it is
        // copied out: copying and scanning cost time per byte, which must come out of
        // the budget rather than add to it.
        match stream.peek(&mut [0u8; 1]) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let arrived = Instant::now();
        // The probe sends one head per write and waits for its answer, so a head is
        // complete when the bytes read so far end with the blank line: checking the end
        // costs the same whatever the size (a scan would not, in a debug build least of all).
        while !buf.ends_with(b"\r\n\r\n") {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let head_len = buf.len();
        wait_until(arrived + fixed + Duration::from_nanos(per_byte_ns * head_len as u64));
        buf.clear();
        if stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

/// Runs `phasescope probe --format json ARGS` and returns its report.
fn probe_json(target: &str, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["probe", "--target", target, "--format", "json"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "probe failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// `(value, low, high)` of an estimate in the report.
fn estimate(report: &Value, name: &str) -> (f64, f64, f64) {
    let e = &report["model"][name];
    let get = |k: &str| {
        e[k].as_f64()
            .unwrap_or_else(|| panic!("{name}.{k} is not a number in {report:#}"))
    };
    (get("value"), get("low"), get("high"))
}

fn assert_interval(report: &Value, name: &str) -> (f64, f64, f64) {
    let (value, low, high) = estimate(report, name);
    assert!(
        low.is_finite() && high.is_finite() && low <= value && value <= high && low < high,
        "{name}: {value} [{low}, {high}] is not an interval around its value"
    );
    (value, low, high)
}

#[test]
fn recovers_a_known_per_byte_cost() {
    let upstream = timed_upstream(Duration::from_micros(50), 100);
    let report = probe_json(
        &format!("http://{upstream}/"),
        &["--samples", "12", "--seed", "11", "--warmup", "20"],
    );
    let (b, low, high) = assert_interval(&report, "b_ns_per_byte");
    // ±25 % of the slope the upstream is scripted to: the probe's shuffled order and cell
    // medians (docs/probe.md) put the machine's load on every head size alike.
    assert!(
        (75.0..=125.0).contains(&b),
        "the upstream spends 100 ns per byte; the probe says {b} [{low}, {high}]\n{report:#}"
    );
    eprintln!("100 ns/byte upstream: b = {b:.2} ns/byte [{low:.2}, {high:.2}]");
    // Every sample answered, none lost.
    assert_eq!(report["failed"], 0, "{report:#}");
    assert_eq!(report["statuses"]["200"], report["requests"], "{report:#}");
    // The typical request's share is derived from the same fit.
    let share = report["typical"]["share"]["value"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{share}");
}

#[test]
fn an_upstream_without_size_dependence_gets_an_interval_around_zero() {
    let upstream = timed_upstream(Duration::from_micros(50), 0);
    let report = probe_json(
        &format!("http://{upstream}/"),
        &["--samples", "30", "--seed", "12", "--warmup", "20"],
    );
    // The upstream's own work does not grow with the head, but reading a longer head
    // costs the kernel and the upstream a little more, so the true slope is tiny rather
    // than exactly 0: the interval must reach the band of what is negligible here (1 % of
    // the 100 ns/byte `recovers_a_known_per_byte_cost` resolves), not exactly 0.
    let (b, low, high) = assert_interval(&report, "b_ns_per_byte");
    assert!(
        low <= 1.0 && -1.0 <= high,
        "no per-byte cost, yet the interval excludes the negligible band: {b} [{low}, {high}]\n{report:#}"
    );
    // Per field beyond its bytes: 1 % of the 50 µs fixed cost spread over the 24 fields
    // of the default grid's largest point is ~20 ns per field.
    let (c, c_low, c_high) = assert_interval(&report, "c_ns_per_header");
    assert!(
        c_low <= 20.0 && -20.0 <= c_high,
        "no per-field cost, yet the interval excludes the negligible band: {c} [{c_low}, {c_high}]\n{report:#}"
    );
    eprintln!("flat upstream: b = {b:.4} ns/byte [{low:.4}, {high:.4}], c = {c:.1} ns/field [{c_low:.1}, {c_high:.1}]");
}

#[test]
fn text_output_states_the_slope_the_floor_and_the_typical_request() {
    let upstream = timed_upstream(Duration::from_micros(20), 200);
    let output = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["probe", "--target", &format!("http://{upstream}/x")])
        .args(["--samples", "8", "--warmup", "5", "--typical-bytes", "1000"])
        .args(["--grid", "bytes=1k,2k,4k;headers=2,4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    for needle in [
        "b  per header byte",
        "c  per header field",
        "a  fixed",
        "TCP handshake",
        "minimal request",
        "typical request (1000 bytes, 8 header fields)",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    // The conclusion: the typical request's cost, or, where 8 samples a cell on a loaded
    // machine leave every interval across zero (a loaded full run: b [−41 ns, 296 ns]),
    // that no growth could be told from the noise. Either is the right sentence for its
    // intervals; none is a defect.
    assert!(
        text.contains("=> a typical 1000-byte request costs ~")
            || text.contains("=> no growth with request size could be told from the noise"),
        "no conclusion in:\n{text}"
    );
}

#[test]
fn a_bad_target_or_grid_is_a_usage_error() {
    for args in [
        vec!["--target", "https://127.0.0.1/"],
        vec!["--target", "http://127.0.0.1:1/", "--grid", "headers=1"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_phasescope"))
            .arg("probe")
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
    // A port nothing listens on: the probe fails, saying so.
    let port = support::free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["probe", "--target", &format!("http://127.0.0.1:{port}/")])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot connect"));
}

#[test]
fn probes_the_php_fixture() {
    let amp = AmpServer::start(&[]);
    let report = probe_json(&amp.url("/"), &["--samples", "12", "--seed", "13"]);
    let (b, low, high) = assert_interval(&report, "b_ns_per_byte");
    let (c, c_low, c_high) = assert_interval(&report, "c_ns_per_header");
    assert_eq!(report["failed"], 0, "{report:#}\n{}", amp.log_tail());
    assert_eq!(report["statuses"]["200"], report["requests"], "{report:#}");
    eprintln!(
        "PHP fixture: b = {b:.3} ns/byte [{low:.3}, {high:.3}], c = {c:.1} ns/field [{c_low:.1}, {c_high:.1}], a = {:.1} µs",
        report["model"]["a_ns"]["value"].as_f64().unwrap() / 1e3
    );
}

#[test]
fn probes_real_webdis() {
    let redis = support::RedisServer::start();
    let webdis = support::Webdis::start(redis.port());
    let report = probe_json(&webdis.url("/PING"), &["--samples", "12", "--seed", "14"]);
    let (b, low, high) = assert_interval(&report, "b_ns_per_byte");
    assert_eq!(report["failed"], 0, "{report:#}");
    assert_eq!(report["statuses"]["200"], report["requests"], "{report:#}");
    eprintln!("Webdis: b = {b:.3} ns/byte [{low:.3}, {high:.3}]");
}

/// Through phasescope: the probe takes the typical request from the tap (`--from`), its
/// own requests are recorded under the route `probe` and stay out of the head shapes it
/// reads, and `--repeat` fits each pass on its own.
#[test]
fn through_phasescope_the_typical_request_comes_from_the_tap_and_the_probe_stays_apart() {
    let redis = support::RedisServer::start();
    let webdis = support::Webdis::start(redis.port());
    let proxy = support::Proxy::in_front_of(webdis.addr(), &[]);
    let admin = format!("http://{}", proxy.admin_addr());
    // The real traffic: 25 heads of one known shape (5 fields).
    let head = b"GET /GET/k HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\nAccept: */*\r\nX-One: 1\r\nX-Two: 22\r\n\r\n";
    let mut conn = support::HttpConn::connect(proxy.addr());
    for _ in 0..25 {
        let answer = conn.exchange(head);
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    }
    let snapshot =
        || -> Value { serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap() };
    assert!(support::wait_for(Duration::from_secs(10), || {
        snapshot()["taps"]["webdis"]["request_heads"]["count"] == 25
    }));

    let report = probe_json(
        &proxy.url("/PING"),
        &[
            "--from",
            &admin,
            "--repeat",
            "2",
            "--samples",
            "4",
            "--warmup",
            "4",
            "--seed",
            "5",
            "--bootstrap",
            "100",
            "--grid",
            "bytes=512,2k;headers=2,6",
        ],
    );
    let typical = &report["typical"];
    assert_eq!(typical["bytes"], head.len(), "{typical}");
    assert_eq!(typical["headers"], 5, "{typical}");
    let source = typical["source"].as_str().unwrap();
    assert!(source.contains("25 request heads tap webdis"), "{source}");
    assert_eq!(
        report["passes"].as_array().map(Vec::len),
        Some(2),
        "{report:#}"
    );

    // The probe's exchanges are under `probe`; the heads the tap counts are still the 25.
    assert!(support::wait_for(Duration::from_secs(10), || {
        let snap = snapshot();
        let probe = snap["taps"]["webdis"]["phases"]["total"]["probe"]["count"]
            .as_u64()
            .unwrap_or(0);
        probe >= report["requests"].as_u64().unwrap()
    }));
    let snap = snapshot();
    let tap = &snap["taps"]["webdis"];
    assert_eq!(
        tap["request_heads"]["count"], 25,
        "{}",
        tap["request_heads"]
    );
    assert_eq!(tap["phases"]["total"]["GET"]["count"], 25);
    assert!(
        tap["phases"]["total"]["PING"].is_null(),
        "the probe's PINGs leaked into PING"
    );
}

#[test]
fn text_output_says_the_intervals_are_within_the_run_and_gives_the_spread_of_repeats() {
    let upstream = timed_upstream(Duration::from_micros(20), 100);
    let output = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["probe", "--target", &format!("http://{upstream}/x")])
        .args([
            "--samples",
            "6",
            "--warmup",
            "5",
            "--repeat",
            "3",
            "--bootstrap",
            "100",
        ])
        .args(["--grid", "bytes=1k,2k,4k;headers=2,4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    for needle in [
        "the intervals are within this run",
        "3 passes, one after another, each fitted on its own",
        "typical request (380 bytes, 8 header fields): the defaults",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    let spread = Regex::new(r"b  per header byte   ([0-9.]+) ns to ([0-9.]+) ns").unwrap();
    let c = spread
        .captures(&text)
        .unwrap_or_else(|| panic!("no spread of b in:\n{text}"));
    let (lo, hi): (f64, f64) = (c[1].parse().unwrap(), c[2].parse().unwrap());
    // Each pass sees the upstream's 100 ns per byte as a positive slope (how close each
    // comes is for a quiet machine; a busy one spreads them, which is the point).
    assert!(lo <= hi && lo > 0.0, "spread of b: {lo} to {hi}\n{text}");
}

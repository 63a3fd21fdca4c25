//! CPU per route, estimated from outside (docs/report.md, "CPU per route"), against
//! upstreams whose routes cost known CPU: the burn upstream's `/cpuN` routes burn N µs of
//! user time a request (measured by its own CPU clock, `/__truth`) on top of what every
//! request costs it (the common cost, measured in the same window: the process's CPU less
//! the burns, over the requests), and real Webdis, whose routes are measured one at a
//! time in the same test.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// One at a time within this binary: each loads the machine with its own server.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn snapshot(proxy: &Proxy) -> Value {
    serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap()
}

fn reset(proxy: &Proxy) {
    let raw = http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(parse_response(&raw).status == 200, "reset failed");
}

fn await_watched(proxy: &Proxy, pid: u32) {
    let found = wait_for(STARTUP_DEADLINE, || {
        snapshot(proxy)["taps"]["webdis"]["upstream"]["pid"].as_u64() == Some(u64::from(pid))
    });
    assert!(
        found,
        "the proxy never watched pid {pid}\n{}",
        proxy.log_tail()
    );
}

/// How the load picks each request's route.
#[derive(Clone, Copy)]
enum Mix {
    /// Weights drawn anew every second, one route at random taking most of the requests:
    /// the mix varies from slice to slice.
    Varying,
    /// Each connection strictly alternates the routes: every slice has the same mix.
    Alternating,
    /// Connection c asks for route `groups[c]` only, without a pause: groups of clients
    /// each on one route, as `wrk` on one path beside `ab` on another. The mix is steady:
    /// each route's rate is flat apart from noise.
    Groups(&'static [usize]),
}

/// Keep-alive GETs of `paths` on `connections` connections for `seconds`; each response
/// read whole by its Content-Length.
fn load(addr: SocketAddr, paths: &[String], seconds: f64, connections: usize, mix: Mix) -> u64 {
    let weights: Arc<Vec<AtomicU64>> = Arc::new(paths.iter().map(|_| AtomicU64::new(1)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mixer = {
        let (weights, stop) = (weights.clone(), stop.clone());
        thread::spawn(move || {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            while !stop.load(Ordering::Relaxed) {
                // One route, drawn at random, takes most of the requests of the next
                // second; the others share the rest at random.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let major = (x % weights.len() as u64) as usize;
                for (i, w) in weights.iter().enumerate() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let weight = if i == major {
                        400 + x % 400
                    } else {
                        1 + x % 100
                    };
                    w.store(weight, Ordering::Relaxed);
                }
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(20));
                }
            }
        })
    };
    let clients: Vec<_> = (0..connections)
        .map(|c| {
            let (weights, stop, done) = (weights.clone(), stop.clone(), done.clone());
            let paths = paths.to_vec();
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_nodelay(true).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut x = 0x2545_f491_4f6c_dd1du64 ^ (c as u64 + 1);
                let mut buf = vec![0u8; 4096];
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    let r = match mix {
                        Mix::Groups(groups) => groups[c],
                        Mix::Alternating => {
                            i += 1;
                            i % paths.len()
                        }
                        Mix::Varying => {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let total: u64 =
                                weights.iter().map(|w| w.load(Ordering::Relaxed)).sum();
                            let mut pick = x % total;
                            let mut r = 0;
                            for (j, w) in weights.iter().enumerate() {
                                let w = w.load(Ordering::Relaxed);
                                if pick < w {
                                    r = j;
                                    break;
                                }
                                pick -= w;
                            }
                            r
                        }
                    };
                    let req = format!("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", paths[r]);
                    s.write_all(req.as_bytes()).unwrap();
                    read_response(&mut s, &mut buf);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    mixer.join().unwrap();
    done.load(Ordering::Relaxed)
}

/// Reads one response whose body has a Content-Length.
fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) {
    let mut have = 0;
    loop {
        if have == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = s.read(&mut buf[have..]).unwrap();
        assert!(n > 0, "the connection closed mid-response");
        have += n;
        let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        if have >= end + 4 + len {
            assert_eq!(have, end + 4 + len, "more than one response");
            return;
        }
    }
}

/// `report --by route --format json` of a saved snapshot: route → its section.
fn report_routes(snap: &Value) -> Vec<Value> {
    report_routes_of(std::slice::from_ref(snap))
}

/// The same of several snapshots read as one (`--from` each: their slices appended).
fn report_routes_of(snaps: &[Value]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let mut report = Command::new(env!("CARGO_BIN_EXE_phasescope"));
    report.args([
        "report", "--by", "route", "--format", "json", "--tap", "webdis",
    ]);
    for (i, snap) in snaps.iter().enumerate() {
        let file = dir.path().join(format!("run{i}.json"));
        std::fs::write(&file, serde_json::to_vec(snap).unwrap()).unwrap();
        report.arg("--from").arg(&file);
    }
    let out = report.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["taps"][0]["routes"].as_array().unwrap().clone()
}

fn text_report(snap: &Value) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    std::fs::write(&file, serde_json::to_vec(snap).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["report", "--by", "route", "--tap", "webdis", "--from"])
        .arg(&file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The slices' totals: CPU seconds and exchanges per route name.
fn slice_totals(snap: &Value) -> (f64, Vec<(String, u64)>, usize) {
    let s = &snap["taps"]["webdis"]["upstream"]["slices"];
    let routes: Vec<String> = s["routes"]
        .as_array()
        .unwrap_or_else(|| panic!("no slices in {}", snap["taps"]["webdis"]["upstream"]))
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    let slices = s["slices"].as_array().unwrap();
    let cpu = slices
        .iter()
        .map(|x| x["cpu_seconds"].as_f64().unwrap())
        .sum();
    let counts = routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let n = slices
                .iter()
                .map(|x| x["exchanges"][i].as_u64().unwrap())
                .sum();
            (r.clone(), n)
        })
        .collect();
    (cpu, counts, slices.len())
}

/// The burn upstream's `/__routes`: per burn N, (requests, CPU ns from parse to written
/// answer).
fn route_truth(up: &BurnUpstream) -> Vec<(u32, u64, u64)> {
    let r = http_get(up.addr(), "/__routes");
    assert_eq!(r.status, 200, "burn-upstream /__routes");
    r.body_text()
        .lines()
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (v[0] as u32, v[1], v[2])
        })
        .collect()
}

/// The truth of each `/cpuN` route over a window, from `/__routes` read at its two ends
/// and the slices' CPU and requests: what its requests cost the server's threads from
/// parse to written answer (their own CPU clock: the burn, preemptions in it, the
/// write), plus the rest of the process's CPU (reading the requests, waking up), which
/// is common to every request and shared equally over them.
struct Truths {
    common_us: f64,
    /// Per burn: its requests and its truth in µs a request.
    routes: Vec<(u32, u64, f64)>,
}

impl Truths {
    fn of(
        before: &[(u32, u64, u64)],
        after: &[(u32, u64, u64)],
        burns: &[u32],
        cpu: f64,
        requests: u64,
    ) -> Truths {
        let inside = |burn: u32| {
            let at = |t: &[(u32, u64, u64)]| {
                t.iter()
                    .find(|x| x.0 == burn)
                    .map_or((0, 0), |x| (x.1, x.2))
            };
            let ((n0, ns0), (n1, ns1)) = (at(before), at(after));
            (n1 - n0, ns1 - ns0)
        };
        let inside_ns: u64 = burns.iter().map(|&b| inside(b).1).sum();
        let common_us = (cpu * 1e9 - inside_ns as f64) / requests as f64 / 1e3;
        let routes = burns
            .iter()
            .map(|&b| {
                let (n, ns) = inside(b);
                (b, n, common_us + ns as f64 / n.max(1) as f64 / 1e3)
            })
            .collect();
        Truths { common_us, routes }
    }

    /// A burn's requests and truth (µs a request).
    fn route(&self, burn: u32) -> (u64, f64) {
        self.routes
            .iter()
            .find(|r| r.0 == burn)
            .map_or((0, 0.0), |r| (r.1, r.2))
    }
}

fn interval(section: &Value) -> Option<(f64, f64, f64)> {
    let c = &section["cpu_per_request"];
    Some((
        c["estimate"].as_f64()?,
        c["low"].as_f64()?,
        c["high"].as_f64()?,
    ))
}

#[test]
fn routes_that_burn_known_cpu_are_told_apart() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const BURNS: [u32; 3] = [0, 100, 300];
    let mut up = BurnUpstream::start(0, 0);
    let proxy = Proxy::in_front_of(up.addr(), &[]);
    await_watched(&proxy, up.process().pid());
    let paths: Vec<String> = BURNS.iter().map(|b| format!("/cpu{b}")).collect();
    // Warm the connections' threads up, then start the window.
    load(proxy.addr(), &paths, 0.5, 2, Mix::Varying);
    thread::sleep(Duration::from_millis(300));
    reset(&proxy);
    let before = route_truth(&up);
    let served = load(proxy.addr(), &paths, 40.0, 2, Mix::Varying);
    // Let a slice close after the last request.
    thread::sleep(Duration::from_millis(600));
    let after = route_truth(&up);
    let snap = snapshot(&proxy);
    let (cpu, counts, slices) = slice_totals(&snap);
    let requests: u64 = counts.iter().map(|(_, n)| n).sum();
    assert!(
        requests * 10 >= served * 9,
        "{requests} in the slices, {served} served"
    );
    let truths = Truths::of(&before, &after, &BURNS, cpu, requests);
    let common_us = truths.common_us;
    let seconds: f64 = snap["taps"]["webdis"]["upstream"]["slices"]["slices"]
        .as_array()
        .map_or(0.0, |s| {
            s.iter().filter_map(|x| x["seconds"].as_f64()).sum()
        });
    let background_us = snap["route_cpu"]["webdis"]["background"]["high"]
        .as_f64()
        .unwrap_or(0.0)
        * seconds
        / requests as f64
        * 1e6;
    let sections = report_routes(&snap);
    eprintln!(
        "{slices} slices, {requests} requests, {cpu:.3} s of CPU; common cost {common_us:.1} µs a request; background {} ({background_us:.1} µs a request at its high end)",
        snap["route_cpu"]["webdis"]["background"]
    );
    eprintln!("{}", text_report(&snap));
    let mut estimates = Vec::new();
    for (&burn, path) in BURNS.iter().zip(&paths) {
        let route = path[1..].to_ascii_uppercase();
        let section = sections
            .iter()
            .find(|s| s["route"] == route.as_str())
            .unwrap_or_else(|| panic!("no route {route} in {sections:?}"));
        let (served_r, truth) = truths.route(burn);
        let (e, lo, hi) = interval(section)
            .unwrap_or_else(|| panic!("{route}: no estimate: {}", section["cpu_reason"]));
        let (e, lo, hi) = (e * 1e6, lo * 1e6, hi * 1e6);
        eprintln!(
            "{route}: truth {truth:.1} µs, estimate {e:.1} µs ({lo:.1}–{hi:.1}), {served_r} requests"
        );
        let tolerance = (0.15 * truth).max(10.0);
        assert!(
            (e - truth).abs() <= tolerance,
            "{route}: estimate {e:.1} µs, truth {truth:.1} µs ± {tolerance:.1}"
        );
        // The truth shares the process's common CPU (reading requests, waking up) out
        // equally over the requests; the fit takes out only what the server spends while
        // it serves nothing (its background, measured over idle slices: none in most runs
        // of this window), which no route's figure holds. So the interval must hold the
        // truth to the background's share of a request (at the high end of its interval),
        // and, added to it, to 3 % of the truth: the truth spreads the common CPU equally
        // while CPU that follows time on a busy machine (preemptions of a long burn) goes
        // with the routes that take the time, and the estimate reads the process's CPU
        // clock where the truth adds up the server's per-request thread clocks. Beside two
        // busy loops the routes read 27.0, 120.3 (116.6–123.9) and 326.8 µs against 23.7,
        // 124.5 and 327.6. (When the fit still estimated a background beside the routes it
        // took that CPU from them: 9.2, 113.7 and 298.6 µs against 23.9, 127.9 and 327.2.)
        let slack = background_us + 0.03 * truth;
        assert!(
            lo - slack <= truth && truth <= hi + slack,
            "{route}: interval {lo:.1}–{hi:.1} µs does not hold the truth {truth:.1} µs (± {slack:.1} µs)"
        );
        estimates.push((burn, e, truth, lo, hi));
    }
    // The gauge the scrapes refresh, over the last minute as of its last refresh (a few
    // seconds older than the report's window): an estimate of the same figure, inside
    // the report's interval.
    let metrics = proxy.admin_get("/metrics").body_text();
    for (&burn, &(_, e, _, lo, hi)) in BURNS.iter().zip(&estimates) {
        let series = format!(
            "phasescope_upstream_route_cpu_seconds{{tap=\"webdis\",route=\"CPU{burn}\",bound=\"estimate\"}} "
        );
        let value: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
            .trim()
            .parse()
            .unwrap();
        let value_us = value * 1e6;
        assert!(
            lo <= value_us && value_us <= hi,
            "{series}{value}, the report {e:.1} µs ({lo:.1}–{hi:.1})"
        );
    }
    // The differences between routes, against the truths' differences.
    for (i, j) in [(0, 1), (1, 2), (0, 2)] {
        let ((b0, e0, t0, ..), (b1, e1, t1, ..)) = (estimates[i], estimates[j]);
        let (got, truth) = (e1 - e0, t1 - t0);
        assert!(
            (got - truth).abs() <= 0.15 * truth,
            "CPU{b1} − CPU{b0}: {got:.1} µs, the truths differ by {truth:.1} µs ± 15 %"
        );
    }
}

/// Groups of clients each on one route without a pause, of uneven sizes: each route's rate
/// is flat apart from noise, so the slices cannot tell the routes apart (issue: the
/// 0/50/150 µs routes read heavy − light 240 µs, and none said `unknown`). Each route is
/// within 25 % of its truth, or `unknown` with its reason, or a figure whose own interval
/// is wider than ±25 % and holds the truth: never a confident wrong number.
#[test]
fn a_steady_mix_is_right_or_unknown() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const BURNS: [u32; 3] = [0, 50, 150];
    let mut up = BurnUpstream::start(0, 0);
    let proxy = Proxy::in_front_of(up.addr(), &[]);
    await_watched(&proxy, up.process().pid());
    let paths: Vec<String> = BURNS.iter().map(|b| format!("/cpu{b}")).collect();
    load(proxy.addr(), &paths, 0.5, 2, Mix::Varying);
    thread::sleep(Duration::from_millis(300));
    reset(&proxy);
    let before = route_truth(&up);
    // 10 s: about 40 slices, past the 32 that three routes and the background need.
    load(
        proxy.addr(),
        &paths,
        10.0,
        6,
        Mix::Groups(&[0, 1, 1, 2, 2, 2]),
    );
    thread::sleep(Duration::from_millis(600));
    let after = route_truth(&up);
    let snap = snapshot(&proxy);
    let (cpu, counts, slices) = slice_totals(&snap);
    let requests: u64 = counts.iter().map(|(_, n)| n).sum();
    let truths = Truths::of(&before, &after, &BURNS, cpu, requests);
    eprintln!(
        "{slices} slices, {requests} requests, {:.1} µs a request over all routes",
        cpu / requests as f64 * 1e6
    );
    eprintln!("{}", text_report(&snap));
    let sections = report_routes(&snap);
    for burn in BURNS {
        let route = format!("CPU{burn}");
        let section = sections
            .iter()
            .find(|s| s["route"] == route.as_str())
            .unwrap_or_else(|| panic!("no route {route} in {sections:?}"));
        let (served, truth) = truths.route(burn);
        match interval(section) {
            None => {
                let why = section["cpu_reason"].as_str().unwrap_or_default();
                eprintln!("{route}: truth {truth:.1} µs, {served} requests: unknown: {why}");
                assert!(
                    !why.is_empty(),
                    "{route}: unknown without a reason: {section}"
                );
            }
            Some((e, lo, hi)) => {
                let (e, lo, hi) = (e * 1e6, lo * 1e6, hi * 1e6);
                eprintln!("{route}: truth {truth:.1} µs, estimate {e:.1} µs ({lo:.1}–{hi:.1}), {served} requests");
                // Right within 25 %, or less sure than that by its own interval (wider
                // than ±25 %; the report gives none past ±50 %) and holding the truth.
                let right = (e - truth).abs() <= 0.25 * truth;
                let unsure = hi - e > 0.25 * e && lo <= truth && truth <= hi;
                assert!(
                    right || unsure,
                    "{route}: {e:.1} µs ({lo:.1}–{hi:.1}) from a steady mix, truth {truth:.1} µs ± 25 %"
                );
            }
        }
    }
}

#[test]
fn a_mix_that_never_varies_is_unknown_with_its_reason() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut up = BurnUpstream::start(0, 0);
    let proxy = Proxy::in_front_of(up.addr(), &[]);
    await_watched(&proxy, up.process().pid());
    let paths: Vec<String> = vec!["/cpu0".into(), "/cpu100".into()];
    reset(&proxy);
    // 8 s: about 32 slices, past the 24 that two routes and the background need before
    // the fit looks at the mix at all.
    load(proxy.addr(), &paths, 8.0, 1, Mix::Alternating);
    thread::sleep(Duration::from_millis(600));
    let snap = snapshot(&proxy);
    let sections = report_routes(&snap);
    for route in ["CPU0", "CPU100"] {
        let section = sections.iter().find(|s| s["route"] == route).unwrap();
        assert!(
            section["cpu_per_request"].is_null(),
            "{route}: a number from a mix that never varies: {section}"
        );
        let why = section["cpu_reason"].as_str().unwrap_or_default();
        assert!(why.contains("the mix never varies"), "{route}: {why}");
    }
    let text = text_report(&snap);
    assert!(
        text.contains("upstream CPU per request unknown: the mix never varies"),
        "{text}"
    );
}

/// Webdis's routes in a mix, each against its CPU per request loaded alone. On a shared
/// machine what a request costs moves as other work comes and goes (GET alone read 47.8
/// to 72.4 µs a request in four runs minutes apart), so the references and the mix are
/// taken in turns, four rounds of each route alone for 2 s then the mix for 10 s, and the
/// mix's windows read as one (`report --from` each: their slices appended).
#[test]
fn webdis_routes_against_each_route_alone() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let redis = RedisServer::start();
    let mut webdis = Webdis::start(redis.port());
    let proxy = Proxy::in_front_of(webdis.addr(), &[]);
    await_watched(&proxy, webdis.process().pid());
    let paths: Vec<String> = vec!["/GET/k".into(), "/SET/k/v".into(), "/PING".into()];
    load(proxy.addr(), &paths, 0.5, 2, Mix::Varying);
    // Per route: CPU seconds and requests alone, over the rounds.
    let mut alone = vec![(0.0, 0u64); paths.len()];
    let mut mixed = Vec::new();
    let window = |seconds: f64, which: &[String]| {
        thread::sleep(Duration::from_millis(300));
        reset(&proxy);
        load(proxy.addr(), which, seconds, 2, Mix::Varying);
        thread::sleep(Duration::from_millis(600));
        snapshot(&proxy)
    };
    for _round in 0..4 {
        for (path, sum) in paths.iter().zip(alone.iter_mut()) {
            let (cpu, counts, _) = slice_totals(&window(2.0, std::slice::from_ref(path)));
            sum.0 += cpu;
            sum.1 += counts.iter().map(|(_, n)| n).sum::<u64>();
        }
        mixed.push(window(10.0, &paths));
    }
    let sections = report_routes_of(&mixed);
    for (route, (cpu, requests)) in ["GET", "SET", "PING"].iter().zip(&alone) {
        let truth = cpu / *requests as f64 * 1e6;
        let section = sections
            .iter()
            .find(|s| s["route"] == *route)
            .unwrap_or_else(|| panic!("no route {route} in {sections:?}"));
        let (e, lo, hi) = interval(section)
            .unwrap_or_else(|| panic!("{route}: no estimate: {}", section["cpu_reason"]));
        let (e, lo, hi) = (e * 1e6, lo * 1e6, hi * 1e6);
        eprintln!("{route}: alone {truth:.1} µs a request ({requests} requests), estimate in the mix {e:.1} µs ({lo:.1}–{hi:.1})");
        assert!(
            (e - truth).abs() <= 0.2 * truth,
            "{route}: estimate {e:.1} µs, alone {truth:.1} µs ± 20 %"
        );
    }
}

/// A snapshot of tests/fixtures/snapshots/stacks.json whose webdis upstream has 40
/// slices made with GET costing 40 µs a request and SET `set_cost`, in a varying mix.
fn with_slices(set_cost: f64) -> Value {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/snapshots/stacks.json");
    let mut snap: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let slices: Vec<Value> = (0..40u64)
        .map(|i| {
            let (get, set) = (100 + (i * 37) % 200, 50 + (i * 53) % 150);
            serde_json::json!({
                "end_unix": 1000.0 + i as f64 * 0.25,
                "seconds": 0.25,
                // A few µs of noise: slices that fit exactly would give every resample
                // the same figure, which is no interval.
                "cpu_seconds": get as f64 * 40e-6 + set as f64 * set_cost
                    + ((i * 7) % 5) as f64 * 3e-6,
                "exchanges": [get, set],
            })
        })
        .collect();
    snap["taps"]["webdis"]["upstream"]["slices"] =
        serde_json::json!({ "routes": ["GET", "SET"], "slices": slices });
    snap
}

/// `compare` has a `cpu` row per route estimated on both sides, each side's estimate as
/// its value and both intervals in its note.
#[test]
fn compare_has_a_cpu_row_per_route_where_both_sides_have_it() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    std::fs::write(&a, serde_json::to_vec(&with_slices(120e-6)).unwrap()).unwrap();
    // B is another run: another process (the same pid over one window would be one
    // process serving both sides at once, its CPU measured once).
    let mut b_snap = with_slices(200e-6);
    b_snap["taps"]["webdis"]["upstream"]["pid"] = serde_json::json!(4243);
    std::fs::write(&b, serde_json::to_vec(&b_snap).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["compare", "--format", "json"])
        .arg(&a)
        .arg("--vs")
        .arg(&b)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let row = |route: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tap"] == "webdis" && r["phase"] == "cpu" && r["route"] == route)
            .unwrap_or_else(|| panic!("no cpu row of route {route} in {}", v["rows"]))
            .clone()
    };
    for (route, a_cost, b_cost) in [("GET", 40e-6, 40e-6), ("SET", 120e-6, 200e-6)] {
        let r = row(route);
        let (got_a, got_b) = (r["a"].as_f64().unwrap(), r["b"].as_f64().unwrap());
        assert!(
            (got_a - a_cost).abs() < 0.01 * a_cost && (got_b - b_cost).abs() < 0.01 * b_cost,
            "{route}: {r}"
        );
        assert!(
            r["note"]
                .as_str()
                .unwrap()
                .contains("CPU per route, estimated from the slices"),
            "{r}"
        );
    }
}

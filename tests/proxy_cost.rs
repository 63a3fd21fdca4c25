//! The proxy's own cost (docs/report.md, "The proxy's own cost"): phasescope's CPU per
//! request as the snapshot, the report and `/metrics` give it, against what
//! /proc/PID/stat gives over the same window; and `proxy_competes`, which holds when the
//! proxy and the upstream share cores and not once each has cores of its own.

mod support;

use std::process::Command;
use std::time::Duration;

use phasescope::snapshot::Snapshot;
use support::{require_tool, wait_for, BurnUpstream, Proxy};

const TAP: &str = "webdis";

fn snapshot(proxy: &Proxy) -> Snapshot {
    let r = proxy.admin_get("/api/snapshot");
    assert_eq!(r.status, 200, "{}", r.body_text());
    Snapshot::from_json(&r.body_text()).unwrap()
}

fn reset(proxy: &Proxy) {
    let raw = support::http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    assert_eq!(support::parse_response(&raw).status, 200);
}

/// utime + stime of `pid` from /proc/PID/stat, seconds.
fn proc_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's closing parenthesis: state is field 3, utime 14.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// `phasescope ARGS`, its standard output; it must succeed.
fn phasescope(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn requests(s: &Snapshot) -> u64 {
    s.taps[TAP].phases["total"].values().map(|x| x.count).sum()
}

fn watched(proxy: &Proxy, pid: u32) -> bool {
    wait_for(Duration::from_secs(10), || {
        let s = snapshot(proxy);
        s.proxy.is_some()
            && s.taps[TAP]
                .upstream
                .as_ref()
                .is_some_and(|u| u.pid == Some(pid))
    })
}

#[test]
fn the_proxys_cpu_per_request_is_what_proc_gives_over_the_same_window() {
    let mut up = BurnUpstream::start(0, 20);
    let upstream_pid = up.process().pid();
    let mut proxy = Proxy::in_front_of(up.addr(), &[]);
    let pid = proxy.process().pid();
    assert!(watched(&proxy, upstream_pid), "{}", proxy.log_tail());
    reset(&proxy);
    let before = proc_cpu(pid);
    let wrk = support::run_wrk(&proxy.url("/"), 4, 8, 2);
    assert_eq!(wrk.non_2xx_3xx, 0, "{}", wrk.output);
    let after = proc_cpu(pid);
    let s = snapshot(&proxy);
    let n = requests(&s) as f64;
    let p = s
        .proxy
        .as_ref()
        .expect("the snapshot has the proxy's own process");
    let ours = (p.cpu_user_seconds + p.cpu_system_seconds) / n;
    let theirs = (after - before) / n;
    eprintln!(
        "{n} requests: the proxy {:.2} µs of CPU per request (user {:.2} s, system {:.2} s), /proc {:.2} µs ({:.2} s); {:.2} of {} cores, machine busy {:.2} s",
        ours * 1e6,
        p.cpu_user_seconds,
        p.cpu_system_seconds,
        theirs * 1e6,
        after - before,
        p.cores_used(),
        p.cpus,
        p.machine_busy_seconds
    );
    assert!(
        after - before >= 0.5,
        "too little CPU to compare: {}",
        after - before
    );
    assert!(
        (ours - theirs).abs() <= 0.15 * theirs,
        "the proxy's CPU per request {ours} s, /proc/{pid}/stat {theirs} s"
    );
    assert!(p.machine_busy_seconds >= p.cpu_user_seconds + p.cpu_system_seconds - 0.05);
    assert!(p.cpus >= 1 && !p.cpus_allowed.is_empty(), "{p:?}");

    // The report gives the same per request, in its JSON and its text.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    std::fs::write(&file, proxy.admin_get("/api/snapshot").body_text()).unwrap();
    let out = phasescope(&[
        "report",
        "--from",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cost = &json["taps"][0]["proxy"];
    let reported = cost["cpu_user"].as_f64().unwrap() + cost["cpu_system"].as_f64().unwrap();
    assert!(
        (reported - theirs).abs() <= 0.15 * theirs,
        "the report's {reported} s, /proc {theirs} s: {cost}"
    );
    let text = phasescope(&["report", "--from", file.to_str().unwrap()]);
    assert!(text.contains("phasescope itself (pid "), "{text}");
    assert!(text.contains(" on CPU (user "), "{text}");
    let csv = phasescope(&[
        "report",
        "--from",
        file.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    let row = |what: &str| -> f64 {
        csv.lines()
            .find(|l| l.starts_with(&format!("{TAP},*,proxy.{what},")))
            .and_then(|l| l.split(',').nth(5))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no proxy.{what} row in\n{csv}"))
    };
    assert!(((row("cpu_user") + row("cpu_system")) - reported).abs() <= 1e-9 * reported);

    // /metrics has it, as counters that only grow.
    let metrics = proxy.admin_get("/metrics").body_text();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
    };
    let exported = value("phasescope_proxy_cpu_seconds_total{mode=\"user\"}")
        + value("phasescope_proxy_cpu_seconds_total{mode=\"system\"}");
    assert!(
        exported >= after - before - 0.05,
        "{exported} < {}",
        after - before
    );
    assert!(value("phasescope_machine_cpus") >= 1.0);
    assert!(value("phasescope_machine_cpu_busy_seconds_total") >= exported - 0.05);
    drop(up);
}

/// taskset -a -p -c CPUS PID: every thread of the process on those CPUs.
fn pin(pid: u32, cpus: &str) {
    let out = Command::new(require_tool("taskset"))
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_proxy_that_takes_the_upstreams_cores_is_found_competing_and_one_apart_is_not() {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if cpus < 2 {
        eprintln!("skipped: one CPU, nothing to pin apart");
        return;
    }
    for apart in [false, true] {
        let mut up = BurnUpstream::start(0, 20);
        let upstream_pid = up.process().pid();
        let mut proxy = Proxy::in_front_of(up.addr(), &[]);
        let pid = proxy.process().pid();
        assert!(watched(&proxy, upstream_pid), "{}", proxy.log_tail());
        if apart {
            pin(pid, "0");
            pin(upstream_pid, "1");
        }
        // The watcher reads the upstream's affinity at each read (every second).
        std::thread::sleep(Duration::from_millis(1500));
        reset(&proxy);
        let wrk = support::run_wrk(&proxy.url("/"), 4, 16, 2);
        assert_eq!(wrk.non_2xx_3xx, 0, "{}", wrk.output);
        let s = snapshot(&proxy);
        let p = s.proxy.as_ref().unwrap();
        let u = s.taps[TAP].upstream.as_ref().unwrap();
        let found: Vec<_> = s
            .findings
            .iter()
            .filter(|f| f.id == "proxy_competes")
            .collect();
        eprintln!(
            "apart {apart}: the proxy on {:?}, {:.2} cores, {:.0} % of the machine's busy {:.2} s; upstream on {:?}, runqueue {:.3} s; found {:?}",
            p.cpus_allowed,
            p.cores_used(),
            100.0 * p.share_of_machine().unwrap_or(0.0),
            p.machine_busy_seconds,
            u.cpus_allowed,
            u.runqueue_seconds,
            found.iter().map(|f| (&f.summary, f.impact.seconds_per_request)).collect::<Vec<_>>()
        );
        if apart {
            assert_eq!(p.shares_cores_with(u), Some(false), "{p:?} {u:?}");
            assert!(found.is_empty(), "pinned apart: {found:?}");
            continue;
        }
        assert_eq!(p.shares_cores_with(u), Some(true), "{p:?} {u:?}");
        // Under wrk the proxy is a large part of what the cores do; the rule's thresholds,
        // as the test measured them, decide.
        let large = p.share_of_machine().unwrap_or(0.0) >= 0.2 && p.cores_used() >= 0.1;
        assert!(large, "the proxy did too little to compete: {p:?}");
        let [f] = found[..] else {
            panic!("one proxy_competes, got {:?}", s.findings)
        };
        // Its impact: the upstream's wait for a CPU per request, the proxy's part of it.
        let n = requests(&s) as f64;
        let others = (p.machine_busy_seconds - (u.cpu_user_seconds + u.cpu_system_seconds))
            .max(p.cpu_user_seconds + p.cpu_system_seconds);
        let want = u.runqueue_seconds / n * (p.cpu_user_seconds + p.cpu_system_seconds) / others;
        assert!(
            (f.impact.seconds_per_request - want).abs() <= 1e-9 + 1e-6 * want,
            "impact {} s, the proxy's part of the upstream's wait {want} s",
            f.impact.seconds_per_request
        );
        assert!(f.fix.contains("cores of its own"), "{}", f.fix);
        drop(up);
    }
}

/// CPU per request of `traffic` (or of the whole window without it) over `n` requests.
fn per_request(t: phasescope::snapshot::Traffic, n: f64) -> f64 {
    t.cpu() / n
}

#[test]
fn figures_per_request_are_read_over_the_seconds_with_traffic_not_the_idle_after() {
    // 3 s of load, then 10 s without a request in which the live page polls the admin
    // API ten times a second (the proxy's CPU, not its tap's traffic): per request, the
    // proxy's and the upstream's CPU after the idle tail must read as they did at the
    // end of the load, the reference measured in the same run.
    let mut up = BurnUpstream::start(0, 100);
    let upstream_pid = up.process().pid();
    let proxy = Proxy::in_front_of(up.addr(), &[]);
    assert!(watched(&proxy, upstream_pid), "{}", proxy.log_tail());
    reset(&proxy);
    let wrk = support::run_wrk(&proxy.url("/"), 3, 2, 1);
    assert_eq!(wrk.non_2xx_3xx, 0, "{}", wrk.output);
    let loaded = snapshot(&proxy);
    let idle_until = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < idle_until {
        let _ = proxy.admin_get("/api/snapshot");
        std::thread::sleep(Duration::from_millis(100));
    }
    let later = snapshot(&proxy);
    let n = requests(&loaded) as f64;
    assert_eq!(requests(&later) as f64, n, "no request after the load");
    let (p0, p1) = (loaded.proxy.clone().unwrap(), later.proxy.clone().unwrap());
    let u0 = loaded.taps[TAP].upstream.clone().unwrap();
    let u1 = later.taps[TAP].upstream.clone().unwrap();
    let (t0, t1) = (
        p1.traffic.expect("the proxy's traffic"),
        u1.traffic.expect("the upstream's traffic"),
    );
    let proxy_loaded = per_request(p0.work(), n);
    let proxy_later = per_request(t0, n);
    let proxy_whole = p1.cpu() / n;
    let upstream_loaded = per_request(u0.work(), n);
    let upstream_later = per_request(t1, n);
    let upstream_whole = (u1.cpu_user_seconds + u1.cpu_system_seconds) / n;
    eprintln!(
        "{n} requests; the proxy per request: {:.2} µs under load, {:.2} µs after {:.1} s idle over its {:.1} s with traffic ({:.2} µs over the whole {:.1} s), {:.3} cores with traffic; the upstream: {:.2} µs, {:.2} µs over {:.1} s with traffic ({:.2} µs over {:.1} s)",
        proxy_loaded * 1e6,
        proxy_later * 1e6,
        p1.watched_seconds - p0.watched_seconds,
        t0.seconds,
        proxy_whole * 1e6,
        p1.watched_seconds,
        t0.cores_used(),
        upstream_loaded * 1e6,
        upstream_later * 1e6,
        t1.seconds,
        upstream_whole * 1e6,
        u1.watched_seconds,
    );
    assert!(n >= 1000.0, "too few requests to compare: {n}");
    assert!(
        t0.seconds < p1.watched_seconds - 8.0 && t0.seconds >= 2.5,
        "the proxy's traffic {} s of {} s watched",
        t0.seconds,
        p1.watched_seconds
    );
    assert!(
        t1.seconds < u1.watched_seconds - 8.0 && t1.seconds >= 2.5,
        "the upstream's traffic {} s of {} s watched",
        t1.seconds,
        u1.watched_seconds
    );
    assert!(
        (proxy_later - proxy_loaded).abs() <= 0.1 * proxy_loaded,
        "the proxy: {proxy_later} s per request after the idle tail, {proxy_loaded} s under load"
    );
    assert!(
        (upstream_later - upstream_loaded).abs() <= 0.1 * upstream_loaded,
        "the upstream: {upstream_later} s per request after the idle tail, {upstream_loaded} s under load"
    );
    // Cores: over the seconds with traffic, not spread over the idle ones.
    assert!(
        t0.cores_used() >= 0.7 * p0.work().cores_used(),
        "{:?} against {:?}",
        t0,
        p0.work()
    );

    // The report says how long the window held traffic and gives the same figures.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    std::fs::write(&file, serde_json::to_string(&later).unwrap()).unwrap();
    let text = phasescope(&["report", "--from", file.to_str().unwrap()]);
    let line = |start: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in\n{text}"))
            .to_owned()
    };
    assert!(
        line("phasescope itself").contains(" s with traffic)"),
        "{text}"
    );
    assert!(line("inside ").contains(" s with traffic"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&phasescope(&[
        "report",
        "--from",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]))
    .unwrap();
    let cost = &json["taps"][0]["proxy"];
    let reported = cost["cpu_user"].as_f64().unwrap() + cost["cpu_system"].as_f64().unwrap();
    assert!(
        (reported - proxy_later).abs() <= 1e-9 + 1e-6 * proxy_later,
        "{cost}"
    );
    drop(up);
}

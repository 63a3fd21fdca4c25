//! `profile = "on-demand"`: no perf event open until asked, sampling for the seconds
//! asked, and the admin call guarded as `/api/reset` is. The proxy's own descriptors are
//! the truth of what is open (/proc/PID/fd links to `anon_inode:[perf_event]`).

mod support;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{http_exchange, parse_response, wait_for, BurnUpstream, Proxy, Response, IO_TIMEOUT};

const TOKEN: &str = "on-demand-token";

/// The proxy's open perf events.
fn perf_events(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| fs::read_link(e.path()).ok())
                .filter(|l| l.to_string_lossy().contains("perf_event"))
                .count()
        })
        .unwrap_or(0)
}

fn admin(proxy: &Proxy, method: &str, path: &str, headers: &str) -> Response {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    parse_response(&http_exchange(proxy.admin_addr(), req.as_bytes()))
}

fn snapshot(proxy: &Proxy) -> Value {
    let r = admin(
        proxy,
        "GET",
        "/api/snapshot",
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    serde_json::from_str(&r.body_text()).unwrap_or_default()
}

/// A keep-alive client through the proxy until `stop`.
fn client(addr: SocketAddr, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            s.write_all(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n").unwrap();
            let mut got = Vec::new();
            while !got.ends_with(b"\r\n\r\nok") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "closed");
                got.extend_from_slice(&buf[..n]);
            }
        }
    })
}

/// A config whose one tap, in front of `upstream`, samples on demand, written in `dir`.
fn on_demand_config(dir: &std::path::Path, upstream: std::net::SocketAddr) -> std::path::PathBuf {
    let config = dir.join("on-demand.toml");
    fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"webdis\"\nlisten = \"127.0.0.1:1\"\nupstream = \"{upstream}\"\n\
             [tap.process]\nprofile = \"on-demand\"\ninterval = \"250ms\"\n"
        ),
    )
    .unwrap();
    config
}

#[test]
fn nothing_is_sampled_until_asked_then_for_the_seconds_asked() {
    let mut burn = BurnUpstream::start(30, 70);
    let upstream_pid = u64::from(burn.process().pid());
    let dir = tempfile::tempdir().unwrap();
    let config = on_demand_config(dir.path(), burn.addr());
    let mut proxy = Proxy::in_front_of(
        burn.addr(),
        &["--config", config.to_str().unwrap(), "--admin-token", TOKEN],
    );
    let pid = proxy.process().pid();
    assert!(
        wait_for(Duration::from_secs(30), || snapshot(&proxy)["taps"]
            ["webdis"]["upstream"]["pid"]
            .as_u64()
            == Some(upstream_pid)),
        "never watched\n{}",
        proxy.log_tail()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load = client(proxy.addr(), stop.clone());
    thread::sleep(Duration::from_secs(1));
    assert_eq!(
        perf_events(pid),
        0,
        "a perf event open before any was asked for"
    );

    // Guarded as /api/reset: the token, then a JSON content type (no cross-site form).
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let json = "Content-Type: application/json\r\n";
    let path = "/api/profile?seconds=3";
    assert_eq!(admin(&proxy, "POST", path, json).status, 401, "no token");
    assert_eq!(
        admin(&proxy, "POST", path, &bearer).status,
        403,
        "a form post"
    );
    let cross = format!("{bearer}{json}Origin: https://evil.example\r\n");
    assert_eq!(
        admin(&proxy, "POST", path, &cross).status,
        403,
        "cross-site"
    );
    assert_eq!(admin(&proxy, "GET", path, &bearer).status, 405, "GET");
    let both = format!("{bearer}{json}");
    let bad = admin(&proxy, "POST", "/api/profile?seconds=0", &both);
    assert_eq!(bad.status, 400, "{}", bad.body_text());
    thread::sleep(Duration::from_millis(600));
    assert_eq!(perf_events(pid), 0, "a refused call opened events");

    let asked = Instant::now();
    let ok = admin(&proxy, "POST", path, &both);
    assert_eq!(ok.status, 200, "{}", ok.body_text());
    assert!(
        wait_for(Duration::from_secs(5), || perf_events(pid) > 0),
        "no perf event opened once asked\n{}",
        proxy.log_tail()
    );
    assert!(
        wait_for(Duration::from_secs(15), || perf_events(pid) == 0),
        "the events stayed open"
    );
    let open_for = asked.elapsed().as_secs_f64();
    thread::sleep(Duration::from_millis(600));
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();

    let u = &snapshot(&proxy)["taps"]["webdis"]["upstream"];
    let samples: u64 = u["samples"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_u64)
        .sum();
    let sampled = u["sampled_seconds"].as_f64().unwrap_or(f64::NAN);
    let cpu = u["sampled_cpu_seconds"].as_f64().unwrap_or(f64::NAN);
    let watched = u["watched_seconds"].as_f64().unwrap_or(f64::NAN);
    let covered = samples as f64 / u["frequency_hz"].as_f64().unwrap() / cpu;
    eprintln!(
        "events open {open_for:.2} s; sampled {sampled:.2} s of {watched:.2} s; {samples} samples, {:.0} % of the {cpu:.2} s of CPU meanwhile",
        covered * 100.0
    );
    assert_eq!(u["on_demand"], true, "{u}");
    assert!(
        (2.5..=6.0).contains(&open_for),
        "events open {open_for:.2} s for 3 asked"
    );
    assert!(
        (2.5..=5.0).contains(&sampled),
        "sampled {sampled:.2} s for 3 asked"
    );
    assert!(
        sampled < watched - 1.0,
        "the window holds unsampled time: {watched:.2} s"
    );
    // The samples stand for the sampled part's CPU, not the whole window's.
    assert!(
        covered > 0.6 && covered < 1.3,
        "{covered:.2} of the sampled CPU"
    );
}

/// `phasescope profile --from URL --seconds N`: asks, waits, and reports the window with
/// the exports `report` writes; the report says which part of the window was sampled. The
/// admin server has a token: the command sends `PHASESCOPE_ADMIN_TOKEN`, and without it
/// says what to set.
#[test]
fn the_profile_command_samples_then_reports_with_its_exports() {
    let mut burn = BurnUpstream::start(30, 70);
    let upstream_pid = u64::from(burn.process().pid());
    let dir = tempfile::tempdir().unwrap();
    let config = on_demand_config(dir.path(), burn.addr());
    let proxy = Proxy::in_front_of(
        burn.addr(),
        &["--config", config.to_str().unwrap(), "--admin-token", TOKEN],
    );
    let profile = |token: Option<&str>, extra: &[&std::ffi::OsStr]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_phasescope"));
        c.args(["profile", "--seconds", "2", "--format", "json", "--from"])
            .arg(format!("http://{}", proxy.admin_addr()))
            .args(extra)
            .env_remove("PHASESCOPE_ADMIN_TOKEN");
        if let Some(token) = token {
            c.env("PHASESCOPE_ADMIN_TOKEN", token);
        }
        c.output().unwrap()
    };
    let refused = profile(None, &[]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "without the token: {said}");
    assert!(
        said.contains("401") && said.contains("set PHASESCOPE_ADMIN_TOKEN"),
        "{said}"
    );
    assert!(
        wait_for(Duration::from_secs(30), || snapshot(&proxy)["taps"]
            ["webdis"]["upstream"]["pid"]
            .as_u64()
            == Some(upstream_pid)),
        "never watched\n{}",
        proxy.log_tail()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load = client(proxy.addr(), stop.clone());
    let folded = dir.path().join("cpu.folded");
    let out = profile(Some(TOKEN), &["--folded".as_ref(), folded.as_os_str()]);
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("sampling webdis for 2 s"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let coverage = &report["taps"][0]["inside"]["coverage"];
    let sampled = coverage["sampled_seconds"].as_f64().unwrap_or(f64::NAN);
    assert!(
        (1.5..=3.5).contains(&sampled),
        "sampled {sampled} s for 2: {coverage}"
    );
    assert!(coverage["samples"].as_u64().unwrap_or(0) > 0, "{coverage}");
    let stacks = fs::read_to_string(&folded).unwrap_or_default();
    assert!(stacks.contains("backend_query"), "{stacks}");
}

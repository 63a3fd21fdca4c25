//! The paired designs of `phasescope bench`, `--design interleave` (the default) and
//! `--design duet`, against two CPU-bound upstreams with the same calibration
//! (tests/fixtures/burn-upstream.c): two identical ones are never `different` on the
//! primary question; one that burns 5 % more CPU per request comes out `different`
//! (slower) within 28 s of load: interleaved, in `total`'s mean (each server has the
//! machine on its slices, so latency carries the whole difference); in a duet, in CPU per
//! request (the `cpu` row; sharing the cores, the duet's latency differs by 1–4 %).
//! With `--until-mde` a paired design runs until its mde reaches a target or
//! `--max-duration` passes.

mod support;

use std::process::Command;

use serde_json::Value;
use support::BurnUpstream;

/// The lock tests/bench.rs takes for its measuring tests: two benches at once on two
/// cores would measure each other.
struct Serial(#[allow(dead_code)] std::fs::File);

fn serial() -> Serial {
    use std::os::fd::AsRawFd;
    let path = std::env::temp_dir().join("phasescope-bench-tests.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: flock on a descriptor this process owns; released when the file closes.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", path.display());
    Serial(file)
}

/// A burn upstream of `backend_us` per request, and its calibration (iterations per µs).
fn calibrated(backend_us: u32) -> (BurnUpstream, String) {
    let mut up = BurnUpstream::start(0, backend_us);
    let log = up.process().log_tail();
    let rate = log
        .split_whitespace()
        .zip(log.split_whitespace().skip(1))
        .find(|(_, unit)| unit.starts_with("iterations/us"))
        .map(|(n, _)| n.to_owned())
        .unwrap_or_else(|| panic!("no calibration in the upstream's log: {log}"));
    (up, rate)
}

/// One with `backend_us`, burning with the calibration `rate` of another.
fn like(rate: &str, backend_us: u32) -> BurnUpstream {
    BurnUpstream::start_with(0, backend_us, |c| {
        c.env("BURN_ITERATIONS_PER_US", rate);
    })
}

/// A bench of `design` with 28 s of load (as 7 runs × 2 s a side would take), in JSON.
fn paired(design: &str, a: &BurnUpstream, b: &BurnUpstream) -> Value {
    let out = bench_design(
        design,
        a,
        b,
        &["--runs", "7", "--duration", "2s", "--format", "json"],
    );
    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("not JSON ({e})"))
}

fn duet(a: &BurnUpstream, b: &BurnUpstream) -> Value {
    paired("duet", a, b)
}

/// `phasescope bench --design duet` of `a` against `b` with `extra`: its standard output.
fn bench(a: &BurnUpstream, b: &BurnUpstream, extra: &[&str]) -> Vec<u8> {
    bench_design("duet", a, b, extra)
}

fn bench_design(design: &str, a: &BurnUpstream, b: &BurnUpstream, extra: &[&str]) -> Vec<u8> {
    let out = Command::new(support::release_phasescope())
        .args(["bench", "--design", design])
        .args(["--warmup", "1s", "--connections", "40"])
        .args(extra)
        .args(["--a", &a.addr().to_string(), "--b", &b.addr().to_string()])
        .env_remove("PHASESCOPE_CONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", out.status);
    out.stdout
}

/// The row of `phase` (`total`, `cpu` …) and `statistic` of tap `a`.
fn row<'v>(v: &'v Value, phase: &str, statistic: &str) -> &'v Value {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tap"] == "a" && r["phase"] == phase && r["statistic"] == statistic)
        .unwrap_or_else(|| panic!("no {phase} {statistic} row: {v:#}"))
}

/// Each server's own burns per request since `before` (its `/__truth`), in µs.
fn burns_since(up: &BurnUpstream, before: &support::BurnTruth) -> f64 {
    let after = up.truth();
    let ns = (after.parser_ns + after.backend_ns) - (before.parser_ns + before.backend_ns);
    ns as f64 / 1e3 / (after.requests - before.requests).max(1) as f64
}

/// `row`'s change lies within half to one and a half times `truth`, the servers' own
/// ratio of their burns over the same bench, less one.
fn assert_carries_the_burns(row: &Value, truth: f64, what: &str) {
    let change = row["change"].as_f64().unwrap();
    assert!(
        change >= 0.5 * truth && change <= 1.5 * truth,
        "{what} {:+.2} %, the burns {:+.2} %",
        change * 100.0,
        truth * 100.0
    );
}

fn total_mean(v: &Value) -> &Value {
    row(v, "total", "mean")
}

/// Not yet reached on the shared 2-core machine (load average 25 while it was written):
/// the duet's `total` mean came out +1.0 % [−2.1, +4.2] and +4.4 % with an mde of 4.5 %,
/// and, with the windows cut in one step, +5.2 % [+1.1, +9.4] with an mde of 5.8 % at
/// load average 23: `unknown`, where it must be `different`; docs/compare.md has the
/// figures.
#[test]
#[ignore = "sharing the cores, a duet's latency carries 20–85 % of a CPU difference; the interleave (the default) is asked it"]
fn a_server_that_burns_5_percent_more_cpu_is_slower_in_a_duet() {
    let _serial = serial();
    let (a, rate) = calibrated(1000);
    let b = like(&rate, 1050);
    let v = duet(&a, &b);
    let row = total_mean(&v);
    println!("5 % more CPU: {row}");
    assert_eq!(row["method"], "paired", "{row:#}");
    assert_eq!(row["primary"], true, "{row:#}");
    assert_eq!(
        (row["verdict"].as_str(), row["direction"].as_str()),
        (Some("different"), Some("slower")),
        "{row:#}"
    );
}

/// The same 5 % pair, judged by what a request costs each server's CPU: the duet's `cpu`
/// row (thread-time per request, paired windows) is `different` (slower), and its change
/// agrees with the servers' own burns. Thread-time against thread-time: a thread waiting
/// for a CPU accrues none, so the machine's load does not move it as it moves latency.
/// The bound on the change is relative to the burns' own ratio, measured in the same run:
/// at least half of it (the proxy-side costs of a request, the same on both sides, dilute
/// it) and at most half again.
#[test]
fn a_server_that_burns_5_percent_more_cpu_costs_more_cpu_per_request_in_a_duet() {
    let _serial = serial();
    let (a, rate) = calibrated(1000);
    let b = like(&rate, 1050);
    let before = [a.truth(), b.truth()];
    let v = duet(&a, &b);
    let truth = burns_since(&b, &before[1]) / burns_since(&a, &before[0]) - 1.0;
    let cpu = row(&v, "cpu", "per_request");
    println!(
        "5 % more CPU, the cpu row: {cpu}\nthe burns: {:+.2} %",
        truth * 100.0
    );
    assert_eq!(cpu["method"], "paired", "{cpu:#}");
    assert_eq!(
        (cpu["verdict"].as_str(), cpu["direction"].as_str()),
        (Some("different"), Some("slower")),
        "{cpu:#}"
    );
    assert_carries_the_burns(cpu, truth, "CPU per request");
}

#[test]
fn identical_servers_are_never_different_in_a_duet() {
    identical_servers_are_never_different("duet");
}

#[test]
fn identical_servers_are_never_different_when_interleaved() {
    identical_servers_are_never_different("interleave");
}

fn identical_servers_are_never_different(design: &str) {
    let _serial = serial();
    let (a, rate) = calibrated(1000);
    let b = like(&rate, 1000);
    let v = paired(design, &a, &b);
    for r in v["rows"].as_array().unwrap() {
        if r["primary"] == true || r["phase"] == "cpu" {
            assert_ne!(r["verdict"], "different", "{design}: {r:#}");
        }
    }
    println!("identical, {design}: {}", total_mean(&v));
    println!(
        "identical, {design}, the cpu row: {}",
        row(&v, "cpu", "per_request")
    );
}

/// The interleave gives each server all the connections and the whole machine on its
/// slices, so a server that burns 5 % more CPU per request answers about 5 % later:
/// `total`'s mean, the primary row, is `different` (slower). The bound on the change is
/// relative to the servers' own burns, measured in the same run (`/__truth`): at least
/// half of their ratio (the proxy's and the generator's share of a request's latency,
/// the same on both sides, dilutes it) and at most half again.
///
/// A power claim, tested as one: `different` (slower) needs the interval wholly beyond
/// +2 %, and at an mde of 3–4 % (this machine with two busy loops beside it) a true +5 %
/// is seen in about nine benches of ten (once, loaded: +3.3 % [+0.3, +6.3], mde 4.2 %). An
/// `unknown` gets one more bench, independent of the first; a design without the power
/// (the duet's latency, 20–85 % of the difference) fails both.
#[test]
fn a_server_that_burns_5_percent_more_cpu_is_slower_when_interleaved() {
    let _serial = serial();
    let (a, rate) = calibrated(1000);
    let b = like(&rate, 1050);
    let mut tried = Vec::new();
    for _ in 0..2 {
        let before = [a.truth(), b.truth()];
        let v = paired("interleave", &a, &b);
        let truth = burns_since(&b, &before[1]) / burns_since(&a, &before[0]) - 1.0;
        let total = total_mean(&v).clone();
        println!(
            "5 % more CPU, interleaved: {total}\nthe burns: {:+.2} %",
            truth * 100.0
        );
        assert_eq!(total["method"], "paired", "{total:#}");
        assert_eq!(total["primary"], true, "{total:#}");
        if total["verdict"] == "different" {
            assert!(
                total["mde"].as_f64().unwrap() <= 0.05,
                "the interleave's mde: {total:#}"
            );
            assert_eq!(total["direction"], "slower", "{total:#}");
            assert_carries_the_burns(&total, truth, "total's mean");
            return;
        }
        tried.push(total);
    }
    panic!("not `different` (slower) in two benches: {tried:#?}");
}

/// `--until-mde` works the same for the interleave: its windows are four slices, A B B A
/// then B A A B, and it stops only after both kinds were taken as often (an even count of
/// windows of 1 s: each side had each place in them as often).
#[test]
fn until_mde_stops_the_interleave_once_the_target_is_reached() {
    let text = interleave_until_mde("30", "60s");
    assert!(text.contains("until mde 30.0 %: reached,"), "{text}");
    assert!(
        text.contains("in slices of 0.25 s A B B A B A A B"),
        "{text}"
    );
    let seconds = interleaved_seconds(&text);
    let windows = seconds.round() as u64;
    assert!(
        (seconds - windows as f64).abs() < 1e-6 && windows.is_multiple_of(2),
        "{seconds} s of windows of 1 s: not as many A B B A as B A A B: {text}"
    );
}

/// An interleave that `--max-duration` ends takes the windows that make whole pairs, A B
/// B A with B A A B: 5 s holds five windows of 1 s, and the bench measures four.
#[test]
fn the_interleave_ends_on_as_many_abba_as_baab_windows() {
    let text = interleave_until_mde("0.001", "5s");
    assert!(text.contains("until mde 0.0 %: not reached,"), "{text}");
    assert_eq!(interleaved_seconds(&text), 4.0, "{text}");
}

/// The report of an interleave of two identical servers with `--until-mde target
/// --max-duration max`.
fn interleave_until_mde(target: &str, max: &str) -> String {
    let _serial = serial();
    let (a, rate) = calibrated(300);
    let b = like(&rate, 300);
    let out = bench_design(
        "interleave",
        &a,
        &b,
        &["--until-mde", target, "--max-duration", max],
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// The seconds of windows an interleave's report header says it measured.
fn interleaved_seconds(text: &str) -> f64 {
    text.split(" connections, ")
        .nth(1)
        .and_then(|rest| rest.split(" s in slices").next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no measured seconds in the header: {text}"))
}

/// `--until-mde` stops the duet once the primary rows can detect the target, well before
/// `--max-duration`: a target of 30 % is reached in seconds even on a loaded machine
/// (the duet's mde was 4.5 % after 28 s at load average 25).
#[test]
fn until_mde_stops_the_duet_once_the_target_is_reached() {
    let _serial = serial();
    let (a, rate) = calibrated(300);
    let b = like(&rate, 300);
    let out = bench(
        &a,
        &b,
        &[
            "--until-mde",
            "30",
            "--max-duration",
            "60s",
            "--format",
            "json",
        ],
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    let until = &v["until_mde"];
    assert_eq!(until["reached"], true, "{until:#}");
    let mde = until["mde"].as_f64().unwrap();
    assert!(mde <= 0.30, "{until:#}");
    // The primary rows' mde in the comparison printed is the one the duet stopped on.
    let largest = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["primary"] == true)
        .map(|r| r["mde"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!((largest - mde).abs() < 1e-9, "rows {largest}, until {mde}");
    let seconds = v["duration"].as_f64().unwrap();
    assert!(
        seconds < 60.0,
        "the duet ran its whole --max-duration: {until:#}"
    );
    assert_eq!(until["seconds"].as_f64(), Some(seconds));
}

/// A target no duet of three seconds can reach ends at `--max-duration`, and the report
/// says it was not reached and what was.
#[test]
fn until_mde_says_when_max_duration_came_first() {
    let _serial = serial();
    let (a, rate) = calibrated(300);
    let b = like(&rate, 300);
    let out = bench(&a, &b, &["--until-mde", "0.001", "--max-duration", "3s"]);
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("until mde 0.0 %: not reached,")
            && text.contains("when --max-duration 3 s passed"),
        "{text}"
    );
    assert!(text.contains("3 s in windows of 0.25 s"), "{text}");
}

/// The bench watches both servers' processes: its note sets their CPU per request side
/// by side. Against each server's own measurement of its burns (its threads' CPU clocks
/// around each call, `/__truth`, over the whole bench with its warm-up): the figure is at
/// least the burn and at most the burn plus what a request costs besides (reading,
/// writing: tens of µs). Thread CPU time against thread CPU time: load does not move it.
#[test]
fn a_duet_sets_both_servers_cpu_per_request_side_by_side() {
    let _serial = serial();
    let (a, rate) = calibrated(300);
    let b = like(&rate, 600);
    let before = [a.truth(), b.truth()];
    let out = bench(
        &a,
        &b,
        &["--runs", "2", "--duration", "2s", "--format", "json"],
    );
    let truth: Vec<f64> = [(&a, &before[0]), (&b, &before[1])]
        .into_iter()
        .map(|(up, before)| burns_since(up, before))
        .collect();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    let note = notes
        .iter()
        .find(|n| n.starts_with("inside the upstream of tap a "))
        .unwrap_or_else(|| panic!("no note on the servers' CPU: {notes:#?}"));
    let figures = note
        .split("CPU per request ")
        .nth(1)
        .and_then(|rest| rest.split(" (").next())
        .unwrap_or_else(|| panic!("{note}"));
    let (x, y) = figures
        .split_once(" → ")
        .unwrap_or_else(|| panic!("{note}"));
    // The report's unit rule: µs below 1 ms, ms above.
    let us = |s: &str| match s.strip_suffix(" ms") {
        Some(ms) => ms.parse::<f64>().unwrap() * 1e3,
        None => s.trim_end_matches(" µs").parse::<f64>().unwrap(),
    };
    println!("{note}\nthe servers' own burns: {truth:?} µs a request");
    for (side, measured, burn) in [("A", us(x), truth[0]), ("B", us(y), truth[1])] {
        assert!(
            measured >= 0.95 * burn && measured <= burn + 100.0,
            "{side}: {measured} µs a request, its burns {burn:.1} µs: {note}"
        );
    }
}

/// The CPU list of thread `tid` of `pid` (its `Cpus_allowed_list`), if it still runs.
fn allowed(pid: u32, tid: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_owned())
}

/// Every thread's CPU list of `pid`.
fn allowed_all(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| allowed(pid, e.file_name().to_str()?))
                .collect()
        })
        .unwrap_or_default()
}

/// A bench with `--cpus 0:1:0-1` and `extra`, its output piped.
fn pinned_bench(a: &BurnUpstream, b: &BurnUpstream, extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["bench", "--cpus", "0:1:0-1"])
        .args([
            "--warmup",
            "500ms",
            "--connections",
            "8",
            "--format",
            "json",
        ])
        .args(extra)
        .args(["--a", &a.addr().to_string(), "--b", &b.addr().to_string()])
        .env_remove("PHASESCOPE_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (10 s at most: the bench pins before its warm-up) until every thread of `pa` is
/// on CPU 0 and every one of `pb` on CPU 1, read from /proc; how many threads each has.
fn wait_pinned(pa: u32, pb: u32) -> Option<(usize, usize)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (ta, tb) = (allowed_all(pa), allowed_all(pb));
        if !ta.is_empty() && ta.iter().all(|c| c == "0") && tb.iter().all(|c| c == "1") {
            return Some((ta.len(), tb.len()));
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Every thread of `pid` is on `cpus` (a /proc list, the main thread's before the bench).
fn all_on(pid: u32, cpus: &Option<String>) -> bool {
    allowed_all(pid).iter().all(|c| Some(c) == cpus.as_ref())
}

/// `--cpus 0:1:0-1`: while the bench runs, every thread of A is on CPU 0 and every one of
/// B on CPU 1 (read from /proc, not from the bench); the report says so; afterwards every
/// thread of each server is back on the CPUs its main thread had, also when the bench is
/// stopped by SIGINT. A CPU that does not exist is a clear error before any load, and
/// leaves the servers as they were.
#[test]
fn cpus_pins_each_server_for_the_bench_and_sets_them_back() {
    let _serial = serial();
    if std::thread::available_parallelism().map_or(0, |n| n.get()) < 2 {
        println!("SKIPPED: --cpus 0:1:… needs two CPUs");
        return;
    }
    let (mut a, rate) = calibrated(200);
    let mut b = like(&rate, 200);
    let (pa, pb) = (a.process().pid(), b.process().pid());
    let before = (allowed(pa, &pa.to_string()), allowed(pb, &pb.to_string()));
    let child = pinned_bench(&a, &b, &["--runs", "2", "--duration", "1s"]);
    let pinned = wait_pinned(pa, pb);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", out.status);
    let (ta, tb) = pinned.unwrap_or_else(|| {
        panic!(
            "never pinned: A {:?}, B {:?}",
            allowed_all(pa),
            allowed_all(pb)
        )
    });
    println!("pinned {ta} threads of A on CPU 0, {tb} of B on CPU 1");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["cpus"],
        serde_json::json!({"a": [0], "b": [1], "load": [0, 1]}),
        "{v:#}"
    );
    assert!(total_mean(&v)["verdict"].is_string(), "{v:#}");
    let after = (allowed(pa, &pa.to_string()), allowed(pb, &pb.to_string()));
    assert_eq!(after, before, "the servers' main threads set back");
    assert!(
        all_on(pa, &before.0) && all_on(pb, &before.1),
        "every thread set back: A {:?}, B {:?}, before {before:?}",
        allowed_all(pa),
        allowed_all(pb)
    );

    // Stopped halfway by the user: the servers do not stay pinned.
    let child = pinned_bench(&a, &b, &["--runs", "10", "--duration", "2s"]);
    assert!(wait_pinned(pa, pb).is_some(), "never pinned");
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: a signal to the child this test started and has not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(
        all_on(pa, &before.0) && all_on(pb, &before.1),
        "set back after SIGINT: A {:?}, B {:?}, before {before:?}",
        allowed_all(pa),
        allowed_all(pb)
    );

    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args([
            "bench",
            "--cpus",
            "0:1:1000",
            "--runs",
            "1",
            "--duration",
            "1s",
        ])
        .args(["--a", &a.addr().to_string(), "--b", &b.addr().to_string()])
        .env_remove("PHASESCOPE_CONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("CPU [1000]"), "{err}");
    let after = (allowed(pa, &pa.to_string()), allowed(pb, &pb.to_string()));
    assert_eq!(after, before, "a failed --cpus leaves the servers alone");
}

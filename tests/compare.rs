//! `phasescope compare`: the same distribution gives "no detectable difference" (and does
//! so at about the advertised rate), a slower upstream gives "slower" for upstream_wait and
//! not for parse, both on synthetic runs recorded through the metrics registry and on
//! real runs through the proxy.

mod report_support;
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use phasescope::config::Protocol;
use phasescope::metrics::Snapshot;
use phasescope::phase::Phase;
use phasescope::report::{compare, CompareOptions, Verdict};
use report_support::{
    phasescope, phasescope_ok, synthetic, write_snapshot, PhaseSpec, SlowUpstream, TapSpec,
};
use serde_json::Value;
use support::{wait_for, HttpConn, Proxy};

/// One synthetic run: `n` exchanges of route GET, upstream_wait around `wait_us`.
fn run(seed: u64, n: usize, wait_us: f64) -> Snapshot {
    let phases: [PhaseSpec; 4] = [
        (Phase::ClientRecv, 3_000.0, 0.3),
        (Phase::Parse, 500.0, 0.25),
        (Phase::UpstreamWait, wait_us * 1_000.0, 0.3),
        (Phase::Write, 5_000.0, 0.3),
    ];
    synthetic(
        seed,
        &[TapSpec {
            name: "web",
            protocol: Protocol::Http,
            routes: &[("GET", n, &phases)],
        }],
    )
}

fn save(dir: &Path, name: &str, snap: &Snapshot) -> String {
    let p = dir.join(name);
    write_snapshot(snap, &p);
    p.display().to_string()
}

fn verdicts(c: &phasescope::report::Comparison) -> Vec<(String, Verdict)> {
    c.rows
        .iter()
        .map(|r| (r.phase.clone(), r.verdict))
        .collect()
}

fn verdict_of(v: &Value, phase: &str) -> String {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == phase)
        .unwrap_or_else(|| panic!("no {phase} row in {v}"))["verdict"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn compare_json(a: &[&str], b: &[&str], extra: &[&str]) -> Value {
    let mut args = vec!["compare"];
    args.extend_from_slice(a);
    args.push("--vs");
    args.extend_from_slice(b);
    args.extend_from_slice(&["--format", "json"]);
    args.extend_from_slice(extra);
    serde_json::from_str(&phasescope_ok(&args, 0)).unwrap()
}

#[test]
fn two_runs_from_the_same_distribution_show_no_detectable_difference() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(dir.path(), "a.json", &run(11, 3000, 100.0));
    let b = save(dir.path(), "b.json", &run(12, 3000, 100.0));
    let v = compare_json(&[&a], &[&b], &[]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        5,
        "client_recv, parse, upstream_wait, write, total"
    );
    for r in rows {
        assert_eq!(r["verdict"], "no_detectable_difference", "{r}");
        assert_eq!(r["method"], "resampling");
        // the interval is reported and brackets the estimate
        let m = &r["mean"];
        assert!(m["low"].as_f64().unwrap() <= m["change"].as_f64().unwrap());
        assert!(m["change"].as_f64().unwrap() <= m["high"].as_f64().unwrap());
    }
    assert_eq!(v["intervals"], 15);
    // Reproducible: the seed fixes the intervals.
    assert_eq!(compare_json(&[&a], &[&b], &[]), v);
}

/// The claim behind the verdicts: with the same distribution on both sides, a table
/// shows any difference at all in at most α of the comparisons (here 5 %). Forty pairs
/// of small runs; a broken method (no Bonferroni, a too-narrow bootstrap) flags far more.
#[test]
fn false_alarms_stay_rare_over_many_identical_pairs() {
    let opts = CompareOptions {
        resamples: 300,
        ..CompareOptions::default()
    };
    let mut alarms = 0;
    for pair in 0..40u64 {
        let a = [run(1000 + 2 * pair, 400, 100.0)];
        let b = [run(1001 + 2 * pair, 400, 100.0)];
        let c = compare(&a, &b, vec!["a".into()], vec!["b".into()], &opts).unwrap();
        if c.rows
            .iter()
            .any(|r| r.verdict != Verdict::NoDetectableDifference)
        {
            alarms += 1;
        }
    }
    // Expected ≤ 2 of 40; 5 would already be improbable (binomial tail < 1 %).
    assert!(
        alarms <= 4,
        "{alarms} of 40 identical pairs flagged a difference"
    );
}

#[test]
fn a_slower_upstream_is_slower_in_upstream_wait_and_total_not_in_parse() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(dir.path(), "a.json", &run(21, 2000, 100.0));
    let b = save(dir.path(), "b.json", &run(22, 2000, 120.0));
    let v = compare_json(&[&a], &[&b], &[]);
    assert_eq!(verdict_of(&v, "upstream_wait"), "slower");
    assert_eq!(verdict_of(&v, "total"), "slower");
    assert_eq!(verdict_of(&v, "parse"), "no_detectable_difference");
    let wait = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == "upstream_wait")
        .unwrap();
    let change = wait["mean"]["change"].as_f64().unwrap();
    assert!((0.12..0.28).contains(&change), "about +20 %: {change}");
    // The other way round it is faster.
    let back = compare_json(&[&b], &[&a], &[]);
    assert_eq!(verdict_of(&back, "upstream_wait"), "faster");

    // Text output names the verdicts.
    let text = phasescope_ok(&["compare", &a, "--vs", &b], 0);
    assert!(
        text.contains("slower") && text.contains("no detectable difference"),
        "{text}"
    );
    assert!(text.contains("bootstrap"), "the method is stated:\n{text}");
}

#[test]
fn several_runs_per_side_use_between_run_variation() {
    let dir = tempfile::tempdir().unwrap();
    let names = |prefix: &str, seeds: &[u64], wait: f64| -> Vec<String> {
        seeds
            .iter()
            .map(|&s| save(dir.path(), &format!("{prefix}{s}.json"), &run(s, 800, wait)))
            .collect()
    };
    let a = names("a", &[31, 32, 33], 100.0);
    let same = names("s", &[34, 35, 36], 100.0);
    let slow = names("b", &[37, 38, 39], 120.0);
    let v = compare_json(&strs(&a), &strs(&same), &[]);
    for r in v["rows"].as_array().unwrap() {
        assert_eq!(r["method"], "runs", "{r}");
        assert_eq!(r["verdict"], "no_detectable_difference", "{r}");
        assert_eq!(
            (r["runs_a"].as_u64(), r["runs_b"].as_u64()),
            (Some(3), Some(3))
        );
    }
    let v = compare_json(&strs(&a), &strs(&slow), &[]);
    assert_eq!(verdict_of(&v, "upstream_wait"), "slower");
    assert_eq!(verdict_of(&v, "parse"), "no_detectable_difference");
    assert!(v["notes"][0].as_str().unwrap().contains("Welch"));
}

#[test]
fn in_process_and_binary_agree_and_missing_series_are_named() {
    let mut b = run(42, 500, 100.0);
    let extra = run(43, 500, 100.0);
    // A phase only B has: a series absent on one side is reported, not compared.
    let queue = extra.taps["web"].phases["write"].clone();
    b.taps
        .get_mut("web")
        .unwrap()
        .phases
        .insert("queue".into(), queue);
    let a = run(41, 500, 100.0);
    let c = compare(
        &[a],
        &[b],
        vec!["a".into()],
        vec!["b".into()],
        &CompareOptions::default(),
    )
    .unwrap();
    let v = verdicts(&c);
    assert!(v.contains(&("queue".to_owned(), Verdict::OnlyInB)), "{v:?}");
    // Bonferroni's k: 5 series × mean and p50; the absent series does not count, nor do
    // p99s of 500 exchanges (too few beyond the 99th percentile).
    assert_eq!(c.intervals, 10);
    assert!(c.rows.iter().all(|r| r.p99.is_none()));
    // Too few exchanges on a side: no verdict either way.
    let tiny = compare(
        &[run(1, 10, 100.0)],
        &[run(2, 10, 300.0)],
        vec![],
        vec![],
        &CompareOptions::default(),
    )
    .unwrap();
    assert!(tiny
        .rows
        .iter()
        .all(|r| r.verdict == Verdict::NoDetectableDifference && r.note.is_some()));
}

#[test]
fn fail_if_slower_sets_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(dir.path(), "a.json", &run(51, 2000, 100.0));
    let b = save(dir.path(), "b.json", &run(52, 2000, 120.0));
    let same = save(dir.path(), "s.json", &run(53, 2000, 100.0));
    // total is ~18 % slower here: over a 5 % limit, under a 50 % one.
    let out = phasescope(&["compare", &a, "--vs", &b, "--fail-if-slower", "5"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL: web/GET/total"));
    phasescope_ok(&["compare", &a, "--vs", &b, "--fail-if-slower", "50"], 0);
    phasescope_ok(&["compare", &a, "--vs", &same, "--fail-if-slower", "1"], 0);
    // Only the phases asked for are checked.
    phasescope_ok(
        &[
            "compare",
            &a,
            "--vs",
            &b,
            "--fail-if-slower",
            "5",
            "--fail-phase",
            "parse",
        ],
        0,
    );
    let out = phasescope(&[
        "compare",
        &a,
        "--vs",
        &b,
        "--fail-if-slower",
        "5",
        "--fail-phase",
        "all",
    ]);
    assert_eq!(out.status.code(), Some(1));
    // Unreadable input is 2, never mistaken for a regression.
    let out = phasescope(&["compare", "/no/such.json", "--vs", &b]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn every_compare_format_parses() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(dir.path(), "a.json", &run(61, 500, 100.0));
    let b = save(dir.path(), "b.json", &run(62, 500, 120.0));
    let csv = phasescope_ok(&["compare", &a, "--vs", &b, "--format", "csv"], 0);
    let mut lines = csv.lines();
    let header = lines.next().unwrap().split(',').count();
    let mut n = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), header, "{l}");
        for v in &f[8..18] {
            v.parse::<f64>().unwrap_or_else(|_| panic!("{v} in {l}"));
        }
        // p99 is not compared from 500 exchanges: its fields are empty
        assert!(f[18..23].iter().all(|v| v.is_empty()), "{l}");
        n += 1;
    }
    assert_eq!(n, 5);
    let md = phasescope_ok(&["compare", &a, "--vs", &b, "--format", "markdown"], 0);
    let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(table.len(), 2 + 5);
    let cols = table[0].matches(" | ").count();
    assert!(table[1].chars().all(|c| "|-:".contains(c)));
    for r in &table[2..] {
        assert_eq!(r.matches(" | ").count(), cols, "{r}");
    }
}

// ---------------------------------------------------------------------------------------
// Live: the real proxy, an upstream that answers in 10 ms (A) or 12 ms (B)
// ---------------------------------------------------------------------------------------

fn snapshot_count(proxy: &Proxy) -> u64 {
    let body = proxy.admin_get("/api/snapshot").body_text();
    let snap = Snapshot::from_json(&body).unwrap();
    snap.taps
        .values()
        .filter_map(|t| t.phases.get("total"))
        .flat_map(|r| r.values())
        .map(|s| s.count)
        .sum()
}

fn live_run(proxy: &Proxy, requests: u64, out: &Path) {
    let mut conn = HttpConn::connect(proxy.addr());
    for _ in 0..requests {
        let r = conn.exchange(b"GET /GET/key HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert!(r.starts_with(b"HTTP/1.1 200"));
    }
    assert!(
        wait_for(Duration::from_secs(10), || snapshot_count(proxy)
            == requests),
        "the snapshot never held {requests} exchanges"
    );
    let url = format!("http://{}", proxy.admin_addr());
    let status = phasescope(&[
        "snapshot",
        "--from",
        &url,
        "-o",
        out.to_str().unwrap(),
        "--reset",
    ]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
}

#[test]
fn live_a_20_percent_slower_upstream_is_slower_in_upstream_wait_not_in_parse() {
    let upstream = SlowUpstream::start(Duration::from_millis(10));
    let proxy = Proxy::in_front_of(upstream.addr, &[]);
    let dir = tempfile::tempdir().unwrap();
    // Warm up, then start clean.
    live_run(&proxy, 10, &dir.path().join("warmup.json"));
    // A B B A A B: a drift over time (a warming cache, a neighbour's load) falls on both.
    let mut a: Vec<PathBuf> = Vec::new();
    let mut b: Vec<PathBuf> = Vec::new();
    for (i, side) in "ABBAAB".chars().enumerate() {
        let slow = side == 'B';
        upstream.set_delay(Duration::from_millis(if slow { 12 } else { 10 }));
        let file = dir.path().join(format!("{i}-{side}.json"));
        live_run(&proxy, 100, &file);
        if slow {
            b.push(file)
        } else {
            a.push(file)
        }
    }
    let s = |v: &[PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
    };
    let (a, b) = (s(&a), s(&b));

    // Several runs per side: between-run variation.
    let v = compare_json(&strs(&a), &strs(&b), &[]);
    assert_eq!(verdict_of(&v, "upstream_wait"), "slower", "{v:#}");
    assert_ne!(verdict_of(&v, "parse"), "slower", "{v:#}");
    let wait = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == "upstream_wait")
        .unwrap();
    let change = wait["mean"]["change"].as_f64().unwrap();
    // 12 ms against 10 ms of sleep, plus the same small overhead on both sides
    assert!((0.1..0.3).contains(&change), "{change}");

    // One run per side: resampling from the histograms still sees the wait.
    let one = compare_json(&[&a[0]], &[&b[0]], &[]);
    assert_eq!(verdict_of(&one, "upstream_wait"), "slower", "{one:#}");
}

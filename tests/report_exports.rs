//! `phasescope report --pprof`, `--flamegraph` and `--folded` on a snapshot with call
//! stacks: the profile read back by the real `go tool pprof` names the snapshot's top
//! functions with its shares, the SVG is XML naming the frames, the files are per tap, and
//! a tap without stacks is refused by name.
//!
//! And end to end: a proxy sampling the burn upstream, its snapshot saved, exported and
//! read back by pprof with the shares its own stacks give.
//!
//! The fixture `tests/fixtures/snapshots/stacks.json` is `fixture.json` with an `upstream`
//! object on its webdis tap as a proxy that sampled Webdis's stacks would write it: the
//! stacks, and the `samples`, `inclusive` and `functions` counted from them.

mod report_support;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use phasescope::snapshot::Snapshot;
use phasescope::snapshot::{FunctionSnapshot, UpstreamSnapshot};
use report_support::{phasescope, phasescope_ok};
use serde_json::Value;
use support::{require_tool, wait_for, BurnUpstream, Proxy, STARTUP_DEADLINE};

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/stacks.json")
}

fn fixture_upstream() -> UpstreamSnapshot {
    let snap = Snapshot::from_json(&std::fs::read_to_string(fixture_path()).unwrap()).unwrap();
    snap.taps["webdis"].upstream.clone().unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One row of `go tool pprof -top`: flat and cumulative shares in percent, by name.
#[derive(Debug)]
struct TopRow {
    name: String,
    flat_pct: f64,
    cum_pct: f64,
}

impl TopRow {
    /// Its flat and cum shares are `flat` and `cum` percent as pprof prints them: two
    /// decimals, and `100%` for anything from 99.95 to 100.05 (pprof's `percentage`).
    fn assert_shares(&self, flat: f64, cum: f64, text: &str) {
        let shown = |pct: f64| {
            if (99.95..=100.05).contains(&pct) {
                100.0
            } else {
                pct
            }
        };
        let (flat, cum) = (shown(flat), shown(cum));
        assert!(
            (self.flat_pct - flat).abs() < 0.006,
            "{}: flat {} % vs {flat} %\n{text}",
            self.name,
            self.flat_pct
        );
        assert!(
            (self.cum_pct - cum).abs() < 0.006,
            "{}: cum {} % vs {cum} %\n{text}",
            self.name,
            self.cum_pct
        );
    }
}

/// The rows under the `flat  flat%  sum%  cum  cum%` header. A share is printed as
/// `30.00%`, `0%` or `100%`; a name may hold spaces (`[other stacks]`).
fn parse_top(text: &str) -> Vec<TopRow> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"));
    assert!(lines.next().is_some(), "no header in\n{text}");
    let pct = |s: &str| -> f64 {
        s.strip_suffix('%')
            .unwrap_or_else(|| panic!("{s:?} is not a share"))
            .parse()
            .unwrap()
    };
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            assert!(words.len() >= 6, "{l:?}");
            TopRow {
                name: words[5..].join(" "),
                flat_pct: pct(words[1]),
                cum_pct: pct(words[4]),
            }
        })
        .collect()
}

/// `go tool pprof -top -nodecount=10 FILE`'s output.
fn pprof_top(go: &Path, profile: &Path, scratch: &Path) -> String {
    let top = Command::new(go)
        .args(["tool", "pprof", "-top", "-nodecount=10"])
        .arg(profile)
        // Nothing to fetch or cache: keep pprof's own files inside the test's directory.
        .env("HOME", scratch)
        .env("PPROF_TMPDIR", scratch)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout).into_owned();
    assert!(
        top.status.success(),
        "go tool pprof failed:\n{text}\n{}",
        String::from_utf8_lossy(&top.stderr)
    );
    text
}

/// `go tool pprof -top` on the exported profile shows the snapshot's own figures: each
/// function's self share (flat) and inclusive share (cum) of the samples, the top ones by
/// self samples, largest first.
#[test]
fn go_tool_pprof_reads_the_profile_with_the_snapshots_top_functions_and_shares() {
    let go = require_tool("go");
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("cpu.pb.gz");
    let fixture = fixture_path().display().to_string();
    let out = phasescope(&[
        "report",
        "--from",
        &fixture,
        "--pprof",
        &profile.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("to {}", profile.display())),
        "stderr names the file: {}",
        stderr(&out)
    );

    let text = pprof_top(&go, &profile, dir.path());
    let rows = parse_top(&text);

    let u = fixture_upstream();
    let total = u.stacks().unwrap().total() as f64;
    let functions: &[FunctionSnapshot] = u.functions().unwrap();
    // Names are unique in the fixture, so pprof's grouping by name is the snapshot's.
    let by_name: BTreeMap<&str, &FunctionSnapshot> =
        functions.iter().map(|f| (f.name.as_str(), f)).collect();
    assert_eq!(by_name.len(), functions.len());

    let mut want: Vec<&FunctionSnapshot> = functions.iter().collect();
    want.sort_by_key(|f| std::cmp::Reverse(f.self_samples));
    let shown = rows.len();
    assert_eq!(shown, functions.len().min(10), "{text}");
    // Every function with self samples among the top 10 is shown (the rest are ties at 0).
    for f in want.iter().take(10).filter(|f| f.self_samples > 0) {
        assert!(
            rows.iter().any(|r| r.name == f.name),
            "{} is not in the top:\n{text}",
            f.name
        );
    }
    for r in &rows {
        let f = by_name
            .get(r.name.as_str())
            .unwrap_or_else(|| panic!("pprof shows {:?}, not a function of the snapshot", r.name));
        let flat = 100.0 * f.self_samples as f64 / total;
        let cum = 100.0 * f.inclusive_samples as f64 / total;
        r.assert_shares(flat, cum, &text);
    }
    assert!(
        rows.windows(2).all(|w| w[0].flat_pct >= w[1].flat_pct),
        "largest flat first:\n{text}"
    );
    // The total is the samples at the sampling period: 1000 Hz, a millisecond each.
    assert!(
        text.contains(&format!("Total samples = {}ms", total as u64)),
        "{text}"
    );
}

/// Reads the SVG as XML and returns the text of its `<title>`s (one per frame).
fn svg_titles(svg: &str) -> Vec<String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut depth = 0usize;
    let mut root = None;
    let mut title: Option<String> = None;
    let mut titles = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => {
                if depth == 0 {
                    root = Some(String::from_utf8_lossy(e.name().as_ref()).into_owned());
                }
                depth += 1;
                if e.name().as_ref() == b"title" {
                    title = Some(String::new());
                }
            }
            Ok(Event::End(e)) => {
                depth = depth.checked_sub(1).expect("an end tag with nothing open");
                if e.name().as_ref() == b"title" {
                    titles.extend(title.take());
                }
            }
            Ok(Event::Text(t)) => {
                if let Some(s) = title.as_mut() {
                    s.push_str(&t.decode().unwrap());
                }
            }
            Ok(Event::GeneralRef(r)) => {
                if let Some(s) = title.as_mut() {
                    let name = r.decode().unwrap();
                    s.push_str(quick_xml::escape::resolve_predefined_entity(&name).unwrap());
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not XML at byte {}: {e}", reader.buffer_position()),
        }
    }
    assert_eq!(depth, 0, "elements left open");
    assert_eq!(root.as_deref(), Some("svg"));
    titles
}

/// One run writes all three; the SVG is XML with a frame per function (inclusive
/// samples), the folded stacks add up to the snapshot's samples, and two snapshots of the
/// same tap are one profile of both.
#[test]
fn flame_graph_and_folded_stacks_of_one_and_of_two_merged_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_path().display().to_string();
    let svg = dir.path().join("cpu.svg");
    let folded = dir.path().join("cpu.folded");
    phasescope_ok(
        &[
            "report",
            "--from",
            &fixture,
            "--flamegraph",
            &svg.display().to_string(),
            "--folded",
            &folded.display().to_string(),
        ],
        0,
    );
    let u = fixture_upstream();
    let total = u.stacks().unwrap().total();
    // A frame per call path: a function's frames together hold its inclusive samples
    // (no function of the fixture calls itself). inferno writes `name (1,000 samples, P%)`.
    let titles = svg_titles(&std::fs::read_to_string(&svg).unwrap());
    let frames: Vec<(&str, u64)> = titles
        .iter()
        .map(|t| {
            let (name, rest) = t.rsplit_once(" (").unwrap();
            let n = rest.split(' ').next().unwrap().replace(',', "");
            (name, n.parse().unwrap())
        })
        .collect();
    assert!(frames.contains(&("all", total)), "{titles:?}");
    for f in u.functions().unwrap() {
        let drawn: u64 = frames
            .iter()
            .filter(|(n, _)| *n == f.name)
            .map(|(_, s)| s)
            .sum();
        assert_eq!(drawn, f.inclusive_samples, "{}: {titles:?}", f.name);
    }

    let sum = |text: &str| -> u64 {
        text.lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    let one = std::fs::read_to_string(&folded).unwrap();
    assert_eq!(sum(&one), total);
    assert_eq!(one.lines().count(), u.stacks().unwrap().stacks.len());

    phasescope_ok(
        &[
            "report",
            "--from",
            &fixture,
            "--from",
            &fixture,
            "--folded",
            &folded.display().to_string(),
        ],
        0,
    );
    let two = std::fs::read_to_string(&folded).unwrap();
    let doubled: Vec<String> = one
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            format!("{stack} {}", 2 * n.parse::<u64>().unwrap())
        })
        .collect();
    assert_eq!(two.lines().collect::<Vec<_>>(), doubled);
}

/// The fixture with the webdis tap's upstream copied onto the redis tap too.
fn two_taps_with_stacks(dir: &Path) -> String {
    let mut snap: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path()).unwrap()).unwrap();
    let u = snap["taps"]["webdis"]["upstream"].clone();
    snap["taps"]["redis"]["upstream"] = u;
    snap["taps"]["redis"]["upstream"]["comm"] = "redis-server".into();
    let path = dir.join("two.json");
    std::fs::write(&path, serde_json::to_string(&snap).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn several_taps_write_a_file_each_unless_tap_picks_one() {
    let dir = tempfile::tempdir().unwrap();
    let two = two_taps_with_stacks(dir.path());
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let pprof = out_dir.join("cpu.pb.gz");
    let out = phasescope(&[
        "report",
        "--from",
        &two,
        "--pprof",
        &pprof.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut files: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["cpu.redis.pb.gz", "cpu.webdis.pb.gz"]);
    for f in &files {
        assert!(
            stderr(&out).contains(f.as_str()),
            "{f} not named in {}",
            stderr(&out)
        );
    }
    assert!(stderr(&out).contains("redis-server"), "{}", stderr(&out));

    std::fs::remove_dir_all(&out_dir).unwrap();
    std::fs::create_dir(&out_dir).unwrap();
    let report = phasescope_ok(
        &[
            "report",
            "--from",
            &two,
            "--tap",
            "redis",
            "--pprof",
            &pprof.display().to_string(),
        ],
        0,
    );
    let files: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files, ["cpu.pb.gz"]);
    assert!(
        report.contains("tap redis") && !report.contains("tap webdis"),
        "--tap narrows the report too:\n{report}"
    );
}

#[test]
fn a_tap_without_stacks_is_refused_by_name_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("cpu.svg");
    let plain = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/fixture.json");
    let out = phasescope(&[
        "report",
        "--from",
        &plain.display().to_string(),
        "--flamegraph",
        &svg.display().to_string(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("tap webdis") && err.contains("tap redis"),
        "{err}"
    );
    assert!(err.contains("profile = true"), "{err}");
    assert!(!svg.exists());

    // With stacks on webdis only, asking for redis names redis.
    let fixture = fixture_path().display().to_string();
    let out = phasescope(&[
        "report",
        "--from",
        &fixture,
        "--tap",
        "redis",
        "--flamegraph",
        &svg.display().to_string(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("tap redis") && err.contains("[tap.process]"),
        "{err}"
    );
    assert!(!svg.exists());

    let out = phasescope(&["report", "--from", &fixture, "--tap", "nope"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("\"nope\""), "{}", stderr(&out));
}

/// Self and inclusive samples per function name, counted from the stacks as pprof counts
/// them (a name once per sample for the inclusive count), and the names that more than
/// one object has (pprof may or may not keep those apart).
fn shares_by_name(u: &UpstreamSnapshot) -> (BTreeMap<String, (u64, u64)>, Vec<String>) {
    let stacks = u.stacks().unwrap();
    let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for s in &stacks.stacks {
        let frames: Vec<_> = stacks.frames_of(s).collect();
        if let Some(leaf) = frames.last() {
            by.entry(leaf.name.clone()).or_default().0 += s.samples;
        }
        let mut seen: Vec<&str> = Vec::new();
        for f in &frames {
            if !seen.contains(&f.name.as_str()) {
                seen.push(&f.name);
                by.entry(f.name.clone()).or_default().1 += s.samples;
            }
        }
    }
    let mut objects: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for f in &stacks.frames {
        let o = objects.entry(&f.name).or_default();
        if !o.contains(&f.object.as_str()) {
            o.push(&f.object);
        }
    }
    let ambiguous = objects
        .into_iter()
        .filter(|(_, o)| o.len() > 1)
        .map(|(n, _)| n.to_owned())
        .collect();
    (by, ambiguous)
}

/// End to end: a proxy samples the burn upstream, whose parser spends its time in a
/// helper it calls; the saved snapshot, exported with --pprof and read by go tool pprof,
/// shows every top function at the share its stacks give, and the parser's inclusive
/// share is its true share of the CPU (the upstream counts the time it spends in it).
#[test]
fn a_sampled_upstream_through_the_proxy_reads_the_same_in_go_tool_pprof() {
    let go = require_tool("go");
    let mut up = BurnUpstream::start_with(30, 70, |c| {
        c.env("BURN_PARSER_HELPER", "1");
    });
    // At the full rate: the shares are held to the truth (support::load_until_sampled).
    let proxy = Proxy::in_front_of(up.addr(), &["--profile-upstream", "--sample-budget", "0"]);
    let admin = format!("http://{}", proxy.admin_addr());
    let pid = up.process().pid();
    let watched = wait_for(STARTUP_DEADLINE, || {
        let out = phasescope(&["report", "--from", &admin, "--format", "json"]);
        let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        json["taps"][0]["inside"]["pid"].as_u64() == Some(u64::from(pid))
    });
    assert!(
        watched,
        "the proxy never watched pid {pid}\n{}",
        proxy.log_tail()
    );
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("run.json");
    let saved_s = saved.display().to_string();
    phasescope_ok(
        &["snapshot", "--from", &admin, "-o", &saved_s, "--reset"],
        0,
    );
    let before = up.truth();
    let requests = support::load_until_sampled(&proxy, "webdis", 2000);
    assert!(requests > 2000, "too little load: {requests} requests");
    let parser_us = up.truth().parser_us_per_request_since(&before);
    phasescope_ok(&["snapshot", "--from", &admin, "-o", &saved_s], 0);

    let snap = Snapshot::from_json(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let (tap, t) = snap
        .taps
        .iter()
        .find(|(_, t)| t.upstream.as_ref().is_some_and(|u| u.stacks().is_some()))
        .unwrap_or_else(|| {
            panic!(
                "no tap with stacks in {}",
                std::fs::read_to_string(&saved).unwrap()
            )
        });
    let u = t.upstream.clone().unwrap();
    let total = u.stacks().unwrap().total();
    assert!(total > 1000, "too few samples: {total}");

    let profile = dir.path().join("cpu.pb.gz");
    let svg = dir.path().join("cpu.svg");
    let folded = dir.path().join("cpu.folded");
    let out = phasescope(&[
        "report",
        "--from",
        &saved_s,
        "--pprof",
        &profile.display().to_string(),
        "--flamegraph",
        &svg.display().to_string(),
        "--folded",
        &folded.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Real frames (kernel ones, C symbols of every shape) still make valid XML, and the
    // folded lines still add up.
    let titles = svg_titles(&std::fs::read_to_string(&svg).unwrap());
    assert!(
        titles.iter().any(|t| t.starts_with("scan_token (")),
        "{titles:?}"
    );
    let folded_total: u64 = std::fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(folded_total, total);
    // Straight from the running proxy too (its window goes on, so only that it works).
    let live = dir.path().join("live.folded");
    phasescope_ok(
        &[
            "report",
            "--from",
            &admin,
            "--folded",
            &live.display().to_string(),
        ],
        0,
    );
    assert!(std::fs::metadata(&live).unwrap().len() > 0);
    // For a person to look at, as the live page's screenshots.
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::copy(&svg, artifacts.join("burn-upstream-flamegraph.svg")).unwrap();

    let text = pprof_top(&go, &profile, dir.path());
    let rows = parse_top(&text);
    assert!(!rows.is_empty(), "{text}");
    let (by_name, ambiguous) = shares_by_name(&u);
    let mut compared = 0;
    for r in &rows {
        if ambiguous.contains(&r.name) {
            continue;
        }
        let Some(&(flat, cum)) = by_name.get(&r.name) else {
            panic!(
                "pprof shows {:?}, which no stack of tap {tap} has:\n{text}",
                r.name
            );
        };
        let flat = 100.0 * flat as f64 / total as f64;
        let cum = 100.0 * cum as f64 / total as f64;
        r.assert_shares(flat, cum, &text);
        compared += 1;
    }
    assert!(compared >= 3, "{text}");
    // The largest self share of the stacks is pprof's first row.
    let top_flat = by_name.values().map(|&(f, _)| f).max().unwrap();
    assert!(
        (rows[0].flat_pct - 100.0 * top_flat as f64 / total as f64).abs() < 0.006,
        "{text}"
    );

    // The parser, which pprof reads under its own name, at its true share of the CPU.
    let cpu_us = 1e6 * (u.cpu_user_seconds + u.cpu_system_seconds)
        / t.phases["total"].values().map(|s| s.count).sum::<u64>() as f64;
    let truth = parser_us / cpu_us;
    let parser = by_name["http_parser_execute"].1 as f64 / total as f64;
    eprintln!(
        "{total} samples; http_parser_execute inclusive {:.1} % in pprof's terms (truth {:.1} %: {parser_us:.1} µs of {cpu_us:.1} µs per request)\n{text}",
        parser * 100.0,
        truth * 100.0
    );
    assert!(
        (parser - truth).abs() <= 0.04,
        "http_parser_execute inclusive {parser:.3}, true share {truth:.3}"
    );
}

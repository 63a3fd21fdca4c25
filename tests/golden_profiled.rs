//! Every output of a profiled run, byte for byte: two snapshots saved from `phasescope demo`
//! (its child upstream sampled, the route slices, the hot path and the findings in them), and
//! what `report` and `compare` make of them in every format and export.
//!
//! The golden fixture of tests/report.rs has no upstream part; this one holds the readers of
//! the profile (the inside section, the hot path, CPU per route, flame graphs, folded stacks,
//! pprof, the differential flame graph) to their output while the code that reads and writes
//! the snapshot moves. A change of output is then a decision (UPDATE_GOLDEN=1 rewrites the
//! files, and the diff shows what changed), never a side effect of a restructuring.
//!
//! The snapshots are kept gzipped, and so are the golden files: the flame graphs and folded
//! stacks are hundreds of kilobytes as text.

mod report_support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use phasescope::snapshot::Snapshot;
use report_support::phasescope_ok;

fn profiled() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/profiled")
}

fn gunzip(path: &Path) -> Vec<u8> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    out
}

/// The two snapshots, unpacked into `dir` as a.json and b.json.
fn unpack(dir: &Path) -> (String, String) {
    let mut names = Vec::new();
    for side in ["a", "b"] {
        let path = dir.join(format!("{side}.json"));
        std::fs::write(&path, gunzip(&profiled().join(format!("{side}.json.gz")))).unwrap();
        names.push(path.to_str().unwrap().to_string());
    }
    (names[0].clone(), names[1].clone())
}

/// Compares the output `actual` with the golden file `name` (stored gzipped), or rewrites it
/// under UPDATE_GOLDEN. On a difference the actual output is left beside the golden one, with
/// the first line that differs in the message.
fn golden(name: &str, actual: &[u8]) {
    let path = profiled().join("golden").join(format!("{name}.gz"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        gz.write_all(actual).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
    }
    let expected = gunzip(&path);
    if expected == actual {
        return;
    }
    let kept = std::env::temp_dir().join(format!("phasescope-golden-{name}"));
    std::fs::write(&kept, actual).unwrap();
    let (e, a) = (
        String::from_utf8_lossy(&expected),
        String::from_utf8_lossy(actual),
    );
    let first = e
        .lines()
        .zip(a.lines())
        .position(|(x, y)| x != y)
        .unwrap_or(e.lines().count().min(a.lines().count()));
    panic!(
        "{name} differs from {} (the actual output is in {}), first at line {}:\n  expected: {}\n  actual:   {}",
        path.display(),
        kept.display(),
        first + 1,
        e.lines().nth(first).unwrap_or("(end)"),
        a.lines().nth(first).unwrap_or("(end)"),
    );
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_snapshots_load_and_serialize_to_the_same_bytes() {
    for side in ["a", "b"] {
        let text = String::from_utf8(gunzip(&profiled().join(format!("{side}.json.gz")))).unwrap();
        let snapshot: Snapshot = serde_json::from_str(&text).unwrap();
        assert!(
            snapshot.taps.values().any(|tap| tap.upstream.is_some()),
            "{side}.json has an upstream part"
        );
        // The file is what the admin server serves: the snapshot, and beside it what the
        // server adds from its own view (findings, the hot path, CPU per route, the phases'
        // order and styles). Every field the snapshot type writes is the file's, unchanged.
        let file: serde_json::Value = serde_json::from_str(&text).unwrap();
        let written = serde_json::to_value(&snapshot).unwrap();
        for (key, value) in written.as_object().unwrap() {
            assert_eq!(
                Some(value),
                file.get(key),
                "{side}.json's {key}, read and written again"
            );
        }
        golden(
            &format!("{side}.snapshot.json"),
            serde_json::to_string(&snapshot).unwrap().as_bytes(),
        );
    }
}

#[test]
fn report_outputs_of_a_profiled_run() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = unpack(dir.path());
    let portable = |out: String| out.replace(&a, "a.json").replace(&b, "b.json");
    for format in ["table", "markdown", "json", "csv"] {
        let out = phasescope_ok(
            &["report", "--from", &a, "--by", "route", "--format", format],
            0,
        );
        golden(&format!("report.{format}"), portable(out).as_bytes());
    }
    let merged = phasescope_ok(
        &["report", "--from", &a, "--from", &b, "--format", "json"],
        0,
    );
    golden("merged.json", portable(merged).as_bytes());

    let file = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    phasescope_ok(
        &[
            "report",
            "--from",
            &a,
            "--format",
            "json",
            "--svg",
            &file("report.svg"),
            "--flamegraph",
            &file("flame.svg"),
            "--folded",
            &file("stacks.folded"),
            "--pprof",
            &file("stacks.pb.gz"),
        ],
        0,
    );
    for name in ["report.svg", "flame.svg", "stacks.folded", "stacks.pb.gz"] {
        golden(name, &read(&dir.path().join(name)));
    }
}

#[test]
fn compare_outputs_of_two_profiled_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = unpack(dir.path());
    let portable = |out: String| out.replace(&a, "a.json").replace(&b, "b.json");
    for format in ["table", "json"] {
        let out = phasescope_ok(&["compare", &a, "--vs", &b, "--format", format], 0);
        golden(&format!("compare.{format}"), portable(out).as_bytes());
    }
    let file = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    phasescope_ok(
        &[
            "compare",
            &a,
            "--vs",
            &b,
            "--format",
            "json",
            "--diff-flamegraph",
            &file("diff.svg"),
            "--folded",
            &file("diff.folded"),
            "--pprof",
            &file("diff.pb.gz"),
        ],
        0,
    );
    for name in [
        "diff.svg",
        "diff.a.svg",
        "diff.a.folded",
        "diff.b.folded",
        "diff.a.pb.gz",
        "diff.b.pb.gz",
    ] {
        golden(name, &read(&dir.path().join(name)));
    }
}

//! The `report`, `snapshot` and `compare` subcommands: arguments in, text out.

use std::io::Write;

use anyhow::Context;

use super::compare::{compare as run_compare, Options};
use super::export::{diff_stacks, pprof, stacks};
use super::render::rows::{self, Report};
use super::render::table::{self, colour_for_stdout};
use super::render::{compare_table, svg};
use super::source::dataset::Dataset;
use super::source::snapshots::{self, Source};
use super::source::{http, prometheus};
use super::{file, snapshot_cmd};
use super::{CompareArgs, ReportArgs, SnapshotArgs};
use crate::snapshot::Snapshot;

/// `phasescope report`; `default_admin` is the admin address (`host:port`) to read when no
/// `--from` is given. `Ok(false)` when `--fail-on` tripped: a finding of that severity or
/// above holds (the report is printed all the same).
pub fn report(args: &ReportArgs, default_admin: &str) -> anyhow::Result<bool> {
    http::set_timeout(args.timeout);
    // The start of the earliest window read, for the pprof profile's time.
    let mut since_unix = None;
    let mut findings;
    let ds = match &args.prometheus {
        Some(url) => {
            let (ds, held) = prometheus::load_with_findings(url, args.range)?;
            findings = held;
            ds
        }
        None => {
            let sources: Vec<Source> = if args.from.is_empty() {
                vec![Source::admin(default_admin)?]
            } else {
                args.from
                    .iter()
                    .map(|f| Source::parse(f))
                    .collect::<anyhow::Result<_>>()?
            };
            let snaps = snapshots::load_all(&sources)?;
            since_unix = snaps.iter().map(|s| s.since_unix).reduce(f64::min);
            findings = Snapshot::merged(&snaps)
                .map(|s| crate::findings::diagnose_with(&s, args.thresholds()))
                .unwrap_or_default();
            Dataset::from_snapshots(&snaps, sources.iter().map(ToString::to_string).collect())?
        }
    };
    let mut ds = ds;
    if let Some(tap) = &args.tap {
        anyhow::ensure!(
            ds.taps.contains_key(tap),
            "no tap {tap:?} in {} (its taps: {})",
            rows::sources_line(&ds.sources),
            ds.taps.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    // Built over every tap, then cut to `--tap`: a tap's figures read the others' (the
    // Webdis split reads Redis's process from the RESP tap behind; the proxy's own CPU
    // says how many taps share it).
    let mut report = Report::build_with(&ds, args.by.is_some(), args.what_if, args.top)?;
    if let Some(tap) = &args.tap {
        ds.taps.retain(|name, _| name == tap);
        report.taps.retain(|t| &t.tap == tap);
        findings.retain(|f| &f.tap == tap);
    }
    report.findings = findings;
    let text = table::render(&report, args.format, colour_for_stdout())?;
    if let Some(path) = &args.svg {
        let picture = svg::render(&ds)?;
        file::write_output(path, picture.as_bytes())?;
    }
    export_stacks(args, &ds, since_unix)?;
    print(&text)?;
    let Some(gate) = args.fail_on else {
        return Ok(true);
    };
    let tripped: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.severity >= gate)
        .map(|f| format!("{} {} (tap {})", f.severity.name(), f.id, f.tap))
        .collect();
    if !tripped.is_empty() {
        // A status line, not data: stderr, so stdout stays the report.
        eprintln!(
            "--fail-on {}: {} finding{} at or above it: {}",
            gate.name(),
            tripped.len(),
            if tripped.len() == 1 { "" } else { "s" },
            tripped.join(", ")
        );
    }
    Ok(tripped.is_empty())
}

/// `--flamegraph`, `--folded`, `--pprof`: each tap's call stacks to its file, each file
/// named on stderr (stdout stays the report).
fn export_stacks(args: &ReportArgs, ds: &Dataset, since_unix: Option<f64>) -> anyhow::Result<()> {
    #[derive(Clone, Copy)]
    enum Export {
        FlameGraph,
        Folded,
        Pprof,
    }
    let wanted: Vec<(&std::path::Path, &str, Export)> = [
        (
            args.flamegraph.as_deref(),
            "flame graph",
            Export::FlameGraph,
        ),
        (args.folded.as_deref(), "folded stacks", Export::Folded),
        (args.pprof.as_deref(), "pprof profile", Export::Pprof),
    ]
    .into_iter()
    .filter_map(|(path, what, export)| path.map(|p| (p, what, export)))
    .collect();
    let render = |export: Export, t: &stacks::TapStacks<'_>| match export {
        Export::FlameGraph => stacks::flamegraph(t),
        Export::Folded => Ok(stacks::folded(t.stacks, t.kind()).into_bytes()),
        Export::Pprof => pprof::encode(&pprof::profile(t, since_unix)),
    };
    if wanted.is_empty() {
        return Ok(());
    }
    let (taps, skipped) = stacks::select(ds, args.tap.as_deref())?;
    for why in &skipped {
        eprintln!("not exported: {why}");
    }
    for (path, what, render_kind) in wanted {
        if taps.len() > 1 && path.as_os_str() == file::STDOUT {
            anyhow::bail!(
                "the {what}s of {} taps cannot share standard output: name a file (each tap gets its own) or choose one with --tap",
                taps.len()
            );
        }
        for t in &taps {
            let out = stacks::path_for(path, t.tap, taps.len() > 1);
            let bytes = render(render_kind, t)?;
            file::write_output(&out, &bytes)?;
            eprintln!(
                "wrote the {what} of {} ({} samples) to {}",
                t.describe(),
                t.stacks.total(),
                out.display()
            );
        }
    }
    Ok(())
}

/// `phasescope snapshot`, reading the admin server `from` (`--from`, else the config's).
pub fn snapshot(args: &SnapshotArgs, from: &str) -> anyhow::Result<()> {
    http::set_timeout(args.timeout);
    let saved = snapshot_cmd::save(from, &args.output, args.reset)?;
    let mut line = format!(
        "saved {} ({} tap{}, {} exchanges from {} to {}) to {}",
        saved.url,
        saved.taps,
        if saved.taps == 1 { "" } else { "s" },
        saved.exchanges,
        saved.since,
        saved.taken_at,
        args.output.display()
    );
    if let Some(since) = &saved.reset_since {
        line.push_str(&format!("; reset, the next run starts at {since}"));
    }
    // A status line, not data: stderr, so stdout stays empty for scripts.
    eprintln!("{line}");
    Ok(())
}

/// `phasescope compare`; `Ok(false)` when `--fail-if-slower` tripped.
pub fn compare(args: &CompareArgs) -> anyhow::Result<bool> {
    let a = snapshots::load_files(&args.a)?;
    let b = snapshots::load_files(&args.vs)?;
    let names = |p: &[std::path::PathBuf]| p.iter().map(|p| p.display().to_string()).collect();
    let opts = Options {
        alpha: args.alpha,
        resamples: args.resamples,
        max_draws: args.max_draws,
        seed: args.seed,
        fail_if_slower: args.fail_if_slower.map(|pct| pct / 100.0),
        fail_phases: args.fail_phase.clone(),
        threshold: args.threshold / 100.0,
        detect: args.detect / 100.0,
        drift: args.drift / 100.0,
        taps: args.tap.clone(),
        vs_tap: args.vs_tap.clone(),
        paired: args.paired,
        phases: if args.phase.is_empty() {
            Options::default().phases
        } else {
            args.phase.clone()
        },
        routes: args.route.clone(),
        asked_functions: args.function.clone(),
        ..Options::default()
    };
    let c = run_compare(&a, &b, names(&args.a), names(&args.vs), &opts)?;
    let exports = diff_stacks::Exports {
        diff_flamegraph: args.diff_flamegraph.as_deref(),
        folded: args.folded.as_deref(),
        pprof: args.pprof.as_deref(),
    };
    if exports.wanted() {
        exports.write(&a, &b, &stack_taps(&a, &b, &opts), &c.functions)?;
    }
    print(&compare_table::render(
        &c,
        args.format,
        colour_for_stdout(),
    )?)?;
    Ok(c.failures.is_empty())
}

/// The taps whose stacks `compare`'s exports draw, as (A's tap, B's tap): with
/// `--vs-tap`, A's `--tap` and B's vs tap; else each tap (of `--tap`, or any) whose
/// server has sampled stacks on both sides.
fn stack_taps(a: &[Snapshot], b: &[Snapshot], opts: &Options) -> Vec<(String, String)> {
    if let (Some(vs), Some(tap)) = (&opts.vs_tap, opts.taps.first()) {
        return vec![(tap.clone(), vs.clone())];
    }
    let stacked = |snaps: &[Snapshot], tap: &str| {
        snaps.iter().any(|s| {
            s.taps
                .get(tap)
                .and_then(|t| t.upstream.as_ref())
                .and_then(|u| u.stacks())
                .is_some_and(|st| st.total() > 0)
        })
    };
    let names: std::collections::BTreeSet<&String> = a.iter().flat_map(|s| s.taps.keys()).collect();
    names
        .into_iter()
        .filter(|t| opts.taps.is_empty() || opts.taps.contains(t))
        .filter(|t| stacked(a, t) && stacked(b, t))
        .map(|t| (t.clone(), t.clone()))
        .collect()
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // `| head` closing the pipe is not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to standard output"),
    }
}

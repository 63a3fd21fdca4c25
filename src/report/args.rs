//! The command lines of `phasescope report`, `snapshot` and `compare`.

use std::path::PathBuf;

use clap::Args;

/// `phasescope profile`: sample on demand for `seconds`, then `report`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// How long the taps with `profile = "on-demand"` sample their upstream, 1 to 3600
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub seconds: u64,

    #[command(flatten)]
    pub report: ReportArgs,
}

/// `phasescope report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// An admin server URL (http://host:port) or a snapshot file; repeat to merge several
    /// [default: the admin server of the config, http://127.0.0.1:9464]
    #[arg(long, value_name = "URL|FILE", conflicts_with = "prometheus")]
    pub from: Vec<String>,

    /// Read the phase histograms from a Prometheus server instead (all instances summed)
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,

    /// With --prometheus: the window to report on, e.g. "15m", "1h"
    #[arg(long, value_name = "DURATION", default_value = "15m", requires = "prometheus",
          value_parser = humantime::parse_duration)]
    pub range: std::time::Duration,

    /// How long reading one source may take in all (an admin server or Prometheus that
    /// accepts and then stalls or trickles fails after it)
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,

    /// Add a table per route
    #[arg(long, value_name = "WHAT", value_parser = ["route"])]
    pub by: Option<String>,

    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: super::Format,

    /// Also draw the report as an SVG file
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// Report on this tap only; with --flamegraph, --folded or --pprof, export its call
    /// stacks alone, to the file named as given
    #[arg(long, value_name = "NAME")]
    pub tap: Option<String>,

    /// Write the upstream's sampled call stacks as a flame graph (SVG); one file per tap
    /// with stacks, the tap's name before the extension, unless --tap picks one
    #[arg(long, value_name = "FILE.svg", conflicts_with = "prometheus")]
    pub flamegraph: Option<PathBuf>,

    /// Write the upstream's sampled call stacks as folded stacks (`root;caller;leaf COUNT`
    /// per line, as flamegraph.pl, inferno and speedscope read them)
    #[arg(long, value_name = "FILE", conflicts_with = "prometheus")]
    pub folded: Option<PathBuf>,

    /// Write the upstream's sampled call stacks as a pprof profile (gzipped protobuf, as
    /// `go tool pprof`, Pyroscope and Parca read it)
    #[arg(long, value_name = "FILE.pb.gz", conflicts_with = "prometheus")]
    pub pprof: Option<PathBuf>,

    /// The what-if lines of an upstream with a profile: a parser, and each hot function,
    /// this many times faster
    #[arg(long, value_name = "N", default_value_t = super::render::inside::DEFAULT_WHAT_IF,
          value_parser = parse_what_if)]
    pub what_if: f64,

    /// Hot functions shown per upstream with call stacks (text, markdown and JSON)
    #[arg(long, value_name = "N", default_value_t = super::render::inside::DEFAULT_TOP)]
    pub top: usize,

    /// Exit 1 (after printing the report) when a finding of this severity or above holds:
    /// `critical` fails a CI job whose requests failed (info, warn, critical)
    #[arg(long, value_name = "SEVERITY", value_parser = parse_severity)]
    pub fail_on: Option<crate::snapshot::Severity>,

    /// The share of all exchanges, in percent, from which the server's own error answers
    /// (HTTP 5xx it sent) are a `warn` finding; below it they are `info`
    #[arg(long, value_name = "PCT", default_value_t = 1.0, value_parser = parse_percent)]
    pub server_errors_warn: f64,

    /// The share, in percent, from which they are `critical`
    #[arg(long, value_name = "PCT", default_value_t = 10.0, value_parser = parse_percent)]
    pub server_errors_critical: f64,
}

impl ReportArgs {
    /// The findings' thresholds these flags set, as fractions.
    pub fn thresholds(&self) -> crate::findings::Thresholds {
        crate::findings::Thresholds {
            server_errors_warn: self.server_errors_warn / 100.0,
            server_errors_critical: self.server_errors_critical / 100.0,
        }
    }
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').trim().parse::<f64>() {
        Ok(f) if (0.0..=100.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "{s:?}: expected a percentage from 0 to 100, such as 10"
        )),
    }
}

fn parse_severity(s: &str) -> Result<crate::snapshot::Severity, String> {
    use crate::snapshot::Severity;
    [Severity::Info, Severity::Warn, Severity::Critical]
        .into_iter()
        .find(|v| v.name() == s)
        .ok_or_else(|| format!("{s:?}: expected info, warn or critical"))
}

fn parse_what_if(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 1.0 => Ok(f),
        _ => Err(format!("{s:?}: expected a factor above 1, such as 2")),
    }
}

/// `phasescope snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The admin server, http://host:port [default: the admin server of the config, as for
    /// report]
    #[arg(long, value_name = "URL")]
    pub from: Option<String>,

    /// The file to write (`-` for standard output); a FIFO or a device is written in
    /// place, never replaced
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,

    /// Save the window a reset ends, and start the next one clean: every exchange is in
    /// exactly one saved window, even under load
    #[arg(long)]
    pub reset: bool,

    /// How long each request to the admin server may take in all (a server that accepts
    /// and then stalls or trickles fails after it)
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
}

/// `phasescope compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Snapshot files of the runs before (A)
    #[arg(value_name = "A.json", required = true, num_args = 1..)]
    pub a: Vec<PathBuf>,

    /// Snapshot files of the runs after (B)
    #[arg(long, value_name = "B.json", required = true, num_args = 1..)]
    pub vs: Vec<PathBuf>,

    /// Exit 1 when a primary row (the front tap's total and request rate) is slower, with
    /// confidence, by more than PCT percent (its whole interval past +PCT %)
    #[arg(long, value_name = "PCT")]
    pub fail_if_slower: Option<f64>,

    /// Phases --fail-if-slower also checks besides the primary rows; repeat for several,
    /// "all" for every phase
    #[arg(long, value_name = "PHASE")]
    pub fail_phase: Vec<String>,

    /// `same` when the interval lies inside ±PCT %, `different` when beyond it
    #[arg(long, value_name = "PCT", default_value_t = 2.0)]
    pub threshold: f64,

    /// The change the power statement is about: runs a side needed to detect PCT %
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    pub detect: f64,

    /// Run-to-run variation assumed for a side with a single run, PCT % (one run cannot
    /// show it)
    #[arg(long, value_name = "PCT", default_value_t = 10.0)]
    pub drift: f64,

    /// Compare only this tap (repeatable); its total and request rate become the primary
    /// question [default: every tap; the client-facing ones are primary]
    #[arg(long, value_name = "TAP")]
    pub tap: Vec<String>,

    /// Compare B's tap NAME with A's --tap (an A/B bench: --tap a --vs-tap b)
    #[arg(long, value_name = "NAME", requires = "tap")]
    pub vs_tap: Option<String>,

    /// A's i-th snapshot and B's i-th were measured at the same time (the windows of a
    /// duet bench): compare their paired ratios
    #[arg(long)]
    pub paired: bool,

    /// The primary phase (repeatable) [default: total]
    #[arg(long, value_name = "PHASE")]
    pub phase: Vec<String>,

    /// Compare only this route (repeatable) [default: every route]
    #[arg(long, value_name = "ROUTE")]
    pub route: Vec<String>,

    /// A function of the servers whose row is kept and printed whatever the cut of rows
    /// (repeatable; its name as the rows give it, e.g. json_reply)
    #[arg(long, value_name = "NAME")]
    pub function: Vec<String>,

    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: super::Format,

    /// Error rate of the primary question; false-discovery rate of the other rows
    #[arg(long, value_name = "ALPHA", default_value_t = 0.05)]
    pub alpha: f64,

    /// Bootstrap replicates per series (one run per side)
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub resamples: usize,

    /// Values drawn per replicate, at most (one run per side)
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_draws: u64,

    /// Seed of the resampling, so that a rerun gives the same intervals
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Write the differential flame graphs of the servers' call stacks: B's stacks to
    /// FILE.svg, A's to FILE.a.svg; a frame red or blue only where its function's row is
    /// different (dearer, cheaper) or on one side only, grey elsewhere (needs sampled
    /// stacks on both sides)
    #[arg(long = "diff-flamegraph", value_name = "FILE.svg")]
    pub diff_flamegraph: Option<PathBuf>,

    /// Write each side's folded call stacks: FILE with `.a` and `.b` before its extension
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Write each side's pprof profile (FILE.a.pb.gz, FILE.b.pb.gz for FILE.pb.gz), CPU
    /// per 1000 requests its default sample type: `go tool pprof -diff_base A B` reads them
    #[arg(long, value_name = "FILE.pb.gz")]
    pub pprof: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// The command `phasescope ARGS…` parses into.
    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from(std::iter::once("phasescope").chain(args.iter().copied()))
            .unwrap()
            .command
    }

    fn refused(args: &[&str]) -> bool {
        Cli::try_parse_from(std::iter::once("phasescope").chain(args.iter().copied())).is_err()
    }

    #[test]
    fn report_sources_grouping_format_and_svg_parse() {
        let Command::Report(r) = parse(&[
            "report",
            "--from",
            "a.json",
            "--from",
            "http://h:1",
            "--by",
            "route",
            "--format",
            "csv",
            "--svg",
            "x.svg",
        ]) else {
            panic!()
        };
        assert_eq!(r.from, ["a.json", "http://h:1"]);
        assert_eq!(r.by.as_deref(), Some("route"));
        assert_eq!(r.format, crate::report::Format::Csv);
        assert_eq!((r.tap.as_ref(), r.flamegraph.as_ref()), (None, None));
        assert_eq!(r.fail_on, None, "no gate unless asked");
        assert!(refused(&["report", "--by", "method"]));
        let Command::Report(r) = parse(&["report", "--fail-on", "critical"]) else {
            panic!()
        };
        assert_eq!(r.fail_on, Some(crate::snapshot::Severity::Critical));
        assert!(refused(&["report", "--fail-on", "fatal"]));
    }

    #[test]
    fn report_stack_exports_parse_and_need_a_snapshot() {
        let Command::Report(r) = parse(&[
            "report",
            "--from",
            "a.json",
            "--tap",
            "webdis",
            "--flamegraph",
            "f.svg",
            "--folded",
            "f.folded",
            "--pprof",
            "f.pb.gz",
        ]) else {
            panic!()
        };
        assert_eq!(r.tap.as_deref(), Some("webdis"));
        assert_eq!(r.flamegraph, Some(PathBuf::from("f.svg")));
        assert_eq!(r.folded, Some(PathBuf::from("f.folded")));
        assert_eq!(r.pprof, Some(PathBuf::from("f.pb.gz")));
        assert!(
            refused(&[
                "report",
                "--prometheus",
                "http://p:9090",
                "--pprof",
                "x.pb.gz"
            ]),
            "Prometheus has no stacks"
        );
    }

    #[test]
    fn report_range_parses_with_prometheus_only() {
        assert!(
            refused(&["report", "--range", "1h"]),
            "--range needs --prometheus"
        );
        let Command::Report(r) =
            parse(&["report", "--prometheus", "http://p:9090", "--range", "1h"])
        else {
            panic!()
        };
        assert_eq!(r.range.as_secs(), 3600);
    }

    #[test]
    fn snapshot_flags_parse() {
        let Command::Snapshot(s) = parse(&[
            "snapshot",
            "--from",
            "http://h:1",
            "-o",
            "s.json",
            "--reset",
        ]) else {
            panic!()
        };
        assert!(s.reset);
        assert_eq!(s.output, PathBuf::from("s.json"));
        let Command::Snapshot(s) = parse(&["snapshot", "-o", "s.json"]) else {
            panic!()
        };
        assert_eq!(s.from, None, "--from defaults to the config's admin server");
    }

    #[test]
    fn compare_sides_and_gate_parse() {
        let Command::Compare(c) = parse(&[
            "compare",
            "a1.json",
            "a2.json",
            "--vs",
            "b1.json",
            "b2.json",
            "--fail-if-slower",
            "5",
        ]) else {
            panic!()
        };
        assert_eq!(c.a.len(), 2);
        assert_eq!(c.vs.len(), 2);
        assert_eq!(c.fail_if_slower, Some(5.0));
        assert!(c.fail_phase.is_empty());
        assert_eq!(c.threshold, 2.0);
        assert!(refused(&["compare", "a.json"]), "--vs is required");
    }
}

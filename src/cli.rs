//! The command line: what `main` parses before anything runs.
//!
//! Each subcommand is one variant of [`Command`] holding its own `Args` struct, so a new
//! subcommand is one variant plus its struct. Flags that override the config are taken as
//! text and parsed by [`crate::config::Overrides`], the same code that parses the
//! `PHASESCOPE_*` variables, so a bad value reads the same either way. (clap's own `env`
//! support is not used: it would rank flags above the environment, the wrong way round.)

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{ConfigError, Key, Overrides};

#[derive(Debug, Parser)]
#[command(
    name = "phasescope",
    version,
    about = "A transparent profiling reverse proxy: times every request in phases",
    long_about = None,
)]
pub struct Cli {
    /// Config file [default: ./config.toml if it exists, else the built-in default]
    /// [env: PHASESCOPE_CONFIG]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Format of phasescope's own log on standard error [default: log.format, "text"]
    /// [env: PHASESCOPE_LOG_FORMAT]
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the taps and the admin server until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Check a config file (FILE or --config) and exit: 0 if it is valid, 2 with
    /// FILE:LINE:COL if not.
    CheckConfig(CheckConfigArgs),
    /// Where the time goes: per tap, one row per phase (count, mean, percentiles, share).
    Report(ReportArgs),
    /// Save a running proxy's snapshot to a file, optionally resetting it for the next run.
    Snapshot(SnapshotArgs),
    /// Compare runs A with runs B: per phase, same, different (slower, faster) or unknown.
    /// Exit 1 when --fail-if-slower trips, 2 when the inputs cannot be read.
    Compare(CompareArgs),
    /// Estimate an upstream's request-parsing cost from how its time to first byte grows
    /// with the request head.
    Probe(crate::probe::ProbeArgs),
    /// A first run with nothing to install: an embedded upstream, the proxy in front of it,
    /// some load, the per-phase report, and the live page until Ctrl-C.
    Demo(crate::demo::DemoArgs),
    /// A/B benchmark of two running servers through an embedded proxy: interleaved runs,
    /// then compare's verdict with its power
    Bench(crate::bench::BenchArgs),
}

/// Overrides of the config for `run`. `--listen`, `--upstream` and `--protocol` apply to
/// the first tap; with a config without taps, `--listen` and `--upstream` create tap
/// "default". PHASESCOPE_* variables override these flags.
#[derive(Debug, Default, Args)]
pub struct RunArgs {
    /// Listen address of the first tap [env: PHASESCOPE_LISTEN]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// host:port of the first tap's upstream [env: PHASESCOPE_UPSTREAM]
    #[arg(long, value_name = "ADDR")]
    pub upstream: Option<String>,

    /// Protocol of the first tap [env: PHASESCOPE_PROTOCOL]
    #[arg(long, value_name = "PROTOCOL", value_parser = ["http", "resp"])]
    pub protocol: Option<String>,

    /// Listen address of the admin server [env: PHASESCOPE_ADMIN]
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,

    /// Access log file, JSON lines, one per exchange; "-" is standard output
    /// [env: PHASESCOPE_ACCESS_LOG]
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<OsString>,

    /// Slow log file, JSON lines for exchanges slower than the threshold
    /// [env: PHASESCOPE_SLOW_LOG]
    #[arg(long, value_name = "FILE")]
    pub slow_log: Option<OsString>,

    /// Total duration above which an exchange is slow, e.g. "250ms"
    /// [env: PHASESCOPE_SLOW_THRESHOLD]
    #[arg(long, value_name = "DURATION")]
    pub slow_threshold: Option<String>,

    /// Record no metrics (the timeline is still taken) [env: PHASESCOPE_NO_METRICS=1]
    #[arg(long)]
    pub no_metrics: bool,

    /// Require `Authorization: Bearer TOKEN` on /metrics and /api/*; prefer the variable,
    /// as command lines are visible to other users [env: PHASESCOPE_ADMIN_TOKEN]
    #[arg(long, value_name = "TOKEN")]
    pub admin_token: Option<String>,

    /// Sample where each tap's upstream process spends its CPU ([tap.process] profile)
    /// [env: PHASESCOPE_PROFILE_UPSTREAM=1]
    #[arg(long)]
    pub profile_upstream: bool,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The config file to check; the global --config names it as well
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
}

impl CheckConfigArgs {
    /// The one file to check: FILE or `--config`; both is an error unless they agree, so
    /// that a file is never silently left unchecked.
    pub fn file<'a>(
        &'a self,
        config: Option<&'a std::path::Path>,
    ) -> Result<&'a std::path::Path, String> {
        match (self.file.as_deref(), config) {
            (Some(file), Some(flag)) if file != flag => Err(format!(
                "check-config: two files given, {} and --config {}; name one",
                file.display(),
                flag.display()
            )),
            (Some(file), _) => Ok(file),
            (None, Some(flag)) => Ok(flag),
            (None, None) => Err(
                "check-config: name the file to check: phasescope check-config FILE (or --config FILE)"
                    .to_owned(),
            ),
        }
    }
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

    /// Add a table per route
    #[arg(long, value_name = "WHAT", value_parser = ["route"])]
    pub by: Option<String>,

    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::report::Format,

    /// Also draw the report as an SVG file
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// The what-if line of an upstream with a profile: a parser this many times faster
    #[arg(long, value_name = "N", default_value_t = crate::report::inside::DEFAULT_WHAT_IF,
          value_parser = parse_what_if)]
    pub what_if: f64,
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

    /// The file to write
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,

    /// Empty the proxy's snapshot histograms after saving, so that the next run starts clean
    #[arg(long)]
    pub reset: bool,
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

    /// The primary phase (repeatable) [default: total]
    #[arg(long, value_name = "PHASE")]
    pub phase: Vec<String>,

    /// Compare only this route (repeatable) [default: every route]
    #[arg(long, value_name = "ROUTE")]
    pub route: Vec<String>,

    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::report::Format,

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
}

impl RunArgs {
    /// The config overrides these flags (and the global `--log-format`) ask for.
    pub fn overrides(&self, log_format: Option<&str>) -> Result<Overrides, ConfigError> {
        let mut o = Overrides::default();
        let text = [
            (Key::Listen, self.listen.as_deref()),
            (Key::Upstream, self.upstream.as_deref()),
            (Key::Protocol, self.protocol.as_deref()),
            (Key::Admin, self.admin.as_deref()),
            (Key::SlowThreshold, self.slow_threshold.as_deref()),
            (Key::LogFormat, log_format),
            (Key::AdminToken, self.admin_token.as_deref()),
        ];
        for (key, value) in text {
            if let Some(value) = value {
                o.set_flag(key, value)?;
            }
        }
        for (key, value) in [
            (Key::AccessLog, &self.access_log),
            (Key::SlowLog, &self.slow_log),
        ] {
            if let Some(value) = value {
                o.set_flag(key, value)?;
            }
        }
        if self.no_metrics {
            o.set_flag(Key::NoMetrics, "true")?;
        }
        if self.profile_upstream {
            o.set_flag(Key::ProfileUpstream, "true")?;
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Protocol;
    use clap::CommandFactory;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_flags_become_overrides() {
        let cli = Cli::try_parse_from([
            "phasescope",
            "--config",
            "x.toml",
            "--log-format",
            "json",
            "run",
            "--listen",
            "127.0.0.1:1",
            "--protocol",
            "resp",
            "--no-metrics",
        ])
        .unwrap();
        assert_eq!(cli.config, Some(PathBuf::from("x.toml")));
        let Command::Run(args) = &cli.command else {
            panic!("not run: {:?}", cli.command)
        };
        let o = args.overrides(cli.log_format.as_deref()).unwrap();
        assert_eq!(o.listen.unwrap().value.port(), 1);
        assert_eq!(o.protocol.unwrap().value, Protocol::Resp);
        assert!(o.no_metrics.unwrap().value);
        assert!(o.log_format.is_some());
        assert!(o.upstream.is_none());
    }

    #[test]
    fn global_flags_may_follow_the_subcommand() {
        let cli = Cli::try_parse_from(["phasescope", "run", "--config", "y.toml"]).unwrap();
        assert_eq!(cli.config, Some(PathBuf::from("y.toml")));
    }

    fn file_to_check(args: &[&str]) -> Result<PathBuf, String> {
        let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
        match &cli.command {
            Command::CheckConfig(a) => a.file(cli.config.as_deref()).map(PathBuf::from),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn check_config_takes_a_file_or_the_global_config() {
        let c = PathBuf::from("c.toml");
        assert_eq!(
            file_to_check(&["phasescope", "check-config", "c.toml"]),
            Ok(c.clone())
        );
        assert_eq!(
            file_to_check(&["phasescope", "check-config", "--config", "c.toml"]),
            Ok(c.clone())
        );
        assert_eq!(
            file_to_check(&["phasescope", "--config", "c.toml", "check-config"]),
            Ok(c.clone())
        );
        assert_eq!(
            file_to_check(&["phasescope", "check-config", "--config", "c.toml", "c.toml"]),
            Ok(c)
        );
        let two = file_to_check(&["phasescope", "check-config", "--config", "a.toml", "b.toml"]);
        assert!(
            two.as_ref()
                .is_err_and(|e| e.contains("a.toml") && e.contains("b.toml")),
            "{two:?}"
        );
        assert!(file_to_check(&["phasescope", "check-config"]).is_err());
    }

    /// Every flag that a `PHASESCOPE_*` variable also sets says so in `--help`. The
    /// variables are read by the config code, not by clap, so clap cannot show them by
    /// itself: the help text carries them, and this walk checks it against [`Key`].
    #[test]
    fn every_flag_with_a_variable_shows_it_in_help() {
        use crate::config::ENV_CONFIG;
        fn walk(cmd: &clap::Command, path: &str, seen: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                let flag = format!("--{long}");
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                let env = match Key::ALL.iter().find(|k| k.flag() == flag) {
                    // `run` and the global flags feed the config; another subcommand's
                    // flag of the same name (demo --admin) is its own.
                    Some(key) if path == "phasescope run" || arg.is_global_set() => Some(key.env()),
                    _ if long == "config" => Some(ENV_CONFIG),
                    _ => None,
                };
                match env {
                    Some(var) => {
                        assert!(
                            help.contains(&format!("[env: {var}")),
                            "{path} {flag}: the help does not show [env: {var}]: {help:?}"
                        );
                        seen.push(var.to_owned());
                    }
                    None => assert!(
                        !help.contains("[env: "),
                        "{path} {flag} claims a variable that does not set it: {help:?}"
                    ),
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), seen);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let mut seen = Vec::new();
        walk(&cmd, "phasescope", &mut seen);
        for var in Key::ALL.iter().map(|k| k.env()).chain([ENV_CONFIG]) {
            assert!(seen.iter().any(|s| s == var), "no flag shows {var}");
        }
    }

    #[test]
    fn report_snapshot_and_compare_parse() {
        let cli = Cli::try_parse_from([
            "phasescope",
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
        ])
        .unwrap();
        let Command::Report(r) = cli.command else {
            panic!()
        };
        assert_eq!(r.from, ["a.json", "http://h:1"]);
        assert_eq!(r.by.as_deref(), Some("route"));
        assert_eq!(r.format, crate::report::Format::Csv);
        assert!(Cli::try_parse_from(["phasescope", "report", "--by", "method"]).is_err());
        assert!(
            Cli::try_parse_from(["phasescope", "report", "--range", "1h"]).is_err(),
            "--range needs --prometheus"
        );
        let cli = Cli::try_parse_from([
            "phasescope",
            "report",
            "--prometheus",
            "http://p:9090",
            "--range",
            "1h",
        ])
        .unwrap();
        let Command::Report(r) = cli.command else {
            panic!()
        };
        assert_eq!(r.range.as_secs(), 3600);

        let cli = Cli::try_parse_from([
            "phasescope",
            "snapshot",
            "--from",
            "http://h:1",
            "-o",
            "s.json",
            "--reset",
        ])
        .unwrap();
        let Command::Snapshot(s) = cli.command else {
            panic!()
        };
        assert!(s.reset);
        assert_eq!(s.output, PathBuf::from("s.json"));
        let cli = Cli::try_parse_from(["phasescope", "snapshot", "-o", "s.json"]).unwrap();
        let Command::Snapshot(s) = cli.command else {
            panic!()
        };
        assert_eq!(s.from, None, "--from defaults to the config's admin server");

        let cli = Cli::try_parse_from([
            "phasescope",
            "compare",
            "a1.json",
            "a2.json",
            "--vs",
            "b1.json",
            "b2.json",
            "--fail-if-slower",
            "5",
        ])
        .unwrap();
        let Command::Compare(c) = cli.command else {
            panic!()
        };
        assert_eq!(c.a.len(), 2);
        assert_eq!(c.vs.len(), 2);
        assert_eq!(c.fail_if_slower, Some(5.0));
        assert!(c.fail_phase.is_empty());
        assert_eq!(c.threshold, 2.0);
        assert!(
            Cli::try_parse_from(["phasescope", "compare", "a.json"]).is_err(),
            "--vs is required"
        );
    }

    #[test]
    fn bad_flag_values_name_the_flag() {
        let args = RunArgs {
            listen: Some("nowhere".into()),
            ..RunArgs::default()
        };
        let e = args.overrides(None).unwrap_err();
        assert!(e.to_string().starts_with("--listen: "), "{e}");
        let args = RunArgs {
            slow_threshold: Some("fast".into()),
            ..RunArgs::default()
        };
        let e = args.overrides(None).unwrap_err();
        assert!(e.to_string().starts_with("--slow-threshold: "), "{e}");
    }
}

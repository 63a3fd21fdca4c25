//! The command line: what `main` parses before anything runs.
//!
//! Each subcommand is one variant of [`Command`] holding its own `Args` struct, so a new
//! subcommand is one variant plus its struct. The struct lives beside the code that runs
//! it (`report::args`, `probe::args`, `demo::args`, `bench::args`), which therefore never
//! imports this module; only `run` and `check-config`, which `main` runs itself, keep
//! theirs here (docs/architecture.md). Flags that override the config are taken as
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
    Report(crate::report::ReportArgs),
    /// Save a running proxy's snapshot to a file, optionally resetting it for the next run.
    Snapshot(crate::report::SnapshotArgs),
    /// Sample the upstreams of a running proxy (taps with profile = "on-demand") for
    /// --seconds, then report its window with every export `report` writes.
    Profile(crate::report::ProfileArgs),
    /// Compare runs A with runs B: per phase, same, different (slower, faster) or unknown.
    /// Exit 1 when --fail-if-slower trips, 2 when the inputs cannot be read.
    Compare(crate::report::CompareArgs),
    /// Estimate an upstream's request-parsing cost from how its time to first byte grows
    /// with the request head.
    Probe(crate::probe::ProbeArgs),
    /// A first run with nothing to install: an embedded upstream, the proxy in front of it,
    /// some load, the per-phase report, and the live page until Ctrl-C.
    Demo(crate::demo::DemoArgs),
    /// The demo's upstream process, which `demo` starts itself.
    #[command(hide = true)]
    DemoUpstream(crate::demo::UpstreamArgs),
    /// A/B benchmark of two running servers through an embedded proxy: interleaved runs,
    /// then compare's verdict with its power
    Bench(Box<crate::bench::BenchArgs>),
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

    /// Bytes of user stack copied per sample for call stacks, 0 for the sampled function
    /// only ([tap.process] stack_bytes) [env: PHASESCOPE_STACK_BYTES]
    #[arg(long, value_name = "BYTES")]
    pub stack_bytes: Option<String>,

    /// Samples per second of each sampled process, the rate adapting to it; 0 keeps the
    /// frequency fixed ([tap.process] sample_budget) [env: PHASESCOPE_SAMPLE_BUDGET]
    #[arg(long, value_name = "N")]
    pub sample_budget: Option<String>,
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
            (Key::StackBytes, self.stack_bytes.as_deref()),
            (Key::SampleBudget, self.sample_budget.as_deref()),
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

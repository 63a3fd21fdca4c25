//! The `phasescope` binary: parse the command line, assemble the config, hand over to the
//! library. Exit codes: 0 ok, 1 the run failed, 2 bad usage, bad config, or a `run` that
//! could not start.
//!
//! Every subcommand returns its error here and this file alone prints it: a config or
//! usage error as it is (`FILE:LINE:COL: …`, `--flag: …`, docs/config.md) by
//! `usage_error`, any other failure with its causes by `print_error`.

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use phasescope::cli::{Cli, Command, RunArgs};
use phasescope::config::{Config, Overrides};
use phasescope::report::ReportArgs;

/// jemalloc's size classes are aligned to themselves: the task cells and socket
/// registrations tokio aligns to 128 bytes cost no slack (glibc's `memalign` leaves a
/// fragment in front of each), docs/BENCHMARKS.md.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bad usage or configuration, the same code clap uses for a bad command line.
const EXIT_CONFIG: u8 = 2;
const EXIT_FAILED: u8 = 1;

fn main() -> ExitCode {
    phasescope::clock::init();
    let cli = Cli::parse();
    match &cli.command {
        Command::Run(args) => run(&cli, args),
        Command::CheckConfig(args) => match args.file(cli.config.as_deref()) {
            Ok(file) => check_config(file),
            Err(e) => usage_error(e),
        },
        Command::Report(args) => report(&cli, args),
        Command::Snapshot(args) => {
            let from = match &args.from {
                Some(from) => from.clone(),
                None => match default_admin(&cli) {
                    Ok(admin) => format!("http://{admin}"),
                    Err(code) => return code,
                },
            };
            outcome(phasescope::report::commands::snapshot(args, &from))
        }
        Command::Profile(args) => profile(&cli, args),
        Command::Compare(args) => match phasescope::report::commands::compare(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(EXIT_FAILED),
            // Unreadable inputs must not look like a regression to a CI script.
            Err(e) => {
                print_error(&e);
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Command::Probe(args) => outcome(phasescope::probe::command(args)),
        Command::Demo(args) => outcome(phasescope::demo::command(args)),
        Command::DemoUpstream(args) => outcome(phasescope::demo::upstream_command(args)),
        Command::Bench(args) => outcome(phasescope::bench::command(args)),
    }
}

/// `phasescope profile`: asks for the seconds of sampling, waits them out, reports.
fn profile(cli: &Cli, args: &phasescope::report::ProfileArgs) -> ExitCode {
    use phasescope::report::profile_cmd;

    let from = match args.report.from.first() {
        Some(from) => from.clone(),
        None => match default_admin(cli) {
            Ok(admin) => format!("http://{admin}"),
            Err(code) => return code,
        },
    };
    match profile_cmd::ask(&from, args.seconds) {
        Ok(taps) => eprintln!("sampling {} for {} s…", taps.join(", "), args.seconds),
        Err(e) => {
            print_error(&e);
            return ExitCode::from(EXIT_FAILED);
        }
    }
    std::thread::sleep(std::time::Duration::from_secs(args.seconds) + profile_cmd::SETTLE);
    report(cli, &args.report)
}

fn report(cli: &Cli, args: &ReportArgs) -> ExitCode {
    // The admin address of the config `run` would use, unless told where to read.
    let mut admin = String::new();
    if args.from.is_empty() && args.prometheus.is_none() {
        match default_admin(cli) {
            Ok(addr) => admin = addr,
            Err(code) => return code,
        }
    }
    match phasescope::report::commands::report(args, &admin) {
        Ok(true) => ExitCode::SUCCESS,
        // `--fail-on` tripped: the report is printed, the exit code says so.
        Ok(false) => ExitCode::from(EXIT_FAILED),
        Err(e) => {
            print_error(&e);
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The admin address (`host:port`) of the config `run` would use: where `report` and
/// `snapshot` read when no `--from` is given.
fn default_admin(cli: &Cli) -> Result<String, ExitCode> {
    match Config::resolve(
        cli.config.as_deref(),
        Overrides::default(),
        std::env::vars_os(),
    ) {
        Ok((config, _)) => {
            let mut addr = config.admin.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            Ok(addr.to_string())
        }
        Err(e) => Err(usage_error(e)),
    }
}

fn outcome(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(&e);
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// A config or usage error: its text is the whole message (it names the file, line and
/// column, or the flag), so it is printed as it is. Exit 2.
fn usage_error(e: impl std::fmt::Display) -> ExitCode {
    say(&format!("{e}"));
    ExitCode::from(EXIT_CONFIG)
}

/// Any other failure: `error: …`, then one `caused by:` line per cause.
fn print_error(e: &anyhow::Error) {
    let mut text = format!("error: {e}\n");
    for cause in e.chain().skip(1) {
        text.push_str(&format!("  caused by: {cause}\n"));
    }
    say(text.trim_end());
}

/// A line to standard error that cannot panic (`eprintln!` does when standard error is a
/// full disk or a closed pipe): the exit code still says what happened.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn run(cli: &Cli, args: &RunArgs) -> ExitCode {
    let resolved = args
        .overrides(cli.log_format.as_deref())
        .and_then(|flags| Config::resolve(cli.config.as_deref(), flags, std::env::vars_os()));
    let (config, origin) = match resolved {
        Ok(resolved) => resolved,
        Err(e) => return usage_error(e),
    };
    phasescope::logging::init(config.log.format);
    tracing::info!(
        config = %origin,
        taps = config.taps.len(),
        admin = %config.admin.listen,
        "configuration loaded"
    );
    // `app::run` returns an error only before it serves (a listen or admin address in use,
    // a log file that cannot be opened, a runtime that cannot start): after that it runs
    // until a signal and drains. Such an error is a start-up error, exit 2 as
    // docs/config.md says, printed with its causes.
    match phasescope::app::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(&e);
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

fn check_config(file: &Path) -> ExitCode {
    match Config::load(file) {
        Ok(config) => {
            for warning in phasescope::config::ceiling::warnings(&config) {
                say(&format!("warning: {}: {warning}", file.display()));
            }
            let names: Vec<&str> = config.taps.iter().map(|t| t.name.as_str()).collect();
            println!(
                "ok: {}: {} taps ({})",
                file.display(),
                names.len(),
                names.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(e),
    }
}

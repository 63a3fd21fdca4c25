//! The `phasescope` binary: parse the command line, assemble the config, hand over to the
//! library. Exit codes: 0 ok, 1 the run failed, 2 bad usage or bad config.

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use phasescope::cli::{Cli, Command, RunArgs};
use phasescope::config::Config;

/// Bad usage or configuration, the same code clap uses for a bad command line.
const EXIT_CONFIG: u8 = 2;
const EXIT_FAILED: u8 = 1;

fn main() -> ExitCode {
    phasescope::clock::init();
    let cli = Cli::parse();
    match &cli.command {
        Command::Run(args) => run(&cli, args),
        Command::CheckConfig(args) => check_config(&args.file),
        Command::Probe(args) => phasescope::probe::command(args),
        Command::Demo(args) => phasescope::demo::command(args),
    }
}

fn run(cli: &Cli, args: &RunArgs) -> ExitCode {
    let resolved = args
        .overrides(cli.log_format.as_deref())
        .and_then(|flags| Config::resolve(cli.config.as_deref(), flags, std::env::vars_os()));
    let (config, origin) = match resolved {
        Ok(resolved) => resolved,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    phasescope::logging::init(config.log.format);
    tracing::info!(
        config = %origin,
        taps = config.taps.len(),
        admin = %config.admin.listen,
        "configuration loaded"
    );
    match phasescope::app::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn check_config(file: &Path) -> ExitCode {
    match Config::load(file) {
        Ok(config) => {
            let names: Vec<&str> = config.taps.iter().map(|t| t.name.as_str()).collect();
            println!(
                "ok: {}: {} taps ({})",
                file.display(),
                names.len(),
                names.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

//! phasescope's own log (not the access or slow log): `tracing` events to standard error.
//!
//! Standard error, because standard output may carry the access log (`access_log = "-"`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The filter when `RUST_LOG` is unset or unusable.
pub const DEFAULT_FILTER: &str = "info";

/// Installs the global subscriber: `RUST_LOG` filters (default `info`), `format` shapes the
/// lines. A second call keeps the first subscriber (tests may call it more than once).
pub fn init(format: LogFormat) {
    let (filter, bad_filter) = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(e) => (EnvFilter::new(DEFAULT_FILTER), Some((spec, e))),
        },
        _ => (EnvFilter::new(DEFAULT_FILTER), None),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in files or CI logs.
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if installed.is_ok() {
        if let Some((spec, e)) = bad_filter {
            tracing::warn!(rust_log = %spec, error = %e, "RUST_LOG is not a valid filter; logging at {DEFAULT_FILTER}");
        }
    }
}

//! phasescope's own log (not the access or slow log): `tracing` events to standard error.
//!
//! Standard error, because standard output may carry the access log (`access_log = "-"`).
//! A line standard error does not take (a full disk behind `2>file`, a pipe whose reader is
//! gone) is dropped and counted, and the next line that gets through is preceded by one
//! that says how many were lost: the log must never stop the proxy. (tracing's own writer
//! reports a failed write with `eprintln!`, which panics on that same standard error.)

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tracing_subscriber::fmt::MakeWriter;
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
        .with_writer(Stderr)
        .log_internal_errors(false)
        // Colour codes only for a person at a terminal, not in files or CI logs.
        .with_ansi(std::io::stderr().is_terminal());
    JSON.store(matches!(format, LogFormat::Json), Ordering::Relaxed);
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

/// Lines standard error did not take since the last one it took.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Whether the notice of dropped lines is written as a JSON line.
static JSON: AtomicBool = AtomicBool::new(false);

/// Lines of the log that could not be written and have not been reported in the log yet.
pub fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The log's writer: standard error, one whole line per write, never an error.
#[derive(Clone, Copy, Debug)]
pub struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Stderr {
        Stderr
    }
}

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    /// One formatted line: written whole, or dropped and counted.
    fn write_all(&mut self, line: &[u8]) -> io::Result<()> {
        write_line(&mut io::stderr().lock(), line);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `line` to `out`, after the notice of the lines dropped before it if there were
/// any; a line `out` does not take is counted in [`DROPPED`].
fn write_line(out: &mut impl Write, line: &[u8]) {
    let dropped = DROPPED.load(Ordering::Relaxed);
    if dropped > 0 && out.write_all(notice(dropped).as_bytes()).is_ok() {
        DROPPED.fetch_sub(dropped, Ordering::Relaxed);
    }
    if out.write_all(line).is_err() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

fn notice(dropped: u64) -> String {
    let message = format!("{dropped} log lines could not be written to standard error");
    if JSON.load(Ordering::Relaxed) {
        format!(
            "{{\"level\":\"WARN\",\"fields\":{{\"message\":\"{message}\",\"dropped\":{dropped}}},\"target\":\"phasescope::logging\"}}\n"
        )
    } else {
        format!("WARN phasescope::logging: {message}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes lines until `fail` is set, then refuses them.
    struct Flaky {
        fail: bool,
        taken: Vec<u8>,
    }

    impl Write for Flaky {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.fail {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.taken.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_not_taken_are_counted_and_announced_once_lines_get_through() {
        let mut out = Flaky {
            fail: true,
            taken: Vec::new(),
        };
        write_line(&mut out, b"one\n");
        write_line(&mut out, b"two\n");
        assert_eq!(dropped_lines(), 2);
        out.fail = false;
        write_line(&mut out, b"three\n");
        assert_eq!(dropped_lines(), 0);
        assert_eq!(
            String::from_utf8_lossy(&out.taken),
            "WARN phasescope::logging: 2 log lines could not be written to standard error\nthree\n"
        );
    }
}

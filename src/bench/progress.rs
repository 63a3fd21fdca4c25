//! The progress line: while a run lasts, a bar redrawn on a terminal; after each run, one
//! line that stays (on anything, so a log or a CI job shows how the runs went). Standard
//! error, so that standard output holds only the result.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::load::Counters;
use super::order::Side;

const WIDTH: usize = 24;
const REDRAW: Duration = Duration::from_millis(200);

/// Redraws the bar of run `index` (1-based) of `total` until `duration` has passed.
pub async fn bar(
    counters: Arc<Counters>,
    index: usize,
    total: usize,
    side: Side,
    duration: Duration,
) {
    let mut err = std::io::stderr();
    if !err.is_terminal() {
        return;
    }
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed().min(duration);
        let done = elapsed.as_secs_f64() / duration.as_secs_f64().max(1e-9);
        let filled = ((done * WIDTH as f64) as usize).min(WIDTH);
        let requests = counters.requests.load(Ordering::Relaxed);
        let _ = write!(
            err,
            "\rrun {index:>2}/{total} {}  [{}{}] {:>4.1} s  {requests:>8} requests  {:>7.0}/s",
            side.tap(),
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            elapsed.as_secs_f64(),
            requests as f64 / elapsed.as_secs_f64().max(1e-3),
        );
        let _ = err.flush();
        if elapsed >= duration {
            return;
        }
        tokio::time::sleep(REDRAW).await;
    }
}

/// The line that stays after run `index`.
pub fn done(index: usize, total: usize, side: Side, requests: u64, seconds: f64, errors: u64) {
    let mut err = std::io::stderr();
    let clear = if err.is_terminal() { "\r\x1b[2K" } else { "" };
    let _ = writeln!(
        err,
        "{clear}run {index:>2}/{total} {}  {seconds:>5.1} s  {requests:>8} requests  {:>8.0}/s{}",
        side.tap(),
        requests as f64 / seconds.max(1e-9),
        if errors > 0 {
            format!("  {errors} errors")
        } else {
            String::new()
        }
    );
}

/// A line about how the bench runs (not a run's result), on standard error.
pub fn note(text: &str) {
    let mut err = std::io::stderr();
    let clear = if err.is_terminal() { "\r\x1b[2K" } else { "" };
    let _ = writeln!(err, "{clear}note: {text}");
}

/// How often a paired design says how far it has come, on anything (a terminal, a log, a
/// CI job): a bench of the defaults loads for 100 s, and one of `--duration 20s` for
/// 400 s, silent until its end without it.
pub const WINDOWS_EVERY: Duration = Duration::from_secs(10);

/// Before a paired design's load: how long it will take, and why that long.
pub fn paired_start(design: &str, length: Duration, windows: usize, window: Duration, why: &str) {
    note(&format!(
        "{design}: {} s of load ({why}), {windows} windows of {} s; a line every {} s",
        trim(length.as_secs_f64()),
        trim(window.as_secs_f64()),
        WINDOWS_EVERY.as_secs()
    ));
}

/// A paired design's progress: `done` of `count` windows.
pub fn windows(done: usize, count: usize, window: Duration) {
    let mut err = std::io::stderr();
    let clear = if err.is_terminal() { "\r\x1b[2K" } else { "" };
    let _ = writeln!(
        err,
        "{clear}window {done:>5}/{count}  {:>6} s of {} s",
        trim(window.as_secs_f64() * done as f64),
        trim(window.as_secs_f64() * count as f64)
    );
}

/// The line that stays for one side of a paired design: its exchanges over the time it
/// was loaded (an interleave's side, its own slices: half the windows), and their rate,
/// the figure the report's `requests/s` line gives.
pub fn side_done(side: Side, requests: u64, seconds: f64, errors: u64, own_slices: bool) {
    let mut err = std::io::stderr();
    let clear = if err.is_terminal() { "\r\x1b[2K" } else { "" };
    let _ = writeln!(
        err,
        "{clear}{}  {requests:>8} requests in {seconds:.1} s{}  {:>8.0}/s{}",
        side.tap(),
        if own_slices { " of its slices" } else { "" },
        requests as f64 / seconds.max(1e-9),
        if errors > 0 {
            format!("  {errors} errors")
        } else {
            String::new()
        }
    );
}

/// Seconds without needless decimals: 400, 2.5.
fn trim(s: f64) -> String {
    let t = format!("{s:.2}");
    t.trim_end_matches('0').trim_end_matches('.').to_owned()
}

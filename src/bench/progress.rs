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

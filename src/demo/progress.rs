//! The progress line drawn while the demo's load runs.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::load::LoadCounters;

const WIDTH: usize = 30;
const REDRAW: Duration = Duration::from_millis(100);

/// Redraws `[#####.....] 1.2 s / 3 s  N requests  R/s` on standard error until
/// `duration` has passed. On anything but a terminal it draws nothing: a log file or a
/// test's captured output gets only the summary that follows.
pub async fn show(counters: Arc<LoadCounters>, duration: Duration) {
    let mut err = std::io::stderr();
    if !err.is_terminal() {
        return;
    }
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed().min(duration);
        let done = if duration.is_zero() {
            1.0
        } else {
            elapsed.as_secs_f64() / duration.as_secs_f64()
        };
        let filled = ((done * WIDTH as f64) as usize).min(WIDTH);
        let requests = counters.requests.load(Ordering::Relaxed);
        let rate = requests as f64 / elapsed.as_secs_f64().max(1e-3);
        let _ = write!(
            err,
            "\r[{}{}] {:>4.1} s / {} s  {requests:>7} requests  {rate:>7.0}/s",
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            elapsed.as_secs_f64(),
            duration.as_secs(),
        );
        let _ = err.flush();
        if elapsed >= duration {
            let _ = writeln!(err);
            return;
        }
        tokio::time::sleep(REDRAW).await;
    }
}

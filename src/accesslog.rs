//! The access log and the slow log: one JSON line per exchange (or per slow exchange).
//!
//! Lines are formatted on the connection task and handed to a writer thread through a
//! bounded queue, so a slow disk never stalls the data plane: when the queue is full the
//! line is dropped and counted, and the drop count is logged.

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;

use crate::recorder::{Event, ExchangeRecord, Recorder};

const QUEUE: usize = 65_536;

/// A JSON-lines sink shared by the taps that log to the same file.
pub struct LogFile {
    tx: SyncSender<Line>,
    dropped: AtomicU64,
}

enum Line {
    Text(String),
    Flush(SyncSender<()>),
}

impl LogFile {
    /// Opens `path` for appending (`-` is standard output) and starts its writer thread.
    pub fn open(path: &Path) -> anyhow::Result<Arc<LogFile>> {
        let out: Box<dyn Write + Send> = if path == Path::new("-") {
            Box::new(io::stdout())
        } else {
            Box::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("cannot open log file {}", path.display()))?,
            )
        };
        let (tx, rx) = sync_channel(QUEUE);
        let name = path.display().to_string();
        std::thread::Builder::new()
            .name("phasescope-log".into())
            .spawn(move || write_lines(rx, BufWriter::new(out), &name))
            .context("cannot start the log writer thread")?;
        Ok(Arc::new(LogFile {
            tx,
            dropped: AtomicU64::new(0),
        }))
    }

    fn send(&self, line: String) {
        match self.tx.try_send(Line::Text(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed);
                if n.is_power_of_two() {
                    tracing::warn!(dropped = n + 1, "log queue full; lines dropped");
                }
            }
        }
    }

    /// Waits until every line queued so far is written.
    pub fn flush(&self) {
        let (tx, rx) = sync_channel(1);
        if self.tx.send(Line::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}

fn write_lines(rx: Receiver<Line>, mut out: BufWriter<Box<dyn Write + Send>>, name: &str) {
    let mut failed = false;
    while let Ok(line) = rx.recv() {
        let mut next = Some(line);
        // Write everything queued, then flush once.
        while let Some(line) = next {
            match line {
                Line::Text(text) => {
                    if let Err(e) = out.write_all(text.as_bytes()) {
                        if !failed {
                            tracing::error!(file = name, error = %e, "cannot write log");
                            failed = true;
                        }
                    }
                }
                Line::Flush(done) => {
                    let _ = out.flush();
                    let _ = done.send(());
                }
            }
            next = rx.try_recv().ok();
        }
        let _ = out.flush();
    }
}

/// Logs exchanges of one tap: all of them, or only those slower than a threshold.
pub struct ExchangeLog {
    tap: Arc<str>,
    file: Arc<LogFile>,
    /// Only exchanges whose total exceeds this many ns (the slow log); 0 logs all.
    min_total_ns: u64,
}

impl ExchangeLog {
    pub fn access(tap: &str, file: Arc<LogFile>) -> Self {
        Self {
            tap: tap.into(),
            file,
            min_total_ns: 0,
        }
    }

    pub fn slow(tap: &str, file: Arc<LogFile>, threshold: std::time::Duration) -> Self {
        Self {
            tap: tap.into(),
            file,
            min_total_ns: u64::try_from(threshold.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
        }
    }
}

/// Formats one record as a JSON line.
pub fn format_line(tap: &str, r: &ExchangeRecord<'_>, now: SystemTime) -> String {
    let mut line = String::with_capacity(256);
    let ts = humantime::format_rfc3339_millis(now);
    let target = String::from_utf8_lossy(r.target);
    // The object's braces as characters, each once: the line reads as balanced to a
    // reader (or a tool) counting them.
    line.push('{');
    let _ = write!(
        line,
        "\"ts\":\"{ts}\",\"exchange_id\":\"{}\",\"tap\":{},\"method\":{},\"target\":{},\"status\":{},\"request_bytes\":{},\"response_bytes\":{},",
        r.id,
        json(tap),
        json(r.method),
        json(&target),
        r.status,
        r.request_bytes,
        r.response_bytes
    );
    if let Some(kind) = r.failure {
        let _ = write!(line, "\"error\":\"{}\",", kind.name());
    }
    line.push_str("\"phases_us\":{");
    for (i, (phase, ns)) in r.phases.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(line, "{sep}\"{}\":{:.3}", phase.name(), ns as f64 / 1_000.0);
    }
    line.push_str("}}\n");
    line
}

fn json(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

impl Recorder for ExchangeLog {
    fn wants_target(&self) -> bool {
        true
    }

    fn exchange(&self, record: &ExchangeRecord<'_>) {
        if self.min_total_ns > 0 {
            let total = record.phases.get(crate::phase::Phase::Total).unwrap_or(0);
            if total < self.min_total_ns {
                return;
            }
        }
        self.file
            .send(format_line(&self.tap, record, SystemTime::now()));
    }

    /// The logs are of exchanges: every other event is left out, each named so that a new
    /// one is a decision here.
    fn event(&self, event: Event) {
        match event {
            Event::Error(_)
            | Event::ClientClosed
            | Event::ConnectFailed(_)
            | Event::ConnectionOpened(_)
            | Event::ConnectionClosed(_)
            | Event::Bytes(..)
            | Event::Pushed(_)
            | Event::Correlated { .. }
            | Event::RequestHead(_) => {}
        }
    }

    fn flush(&self) {
        self.file.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phase::{Phase, Phases};
    use crate::recorder::{ExchangeId, RouteId};

    #[test]
    fn lines_are_json_with_phases_in_microseconds() {
        let mut phases = Phases::default();
        phases.set(Phase::UpstreamWait, 20_000_000);
        phases.set(Phase::Total, 20_500_000);
        let r = ExchangeRecord {
            id: ExchangeId(0x0001_0000_0000_002a),
            route: RouteId(0),
            method: "GET",
            target: b"/GET/\"k\"",
            status: 200,
            request_bytes: 30,
            response_bytes: 90,
            phases,
            failure: None,
            error_reply: false,
        };
        let line = format_line("webdis", &r, SystemTime::UNIX_EPOCH);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["target"], "/GET/\"k\"");
        assert_eq!(v["phases_us"]["upstream_wait"], 20_000.0);
        assert_eq!(v["phases_us"]["total"], 20_500.0);
        assert!(v["phases_us"].get("queue").is_none());
        assert_eq!(v["ts"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["exchange_id"], "000100000000002a");
    }
}

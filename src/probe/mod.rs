//! `phasescope probe`: how an upstream's time to first byte grows with the request, to
//! estimate from outside what the upstream pays to parse a request head.
//!
//! A proxy sees only the upstream's whole time to first byte (`upstream_wait`). Parsing a
//! head costs more the larger it is and the more fields it has, while the upstream's other
//! work does not depend on the head, so varying the head alone and watching time to first
//! byte move isolates the parser (plus everything else that grows with the head: the
//! kernel's copy, any proxy on the way). The probe sends requests one at a time on one
//! keep-alive connection, over a grid of head sizes and field counts in random order, and
//! fits `ttfb = a + b·bytes + c·headers` (see [`fit`]). docs/probe.md describes the method
//! and its limits.

mod args;
mod conn;
pub mod fit;
pub mod grid;
mod report;
mod run;
pub mod target;
mod typical;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::net::SocketAddr;

use anyhow::{bail, Context};

pub use args::ProbeArgs;
pub use conn::{ExchangeError, ProbeConn, Timed};
pub use fit::{Cell, Estimate, Fit};
pub use grid::{Grid, Shape};
pub use report::{duration as format_ns, CellSummary, Floor, Model, Pass, ProbeReport, Typical};
pub use run::run;
pub use target::Target;

/// What to probe and how.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub target: Target,
    /// Timed requests per cell (and of the minimal request).
    pub samples: usize,
    pub grid: Grid,
    pub seed: u64,
    pub bootstrap: usize,
    /// Unmeasured requests first, so that caches, the allocator and the server's JIT (if
    /// any) are warm before the first sample.
    pub warmup: usize,
    /// The request shape the result is applied to.
    pub typical: Shape,
    /// Where `typical` came from, for the report.
    pub typical_source: String,
    /// Passes over the whole grid; with more than one, each is fitted on its own too.
    pub repeat: usize,
    /// Draw a progress line on standard error.
    pub progress: bool,
}

impl ProbeOptions {
    /// Defaults for everything but the target: 30 samples per cell, the default grid, a
    /// seed from the clock, 1000 bootstrap replicates, a 380-byte head with 8 fields.
    pub fn new(target: Target) -> ProbeOptions {
        ProbeOptions {
            target,
            samples: 30,
            grid: Grid::default(),
            seed: crate::rng::Rng::seed_from_time(),
            bootstrap: 1000,
            warmup: 50,
            typical: Shape {
                bytes: 380,
                headers: 8,
            },
            typical_source: "the defaults (380 bytes, 8 fields); --from ADMIN_URL takes them from a phasescope tap".into(),
            repeat: 1,
            progress: false,
        }
    }
}

/// `phasescope probe`: runs and prints; an error when the probe could not complete.
pub fn command(args: &ProbeArgs) -> anyhow::Result<()> {
    crate::clock::init();
    let options = args.options_with_tap()?;
    let report = run(&options)?;
    if args.format == "json" {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| anyhow::anyhow!("cannot encode the report: {e}"))?;
        println!("{text}");
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

/// Time to first byte without the client's own cost of sending: each sample's time from
/// the start of its write, less its own write, or less the cell's median write if its own
/// was slower than that. A write during which this thread was preempted lasts as long as
/// whatever ran instead, the server included; subtracting all of it would erase the very
/// time being measured, while the median write is what sending costs when undisturbed
/// (as long as fewer than half the writes are disturbed).
fn server_times(timed: &[Timed]) -> Vec<f64> {
    let mut writes: Vec<f64> = timed.iter().map(|t| t.write_ns as f64).collect();
    let typical = fit::median(&mut writes);
    timed
        .iter()
        .map(|t| (t.ttfb_ns as f64 - (t.write_ns as f64).min(typical)).max(0.0))
        .collect()
}

/// The connection the samples go over, reopened when the server closes it.
struct Session {
    addr: SocketAddr,
    conn: Option<ProbeConn>,
    connect_ns: Vec<u64>,
    statuses: BTreeMap<u16, usize>,
    timed: usize,
    failed: usize,
    reconnects: usize,
}

impl Session {
    fn open(addr: SocketAddr) -> anyhow::Result<Session> {
        let mut session = Session {
            addr,
            conn: None,
            connect_ns: Vec::new(),
            statuses: BTreeMap::new(),
            timed: 0,
            failed: 0,
            reconnects: 0,
        };
        session.connect()?;
        session.reconnects = 0;
        Ok(session)
    }

    fn connect(&mut self) -> anyhow::Result<&mut ProbeConn> {
        let (conn, connect_ns) = ProbeConn::connect(self.addr)
            .with_context(|| format!("cannot connect to {}", self.addr))?;
        self.connect_ns.push(connect_ns);
        self.reconnects += 1;
        Ok(self.conn.insert(conn))
    }

    /// One timed exchange; on a failure, one more try on a new connection. `None` when
    /// both failed; an error once failures pass a tenth of the requests (the target is
    /// not answering, and a fit would mean nothing).
    fn exchange(&mut self, head: &[u8]) -> anyhow::Result<Option<Timed>> {
        let mut last = None;
        for _attempt in 0..2 {
            let conn = match self.conn.as_mut() {
                Some(conn) => conn,
                None => self.connect()?,
            };
            match conn.exchange(head) {
                Ok(timed) => {
                    self.timed += 1;
                    *self.statuses.entry(timed.status).or_default() += 1;
                    if !timed.keep_alive {
                        self.conn = None;
                    }
                    return Ok(Some(timed));
                }
                Err(e) => {
                    self.conn = None;
                    last = Some(e);
                }
            }
        }
        self.failed += 1;
        if self.failed > 3 + self.timed / 10 {
            let e = last.map_or_else(|| "unknown".to_owned(), |e| e.to_string());
            bail!(
                "{} of {} requests to {} failed; the last: {e}",
                self.failed,
                self.failed + self.timed,
                self.addr
            );
        }
        Ok(None)
    }
}

/// A one-line progress display on standard error, for a terminal only.
struct Progress {
    enabled: bool,
    total: usize,
    shown: usize,
}

impl Progress {
    fn new(wanted: bool, total: usize) -> Progress {
        Progress {
            enabled: wanted && std::io::stderr().is_terminal(),
            total,
            shown: 0,
        }
    }

    fn update(&mut self, done: usize) {
        // Redraw at most ~100 times: the terminal write must not disturb the timings.
        if !self.enabled || (done - self.shown) * 100 < self.total && done != self.total {
            return;
        }
        self.shown = done;
        let mut err = std::io::stderr();
        let _ = write!(err, "\rprobing: {done}/{} requests", self.total);
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.enabled {
            let _ = writeln!(std::io::stderr());
        }
    }
}

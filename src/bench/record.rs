//! What a bench records of its load, the rows its report is made of: each run's (or each
//! paired side's) [`RunRecord`], each side's [`SideErrors`], and what `--until-mde` came
//! to. Here, below the steps that make them (`runs`, `paired`), the validity rules that
//! read them and the report that prints them, so that each of those imports them and none
//! imports another for them: spread over those files, they made a circle of imports.

use std::collections::BTreeMap;

use serde::Serialize;

use super::load::Outcome;
use super::order::Side;
use crate::snapshot::Snapshot;

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub index: usize,
    pub side: Side,
    /// Exchanges the proxy recorded on the side's tap.
    pub requests: u64,
    /// The snapshot's window (from the reset to the snapshot).
    pub seconds: f64,
    pub requests_per_s: f64,
    /// Failed connects and exchanges of the built-in generator (0 with `--load`).
    pub errors: u64,
    /// What the built-in generator saw (null with `--load`).
    pub generator: Option<Outcome>,
    /// The proxy's errors on the side's tap in this run, by kind (non-zero ones).
    pub proxy_errors: BTreeMap<String, u64>,
    /// No error of any kind: neither the generator's (failures, answers of 400 or more)
    /// nor the proxy's.
    pub valid: bool,
}

impl RunRecord {
    pub fn new(index: usize, side: Side, snap: &Snapshot, generator: Option<Outcome>) -> Self {
        let requests = recorded(snap, side.tap());
        let seconds = (snap.taken_at_unix - snap.since_unix).max(0.0);
        let proxy_errors: BTreeMap<String, u64> = snap
            .taps
            .get(side.tap())
            .map(|t| {
                t.errors
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(k, n)| (k.clone(), *n))
                    .collect()
            })
            .unwrap_or_default();
        let mut run = RunRecord {
            index,
            side,
            requests,
            seconds,
            requests_per_s: requests as f64 / seconds.max(1e-9),
            errors: generator.as_ref().map_or(0, |g| g.errors),
            generator,
            proxy_errors,
            valid: true,
        };
        run.valid = run.failed() == 0;
        run
    }

    /// Failed exchanges of the run: the generator's failures and error answers, or the
    /// proxy's errors on the tap (all that is known with `--load`), whichever is larger,
    /// since one failure is often seen by both (an upstream refused: the proxy counts
    /// `upstream_connect`, the generator a 502).
    pub fn failed(&self) -> u64 {
        let generator = self
            .generator
            .as_ref()
            .map_or(0, |g| g.errors + g.error_statuses);
        let proxy: u64 = self.proxy_errors.values().sum();
        generator.max(proxy)
    }
}

/// One side's errors over the bench.
#[derive(Debug, Clone, Serialize)]
pub struct SideErrors {
    pub side: Side,
    /// Runs with at least one error.
    pub invalid_runs: usize,
    pub runs: usize,
    /// Failed exchanges (the larger of what the generator and the proxy counted).
    pub errors: u64,
    /// Exchanges tried: answered ones and failed ones.
    pub attempts: u64,
    /// `errors / attempts`.
    pub error_rate: f64,
}

/// What `--until-mde` came to.
#[derive(Debug, Clone, Serialize)]
pub struct UntilMde {
    /// The target, a fraction.
    pub target: f64,
    /// The primary rows' largest mde when the duet ended (null: a row had none).
    pub mde: Option<f64>,
    /// Whether the target was reached (else `--max-duration` passed first).
    pub reached: bool,
    /// Seconds of measured windows.
    pub seconds: f64,
    pub max_duration: f64,
}

/// Exchanges the proxy recorded on `tap` in this snapshot (all routes).
pub fn recorded(snap: &Snapshot, tap: &str) -> u64 {
    snap.taps
        .get(tap)
        .and_then(|t| t.phases.get("total"))
        .map_or(0, |routes| routes.values().map(|s| s.count).sum())
}

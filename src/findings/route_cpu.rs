//! Each tap's CPU per route over a snapshot's window, for what `/api/snapshot` serves
//! beside the findings (the live page's route table) and for the gauges the scrapes
//! refresh ([`super::Recent`]). The estimate is `snapshot::route_cpu`'s; this module
//! only runs it per tap, and no more often than [`EVERY`] for the page, which asks once
//! a second (a bootstrap of a long window takes milliseconds).

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::snapshot::route_cpu::{estimate, RouteCpuEstimate};
use crate::snapshot::Snapshot;
use crate::sync::lock;

/// Tap → its CPU per route.
pub type Estimates = BTreeMap<String, RouteCpuEstimate>;

/// The shortest time between two estimates of the same window for the page, seconds.
pub const EVERY: f64 = 5.0;

/// Tap → its estimate, for the taps whose snapshot has slices.
pub fn estimates(snapshot: &Snapshot) -> BTreeMap<String, RouteCpuEstimate> {
    snapshot
        .taps
        .iter()
        .filter_map(|(name, tap)| {
            let slices = tap.upstream.as_ref()?.slices.as_ref()?;
            Some((name.clone(), estimate(slices)?))
        })
        .collect()
}

/// The last estimates and the window they were made of.
#[derive(Debug, Default)]
pub struct Cached {
    /// The window's start and when it was estimated (Unix seconds), and the estimates.
    last: Mutex<Option<(f64, f64, Estimates)>>,
}

impl Cached {
    /// The estimates of `snapshot`'s window: those of the last call while its window
    /// started at the same moment and they are less than [`EVERY`] old.
    pub fn of(&self, snapshot: &Snapshot) -> BTreeMap<String, RouteCpuEstimate> {
        let mut last = lock(&self.last);
        if let Some((since, at, e)) = last.as_ref() {
            if *since == snapshot.since_unix && snapshot.taken_at_unix - at < EVERY {
                return e.clone();
            }
        }
        let e = estimates(snapshot);
        *last = Some((snapshot.since_unix, snapshot.taken_at_unix, e.clone()));
        e
    }
}

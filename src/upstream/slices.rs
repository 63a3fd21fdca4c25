//! The window cut into short slices: per slice, the upstream's CPU and each route's
//! exchanges, what [`crate::snapshot::route_cpu`] fits CPU per request per route from.
//!
//! The watcher closes a slice every [`SLICE`] (or every `interval`, if shorter) from the
//! same counters as the accounting: the CPU the accountant has added since the slice
//! began, and the exchanges the tap has counted per route since then, read through
//! [`RouteCounts`] (the metrics' shards, which the relay counts into already: nothing is
//! added to a request's path). A window keeps at most [`MAX_SLICES`]; past that, pairs of
//! neighbours are added into one, and from then on each slice holds twice as many reads.
//! A sum of slices is still a slice of the same model, only a coarser one.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::account::Totals;
pub use crate::snapshot::slices::SLICE;
use crate::snapshot::{RouteSlices, Slice};

/// Slices a window keeps before it halves its resolution.
pub const MAX_SLICES: usize = 1024;

/// A tap's exchanges per route, as the metrics count them: what the slices read.
pub trait RouteCounts: Send + Sync {
    /// Every route's exchanges since start, indexed by route id (`into` is cleared first).
    fn exchanges(&self, into: &mut Vec<u64>);
    /// The route label of an index of [`exchanges`](Self::exchanges).
    fn route_name(&self, index: usize) -> String;
}

/// Where the current slice began.
struct Mark {
    totals: Totals,
    threads_readable: bool,
    exchanges: Vec<u64>,
    at: Instant,
}

/// The slices of the current window, kept by [`super::Upstream`].
#[derive(Default)]
pub(crate) struct SliceWindow {
    routes: Option<Arc<dyn RouteCounts>>,
    start: Option<Mark>,
    done: Vec<Slice>,
    /// Reads added into `pending` so far, and how many make a slice now.
    pending: Option<Slice>,
    pending_reads: u32,
    per_slice: u32,
    scratch: Vec<u64>,
}

impl SliceWindow {
    pub(crate) fn set_routes(&mut self, routes: Arc<dyn RouteCounts>) {
        self.routes = Some(routes);
        self.start = None;
    }

    /// Whether a tap's routes are counted (slices are cut at all).
    pub(crate) fn counting(&self) -> bool {
        self.routes.is_some()
    }

    /// Forgets where the slice in progress began (no process, or another one): the next
    /// read starts a slice, none spans the change.
    pub(crate) fn lose_track(&mut self) {
        self.start = None;
    }

    /// Ends the slice in progress at the accountant's `totals` (just read) and begins the
    /// next one there.
    pub(crate) fn close(&mut self, totals: Totals, threads_readable: bool) {
        let Some(routes) = &self.routes else { return };
        routes.exchanges(&mut self.scratch);
        let at = Instant::now();
        if let Some(start) = &self.start {
            let window = totals.since(&start.totals);
            // The process's CPU clock, to the nanosecond and current to the read; else
            // schedstat's (which lags a tick for a running thread); else the clock ticks
            // of user and system time.
            let cpu_ns = if window.process_cpu_ns > 0 {
                window.process_cpu_ns
            } else if threads_readable && start.threads_readable {
                window.cpu_ns
            } else {
                window.user_ns + window.system_ns
            };
            let exchanges = self
                .scratch
                .iter()
                .enumerate()
                .map(|(i, &n)| n.saturating_sub(start.exchanges.get(i).copied().unwrap_or(0)))
                .collect();
            let slice = Slice {
                end_unix: unix_now(),
                seconds: at.saturating_duration_since(start.at).as_secs_f64(),
                cpu_seconds: cpu_ns as f64 / 1e9,
                exchanges,
            };
            self.push(slice);
        }
        match &mut self.start {
            Some(m) => {
                m.totals = totals;
                m.threads_readable = threads_readable;
                m.exchanges.clone_from(&self.scratch);
                m.at = at;
            }
            None => {
                self.start = Some(Mark {
                    totals,
                    threads_readable,
                    exchanges: self.scratch.clone(),
                    at,
                })
            }
        }
    }

    fn push(&mut self, slice: Slice) {
        let per_slice = self.per_slice.max(1);
        match &mut self.pending {
            Some(p) => p.add(&slice),
            None => self.pending = Some(slice),
        }
        self.pending_reads += 1;
        if self.pending_reads < per_slice {
            return;
        }
        self.pending_reads = 0;
        if let Some(p) = self.pending.take() {
            self.done.push(p);
        }
        if self.done.len() >= MAX_SLICES {
            let pairs: Vec<Slice> = self
                .done
                .chunks(2)
                .map(|pair| {
                    let mut s = pair[0].clone();
                    if let Some(b) = pair.get(1) {
                        s.add(b);
                    }
                    s
                })
                .collect();
            self.done = pairs;
            self.per_slice = per_slice * 2;
        }
    }

    /// Starts a new window: the slices so far are dropped, the slice in progress goes on.
    pub(crate) fn restart(&mut self) {
        self.done.clear();
        self.pending = None;
        self.pending_reads = 0;
        self.per_slice = 1;
    }

    /// The window's slices, the columns named, routes that had no exchange left out;
    /// `None` when no tap's routes are counted.
    pub(crate) fn snapshot(&self) -> Option<RouteSlices> {
        let routes = self.routes.as_ref()?;
        let all: Vec<&Slice> = self.done.iter().chain(self.pending.as_ref()).collect();
        let width = all.iter().map(|s| s.exchanges.len()).max().unwrap_or(0);
        let used: Vec<usize> = (0..width)
            .filter(|&i| {
                all.iter()
                    .any(|s| s.exchanges.get(i).is_some_and(|&n| n > 0))
            })
            .collect();
        Some(RouteSlices {
            routes: used.iter().map(|&i| routes.route_name(i)).collect(),
            slices: all
                .iter()
                .map(|s| Slice {
                    exchanges: used
                        .iter()
                        .map(|&i| s.exchanges.get(i).copied().unwrap_or(0))
                        .collect(),
                    ..(*s).clone()
                })
                .collect(),
        })
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Fixed(Mutex<Vec<u64>>);

    impl RouteCounts for Fixed {
        fn exchanges(&self, into: &mut Vec<u64>) {
            into.clear();
            into.extend(self.0.lock().unwrap().iter());
        }
        fn route_name(&self, index: usize) -> String {
            format!("/r{index}")
        }
    }

    #[test]
    fn slices_hold_the_differences_and_halve_when_full() {
        let counts = Arc::new(Fixed(Mutex::new(vec![0, 0, 0])));
        let mut w = SliceWindow::default();
        w.set_routes(counts.clone());
        let mut totals = Totals::default();
        w.close(totals, true);
        for i in 0..(MAX_SLICES as u64 + 10) {
            totals.cpu_ns += 1_000_000;
            {
                let mut c = counts.0.lock().unwrap();
                c[0] += 1;
                c[2] += i % 2;
            }
            w.close(totals, true);
        }
        let snap = w.snapshot().unwrap();
        // Route 1 never had an exchange: its column is left out.
        assert_eq!(snap.routes, vec!["/r0", "/r2"]);
        let cpu: f64 = snap.slices.iter().map(|s| s.cpu_seconds).sum();
        let n0: u64 = snap.slices.iter().map(|s| s.exchanges[0]).sum();
        assert!(
            (cpu - (MAX_SLICES as f64 + 10.0) * 1e-3).abs() < 1e-9,
            "{cpu}"
        );
        assert_eq!(n0, MAX_SLICES as u64 + 10);
        assert!(
            snap.slices.len() <= MAX_SLICES / 2 + 10,
            "{}",
            snap.slices.len()
        );
        w.restart();
        assert!(w.snapshot().unwrap().slices.is_empty());
    }
}

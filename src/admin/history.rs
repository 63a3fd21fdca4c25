//! The live page's history: what the window held second by second, kept by the admin
//! server whether or not a page is open (`GET /api/history`, docs/metrics.md).
//!
//! The page drew only what it polled since it opened: an outage two minutes earlier was
//! invisible to whoever opened the page to look at it. A thread of its own takes a
//! snapshot every [`EVERY`] and keeps, per tap, the difference from the one before
//! (exchanges, errors, the answered exchanges' phase sums, the p50 and p99 of `total` over
//! just that second), at most [`KEEP`] points; the page draws them first, then its polls.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::metrics::{HistoryTotals, Registry};
use crate::sync::lock;

/// How often a point is taken: the page's own poll.
pub const EVERY: Duration = Duration::from_secs(1);
/// Points kept: ten minutes, as the page keeps.
pub const KEEP: usize = 600;

/// One second of one tap.
#[derive(Debug, Clone, Serialize)]
pub struct TapPoint {
    /// Exchanges recorded (all statuses, the failed included).
    pub requests: u64,
    /// Errors of every kind.
    pub errors: u64,
    /// Exchanges answered with success: what `sums` are over.
    pub answered: u64,
    /// Phase → seconds summed over the answered exchanges (all routes).
    pub sums: BTreeMap<String, f64>,
    /// Of `total` over the second, seconds; null without an answered exchange.
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// One second of every tap.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The end of the second (Unix seconds) and its length.
    pub t: f64,
    pub dt: f64,
    /// The start of the window it belongs to: a reset starts another.
    pub since: f64,
    pub taps: BTreeMap<String, TapPoint>,
}

/// The points of the current window.
#[derive(Debug, Default)]
pub struct History {
    points: Mutex<VecDeque<Point>>,
}

impl History {
    /// Starts taking points from `registry` on a thread of its own, which ends once the
    /// returned history is dropped.
    pub fn start(registry: Arc<Registry>) -> Arc<History> {
        let history = Arc::new(History::default());
        let weak: Weak<History> = Arc::downgrade(&history);
        let spawned = std::thread::Builder::new()
            .name("phasescope-history".to_owned())
            .spawn(move || {
                // Not a snapshot a second: at 256 routes, merging every series' HDR
                // copies each second took the proxy's RSS 60 to 190 MB past its stated
                // ceiling (tests/route_ceiling.rs); only `total`'s are merged.
                let mut prev: Option<Totals> = None;
                loop {
                    std::thread::sleep(EVERY);
                    let Some(history) = weak.upgrade() else { break };
                    if !registry.enabled() {
                        continue;
                    }
                    let now = Totals::of(registry.history_totals());
                    if let Some(p) = prev.as_ref().and_then(|p| point(p, &now)) {
                        history.push(p);
                    }
                    prev = Some(now);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("the live page's history is off: cannot start its thread: {e}");
        }
        history
    }

    fn push(&self, p: Point) {
        let mut points = lock(&self.points);
        points.push_back(p);
        while points.len() > KEEP {
            points.pop_front();
        }
    }

    /// The points of the latest window, oldest first.
    pub fn window(&self) -> Vec<Point> {
        let points = lock(&self.points);
        let Some(since) = points.back().map(|p| p.since) else {
            return Vec::new();
        };
        points
            .iter()
            .filter(|p| p.since == since)
            .cloned()
            .collect()
    }
}

/// The registry's cumulative figures a point is the difference of, with when they were
/// taken and the start of their window.
struct Totals {
    taken_at: f64,
    since: f64,
    taps: BTreeMap<String, HistoryTotals>,
}

impl Totals {
    fn of((since, taps): (SystemTime, Vec<HistoryTotals>)) -> Totals {
        let unix = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        Totals {
            taken_at: unix(SystemTime::now()),
            since: unix(since),
            taps: taps.into_iter().map(|t| (t.tap.clone(), t)).collect(),
        }
    }
}

/// The second between `prev` and `now`; `None` across a reset.
fn point(prev: &Totals, now: &Totals) -> Option<Point> {
    let dt = now.taken_at - prev.taken_at;
    if prev.since != now.since || dt <= 0.0 {
        return None;
    }
    let taps = now
        .taps
        .iter()
        .filter_map(|(name, tap)| Some((name.clone(), tap_point(prev.taps.get(name)?, tap))))
        .collect();
    Some(Point {
        t: now.taken_at,
        dt,
        since: now.since,
        taps,
    })
}

fn tap_point(prev: &HistoryTotals, now: &HistoryTotals) -> TapPoint {
    let sums = now
        .sums
        .iter()
        .map(|(phase, &x)| {
            let before = prev.sums.get(phase).copied().unwrap_or(0.0);
            (phase.clone(), (x - before).max(0.0))
        })
        .collect();
    let [p50, p99] = interval_quantiles(&prev.total, &now.total, [0.5, 0.99]);
    TapPoint {
        requests: now.requests.saturating_sub(prev.requests),
        errors: now.errors.saturating_sub(prev.errors),
        answered: now.answered.saturating_sub(prev.answered),
        sums,
        p50,
        p99,
    }
}

/// Quantiles of `total` over the second: the difference of the two cumulative histograms
/// (values in nanoseconds).
fn interval_quantiles(
    before: &BTreeMap<u64, u64>,
    now: &BTreeMap<u64, u64>,
    qs: [f64; 2],
) -> [Option<f64>; 2] {
    let diff: Vec<(u64, u64)> = now
        .iter()
        .map(|(&v, &n)| (v, n.saturating_sub(before.get(&v).copied().unwrap_or(0))))
        .filter(|&(_, n)| n > 0)
        .collect();
    let count: u64 = diff.iter().map(|&(_, n)| n).sum();
    qs.map(|q| {
        if count == 0 {
            return None;
        }
        let rank = ((q * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        diff.iter()
            .find(|&&(_, n)| {
                seen += n;
                seen >= rank
            })
            .map(|&(v, _)| v as f64 / 1e9)
    })
}

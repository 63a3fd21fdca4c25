//! One tap's window as the rules read it: phase counts and sums over its routes, the
//! request count, and what its upstream process did per request.

use std::collections::BTreeMap;

use crate::snapshot::summary::{Inside, DEFAULT_WHAT_IF};
use crate::snapshot::ProxySnapshot;
use crate::snapshot::{SeriesSnapshot, TapSnapshot};

/// The count and sum of one phase, over some routes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Agg {
    pub count: u64,
    /// Seconds.
    pub sum: f64,
}

impl Agg {
    fn add(&mut self, s: &SeriesSnapshot) {
        self.count += s.count;
        self.sum += s.sum;
    }

    /// The mean in seconds; `None` when nothing was observed.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// One tap over one window.
pub struct TapView<'a> {
    pub name: &'a str,
    pub tap: &'a TapSnapshot,
    /// Seconds the window lasted.
    pub window: f64,
    /// Exchanges answered with success: the `total` count over every route.
    pub requests: u64,
    /// The server's own error answers (an HTTP 5xx it sent), kept out of `requests` and
    /// of every phase the rules read.
    pub server_errors: u64,
    /// The mean `total`, seconds.
    pub mean_total: Option<f64>,
    /// The upstream's process over the window, when the tap watches one.
    pub inside: Option<Inside>,
    /// phasescope's own process over the same window, when the snapshot has it.
    pub proxy: Option<&'a ProxySnapshot>,
    /// The thresholds the user may set.
    pub thresholds: Thresholds,
}

/// The thresholds of the rules that take them from the user (`report
/// --server-errors-warn`, `--server-errors-critical`; docs/config.md): shares of all
/// exchanges, as fractions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// The server's error answers' share from which `server_errors` is a warning.
    pub server_errors_warn: f64,
    /// … and critical.
    pub server_errors_critical: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            server_errors_warn: 0.01,
            server_errors_critical: 0.10,
        }
    }
}

impl<'a> TapView<'a> {
    pub fn new(name: &'a str, tap: &'a TapSnapshot, window: f64) -> Self {
        let total = phase_of(tap, "total", None);
        let server_errors: u64 = errors_by_status(tap).values().sum();
        // The server's CPU went into its error answers too: per request is per exchange
        // it answered, successes and errors.
        let inside = tap.upstream.as_ref().map(|u| {
            Inside::new(
                u,
                total.count + server_errors,
                total.mean(),
                DEFAULT_WHAT_IF,
            )
        });
        Self {
            name,
            tap,
            window,
            requests: total.count,
            server_errors,
            mean_total: total.mean(),
            inside,
            proxy: None,
            thresholds: Thresholds::default(),
        }
    }

    /// With the thresholds of the rules that take them from the user.
    pub fn with_thresholds(mut self, thresholds: Thresholds) -> Self {
        self.thresholds = thresholds;
        self
    }

    /// The server's error answers by status (`"503"`): the count of each status's
    /// `total` series over every route.
    pub fn server_errors_by_status(&self) -> BTreeMap<&'a str, u64> {
        errors_by_status(self.tap)
    }

    /// With the proxy's own process over the same window.
    pub fn with_proxy(mut self, proxy: Option<&'a ProxySnapshot>) -> Self {
        self.proxy = proxy;
        self
    }

    /// `phase` over every route.
    pub fn phase(&self, phase: &str) -> Agg {
        phase_of(self.tap, phase, None)
    }

    /// `phase` of one route.
    pub fn route_phase(&self, phase: &str, route: &str) -> Agg {
        phase_of(self.tap, phase, Some(route))
    }

    /// The mean of `phase` per exchange that had it, seconds.
    pub fn mean(&self, phase: &str) -> Option<f64> {
        self.phase(phase).mean()
    }

    /// The routes that have a `total`, each with its count.
    pub fn routes(&self) -> Vec<(&'a str, u64)> {
        self.tap
            .phases
            .get("total")
            .into_iter()
            .flatten()
            .map(|(route, s)| (route.as_str(), s.count))
            .collect()
    }

    /// The observations of `phase` (one route, or all) between `low` and `high` seconds,
    /// both inclusive, read off the HDR histogram: their count and sum (each value taken
    /// as its bucket's, at most 1/128 above the exact one).
    pub fn between(&self, phase: &str, route: Option<&str>, low: f64, high: f64) -> Agg {
        let (lo, hi) = ((low * 1e9) as u64, (high * 1e9) as u64);
        let mut out = Agg::default();
        for (r, s) in self.tap.phases.get(phase).into_iter().flatten() {
            if route.is_some_and(|want| want != r) {
                continue;
            }
            for &[value, count] in &s.histogram {
                if (lo..=hi).contains(&value) {
                    out.count += count;
                    out.sum += value as f64 / 1e9 * count as f64;
                }
            }
        }
        out
    }

    /// `seconds` as a share of the mean `total`.
    pub fn of_total(&self, seconds: f64) -> Option<f64> {
        self.mean_total.filter(|t| *t > 0.0).map(|t| seconds / t)
    }
}

/// The server's error answers of `tap` by status, over every route.
fn errors_by_status(tap: &TapSnapshot) -> BTreeMap<&str, u64> {
    tap.server_errors
        .iter()
        .map(|(status, phases)| {
            let n: u64 = phases
                .get("total")
                .into_iter()
                .flatten()
                .map(|(_, s)| s.count)
                .sum();
            (status.as_str(), n)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn phase_of(tap: &TapSnapshot, phase: &str, route: Option<&str>) -> Agg {
    let mut out = Agg::default();
    for (r, s) in tap.phases.get(phase).into_iter().flatten() {
        if route.is_none_or(|want| want == r) {
            out.add(s);
        }
    }
    out
}

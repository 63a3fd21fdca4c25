//! The slices an estimate reads, and what it knows of them before any fit: each route's
//! requests, the busiest first, the server's CPU, which slices served nothing (idle), and
//! the reasons that hold for every route at once (too few slices, a saturated server).

use super::{RouteCpu, MIN_SLICES, SATURATED_CV};
use crate::snapshot::slices::{RouteSlices, Slice, SLICE};

/// One window's slices, as the estimate reads them.
pub(super) struct Window<'a> {
    pub names: &'a [String],
    /// The slices that lasted at all, oldest first.
    pub rows: Vec<&'a Slice>,
    /// Per slice of `rows`: whether it served no exchange of any route.
    pub idle: Vec<bool>,
    /// Per route column: its exchanges over the slices.
    pub totals: Vec<u64>,
    /// The routes that had exchanges, busiest first.
    pub order: Vec<usize>,
    /// The process's CPU over the slices, seconds.
    pub cpu_seconds: f64,
}

impl<'a> Window<'a> {
    /// `None` when the slices hold no exchange at all.
    pub fn of(slices: &'a RouteSlices) -> Option<Window<'a>> {
        let rows: Vec<&Slice> = slices.slices.iter().filter(|s| s.seconds > 0.0).collect();
        let width = slices.routes.len();
        let count = |s: &Slice, r: usize| s.exchanges.get(r).copied().unwrap_or(0);
        let totals: Vec<u64> = (0..width)
            .map(|r| rows.iter().map(|s| count(s, r)).sum())
            .collect();
        if totals.iter().all(|&n| n == 0) {
            return None;
        }
        let mut order: Vec<usize> = (0..width).filter(|&r| totals[r] > 0).collect();
        order.sort_by(|&a, &b| totals[b].cmp(&totals[a]).then(a.cmp(&b)));
        Some(Window {
            names: &slices.routes,
            idle: rows
                .iter()
                .map(|s| s.exchanges.iter().all(|&n| n == 0))
                .collect(),
            cpu_seconds: rows.iter().map(|s| s.cpu_seconds).sum(),
            rows,
            totals,
            order,
        })
    }

    /// The slices that served something: the only ones that say anything of a route.
    pub fn loaded(&self) -> impl Iterator<Item = &'a Slice> + '_ {
        self.rows
            .iter()
            .zip(&self.idle)
            .filter(|(_, &idle)| !idle)
            .map(|(s, _)| *s)
    }

    pub fn loaded_count(&self) -> usize {
        self.idle.iter().filter(|&&i| !i).count()
    }

    pub fn requests(&self) -> u64 {
        self.totals.iter().sum()
    }

    /// The process's CPU per request over all routes: what any route's reason can still
    /// give, and the bound no route's figure may pass (weighted by its requests).
    pub fn per_request(&self) -> f64 {
        self.cpu_seconds / self.requests().max(1) as f64
    }

    /// Route `r` without a figure, and why.
    pub fn unknown(&self, r: usize, why: String) -> RouteCpu {
        RouteCpu {
            route: self.names[r].clone(),
            requests: self.totals[r],
            cpu_per_request: None,
            share: None,
            reason: Some(why),
        }
    }

    /// Every route without a figure, for one reason.
    pub fn all_unknown(&self, why: &str) -> Vec<RouteCpu> {
        self.order
            .iter()
            .map(|&r| self.unknown(r, why.to_owned()))
            .collect()
    }

    /// Why nothing can be estimated from so few slices with requests, if so.
    pub fn too_few_slices(&self) -> Option<String> {
        let n = self.loaded_count();
        (n < MIN_SLICES).then(|| {
            format!(
                "too few slices: {n} with requests of the {MIN_SLICES} the fit needs (a window of at least {} s under load)",
                (MIN_SLICES as f64 * SLICE.as_secs_f64()).ceil()
            )
        })
    }

    /// Saturation: the same CPU every slice with requests while the requests vary. A
    /// server that spends a full core whatever it serves (spinning, or work of its own)
    /// gives no figure per request; the reason says what the window still tells.
    pub fn saturated(&self) -> Option<String> {
        let loaded: Vec<&Slice> = self.loaded().collect();
        let rates: Vec<f64> = loaded.iter().map(|s| s.cpu_seconds / s.seconds).collect();
        let request_rates: Vec<f64> = loaded
            .iter()
            .map(|s| s.exchanges.iter().sum::<u64>() as f64 / s.seconds)
            .collect();
        let (cpu_cv, mean_rate) = cv(&rates);
        let (req_cv, _) = cv(&request_rates);
        (cpu_cv < SATURATED_CV && req_cv > 2.0 * cpu_cv && mean_rate > 0.2).then(|| {
            format!(
                "saturated: the server spent {:.2} CPUs in every slice (±{:.1} %) whatever the mix, so the routes cannot be told apart; over all routes a request costs {} of CPU at most",
                mean_rate,
                cpu_cv * 100.0,
                super::duration(self.per_request())
            )
        })
    }
}

/// Coefficient of variation and mean.
fn cv(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    if mean > 0.0 {
        (var.sqrt() / mean, mean)
    } else {
        (0.0, mean)
    }
}

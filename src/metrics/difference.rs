//! The window between two snapshots of one process: what happened after `older` was
//! taken and before `newer` was. Counts, sums and histograms subtract exactly; the
//! percentiles and extremes of a difference are read off its histogram (each at most
//! 1/128 above the exact value, as in a snapshot), since the exact extremes of a part of
//! a window are not kept.

use std::collections::BTreeMap;

use super::snapshot::{SeriesSnapshot, Snapshot, TapSnapshot};

impl Snapshot {
    /// The window from `older`'s `taken_at` to this one's. When a reset came between them
    /// (their `since` differ), this snapshot's own window is already the later one, and it
    /// is returned as it is.
    pub fn since(&self, older: &Snapshot) -> Snapshot {
        if older.since_unix != self.since_unix || older.taken_at_unix > self.taken_at_unix {
            return self.clone();
        }
        let mut out = self.clone();
        out.since = older.taken_at.clone();
        out.since_unix = older.taken_at_unix;
        out.findings = Vec::new();
        for (name, tap) in &mut out.taps {
            if let Some(before) = older.taps.get(name) {
                tap_since(tap, before);
            }
        }
        out
    }
}

fn tap_since(tap: &mut TapSnapshot, before: &TapSnapshot) {
    for (phase, routes) in &mut tap.phases {
        for (route, series) in routes.iter_mut() {
            if let Some(b) = before.phases.get(phase).and_then(|r| r.get(route)) {
                *series = series_since(series, b);
            }
        }
        routes.retain(|_, s| s.count > 0);
    }
    tap.phases.retain(|_, routes| !routes.is_empty());
    for (kind, n) in &mut tap.errors {
        *n = n.saturating_sub(before.errors.get(kind).copied().unwrap_or(0));
    }
    // The heads' shapes are kept per window since the reset only.
    tap.request_heads = None;
    if let (Some(u), Some(b)) = (&mut tap.upstream, &before.upstream) {
        *u = crate::upstream::snapshot::since(u, b);
    }
}

fn series_since(now: &SeriesSnapshot, before: &SeriesSnapshot) -> SeriesSnapshot {
    let mut counts: BTreeMap<u64, u64> = now.histogram.iter().map(|&[v, n]| (v, n)).collect();
    for &[v, n] in &before.histogram {
        if let Some(c) = counts.get_mut(&v) {
            *c = c.saturating_sub(n);
        }
    }
    let histogram: Vec<[u64; 2]> = counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(v, n)| [v, n])
        .collect();
    let count = now.count.saturating_sub(before.count);
    let sum = (now.sum - before.sum).max(0.0);
    let at = |q: f64| quantile(&histogram, count, q);
    SeriesSnapshot {
        count,
        sum,
        mean: if count == 0 { 0.0 } else { sum / count as f64 },
        min: histogram.first().map_or(0.0, |p| p[0] as f64 / 1e9),
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        p999: at(0.999),
        max: histogram.last().map_or(0.0, |p| p[0] as f64 / 1e9),
        histogram,
    }
}

/// The value at rank ⌈q · count⌉ of `[value_ns, count]` pairs, seconds.
fn quantile(histogram: &[[u64; 2]], count: u64, q: f64) -> f64 {
    let rank = ((q * count as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for &[v, n] in histogram {
        seen += n;
        if seen >= rank {
            return v as f64 / 1e9;
        }
    }
    histogram.last().map_or(0.0, |p| p[0] as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(pairs: &[[u64; 2]]) -> SeriesSnapshot {
        let count = pairs.iter().map(|p| p[1]).sum();
        let sum = pairs.iter().map(|p| p[0] as f64 / 1e9 * p[1] as f64).sum();
        SeriesSnapshot {
            count,
            sum,
            mean: sum / count as f64,
            min: 0.0,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            p999: 0.0,
            max: 0.0,
            histogram: pairs.to_vec(),
        }
    }

    #[test]
    fn a_series_difference_is_what_came_after() {
        let before = series(&[[1_000, 5], [2_000, 5]]);
        let now = series(&[[1_000, 5], [2_000, 6], [40_000_000, 9]]);
        let d = series_since(&now, &before);
        assert_eq!(d.count, 10);
        assert_eq!(d.histogram, vec![[2_000, 1], [40_000_000, 9]]);
        assert!((d.sum - (2e-6 + 9.0 * 0.04)).abs() < 1e-9);
        assert_eq!((d.min, d.p50, d.max), (2e-6, 0.04, 0.04));
    }
}

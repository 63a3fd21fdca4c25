//! Snapshots as windows: the window between two snapshots of one process (what happened
//! after the older was taken and before the newer was), and several windows as one.
//! Counts, sums and histograms subtract and add exactly; the percentiles of the result
//! are read off its histogram (each at most 1/128 above the exact value, as in a
//! snapshot), and so are the extremes of a difference, since those of part of a window
//! are not kept.

use std::collections::BTreeMap;

use super::document::Snapshot;
use super::series::SeriesSnapshot;
use super::tap::{PhaseSeries, TapSnapshot};
use super::{proxy, upstream};

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
        if let (Some(p), Some(b)) = (&mut out.proxy, &older.proxy) {
            *p = proxy::since(p, b);
        }
        for (name, tap) in &mut out.taps {
            if let Some(before) = older.taps.get(name) {
                tap_since(tap, before);
            }
        }
        out
    }
}

impl Snapshot {
    /// Several snapshots (of one proxy's runs, or of several proxies) as one window that
    /// holds all of their exchanges: series, errors, totals and upstream figures add up.
    /// `None` for no snapshot.
    pub fn merged(snapshots: &[Snapshot]) -> Option<Snapshot> {
        let (first, rest) = snapshots.split_first()?;
        let mut out = first.clone();
        out.findings = Vec::new();
        for s in rest {
            if s.since_unix < out.since_unix {
                out.since.clone_from(&s.since);
                out.since_unix = s.since_unix;
            }
            if s.taken_at_unix > out.taken_at_unix {
                out.taken_at.clone_from(&s.taken_at);
                out.taken_at_unix = s.taken_at_unix;
            }
            out.proxy = match (out.proxy.take(), &s.proxy) {
                (Some(a), Some(b)) => Some(proxy::merge(a, b)),
                (a, b) => a.or_else(|| b.clone()),
            };
            for (name, tap) in &s.taps {
                match out.taps.get_mut(name) {
                    Some(into) => tap_add(into, tap),
                    None => {
                        out.taps.insert(name.clone(), tap.clone());
                    }
                }
            }
        }
        Some(out)
    }
}

fn tap_add(into: &mut TapSnapshot, tap: &TapSnapshot) {
    phases_add(&mut into.phases, &tap.phases);
    for (kind, phases) in &tap.failed {
        phases_add(into.failed.entry(kind.clone()).or_default(), phases);
    }
    for (status, phases) in &tap.server_errors {
        phases_add(
            into.server_errors.entry(status.clone()).or_default(),
            phases,
        );
    }
    for (kind, n) in &tap.errors {
        *into.errors.entry(kind.clone()).or_default() += n;
    }
    into.client_closes += tap.client_closes;
    for (why, n) in &tap.connect_failures {
        *into.connect_failures.entry(why.clone()).or_default() += n;
    }
    if into.upstream_address.is_none() {
        into.upstream_address.clone_from(&tap.upstream_address);
    }
    into.request_heads = None;
    let t = &mut into.totals;
    t.requests += tap.totals.requests;
    t.pushed += tap.totals.pushed;
    t.client_closes += tap.totals.client_closes;
    t.correlations.matched += tap.totals.correlations.matched;
    t.correlations.unmatched += tap.totals.correlations.unmatched;
    for (into, from) in [
        (&mut t.errors, &tap.totals.errors),
        (&mut t.connections_open, &tap.totals.connections_open),
        (&mut t.connections, &tap.totals.connections),
        (&mut t.bytes, &tap.totals.bytes),
    ] {
        for (k, n) in from {
            *into.entry(k.clone()).or_default() += n;
        }
    }
    into.upstream = match (into.upstream.take(), &tap.upstream) {
        (Some(a), Some(b)) => Some(upstream::merge(a, b)),
        (a, b) => a.or_else(|| b.clone()),
    };
}

fn phases_add(into: &mut PhaseSeries, from: &PhaseSeries) {
    for (phase, routes) in from {
        let mine = into.entry(phase.clone()).or_default();
        for (route, series) in routes {
            match mine.get_mut(route) {
                Some(s) => *s = series_add(s, series),
                None => {
                    mine.insert(route.clone(), series.clone());
                }
            }
        }
    }
}

fn series_add(a: &SeriesSnapshot, b: &SeriesSnapshot) -> SeriesSnapshot {
    let mut counts: BTreeMap<u64, u64> = a.histogram.iter().map(|&[v, n]| (v, n)).collect();
    for &[v, n] in &b.histogram {
        *counts.entry(v).or_default() += n;
    }
    let histogram: Vec<[u64; 2]> = counts.into_iter().map(|(v, n)| [v, n]).collect();
    let count = a.count + b.count;
    let sum = a.sum + b.sum;
    read_off(histogram, count, sum, a.min.min(b.min), a.max.max(b.max))
}

/// A series of `histogram` with exact `count`, `sum` and extremes; percentiles read off
/// the histogram, clamped to the extremes.
fn read_off(histogram: Vec<[u64; 2]>, count: u64, sum: f64, min: f64, max: f64) -> SeriesSnapshot {
    let at = |q: f64| quantile(&histogram, count, q).clamp(min, max.max(min));
    SeriesSnapshot {
        count,
        sum,
        mean: if count == 0 { 0.0 } else { sum / count as f64 },
        min,
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        p999: at(0.999),
        max,
        histogram,
    }
}

fn tap_since(tap: &mut TapSnapshot, before: &TapSnapshot) {
    phases_since(&mut tap.phases, &before.phases);
    for (kind, phases) in &mut tap.failed {
        if let Some(b) = before.failed.get(kind) {
            phases_since(phases, b);
        }
    }
    tap.failed.retain(|_, phases| !phases.is_empty());
    for (status, phases) in &mut tap.server_errors {
        if let Some(b) = before.server_errors.get(status) {
            phases_since(phases, b);
        }
    }
    tap.server_errors.retain(|_, phases| !phases.is_empty());
    for (kind, n) in &mut tap.errors {
        *n = n.saturating_sub(before.errors.get(kind).copied().unwrap_or(0));
    }
    tap.client_closes = tap.client_closes.saturating_sub(before.client_closes);
    for (why, n) in &mut tap.connect_failures {
        *n = n.saturating_sub(before.connect_failures.get(why).copied().unwrap_or(0));
    }
    // The heads' shapes are kept per window since the reset only.
    tap.request_heads = None;
    if let (Some(u), Some(b)) = (&mut tap.upstream, &before.upstream) {
        *u = upstream::since(u, b);
    }
}

fn phases_since(now: &mut PhaseSeries, before: &PhaseSeries) {
    for (phase, routes) in now.iter_mut() {
        for (route, series) in routes.iter_mut() {
            if let Some(b) = before.get(phase).and_then(|r| r.get(route)) {
                *series = series_since(series, b);
            }
        }
        routes.retain(|_, s| s.count > 0);
    }
    now.retain(|_, routes| !routes.is_empty());
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
    let min = histogram.first().map_or(0.0, |p| p[0] as f64 / 1e9);
    let max = histogram.last().map_or(0.0, |p| p[0] as f64 / 1e9);
    read_off(histogram, count, sum, min, max)
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
            min: pairs[0][0] as f64 / 1e9,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            p999: 0.0,
            max: pairs[pairs.len() - 1][0] as f64 / 1e9,
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

    #[test]
    fn two_series_add_up_and_read_their_percentiles_off_the_sum() {
        let a = series(&[[1_000, 5]]);
        let b = series(&[[1_000, 1], [3_000, 4]]);
        let m = series_add(&a, &b);
        assert_eq!(m.count, 10);
        assert_eq!(m.histogram, vec![[1_000, 6], [3_000, 4]]);
        assert_eq!((m.p50, m.p90), (1e-6, 3e-6));
    }
}

//! The data every report is built from: per tap, phase and route, a count, a sum and a
//! distribution, whether it came from snapshots (exact HDR histograms) or from Prometheus
//! (bucket counts). Merging happens here, so several `--from` read as one proxy.

use std::collections::BTreeMap;

use anyhow::{ensure, Context};
use hdrhistogram::Histogram;

use crate::phase::Phase;
use crate::snapshot::{HdrLayout, SeriesSnapshot, Snapshot};

/// How the percentiles of a dataset were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// From HDR histograms: within 1/128 of the exact value, min and max exact.
    Exact,
    /// Interpolated within Prometheus buckets; max is a bucket bound.
    Buckets,
}

/// Everything a report reads, merged over its sources.
#[derive(Debug)]
pub struct Dataset {
    pub precision: Precision,
    /// What was read, for the report's header.
    pub sources: Vec<String>,
    /// Caveats to print with the report.
    pub notes: Vec<String>,
    /// Keyed by tap name.
    pub taps: BTreeMap<String, TapData>,
    /// The proxy's own process over the same window, when the snapshots had it (merged:
    /// times add up).
    pub proxy: Option<crate::snapshot::ProxySnapshot>,
}

#[derive(Debug, Default)]
pub struct TapData {
    /// `http` or `resp`, when the source says.
    pub protocol: Option<String>,
    /// Front to back (the snapshot's `position`), when the source says.
    pub position: Option<u32>,
    /// phase name → route → series, of the exchanges answered.
    pub phases: BTreeMap<String, BTreeMap<String, Series>>,
    /// The exchanges that failed: error kind → phase name → route → series (snapshots of
    /// older builds and Prometheus have none: their failures, if any, are in `phases`).
    pub failed: BTreeMap<String, BTreeMap<String, BTreeMap<String, Series>>>,
    /// The server's own error answers (an HTTP 5xx it sent): status → phase name → route
    /// → series, kept out of `phases` (snapshots of older builds have none: their errors
    /// are in `phases`). From Prometheus, the `total` series' counts only.
    pub server_errors: BTreeMap<String, BTreeMap<String, BTreeMap<String, Series>>>,
    /// The server's error answers counted without their phases (from Prometheus): status
    /// → route → count.
    pub server_counts: BTreeMap<String, BTreeMap<String, u64>>,
    /// Errors by kind over the window (snapshots only).
    pub errors: BTreeMap<String, u64>,
    /// Failed upstream connects by reason over the window (snapshots only).
    pub connect_failures: BTreeMap<String, u64>,
    /// Client connections the client ended between exchanges over the window.
    pub client_closes: u64,
    /// The `host:port` the tap forwards to, when the source says.
    pub upstream_address: Option<String>,
    /// The upstream's process over the same window, when a snapshot had it (merged:
    /// times, counts and samples add up; the last snapshot names the process).
    pub upstream: Option<crate::snapshot::UpstreamSnapshot>,
    /// An HTTP tap of a `[[correlate]]`: its RESP tap, when the source says.
    pub backend: Option<String>,
}

/// One (tap, phase, route) series, all durations in seconds.
#[derive(Debug, Clone)]
pub struct Series {
    pub count: u64,
    pub sum: f64,
    /// Exact minimum; unknown from buckets.
    pub min: Option<f64>,
    /// Exact maximum, or (from buckets) the top of the highest non-empty bucket.
    pub max: f64,
    pub dist: Distribution,
}

#[derive(Debug, Clone)]
pub enum Distribution {
    /// Nanosecond values, layout of the snapshot.
    Hdr(Histogram<u64>),
    /// Prometheus buckets: (upper bound in seconds, cumulative count), ascending, the last
    /// one `+Inf`. Counts from `increase()` are extrapolated, hence not integers.
    Buckets(Vec<(f64, f64)>),
}

/// The numbers a report row shows, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub count: u64,
    pub sum: f64,
    pub mean: f64,
    pub min: Option<f64>,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Series {
    /// A series from one snapshot, its histogram recorded into the snapshot's layout.
    pub fn from_snapshot(s: &SeriesSnapshot, layout: &HdrLayout) -> anyhow::Result<Series> {
        let mut hist = layout.empty_histogram()?;
        s.add_to(&mut hist)?;
        Ok(Series {
            count: s.count,
            sum: s.sum,
            min: Some(s.min),
            max: s.max,
            dist: Distribution::Hdr(hist),
        })
    }

    /// Adds `other` in: counts and sums add, extremes widen, distributions merge.
    pub fn merge(&mut self, other: &Series) -> anyhow::Result<()> {
        self.count += other.count;
        self.sum += other.sum;
        self.min = match (self.min, other.min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
        self.max = self.max.max(other.max);
        match (&mut self.dist, &other.dist) {
            (Distribution::Hdr(a), Distribution::Hdr(b)) => {
                a.add(b).context("merging HDR histograms")?;
            }
            (Distribution::Buckets(a), Distribution::Buckets(b)) => {
                *a = merge_buckets(a, b);
            }
            _ => anyhow::bail!("cannot merge a snapshot series with a Prometheus series"),
        }
        Ok(())
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The `q` quantile in seconds. HDR: the top of the bucket holding rank ⌈q·count⌉,
    /// clamped to the exact extremes, exactly as `/api/snapshot` computes it. Buckets:
    /// linear interpolation inside the bucket holding rank q·count, as PromQL's
    /// `histogram_quantile` does.
    pub fn quantile(&self, q: f64) -> f64 {
        match &self.dist {
            Distribution::Hdr(h) => {
                if h.is_empty() {
                    return 0.0;
                }
                let lo = self.min.map_or(0, |m| (m * 1e9).round() as u64);
                let hi = (self.max * 1e9).round() as u64;
                h.value_at_quantile(q).clamp(lo.min(hi), hi) as f64 / 1e9
            }
            // Every value 0 (a phase that took no time, e.g. a response in one read):
            // interpolating inside the first bucket would invent durations.
            Distribution::Buckets(_) if self.sum <= 0.0 => 0.0,
            Distribution::Buckets(b) => bucket_quantile(b, q),
        }
    }

    pub fn stats(&self) -> Stats {
        Stats {
            count: self.count,
            sum: self.sum,
            mean: self.mean(),
            min: self.min,
            p50: self.quantile(0.5),
            p90: self.quantile(0.9),
            p99: self.quantile(0.99),
            p999: self.quantile(0.999),
            max: self.max,
        }
    }
}

/// Adds two cumulative bucket lists bound by bound; a bound only one side has gets the
/// other side's cumulative count at the next lower bound it has.
fn merge_buckets(a: &[(f64, f64)], b: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut bounds: Vec<f64> = a.iter().chain(b).map(|&(le, _)| le).collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    let at = |list: &[(f64, f64)], le: f64| {
        list.iter()
            .take_while(|&&(l, _)| l <= le)
            .last()
            .map_or(0.0, |&(_, c)| c)
    };
    bounds
        .into_iter()
        .map(|le| (le, at(a, le) + at(b, le)))
        .collect()
}

/// `histogram_quantile` on one cumulative bucket list.
pub fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return 0.0;
    };
    if total <= 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, cumulative) in buckets {
        if cumulative >= rank && cumulative > below {
            if le.is_infinite() {
                // Nothing is known above the last finite bound.
                return lower;
            }
            return lower + (le - lower) * (rank - below) / (cumulative - below);
        }
        lower = le;
        below = cumulative;
    }
    lower
}

/// The top of the highest bucket that holds anything (the largest finite bound if only
/// `+Inf` does).
pub fn bucket_max(buckets: &[(f64, f64)]) -> f64 {
    let mut previous = 0.0;
    let mut last_finite = 0.0;
    let mut top = 0.0;
    for &(le, cumulative) in buckets {
        if cumulative > previous {
            top = if le.is_finite() { le } else { last_finite };
        }
        if le.is_finite() {
            last_finite = le;
        }
        previous = cumulative;
    }
    top
}

/// Orders phase names as the timeline does (`Phase::ALL`), unknown names last.
pub fn phase_order(name: &str) -> (usize, String) {
    (
        Phase::from_name(name).map_or(usize::MAX, Phase::index),
        name.to_owned(),
    )
}

impl TapData {
    /// Takes `series` as the answered exchanges of `phase` on `route` (a Prometheus
    /// answer's one series; a later one for the same pair replaces it).
    pub fn insert_answered(&mut self, phase: String, route: String, series: Series) {
        self.phases.entry(phase).or_default().insert(route, series);
    }

    /// Phase names present, in timeline order.
    pub fn phase_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.phases.keys().map(String::as_str).collect();
        names.sort_by_key(|n| phase_order(n));
        names
    }

    /// Routes present in any phase, answered, failed or the server's errors, sorted.
    pub fn routes(&self) -> Vec<&str> {
        let mut routes: Vec<&str> = self
            .phases
            .values()
            .chain(self.failed.values().flat_map(|phases| phases.values()))
            .chain(
                self.server_errors
                    .values()
                    .flat_map(|phases| phases.values()),
            )
            .flat_map(|r| r.keys().map(String::as_str))
            .collect();
        routes.sort_unstable();
        routes.dedup();
        routes
    }

    /// One phase of the answered exchanges over all routes, or over one route.
    pub fn series(&self, phase: &str, route: Option<&str>) -> anyhow::Result<Option<Series>> {
        let mut out: Option<Series> = None;
        if let Some(routes) = self.phases.get(phase) {
            merge_routes(&mut out, routes, route)?;
        }
        Ok(out)
    }

    /// One phase of the failed exchanges, every kind together, over all routes or one.
    pub fn failed_series(
        &self,
        phase: &str,
        route: Option<&str>,
    ) -> anyhow::Result<Option<Series>> {
        apart_series(&self.failed, phase, route)
    }

    /// Phase names of the failed exchanges, in timeline order.
    pub fn failed_phase_names(&self) -> Vec<&str> {
        apart_phase_names(&self.failed)
    }

    /// The failed exchanges of one route (or all) by kind: the count of each kind's
    /// `total` series.
    pub fn failed_by_kind(&self, route: Option<&str>) -> BTreeMap<String, u64> {
        apart_counts(&self.failed, route)
    }

    /// One phase of the server's error answers, every status together, over all routes
    /// or one.
    pub fn server_series(
        &self,
        phase: &str,
        route: Option<&str>,
    ) -> anyhow::Result<Option<Series>> {
        apart_series(&self.server_errors, phase, route)
    }

    /// Phase names of the server's error answers, in timeline order.
    pub fn server_phase_names(&self) -> Vec<&str> {
        apart_phase_names(&self.server_errors)
    }

    /// The server's error answers of one route (or all) by status.
    pub fn server_by_status(&self, route: Option<&str>) -> BTreeMap<String, u64> {
        let mut out = apart_counts(&self.server_errors, route);
        for (status, routes) in &self.server_counts {
            let n: u64 = routes
                .iter()
                .filter(|(name, _)| route.is_none_or(|r| r == name.as_str()))
                .map(|(_, n)| n)
                .sum();
            if n > 0 {
                *out.entry(status.clone()).or_default() += n;
            }
        }
        out
    }
}

/// Exchanges kept apart from the successes, by why (an error kind, a status): why →
/// phase name → route → series.
type Apart = BTreeMap<String, BTreeMap<String, BTreeMap<String, Series>>>;

/// One phase of `apart`, every why together, over all routes or one.
fn apart_series(apart: &Apart, phase: &str, route: Option<&str>) -> anyhow::Result<Option<Series>> {
    let mut out: Option<Series> = None;
    for phases in apart.values() {
        if let Some(routes) = phases.get(phase) {
            merge_routes(&mut out, routes, route)?;
        }
    }
    Ok(out)
}

/// Phase names of `apart`, in timeline order.
fn apart_phase_names(apart: &Apart) -> Vec<&str> {
    let mut names: Vec<&str> = apart
        .values()
        .flat_map(|phases| phases.keys().map(String::as_str))
        .collect();
    names.sort_by_key(|n| phase_order(n));
    names.dedup();
    names
}

/// The exchanges of `apart` of one route (or all) by why: the count of each why's
/// `total` series.
fn apart_counts(apart: &Apart, route: Option<&str>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (kind, phases) in apart {
        let n: u64 = phases
            .get(Phase::Total.name())
            .into_iter()
            .flatten()
            .filter(|(name, _)| route.is_none_or(|r| r == name.as_str()))
            .map(|(_, s)| s.count)
            .sum();
        if n > 0 {
            out.insert(kind.clone(), n);
        }
    }
    out
}

/// Merges the series of `routes` (or of the one route named) into `out`.
fn merge_routes(
    out: &mut Option<Series>,
    routes: &BTreeMap<String, Series>,
    route: Option<&str>,
) -> anyhow::Result<()> {
    for (name, s) in routes {
        if route.is_some_and(|r| r != name) {
            continue;
        }
        match out {
            None => *out = Some(s.clone()),
            Some(acc) => acc.merge(s)?,
        }
    }
    Ok(())
}

/// Adds a snapshot's phase → route → series to `into`.
fn merge_phases(
    into: &mut BTreeMap<String, BTreeMap<String, Series>>,
    phases: &crate::snapshot::PhaseSeries,
    layout: &HdrLayout,
) -> anyhow::Result<()> {
    for (phase, routes) in phases {
        for (route, s) in routes {
            let series =
                Series::from_snapshot(s, layout).with_context(|| format!("{phase}/{route}"))?;
            let slot = into.entry(phase.clone()).or_default();
            match slot.get_mut(route) {
                Some(acc) => acc
                    .merge(&series)
                    .with_context(|| format!("{phase}/{route}"))?,
                None => {
                    slot.insert(route.clone(), series);
                }
            }
        }
    }
    Ok(())
}

impl Dataset {
    /// The taps in the order a reader follows a request: by the sources' `position` (the
    /// taps clients reach first, each followed by the taps behind it). A source that does
    /// not say (Prometheus, snapshots of older builds) gets HTTP taps before RESP taps, as
    /// a RESP tap usually sits behind an HTTP server; then by name.
    pub fn taps_front_to_back(&self) -> Vec<(&String, &TapData)> {
        let mut taps: Vec<(&String, &TapData)> = self.taps.iter().collect();
        taps.sort_by_key(|(name, t)| {
            (
                t.position.unwrap_or(u32::MAX),
                t.protocol.as_deref() == Some("resp"),
                *name,
            )
        });
        taps
    }

    /// Merges snapshots: per tap, phase and route, counts and sums add and histograms
    /// merge; percentiles are then taken from the merged histograms.
    pub fn from_snapshots(snapshots: &[Snapshot], sources: Vec<String>) -> anyhow::Result<Dataset> {
        ensure!(!snapshots.is_empty(), "no snapshot to report on");
        let mut taps: BTreeMap<String, TapData> = BTreeMap::new();
        let mut notes = Vec::new();
        let mut proxy: Option<crate::snapshot::ProxySnapshot> = None;
        for (i, snap) in snapshots.iter().enumerate() {
            if let Some(p) = &snap.proxy {
                proxy = Some(match proxy.take() {
                    Some(acc) => crate::snapshot::proxy::merge(acc, p),
                    None => p.clone(),
                });
            }
            let name = sources.get(i).map_or("a snapshot", String::as_str);
            if !snap.metrics_enabled {
                notes.push(format!(
                    "{name}: the proxy ran with --no-metrics, nothing was recorded"
                ));
            }
            for (tap_name, tap) in &snap.taps {
                let data = taps.entry(tap_name.clone()).or_default();
                data.protocol.get_or_insert_with(|| tap.protocol.clone());
                if data.position.is_none() {
                    data.position = tap.position;
                }
                if data.upstream_address.is_none() {
                    data.upstream_address.clone_from(&tap.upstream_address);
                }
                for (kind, n) in &tap.errors {
                    *data.errors.entry(kind.clone()).or_default() += n;
                }
                for (why, n) in &tap.connect_failures {
                    *data.connect_failures.entry(why.clone()).or_default() += n;
                }
                data.client_closes += tap.client_closes;
                for (kind, phases) in &tap.failed {
                    let into = data.failed.entry(kind.clone()).or_default();
                    merge_phases(into, phases, &snap.hdr)
                        .with_context(|| format!("{name}: {tap_name}, failed {kind}"))?;
                }
                for (status, phases) in &tap.server_errors {
                    let into = data.server_errors.entry(status.clone()).or_default();
                    merge_phases(into, phases, &snap.hdr)
                        .with_context(|| format!("{name}: {tap_name}, server {status}"))?;
                }
                if data.backend.is_none() {
                    data.backend.clone_from(&tap.backend);
                }
                if let Some(u) = &tap.upstream {
                    data.upstream = Some(match data.upstream.take() {
                        Some(acc) => crate::snapshot::upstream::merge(acc, u),
                        None => u.clone(),
                    });
                }
                merge_phases(&mut data.phases, &tap.phases, &snap.hdr)
                    .with_context(|| format!("{name}: {tap_name}"))?;
            }
        }
        if snapshots.len() > 1 {
            notes.push(format!(
                "{} snapshots merged: counts and sums added, percentiles from the merged histograms",
                snapshots.len()
            ));
        }
        if taps
            .values()
            .any(|t| t.phases.contains_key(Phase::Backend.name()))
        {
            notes.push(
                "backend_in/backend/backend_out pair each HTTP request with its Redis command: \
                 their means are exact; where identical commands ran concurrently the pairing \
                 is ambiguous and their percentiles approximate"
                    .to_owned(),
            );
        }
        Ok(Dataset {
            precision: Precision::Exact,
            sources,
            notes,
            taps,
            proxy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_quantiles_interpolate_like_histogram_quantile() {
        // 10 values ≤ 1, 10 more ≤ 2, nothing above.
        let b = [(1.0, 10.0), (2.0, 20.0), (f64::INFINITY, 20.0)];
        assert!((bucket_quantile(&b, 0.5) - 1.0).abs() < 1e-12);
        assert!((bucket_quantile(&b, 0.25) - 0.5).abs() < 1e-12);
        assert!((bucket_quantile(&b, 0.75) - 1.5).abs() < 1e-12);
        assert_eq!(bucket_max(&b), 2.0);
        // Mass in +Inf only: the last finite bound is all that is known.
        let b = [(1.0, 0.0), (f64::INFINITY, 5.0)];
        assert_eq!(bucket_quantile(&b, 0.5), 1.0);
        assert_eq!(bucket_max(&b), 1.0);
        assert_eq!(bucket_quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn bucket_lists_merge_on_the_union_of_bounds() {
        let a = [(1.0, 2.0), (f64::INFINITY, 3.0)];
        let b = [(1.0, 1.0), (2.0, 4.0), (f64::INFINITY, 4.0)];
        assert_eq!(
            merge_buckets(&a, &b),
            vec![(1.0, 3.0), (2.0, 6.0), (f64::INFINITY, 7.0)]
        );
    }

    #[test]
    fn phases_sort_in_timeline_order() {
        let mut names = vec!["total", "zzz", "parse", "client_recv"];
        names.sort_by_key(|n| phase_order(n));
        assert_eq!(names, ["client_recv", "parse", "total", "zzz"]);
    }
}

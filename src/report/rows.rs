//! The report itself, independent of how it is printed: per tap (and per route with
//! `--by route`) one row per phase and a headline. Every format in [`super::table`] prints
//! this same structure, so they cannot disagree.

use serde::Serialize;

use super::dataset::{Dataset, Precision, TapData};
use super::headline;
use crate::phase::Phase;

/// The route name of rows that cover every route of a tap.
pub const ALL_ROUTES: &str = "*";

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What was read.
    pub sources: Vec<String>,
    /// `exact` (HDR snapshots) or `interpolated` (Prometheus buckets).
    pub percentiles: &'static str,
    /// Caveats that apply to the numbers.
    pub notes: Vec<String>,
    /// What the rules of docs/findings.md find in the window, most severe first, each with
    /// its `tap`; made from snapshots (a Prometheus report has none).
    pub findings: Vec<crate::metrics::Finding>,
    pub taps: Vec<TapReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TapReport {
    pub tap: String,
    pub protocol: Option<String>,
    /// Every route together.
    pub all: Section,
    /// One section per route, with `--by route`; empty otherwise.
    pub routes: Vec<Section>,
    /// The `host:port` the tap forwards to, when the source says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_address: Option<String>,
    /// The upstream's process, when the tap watched one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inside: Option<super::inside::Inside>,
    /// Why there is no inside section although the tap watches its upstream: no process
    /// was found in the whole window (`no process listens on 127.0.0.1:27999`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_process: Option<String>,
}

/// One table: a tap, or one route of a tap.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    /// A route label, or [`ALL_ROUTES`].
    pub route: String,
    /// Failures first (when any), then where the answered exchanges' time goes.
    pub headline: String,
    /// The answered exchanges' phases.
    pub rows: Vec<Row>,
    /// The exchanges that failed, and their phases apart.
    pub failures: super::failures::Failures,
}

/// One phase. Durations in seconds, as in the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub phase: String,
    pub count: u64,
    pub sum: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// This phase's share of the mean total: its time summed over all requests divided
    /// by the summed total (a fraction, 0 to 1). Phases that happen in only some
    /// exchanges (connects) thus weigh what they cost per request on average. `None`
    /// when the section has no `total`.
    pub share: Option<f64>,
}

impl Row {
    /// A row of `phase` from its statistics, its share not yet known.
    pub fn of(phase: &str, s: &super::dataset::Stats) -> Row {
        Row {
            phase: phase.to_owned(),
            count: s.count,
            sum: s.sum,
            mean: s.mean,
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
            p999: s.p999,
            max: s.max,
            share: None,
        }
    }
}

/// Gives each row its share of the rows' `total`, when there is one above 0.
pub fn share_of_total(rows: &mut [Row]) {
    let total = rows
        .iter()
        .find(|r| r.phase == Phase::Total.name())
        .map(|r| r.sum);
    if let Some(total) = total.filter(|t| *t > 0.0) {
        for r in rows {
            r.share = Some(r.sum / total);
        }
    }
}

impl Report {
    /// Builds the report; `by_route` adds a section per route.
    pub fn build(ds: &Dataset, by_route: bool) -> anyhow::Result<Report> {
        Self::build_with(
            ds,
            by_route,
            super::inside::DEFAULT_WHAT_IF,
            super::inside::DEFAULT_TOP,
        )
    }

    /// [`build`](Self::build) with the what-if factor of the inside-the-upstream section
    /// and the hot functions it keeps.
    pub fn build_with(
        ds: &Dataset,
        by_route: bool,
        what_if: f64,
        top: usize,
    ) -> anyhow::Result<Report> {
        let mut taps = Vec::new();
        for (name, tap) in ds.taps_front_to_back() {
            let all = section(tap, None)?;
            let routes = if by_route {
                tap.routes()
                    .into_iter()
                    .map(|r| section(tap, Some(r)))
                    .collect::<anyhow::Result<_>>()?
            } else {
                Vec::new()
            };
            // A watcher that found no process in the whole window has nothing to say
            // inside it: say why instead of a line of zeros.
            let no_process = tap
                .upstream
                .as_ref()
                .filter(|u| u.pid.is_none() && u.watched_seconds == 0.0)
                .map(|_| no_process(tap, &all.failures));
            let inside = tap
                .upstream
                .as_ref()
                .filter(|_| no_process.is_none())
                .map(|u| {
                    let total = all.rows.iter().find(|r| r.phase == Phase::Total.name());
                    let mut inside = super::inside::Inside::new(
                        u,
                        total.map_or(0, |r| r.count),
                        total.map(|r| r.mean),
                        what_if,
                    );
                    inside.hot.truncate(top);
                    inside
                });
            taps.push(TapReport {
                tap: name.clone(),
                protocol: tap.protocol.clone(),
                all,
                routes,
                upstream_address: tap.upstream_address.clone(),
                inside,
                no_process,
            });
        }
        Ok(Report {
            sources: ds.sources.clone(),
            percentiles: match ds.precision {
                Precision::Exact => "exact",
                Precision::Buckets => "interpolated",
            },
            notes: ds.notes.clone(),
            findings: Vec::new(),
            taps,
        })
    }
}

/// `no process listens on ADDR` when connects there were refused, else that none was
/// found.
fn no_process(tap: &TapData, failures: &super::failures::Failures) -> String {
    let addr = tap.upstream_address.as_deref().unwrap_or("its address");
    if failures.connect.get("refused").is_some_and(|&n| n > 0) {
        format!("no process listens on {addr} (connects there were refused)")
    } else {
        format!("no process was found for the upstream {addr} in this window")
    }
}

fn section(tap: &TapData, route: Option<&str>) -> anyhow::Result<Section> {
    let mut rows = Vec::new();
    for phase in tap.phase_names() {
        let Some(series) = tap.series(phase, route)? else {
            continue;
        };
        rows.push(Row::of(phase, &series.stats()));
    }
    share_of_total(&mut rows);
    let answered = rows
        .iter()
        .find(|r| r.phase == Phase::Total.name())
        .map_or(0, |r| r.count);
    let failures = super::failures::Failures::of(tap, route, answered)?;
    let headline = match failures.clause(answered, tap.protocol.as_deref()) {
        None => headline::headline(&rows),
        Some(clause) if answered == 0 => format!("{clause}; none answered"),
        Some(clause) => format!("{clause}; answered: {}", headline::headline(&rows)),
    };
    Ok(Section {
        route: route.unwrap_or(ALL_ROUTES).to_owned(),
        headline,
        rows,
        failures,
    })
}

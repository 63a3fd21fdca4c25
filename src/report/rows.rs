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
    /// The upstream's process, when the tap watched one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inside: Option<super::inside::Inside>,
}

/// One table: a tap, or one route of a tap.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    /// A route label, or [`ALL_ROUTES`].
    pub route: String,
    pub headline: String,
    pub rows: Vec<Row>,
    /// What a request of the route costs the upstream's CPU (route sections of a tap
    /// whose snapshot has slices; docs/report.md, "CPU per route").
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<RouteCpuFigures>,
}

/// A route's CPU per request, as the JSON gives it: `cpu_per_request` with `estimate`,
/// `low` and `high` in seconds, or null with `cpu_reason`; `cpu_share` the fraction of
/// the server's CPU its requests took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteCpuFigures {
    pub cpu_per_request: Option<crate::upstream::route_cpu::Interval>,
    pub cpu_share: Option<f64>,
    pub cpu_reason: Option<String>,
}

impl RouteCpuFigures {
    fn of(e: &crate::upstream::route_cpu::RouteCpuEstimate, route: &str) -> RouteCpuFigures {
        match e.route(route) {
            Some(r) => RouteCpuFigures {
                cpu_per_request: r.cpu_per_request,
                cpu_share: r.share,
                cpu_reason: r.reason.clone(),
            },
            None => RouteCpuFigures {
                cpu_per_request: None,
                cpu_share: None,
                cpu_reason: Some("no exchange of the route in the slices".to_owned()),
            },
        }
    }

    /// The line a route's section prints under its headline.
    pub fn line(&self) -> String {
        let us = |s: f64| crate::units::duration(s);
        match (&self.cpu_per_request, &self.cpu_reason) {
            (Some(iv), _) => format!(
                "upstream CPU per request {} (95 % interval {}–{}){}",
                us(iv.estimate),
                us(iv.low),
                us(iv.high),
                self.cpu_share
                    .map(|s| format!(", {} of the server's CPU", crate::units::share(s)))
                    .unwrap_or_default()
            ),
            (None, Some(why)) => format!("upstream CPU per request unknown: {why}"),
            (None, None) => "upstream CPU per request unknown".to_owned(),
        }
    }
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
            let estimate = if by_route {
                tap.upstream
                    .as_ref()
                    .and_then(|u| u.slices.as_ref())
                    .and_then(crate::upstream::route_cpu::estimate)
            } else {
                None
            };
            let routes = if by_route {
                tap.routes()
                    .into_iter()
                    .map(|r| {
                        let mut s = section(tap, Some(r))?;
                        s.cpu = estimate.as_ref().map(|e| RouteCpuFigures::of(e, r));
                        Ok(s)
                    })
                    .collect::<anyhow::Result<_>>()?
            } else {
                Vec::new()
            };
            let inside = tap.upstream.as_ref().map(|u| {
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
                inside,
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

fn section(tap: &TapData, route: Option<&str>) -> anyhow::Result<Section> {
    let mut rows = Vec::new();
    for phase in tap.phase_names() {
        let Some(series) = tap.series(phase, route)? else {
            continue;
        };
        let s = series.stats();
        rows.push(Row {
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
        });
    }
    let total = rows
        .iter()
        .find(|r| r.phase == Phase::Total.name())
        .map(|r| r.sum);
    if let Some(total) = total.filter(|t| *t > 0.0) {
        for r in &mut rows {
            r.share = Some(r.sum / total);
        }
    }
    Ok(Section {
        route: route.unwrap_or(ALL_ROUTES).to_owned(),
        headline: headline::headline(&rows),
        rows,
        cpu: None,
    })
}

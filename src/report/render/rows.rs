//! The report itself, independent of how it is printed: per tap (and per route with
//! `--by route`) one row per phase and a headline. Every format in [`super::table`] prints
//! this same structure, so they cannot disagree.

use serde::Serialize;

use super::headline;
use super::row::{share_of_total, Row};
use crate::phase::Phase;
use crate::report::source::dataset::{Dataset, Precision, TapData};

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
    pub findings: Vec<crate::snapshot::Finding>,
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
    /// The Webdis split of `upstream_wait` (a correlated HTTP tap), with Redis's own CPU
    /// and wait for a CPU when the RESP tap behind watches Redis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_split: Option<super::backend_split::BackendSplit>,
    /// phasescope's own process per request of this tap, when the snapshots had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<super::own::ProxyCost>,
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
    pub cpu_per_request: Option<crate::snapshot::route_cpu::Interval>,
    pub cpu_share: Option<f64>,
    pub cpu_reason: Option<String>,
}

impl RouteCpuFigures {
    fn of(e: &crate::snapshot::route_cpu::RouteCpuEstimate, route: &str) -> RouteCpuFigures {
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
            let mut all = section(tap, None)?;
            let redis = redis_work(ds, name, tap);
            if redis.is_some() {
                all.headline = headline::headline_with(&all.rows, redis);
            }
            let backend_split = super::backend_split::BackendSplit::new(&all.rows, redis);
            let estimate = if by_route {
                tap.upstream
                    .as_ref()
                    .and_then(|u| u.slices.as_ref())
                    .and_then(crate::snapshot::route_cpu::estimate)
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
                    // The server's CPU went into its error answers too.
                    let mut inside = super::inside::Inside::new(
                        u,
                        total.map_or(0, |r| r.count) + all.failures.server_failed,
                        total.map(|r| r.mean),
                        what_if,
                    );
                    inside.hot.truncate(top);
                    inside
                });
            // The proxy spends its CPU on every exchange, failed ones too; with none in
            // the window there is no figure per request to give.
            let exchanges = all
                .rows
                .iter()
                .find(|r| r.phase == Phase::Total.name())
                .map_or(0, |r| r.count)
                + all.failures.failed
                + all.failures.server_failed;
            let proxy = ds.proxy.as_ref().filter(|_| exchanges > 0).map(|p| {
                super::own::ProxyCost::new(p, exchanges, tap.upstream.as_ref(), ds.taps.len())
            });
            taps.push(TapReport {
                tap: name.clone(),
                protocol: tap.protocol.clone(),
                all,
                routes,
                upstream_address: tap.upstream_address.clone(),
                inside,
                no_process,
                backend_split,
                proxy,
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

/// Redis's process per command, for the Webdis split of `tap` (an HTTP tap with the
/// backend phases): from the RESP tap the snapshot names as its `backend`, else (older
/// snapshots) the one RESP tap that watches a process.
fn redis_work(ds: &Dataset, name: &str, tap: &TapData) -> Option<super::backend_split::RedisWork> {
    if !tap.phases.contains_key(Phase::Backend.name()) {
        return None;
    }
    let resp = match &tap.backend {
        Some(b) => ds.taps.get(b)?,
        None => {
            let mut watched = ds.taps.iter().filter(|(n, t)| {
                n.as_str() != name && t.protocol.as_deref() == Some("resp") && t.upstream.is_some()
            });
            let (_, only) = watched.next()?;
            if watched.next().is_some() {
                return None;
            }
            only
        }
    };
    let commands = resp
        .phases
        .get(Phase::Total.name())?
        .values()
        .map(|s| s.count)
        .sum();
    super::backend_split::RedisWork::new(resp.upstream.as_ref()?, commands)
}

/// More sources than this are condensed in the text (the JSON keeps every one).
const SOURCES_SHOWN: usize = 4;

/// The sources as the text and markdown reports name them: all of them when few, else
/// how many, where and the first and last (`100 files in runs/ (w001.json … w100.json)`),
/// so that a report over a bench's hundred kept windows does not open with a screen of
/// file names.
pub fn sources_line(sources: &[String]) -> String {
    if sources.len() <= SOURCES_SHOWN {
        return sources.join(", ");
    }
    let (first, last) = (&sources[0], &sources[sources.len() - 1]);
    let dir = |s: &str| std::path::Path::new(s).parent().map(|p| p.to_owned());
    let name = |s: &str| {
        std::path::Path::new(s)
            .file_name()
            .map_or_else(|| s.to_owned(), |n| n.to_string_lossy().into_owned())
    };
    let one_dir = dir(first).filter(|d| sources.iter().all(|s| dir(s).as_ref() == Some(d)));
    match one_dir {
        Some(d) => {
            let d = d.display().to_string();
            let d = if d.is_empty() { ".".to_owned() } else { d };
            format!(
                "{} files in {d} ({} … {})",
                sources.len(),
                name(first),
                name(last)
            )
        }
        None => format!("{} sources ({first} … {last})", sources.len()),
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
    // With the server's errors apart, the figures that follow are the successes'.
    let (answered_word, none_word) = if failures.server_failed > 0 {
        ("successes", "no success")
    } else {
        ("answered", "none answered")
    };
    let headline = match failures.clause(answered, tap.protocol.as_deref()) {
        None => headline::headline(&rows),
        Some(clause) if answered == 0 => format!("{clause}; {none_word}"),
        Some(clause) => format!("{clause}; {answered_word}: {}", headline::headline(&rows)),
    };
    Ok(Section {
        route: route.unwrap_or(ALL_ROUTES).to_owned(),
        headline,
        rows,
        failures,
        cpu: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_sources_are_condensed_and_few_are_named() {
        let few: Vec<String> = ["a.json", "b.json"].map(str::to_owned).to_vec();
        assert_eq!(sources_line(&few), "a.json, b.json");
        let kept: Vec<String> = (1..=100)
            .map(|i| format!("/tmp/runs/w{i:03}.json"))
            .collect();
        assert_eq!(
            sources_line(&kept),
            "100 files in /tmp/runs (w001.json … w100.json)"
        );
        let here: Vec<String> = (1..=5).map(|i| format!("w{i}.json")).collect();
        assert_eq!(sources_line(&here), "5 files in . (w1.json … w5.json)");
        let mixed: Vec<String> = (1..=5)
            .map(|i| format!("/d{i}/w.json"))
            .chain(["http://127.0.0.1:9464".to_owned()])
            .collect();
        assert_eq!(
            sources_line(&mixed),
            "6 sources (/d1/w.json … http://127.0.0.1:9464)"
        );
    }
}

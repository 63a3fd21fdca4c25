//! The `phasescope_upstream_route_cpu_seconds` and `phasescope_upstream_route_cpu_share`
//! gauges: the CPU per request of each route of the last evaluation (docs/metrics.md), as
//! the scrapes' refresh of the last minute leaves them ([`crate::snapshot::route_cpu`]
//! estimates them; the findings' monitor refreshes them with the findings).

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus::proto::{MetricFamily, MetricType};

use super::exposition::{family, sample};
use crate::snapshot::route_cpu::RouteCpuEstimate;
use crate::sync::lock;

pub const SECONDS: &str = "phasescope_upstream_route_cpu_seconds";
pub const SHARE: &str = "phasescope_upstream_route_cpu_share";

/// Each tap's estimate at the last evaluation.
#[derive(Debug, Default)]
pub struct Board {
    estimates: Mutex<BTreeMap<String, RouteCpuEstimate>>,
}

impl Board {
    pub fn set(&self, estimates: BTreeMap<String, RouteCpuEstimate>) {
        *lock(&self.estimates) = estimates;
    }

    /// Routes the window can tell only: an `unknown` route has no series.
    pub fn families(&self) -> Vec<MetricFamily> {
        let estimates = lock(&self.estimates).clone();
        let mut seconds = Vec::new();
        let mut shares = Vec::new();
        for (tap, e) in &estimates {
            for r in &e.routes {
                let Some(iv) = r.cpu_per_request else {
                    continue;
                };
                for (bound, v) in [
                    ("estimate", iv.estimate),
                    ("low", iv.low),
                    ("high", iv.high),
                ] {
                    seconds.push(sample(
                        MetricType::GAUGE,
                        &[("tap", tap), ("route", &r.route), ("bound", bound)],
                        v,
                    ));
                }
                if let Some(share) = r.share {
                    shares.push(sample(
                        MetricType::GAUGE,
                        &[("tap", tap), ("route", &r.route)],
                        share,
                    ));
                }
            }
        }
        let mut out: Vec<MetricFamily> = family(
            SECONDS,
            "CPU seconds a request of the route costs the upstream, estimated over the last minute's slices (docs/report.md, CPU per route); bound: estimate, low, high (95 % interval).",
            MetricType::GAUGE,
            seconds,
        )
        .into_iter()
        .collect();
        out.extend(family(
            SHARE,
            "Share of the upstream's CPU the route's requests took over the last minute (estimated).",
            MetricType::GAUGE,
            shares,
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::route_cpu::{Interval, RouteCpu};

    #[test]
    fn known_routes_have_three_bounds_and_a_share_unknown_ones_nothing() {
        let board = Board::default();
        assert!(board.families().is_empty());
        let known = RouteCpu {
            route: "/a".into(),
            requests: 100,
            cpu_per_request: Some(Interval {
                estimate: 1e-4,
                low: 9e-5,
                high: 1.1e-4,
            }),
            share: Some(0.5),
            reason: None,
        };
        let unknown = RouteCpu {
            route: "/b".into(),
            cpu_per_request: None,
            share: None,
            reason: Some("too few requests".into()),
            ..known.clone()
        };
        board.set(BTreeMap::from([(
            "t".to_owned(),
            RouteCpuEstimate {
                slices: 20,
                cpu_seconds: 1.0,
                background: None,
                routes: vec![known, unknown],
            },
        )]));
        let families = board.families();
        assert_eq!(families.len(), 2);
        assert_eq!(families[0].get_metric().len(), 3);
        assert_eq!(families[1].get_metric().len(), 1);
    }
}

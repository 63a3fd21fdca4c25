//! One row of a report's table: a phase's count, mean, percentiles, max and share of the
//! mean total. The headline, the Webdis split and the failures read rows; the report
//! ([`super::rows`]) holds them.

use serde::Serialize;

use crate::phase::Phase;
use crate::report::source::dataset::Stats;

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

#[cfg(test)]
impl Row {
    /// A row of `count` exchanges whose phase sums to `sum` seconds, of a section whose
    /// `total` sums to `total`: what the headline and the Webdis split read.
    pub(crate) fn of_sum(phase: &str, count: u64, sum: f64, total: f64) -> Row {
        Row {
            phase: phase.to_owned(),
            count,
            sum,
            mean: sum / count as f64,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            p999: 0.0,
            max: 0.0,
            share: Some(sum / total),
        }
    }
}

impl Row {
    /// A row of `phase` from its statistics, its share not yet known.
    pub fn of(phase: &str, s: &Stats) -> Row {
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

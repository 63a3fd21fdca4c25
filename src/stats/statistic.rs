//! What a compared row measures: a phase's mean or percentile, the request rate, or a
//! server's seconds of CPU per request.

use serde::Serialize;

/// What a row compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    Mean,
    P50,
    P99,
    /// Requests per second of the run (`total`'s count over the snapshot's window).
    Rate,
    /// Seconds of the upstream's thread-time per exchange (the comparison's `cpu` rows).
    PerRequest,
}

impl Statistic {
    pub fn as_str(self) -> &'static str {
        match self {
            Statistic::Mean => "mean",
            Statistic::P50 => "p50",
            Statistic::P99 => "p99",
            Statistic::Rate => "req/s",
            Statistic::PerRequest => "per req",
        }
    }
}

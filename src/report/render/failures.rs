//! Failures first: how many of a tap's (or a route's) exchanges failed, by kind and
//! cause, and the phases of the failed ones, apart from the answered ones' (a table of
//! 502s the proxy made in 80 µs is not the server's latency).

use std::collections::BTreeMap;

use serde::Serialize;

use super::row::Row;
use crate::recorder::{Culprit, ErrorKind};
use crate::report::source::dataset::TapData;
use crate::units;

/// The failures of one section of the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Failures {
    /// Exchanges that failed, by error kind: the upstream's failures and the requests
    /// the proxy refused (`bad_request`, …). Client aborts and unsolicited responses are
    /// apart.
    pub by_kind: BTreeMap<String, u64>,
    /// `by_kind` summed.
    pub failed: u64,
    /// Exchanges that failed over all exchanges (answered + failed); 0 when there were
    /// none.
    pub share: f64,
    /// The upstream's share of `failed`: what the `upstream_errors` finding is about.
    pub upstream: u64,
    /// Failed connects by reason (`refused`, `timeout`, `other`), over the tap.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub connect: BTreeMap<String, u64>,
    /// Exchanges the clients abandoned in flight (`client_abort`): counted, but not the
    /// server's failures. Known for the whole tap only.
    pub client_aborts: u64,
    /// Connections the clients ended between exchanges: normal ends. Whole tap only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_closes: Option<u64>,
    /// Responses the upstream sent when none was asked for (`unsolicited_response`).
    pub unsolicited: u64,
    /// The failed exchanges' phases, every kind together (the proxy's own answers and the
    /// exchanges cut short): count, percentiles, and each phase's share of their total.
    pub rows: Vec<Row>,
}

impl Failures {
    /// The failures of `tap` (every route, `route` `None`) or of one route, beside
    /// `answered` exchanges. A tap's counts come from its window's errors (which also
    /// count the exchanges cut before any answer could be recorded); a route's from its
    /// failed exchanges' series.
    pub fn of(tap: &TapData, route: Option<&str>, answered: u64) -> anyhow::Result<Failures> {
        let mut out = Failures::default();
        let counts = match route {
            None if !tap.errors.is_empty() => tap.errors.clone(),
            _ => tap.failed_by_kind(route),
        };
        for (kind, n) in counts {
            if n == 0 {
                continue;
            }
            match ErrorKind::from_name(&kind) {
                Some(ErrorKind::ClientAbort) => out.client_aborts += n,
                Some(ErrorKind::UnsolicitedResponse) => out.unsolicited += n,
                known => {
                    if known.is_none_or(|k| k.culprit() == Culprit::Upstream) {
                        out.upstream += n;
                    }
                    out.failed += n;
                    out.by_kind.insert(kind, n);
                }
            }
        }
        let all = answered + out.failed;
        if all > 0 {
            out.share = out.failed as f64 / all as f64;
        }
        if route.is_none() {
            out.connect = tap
                .connect_failures
                .iter()
                .filter(|(_, &n)| n > 0)
                .map(|(k, &n)| (k.clone(), n))
                .collect();
            out.client_closes = Some(tap.client_closes);
        }
        out.rows = rows(tap, route)?;
        Ok(out)
    }

    /// The headline's first clause, e.g. `failed 200 of 200 exchanges (100 %):
    /// upstream_connect 200 (connection refused)`; `None` when nothing failed and no
    /// client left mid-exchange. `protocol` names what a bad response is not.
    pub fn clause(&self, answered: u64, protocol: Option<&str>) -> Option<String> {
        if self.failed == 0 && self.client_aborts == 0 {
            return None;
        }
        let mut parts = Vec::new();
        if self.failed > 0 {
            let kinds: Vec<String> = self
                .by_kind
                .iter()
                .map(|(kind, n)| match self.cause(kind, protocol) {
                    Some(cause) => format!("{kind} {n} ({cause})"),
                    None => format!("{kind} {n}"),
                })
                .collect();
            parts.push(format!(
                "failed {} of {} exchanges ({}): {}",
                self.failed,
                answered + self.failed,
                units::share(self.share),
                kinds.join(", ")
            ));
        }
        if self.client_aborts > 0 {
            parts.push(format!(
                "clients abandoned {} in flight",
                self.client_aborts
            ));
        }
        Some(parts.join("; "))
    }

    /// What a kind of failure was, in words; for `upstream_connect`, from the reasons
    /// counted.
    pub fn cause(&self, kind: &str, protocol: Option<&str>) -> Option<String> {
        Some(match ErrorKind::from_name(kind)? {
            ErrorKind::UpstreamConnect => {
                let reasons: Vec<&str> = self
                    .connect
                    .keys()
                    .map(|r| match r.as_str() {
                        "refused" => "connection refused",
                        "timeout" => "connect timed out",
                        _ => "connect failed",
                    })
                    .collect();
                if reasons.is_empty() {
                    "could not connect".to_owned()
                } else {
                    reasons.join(", ")
                }
            }
            ErrorKind::UpstreamReset => "closed or reset by the upstream".to_owned(),
            ErrorKind::UpstreamTimeout => "no answer in time".to_owned(),
            ErrorKind::BadResponse => match protocol {
                Some("resp") => "not RESP".to_owned(),
                _ => "not HTTP".to_owned(),
            },
            ErrorKind::BadRequest => "the client's request was malformed".to_owned(),
            ErrorKind::HeaderTooLarge => "the client's head was too large".to_owned(),
            ErrorKind::ClientTimeout => "the client was too slow".to_owned(),
            ErrorKind::ClientAbort | ErrorKind::UnsolicitedResponse => return None,
        })
    }
}

/// The failed exchanges' rows, each phase's share of their summed `total`.
fn rows(tap: &TapData, route: Option<&str>) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for phase in tap.failed_phase_names() {
        let Some(series) = tap.failed_series(phase, route)? else {
            continue;
        };
        rows.push(Row::of(phase, &series.stats()));
    }
    super::row::share_of_total(&mut rows);
    Ok(rows)
}

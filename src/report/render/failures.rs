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
    /// The server's own error answers (an HTTP 5xx it sent, not one the proxy made) by
    /// status: failures of the server, apart from the proxy's (`by_kind`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub server: BTreeMap<String, u64>,
    /// `server` summed.
    pub server_failed: u64,
    /// `server_failed` over all exchanges (successes + the server's errors + failed); 0
    /// when there were none.
    pub server_share: f64,
    /// The server's error answers' phases, every status together, apart from the
    /// successes' (`rows` of the section) so that a fast error cannot lower their mean.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_rows: Vec<Row>,
}

impl Failures {
    /// The failures of `tap` (every route, `route` `None`) or of one route, beside
    /// `answered` exchanges (the successes). A tap's counts come from its window's errors
    /// (which also count the exchanges cut before any answer could be recorded); a
    /// route's from its failed exchanges' series; the server's error answers from theirs.
    pub fn of(tap: &TapData, route: Option<&str>, answered: u64) -> anyhow::Result<Failures> {
        let mut out = Failures::default();
        out.server = tap.server_by_status(route);
        out.server_failed = out.server.values().sum();
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
        let all = answered + out.failed + out.server_failed;
        if all > 0 {
            out.share = out.failed as f64 / all as f64;
            out.server_share = out.server_failed as f64 / all as f64;
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
        out.server_rows = server_rows(tap, route)?;
        Ok(out)
    }

    /// Every exchange of the section: the successes (`answered`), the server's error
    /// answers and the failed ones.
    pub fn all(&self, answered: u64) -> u64 {
        answered + self.server_failed + self.failed
    }

    /// `the server answered 503 to 1200 of 5000 (24 %)`, statuses most frequent first;
    /// `None` when it answered no error.
    pub fn server_clause(&self, answered: u64) -> Option<String> {
        if self.server_failed == 0 {
            return None;
        }
        let mut statuses: Vec<(&String, &u64)> = self.server.iter().collect();
        statuses.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = statuses
            .iter()
            .map(|(status, n)| crate::snapshot::tap::answered_with(status, **n))
            .collect();
        Some(format!(
            "the server answered {} of {} ({})",
            and_list(&parts),
            self.all(answered),
            units::share(self.server_share)
        ))
    }

    /// The server's error answers' own line: `the server's errors: mean total 85.0 µs,
    /// p99 210 µs (not in the rows of the successes)`; `None` without any.
    pub fn server_line(&self) -> Option<String> {
        let total = self
            .server_rows
            .iter()
            .find(|r| r.phase == crate::phase::Phase::Total.name())?;
        Some(format!(
            "the server's {} error answers: mean total {}, p50 {}, p99 {} (apart from the successes' figures)",
            total.count,
            units::duration(total.mean),
            units::duration(total.p50),
            units::duration(total.p99)
        ))
    }

    /// The headline's first clause, e.g. `failed 200 of 200 exchanges (100 %):
    /// upstream_connect 200 (connection refused)`; `None` when nothing failed and no
    /// client left mid-exchange. `protocol` names what a bad response is not.
    pub fn clause(&self, answered: u64, protocol: Option<&str>) -> Option<String> {
        if self.failed == 0 && self.client_aborts == 0 && self.server_failed == 0 {
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
                self.all(answered),
                units::share(self.share),
                kinds.join(", ")
            ));
        }
        parts.extend(self.server_clause(answered));
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

/// `a`, `a and b`, `a, b and c`.
fn and_list(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The server's error answers' rows, each phase's share of their summed `total`.
fn server_rows(tap: &TapData, route: Option<&str>) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for phase in tap.server_phase_names() {
        let Some(series) = tap.server_series(phase, route)? else {
            continue;
        };
        rows.push(Row::of(phase, &series.stats()));
    }
    super::row::share_of_total(&mut rows);
    Ok(rows)
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

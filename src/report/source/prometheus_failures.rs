//! The failures of a Prometheus report: the proxy's own (`phasescope_errors_total` by kind,
//! `phasescope_upstream_connect_failures_total` by reason) and the server's error answers
//! (`phasescope_server_errors_total` by route and status), as increases over the range,
//! into each tap's [`TapData`] where a snapshot's `errors`, `connect_failures` and
//! `server_errors` would go. The report then leads with them as it does from snapshots.

use std::collections::BTreeMap;

use super::dataset::TapData;
use super::prometheus::{counted, Sample};

/// The three queries over `range` (a PromQL range such as `900s`), in the order errors,
/// connects, the server's error answers.
pub fn queries(range: &str) -> [String; 3] {
    [
        format!(
            "sum by (tap, kind) ({})",
            counted("phasescope_errors_total", range)
        ),
        format!(
            "sum by (tap, reason) ({})",
            counted("phasescope_upstream_connect_failures_total", range)
        ),
        format!(
            "sum by (tap, route, status) ({})",
            counted("phasescope_server_errors_total", range)
        ),
    ]
}

/// Adds the answers of [`queries`] to `taps`: a tap with failures and no answered
/// exchange is added. `increase()` extrapolates, so counts are rounded; one that rounds to
/// 0 is left out.
pub fn add(
    taps: &mut BTreeMap<String, TapData>,
    errors: &[Sample],
    connects: &[Sample],
    server: &[Sample],
) {
    let count = |s: &Sample| {
        let n = s.value.round();
        (n.is_finite() && n >= 1.0).then_some(n as u64)
    };
    for s in errors {
        if let (Some(tap), Some(kind), Some(n)) =
            (s.labels.get("tap"), s.labels.get("kind"), count(s))
        {
            *taps
                .entry(tap.clone())
                .or_default()
                .errors
                .entry(kind.clone())
                .or_default() += n;
        }
    }
    for s in connects {
        if let (Some(tap), Some(reason), Some(n)) =
            (s.labels.get("tap"), s.labels.get("reason"), count(s))
        {
            *taps
                .entry(tap.clone())
                .or_default()
                .connect_failures
                .entry(reason.clone())
                .or_default() += n;
        }
    }
    for s in server {
        let (Some(tap), Some(route), Some(status), Some(n)) = (
            s.labels.get("tap"),
            s.labels.get("route"),
            s.labels.get("status"),
            count(s),
        ) else {
            continue;
        };
        *taps
            .entry(tap.clone())
            .or_default()
            .server_counts
            .entry(status.clone())
            .or_default()
            .entry(route.clone())
            .or_default() += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            value,
        }
    }

    #[test]
    fn failures_land_where_a_snapshots_would_rounded_and_a_tap_of_failures_only_is_added() {
        let mut taps = BTreeMap::new();
        add(
            &mut taps,
            &[
                sample(&[("tap", "web"), ("kind", "upstream_connect")], 11.6),
                sample(&[("tap", "web"), ("kind", "bad_request")], 0.2),
            ],
            &[sample(&[("tap", "web"), ("reason", "refused")], 11.6)],
            &[
                sample(
                    &[("tap", "web"), ("route", "GET"), ("status", "503")],
                    1532.4,
                ),
                sample(&[("tap", "web"), ("route", "SET"), ("status", "503")], 3.0),
            ],
        );
        let web = &taps["web"];
        assert_eq!(
            web.errors,
            BTreeMap::from([("upstream_connect".to_owned(), 12)])
        );
        assert_eq!(web.connect_failures["refused"], 12);
        assert_eq!(web.server_by_status(None)["503"], 1535);
        assert_eq!(web.server_by_status(Some("SET"))["503"], 3);
        assert!(web.server_phase_names().is_empty(), "counts, no phases");
    }
}

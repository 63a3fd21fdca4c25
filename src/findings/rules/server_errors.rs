//! `server_errors`: the server answered some exchanges with an error of its own (an HTTP
//! 5xx it sent, not one the proxy made). Its severity follows their share of all
//! exchanges: critical from `server_errors_critical` (10 %), a warning from
//! `server_errors_warn` (1 %), information below, so that even one error answer is named.
//! Like `upstream_errors` it looks at a tap whatever its number of successes.

use super::{met_as, shown, Draft};
use crate::findings::TapView;
use crate::recorder::ErrorKind;
use crate::snapshot::{Finding, Severity};
use crate::units::{figure, share};

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    if v.server_errors == 0 {
        return None;
    }
    let by_status = v.server_errors_by_status();
    let failed: u64 = v
        .tap
        .errors
        .iter()
        .filter(|(kind, _)| {
            !matches!(
                ErrorKind::from_name(kind),
                Some(ErrorKind::ClientAbort | ErrorKind::UnsolicitedResponse)
            )
        })
        .map(|(_, n)| n)
        .sum();
    let all = v.requests + v.server_errors + failed;
    let of_all = v.server_errors as f64 / all.max(1) as f64;
    let t = v.thresholds;
    let (severity, threshold) = if of_all >= t.server_errors_critical {
        (
            Severity::Critical,
            format!("≥ {}", figure(t.server_errors_critical, "ratio")),
        )
    } else if of_all >= t.server_errors_warn {
        (
            Severity::Warn,
            format!("≥ {}", figure(t.server_errors_warn, "ratio")),
        )
    } else {
        (
            Severity::Info,
            format!("< {}", figure(t.server_errors_warn, "ratio")),
        )
    };
    let mut statuses: Vec<(&str, u64)> = by_status.iter().map(|(s, n)| (*s, *n)).collect();
    statuses.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let named: Vec<String> = statuses
        .iter()
        .map(|(status, n)| crate::snapshot::tap::answered_with(status, *n))
        .collect();
    let mut evidence = vec![met_as(
        "exchanges the server answered with an error, over all exchanges",
        of_all,
        "ratio",
        threshold,
    )];
    evidence.push(shown("error answers", v.server_errors as f64, "count"));
    for (status, n) in &statuses {
        evidence.push(shown(&format!("status {status}"), *n as f64, "count"));
    }
    evidence.push(shown("successes", v.requests as f64, "count"));
    let draft = Draft {
        id: "server_errors",
        route: None,
        summary: format!(
            "the server answered {} of {all} exchanges ({}) with an error of its own",
            named.join(", "),
            share(of_all)
        ),
        evidence,
        seconds: 0.0,
        share: None,
        fix: fix(&statuses),
    };
    Some(draft.with(v, severity))
}

/// What to look at, from the status the server answered most.
fn fix(statuses: &[(&str, u64)]) -> String {
    let main = statuses.first().map_or("", |(s, _)| *s);
    let cause = match main {
        "503" => "a 503 says it could not serve the request now: a backend it cannot reach (Webdis answers 503 when Redis does not), an overload it sheds, or a restart",
        "500" => "a 500 is the server's own fault in handling the request: its log has the error",
        "502" | "504" => "a 502 or 504 sent by the server (not by the proxy) comes from a gateway of its own, or a backend behind it that failed or was slow",
        "error" => "a RESP error reply says Redis refused the command: the clients' own mistakes (WRONGTYPE, a wrong number of arguments), a script it does not hold (NOSCRIPT: EVALSHA before SCRIPT LOAD, which clients may retry with EVAL), or its limits (OOM under maxmemory, READONLY on a replica, LOADING after a restart)",
        _ => "its log says why",
    };
    format!(
        "Read the server's log for the cause: {cause}. The latency figures are the successes' only; the error answers' phases are in their own table."
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::findings::Thresholds;
    use crate::snapshot::{SeriesSnapshot, TapSnapshot};

    fn series(count: u64) -> SeriesSnapshot {
        SeriesSnapshot {
            count,
            sum: 1e-4 * count as f64,
            mean: 1e-4,
            min: 1e-4,
            p50: 1e-4,
            p90: 1e-4,
            p99: 1e-4,
            p999: 1e-4,
            max: 1e-4,
            histogram: vec![[100_000, count]],
        }
    }

    /// A tap with `ok` successes and `errors` 503s.
    fn tap(ok: u64, errors: u64) -> TapSnapshot {
        let mut tap: TapSnapshot = serde_json::from_value(serde_json::json!({
            "protocol": "http", "phases": {},
            "totals": { "requests": ok + errors, "errors": {}, "connections_open": {},
                        "connections": {}, "bytes": {} }
        }))
        .unwrap();
        let total = |n| {
            BTreeMap::from([(
                "total".to_owned(),
                BTreeMap::from([("GET".to_owned(), series(n))]),
            )])
        };
        tap.phases = total(ok);
        if errors > 0 {
            tap.server_errors.insert("503".to_owned(), total(errors));
        }
        tap
    }

    fn severity(ok: u64, errors: u64, t: Thresholds) -> Option<Severity> {
        let tap = tap(ok, errors);
        let v = TapView::new("web", &tap, 10.0).with_thresholds(t);
        check(&v).map(|f| f.severity)
    }

    #[test]
    fn the_severity_follows_the_share_at_the_thresholds() {
        let d = Thresholds::default();
        assert_eq!(severity(1000, 0, d), None);
        assert_eq!(
            severity(9999, 1, d),
            Some(Severity::Info),
            "one error is named"
        );
        assert_eq!(severity(991, 9, d), Some(Severity::Info), "0.9 %");
        assert_eq!(severity(99, 1, d), Some(Severity::Warn), "1 % exactly");
        assert_eq!(severity(91, 9, d), Some(Severity::Warn), "9 %");
        assert_eq!(
            severity(90, 10, d),
            Some(Severity::Critical),
            "10 % exactly"
        );
        assert_eq!(
            severity(0, 5, d),
            Some(Severity::Critical),
            "no success at all"
        );
        let strict = Thresholds {
            server_errors_warn: 0.001,
            server_errors_critical: 0.005,
        };
        assert_eq!(severity(991, 9, strict), Some(Severity::Critical));
        assert_eq!(severity(9990, 10, strict), Some(Severity::Warn));
    }

    #[test]
    fn the_finding_names_the_status_and_counts_with_the_threshold_in_percent() {
        let tap = tap(600, 400);
        let f = check(&TapView::new("web", &tap, 10.0)).unwrap();
        assert_eq!(f.id, "server_errors");
        assert_eq!(
            f.summary,
            "the server answered 503 to 400 of 1000 exchanges (40 %) with an error of its own"
        );
        assert_eq!(f.evidence[0].threshold.as_deref(), Some("≥ 10 %"));
        assert!(f.fix.contains("Webdis answers 503"), "{}", f.fix);
    }
}

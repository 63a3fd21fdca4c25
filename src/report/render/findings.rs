//! The findings of a report, as text: per tap under its headline, each finding with its
//! evidence, what it explains and its fix (docs/findings.md has the rules).

use crate::snapshot::{Evidence, Finding, Severity};
use crate::units;

/// A figure of the evidence in its unit, with the threshold it met. A share that rounds
/// to its threshold's figure gets two decimals: `1 % (< 1 %)` reads as a contradiction,
/// `0.98 % (< 1 %)` does not.
fn figure(e: &Evidence) -> String {
    let mut value = units::figure(e.value, &e.unit);
    let bound = |t: &str| t.trim_start_matches(['≥', '≤', '<', '>', ' ']).to_owned();
    if e.unit == "ratio" && e.threshold.as_deref().map(bound).as_ref() == Some(&value) {
        value = format!("{:.2} %", e.value * 100.0);
    }
    match &e.threshold {
        Some(t) => format!("{} {value} ({t})", e.name),
        None => format!("{} {value}", e.name),
    }
}

/// The lines of one finding: what, evidence, impact, fix.
pub fn lines(f: &Finding) -> Vec<String> {
    let severity = f.severity.name();
    let route = f
        .route
        .as_ref()
        .map(|r| format!(", route {r}"))
        .unwrap_or_default();
    let impact = match f.impact.share_of_total {
        Some(s) => format!(
            "{} per request, {} of total",
            units::duration(f.impact.seconds_per_request),
            units::share(s)
        ),
        None => format!(
            "{} per request",
            units::duration(f.impact.seconds_per_request)
        ),
    };
    let mut out = vec![
        format!("{severity} {}{route}: {}", f.id, f.summary),
        format!(
            "  evidence: {}",
            f.evidence.iter().map(figure).collect::<Vec<_>>().join("; ")
        ),
    ];
    // Failures explain no share of the answered requests' time: they are failures, and
    // say so by explaining none (`upstream_errors`, `server_errors` at any severity).
    let explains_none = f.impact.seconds_per_request == 0.0 && f.impact.share_of_total.is_none();
    if f.severity != Severity::Critical && !explains_none {
        out.push(format!("  explains: {impact}"));
    }
    out.push(format!("  fix: {}", f.fix));
    out
}

/// The findings of `tap`, in the report's order.
pub fn of_tap<'a>(findings: &'a [Finding], tap: &'a str) -> impl Iterator<Item = &'a Finding> {
    findings.iter().filter(move |f| f.tap == tap)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_share_that_rounds_to_its_threshold_gets_decimals() {
        let e = |value: f64, threshold: &str| super::Evidence {
            name: "failed".to_owned(),
            value,
            unit: "ratio".to_owned(),
            threshold: Some(threshold.to_owned()),
        };
        assert_eq!(super::figure(&e(0.00982, "< 1 %")), "failed 0.98 % (< 1 %)");
        assert_eq!(super::figure(&e(0.25, "≥ 10 %")), "failed 25 % (≥ 10 %)");
    }
}

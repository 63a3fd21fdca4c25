//! The alerting rules that ship beside the dashboard (dashboards/alerts.yml,
//! docs/dashboards.md "Alerts"): promtool checks them, and its unit tests
//! (dashboards/alerts_test.yml) see each alert fire on the series that should fire it and
//! not on those that should not; every alert of the file is among those seen firing.

mod support;

use std::path::Path;
use std::process::Command;

use support::require_tool;

fn promtool(args: &[&str]) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let out = Command::new(require_tool("promtool"))
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerting_rules_pass_promtool_and_each_alert_is_seen_firing() {
    promtool(&["check", "rules", "alerts.yml"]);
    promtool(&["test", "rules", "alerts_test.yml"]);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let rules = std::fs::read_to_string(dir.join("alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("alerts_test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 5, "{alerts:?}");
    for a in &alerts {
        // A test block for the alert whose expected alerts are not empty.
        let fired = tests
            .split("- alertname: ")
            .skip(1)
            .any(|block| block.starts_with(&format!("{a}\n")) && block.contains("exp_labels"));
        assert!(fired, "no test sees {a} firing");
    }
    for needed in [
        "phasescope_server_errors_total",
        "phasescope_errors_total",
        "phasescope_finding{severity=\"critical\"}",
        "phasescope_phase_duration_seconds_bucket",
    ] {
        assert!(rules.contains(needed), "the rules do not read {needed}");
    }
}

//! The processes of a Prometheus report: phasescope's own (`phasescope_proxy_*`,
//! `phasescope_machine_*`) and each tap's upstream (`phasescope_upstream_*`), as increases
//! over the range, into the dataset where a snapshot's `proxy` and a tap's `upstream`
//! would go; and the findings the proxies' gauge held over the range. The report then
//! gives `phasescope itself`, the inside line and the findings as it does from snapshots.
//!
//! Prometheus keeps counters, not the reads behind them: the seconds watched are the
//! range's, the figures cover every instance summed, and there is no `traffic` (per
//! request is over the range's requests, idle seconds included: the report says so).

use super::dataset::{Dataset, TapData};
use super::prometheus::{counted, Sample};
use crate::snapshot::{Evidence, Finding, Impact, ProxySnapshot, Severity, UpstreamSnapshot};

/// The queries over `range` (a PromQL range such as `900s`), in the order of [`Answers`].
pub fn queries(range: &str) -> [String; 12] {
    [
        format!(
            "sum by (mode) ({})",
            counted("phasescope_proxy_cpu_seconds_total", range)
        ),
        format!(
            "sum({})",
            counted("phasescope_proxy_runqueue_seconds_total", range)
        ),
        format!(
            "sum({})",
            counted("phasescope_machine_cpu_busy_seconds_total", range)
        ),
        "sum(phasescope_machine_cpus)".to_owned(),
        "sum(phasescope_proxy_threads)".to_owned(),
        format!(
            "sum by (tap, mode) ({})",
            counted("phasescope_upstream_cpu_seconds_total", range)
        ),
        format!(
            "sum by (tap) ({})",
            counted("phasescope_upstream_runqueue_seconds_total", range)
        ),
        "max by (tap, pid, comm) (phasescope_upstream_info)".to_owned(),
        format!("max by (tap, id, severity) (max_over_time(phasescope_finding[{range}]))"),
        "sum by (tap) (phasescope_upstream_threads)".to_owned(),
        format!("sum({})", counted("phasescope_proxy_stalls_total", range)),
        format!(
            "sum({})",
            counted("phasescope_proxy_stalled_seconds_total", range)
        ),
    ]
}

/// The answers of [`queries`], in their order.
pub type Answers = [Vec<Sample>; 12];

/// Adds the processes and findings of `answers` over `seconds` of range to `ds`; the
/// findings are returned for the report.
pub fn add(ds: &mut Dataset, answers: &Answers, seconds: f64) -> Vec<Finding> {
    let [cpu, runqueue, busy, cpus, threads, up_cpu, up_runqueue, info, findings, up_threads, stalls, stalled] =
        answers;
    let total = |v: &[Sample]| v.iter().map(|s| s.value).sum::<f64>();
    let by = |v: &[Sample], label: &str, value: &str| {
        v.iter()
            .filter(|s| s.labels.get(label).map(String::as_str) == Some(value))
            .map(|s| s.value)
            .sum::<f64>()
    };
    if !cpu.is_empty() {
        ds.proxy = Some(ProxySnapshot {
            pid: 0,
            threads: total(threads) as u64,
            watched_seconds: seconds,
            cpu_user_seconds: by(cpu, "mode", "user"),
            cpu_system_seconds: by(cpu, "mode", "system"),
            cpu_seconds: None,
            runqueue_seconds: total(runqueue),
            cpus: total(cpus).max(1.0) as u64,
            cpus_allowed: Vec::new(),
            machine_busy_seconds: total(busy),
            traffic: None,
            // Counters keep no single stall: the longest is unknown, and left at 0.
            stalls: crate::snapshot::Stalls {
                count: total(stalls).round() as u64,
                seconds: total(stalled),
                longest_seconds: 0.0,
            },
        });
    }
    for (tap, data) in ds.taps.iter_mut() {
        upstream(data, tap, [up_cpu, up_runqueue, info, up_threads], seconds);
    }
    findings
        .iter()
        .filter(|s| s.value >= 1.0)
        .filter_map(finding)
        .collect()
}

/// A tap's upstream from its series, when Prometheus has its CPU.
fn upstream(data: &mut TapData, tap: &str, series: [&[Sample]; 4], seconds: f64) {
    let [cpu, runqueue, info, threads] = series;
    let of = |v: &[Sample], mode: Option<&str>| {
        v.iter()
            .filter(|s| s.labels.get("tap").map(String::as_str) == Some(tap))
            .filter(|s| mode.is_none() || s.labels.get("mode").map(String::as_str) == mode)
            .map(|s| s.value)
            .sum::<f64>()
    };
    if !cpu
        .iter()
        .any(|s| s.labels.get("tap").map(String::as_str) == Some(tap))
    {
        return;
    }
    let process = info
        .iter()
        .find(|s| s.labels.get("tap").map(String::as_str) == Some(tap));
    let pid = process.and_then(|s| s.labels.get("pid")?.parse().ok());
    let comm = process.and_then(|s| s.labels.get("comm").cloned());
    data.upstream = Some(UpstreamSnapshot {
        pid,
        comm,
        exe: None,
        threads: of(threads, None) as u64,
        cpus_allowed: None,
        interval_seconds: 1.0,
        watched_seconds: seconds,
        cpu_user_seconds: of(cpu, Some("user")),
        cpu_system_seconds: of(cpu, Some("system")),
        cpu_seconds: None,
        runqueue_seconds: of(runqueue, None),
        busiest_thread_seconds: 0.0,
        active_seconds: None,
        active_busiest_thread_seconds: None,
        traffic: None,
        context_switches_voluntary: 0,
        context_switches_involuntary: 0,
        restarts: 0,
        processes: None,
        profile: None,
        slices: None,
    });
}

/// A finding the gauge held in the range: its rule, tap and severity are all Prometheus
/// keeps; the evidence and the fix are the proxy's live page's and its report's.
fn finding(s: &Sample) -> Option<Finding> {
    let severity = match s.labels.get("severity").map(String::as_str) {
        Some("critical") => Severity::Critical,
        Some("warn") => Severity::Warn,
        Some("info") => Severity::Info,
        // A proxy of an older build: its gauge had no severity.
        _ => Severity::Info,
    };
    let id = s.labels.get("id")?.clone();
    Some(Finding {
        tap: s.labels.get("tap")?.clone(),
        route: None,
        severity,
        summary: "held at an evaluation within the range (phasescope_finding)".to_owned(),
        evidence: vec![Evidence {
            name: "phasescope_finding".to_owned(),
            value: 1.0,
            unit: "count".to_owned(),
            threshold: None,
        }],
        impact: Impact {
            seconds_per_request: 0.0,
            share_of_total: None,
        },
        fix: format!(
            "see docs/findings.md#{id}, and the proxy's live page or `phasescope report` for its evidence"
        ),
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            value,
        }
    }

    #[test]
    fn the_proxy_the_upstream_and_the_findings_come_from_their_series() {
        let mut ds = Dataset {
            precision: super::super::dataset::Precision::Buckets,
            sources: Vec::new(),
            notes: Vec::new(),
            taps: BTreeMap::new(),
            proxy: None,
        };
        ds.taps.insert("webdis".to_owned(), TapData::default());
        let answers: Answers = [
            vec![
                sample(&[("mode", "user")], 2.0),
                sample(&[("mode", "system")], 4.0),
            ],
            vec![sample(&[], 0.5)],
            vec![sample(&[], 50.0)],
            vec![sample(&[], 2.0)],
            vec![sample(&[], 9.0)],
            vec![
                sample(&[("tap", "webdis"), ("mode", "user")], 3.0),
                sample(&[("tap", "webdis"), ("mode", "system")], 1.0),
            ],
            vec![sample(&[("tap", "webdis")], 0.25)],
            vec![sample(
                &[("tap", "webdis"), ("pid", "42"), ("comm", "webdis")],
                1.0,
            )],
            vec![sample(
                &[
                    ("tap", "webdis"),
                    ("id", "server_errors"),
                    ("severity", "critical"),
                ],
                1.0,
            )],
            vec![sample(&[("tap", "webdis")], 3.0)],
            vec![sample(&[], 1.0)],
            vec![sample(&[], 5.0)],
        ];
        let findings = add(&mut ds, &answers, 60.0);
        let p = ds.proxy.as_ref().unwrap();
        assert_eq!((p.cpu(), p.cpus, p.threads), (6.0, 2, 9));
        assert_eq!((p.stalls.count, p.stalls.seconds), (1, 5.0));
        let u = ds.taps["webdis"].upstream.as_ref().unwrap();
        assert_eq!(
            (u.pid, u.cpu_user_seconds, u.runqueue_seconds, u.threads),
            (Some(42), 3.0, 0.25, 3)
        );
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].severity, Severity::Critical);
    }
}

//! Findings: why a request's time goes where it goes, said from the proxy's own
//! measurements, with the numbers that show it and what to change (docs/findings.md).
//!
//! Each rule is a plain function over one tap's window ([`TapView`]) that returns a
//! [`Finding`] only when its figures meet its documented thresholds; a finding carries
//! those figures as its evidence, so none stands without them. The rules read snapshots
//! (live, saved or the difference of two), never the registry, so the report, the live
//! page, `compare` and the gauge all say the same of the same window.

mod monitor;
pub mod route_cpu;
mod rules;
mod view;

pub use monitor::Recent;
pub use view::{Agg, TapView, Thresholds};

use crate::snapshot::{Finding, Snapshot};

/// Fewer requests than this in a tap's window say nothing: no rule looks at it.
pub const MIN_REQUESTS: u64 = 20;

/// Every finding of every tap in `snapshot`'s window, the most severe and largest first.
pub fn diagnose(snapshot: &Snapshot) -> Vec<Finding> {
    diagnose_with_hot(snapshot, 0).0
}

/// Each sampled tap's what-if of a faster parser (docs/report.md, "Inside the upstream"):
/// the live page shows the report's figure rather than working one out of its own.
pub type WhatIfs = std::collections::BTreeMap<String, crate::snapshot::summary::WhatIf>;

/// Each sampled tap's hot path, at most `top` functions (docs/report.md, "Call stacks").
pub type HotPaths = std::collections::BTreeMap<String, Vec<crate::snapshot::hot::HotFunction>>;

/// [`diagnose`], and per tap whose upstream was sampled with call stacks its hot path over
/// the same window, at most `top` functions: what the live page shows beside the
/// findings, from the one view of each tap the rules read (the hot path is computed
/// once).
pub fn diagnose_with_hot(snapshot: &Snapshot, top: usize) -> (Vec<Finding>, HotPaths, WhatIfs) {
    diagnose_all(snapshot, top, Thresholds::default())
}

/// [`diagnose`] with the thresholds the user set.
pub fn diagnose_with(snapshot: &Snapshot, thresholds: Thresholds) -> Vec<Finding> {
    diagnose_all(snapshot, 0, thresholds).0
}

fn diagnose_all(
    snapshot: &Snapshot,
    top: usize,
    thresholds: Thresholds,
) -> (Vec<Finding>, HotPaths, WhatIfs) {
    let mut out = Vec::new();
    let mut hot = HotPaths::new();
    let mut what_ifs = WhatIfs::new();
    for (name, tap) in &snapshot.taps {
        let view = TapView::new(name, tap, snapshot.taken_at_unix - snapshot.since_unix)
            .with_proxy(snapshot.proxy.as_ref())
            .with_thresholds(thresholds);
        out.extend(rules::failures(&view));
        if view.requests >= MIN_REQUESTS {
            out.extend(rules::all(&view));
        }
        if let Some(i) = view
            .inside
            .as_ref()
            .filter(|i| top > 0 && !i.hot.is_empty())
        {
            hot.insert(name.clone(), i.hot.iter().take(top).cloned().collect());
        }
        if let Some(w) = view.inside.as_ref().and_then(|i| i.what_if.clone()) {
            what_ifs.insert(name.clone(), w);
        }
    }
    out.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(
                b.impact
                    .seconds_per_request
                    .total_cmp(&a.impact.seconds_per_request),
            )
            .then(a.tap.cmp(&b.tap))
            .then(a.id.cmp(&b.id))
    });
    (out, hot, what_ifs)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::snapshot::FrameKind;
    use crate::snapshot::UpstreamSnapshot;
    use crate::snapshot::{SeriesSnapshot, TapSnapshot};

    /// A series of `count` observations of `mean` seconds each.
    fn series(count: u64, mean: f64) -> SeriesSnapshot {
        let ns = (mean * 1e9) as u64;
        SeriesSnapshot {
            count,
            sum: mean * count as f64,
            mean,
            min: mean,
            p50: mean,
            p90: mean,
            p99: mean,
            p999: mean,
            max: mean,
            histogram: vec![[ns, count]],
        }
    }

    /// One tap `web` over a 10 s window with 1000 requests of these phase means.
    fn snapshot(phases: &[(&str, f64)], upstream: Option<UpstreamSnapshot>) -> Snapshot {
        let mut s: Snapshot = serde_json::from_value(serde_json::json!({
            "format": "phasescope-snapshot", "format_version": 1, "version": "test",
            "clock": "os", "taken_at": "", "taken_at_unix": 10.0, "since": "",
            "since_unix": 0.0, "metrics_enabled": true,
            "hdr": { "significant_figures": 2, "lowest_ns": 1, "highest_ns": 3_600_000_000_000u64 },
            "taps": {}
        }))
        .unwrap();
        let mut tap: TapSnapshot = serde_json::from_value(serde_json::json!({
            "protocol": "http", "phases": {},
            "totals": { "requests": 1000, "errors": {}, "connections_open": {},
                        "connections": { "client": 1 }, "bytes": {} }
        }))
        .unwrap();
        for (phase, mean) in phases {
            tap.phases.insert(
                (*phase).to_owned(),
                BTreeMap::from([("all".to_owned(), series(1000, *mean))]),
            );
        }
        tap.upstream = upstream;
        s.taps.insert("web".to_owned(), tap);
        s
    }

    fn upstream(cpu: f64, runqueue: f64, samples: &[(&str, u64)]) -> UpstreamSnapshot {
        serde_json::from_value(serde_json::json!({
            "pid": 1, "comm": "server", "exe": "/usr/bin/server", "threads": 4,
            "interval_seconds": 1.0, "watched_seconds": 10.0,
            "cpu_user_seconds": cpu, "cpu_system_seconds": 0.0, "runqueue_seconds": runqueue,
            "busiest_thread_seconds": (cpu + runqueue) / 4.0,
            "context_switches_voluntary": 0, "context_switches_involuntary": 0, "restarts": 0,
            "samples": samples.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect::<BTreeMap<_, _>>(),
            "stripped": false
        }))
        .unwrap()
    }

    fn ids(s: &Snapshot) -> Vec<String> {
        diagnose(s).into_iter().map(|f| f.id).collect()
    }

    const QUICK: [(&str, f64); 4] = [
        ("client_recv", 2e-6),
        ("upstream_wait", 80e-6),
        ("write", 4e-6),
        ("total", 100e-6),
    ];

    #[test]
    fn a_proxy_adding_a_quarter_of_the_time_is_a_finding_and_a_tenth_less_is_not() {
        let mut phases = QUICK.to_vec();
        phases.push(("proxy_overhead", 25e-6));
        let found = diagnose(&snapshot(&phases, None));
        let f = found.iter().find(|f| f.id == "proxy_overhead").unwrap();
        assert!((f.impact.share_of_total.unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(f.severity, crate::snapshot::Severity::Warn);
        phases.pop();
        phases.push(("proxy_overhead", 9e-6));
        assert!(!ids(&snapshot(&phases, None)).contains(&"proxy_overhead".to_owned()));
    }

    #[test]
    fn upstream_failures_past_one_percent_are_critical_and_any_below_is_information() {
        let with_errors = |answered: &[(&str, f64)], kind: &str, n: u64| {
            let mut s = snapshot(answered, None);
            let tap = s.taps.get_mut("web").unwrap();
            tap.errors.insert(kind.to_owned(), n);
            tap.errors.insert("client_abort".to_owned(), 50);
            tap.upstream_address = Some("127.0.0.1:27999".to_owned());
            s
        };
        // 1000 answered, 11 reset: 1.09 % of 1011.
        let found = diagnose(&with_errors(&QUICK, "upstream_reset", 11));
        let f = &found[0];
        assert_eq!(f.id, "upstream_errors", "the most severe comes first");
        assert_eq!(f.severity, crate::snapshot::Severity::Critical);
        assert!(f.summary.contains("closed or reset"), "{}", f.summary);
        // 10 of 1010 is under 1 % (clients' aborts are not the server's failures): named,
        // as information.
        let severity = |s: &Snapshot| {
            diagnose(s)
                .into_iter()
                .find(|f| f.id == "upstream_errors")
                .map(|f| f.severity)
        };
        let info = Some(crate::snapshot::Severity::Info);
        assert_eq!(severity(&with_errors(&QUICK, "upstream_reset", 10)), info);
        // Nothing answered at all (no `total`): still found, with the refusal's fix.
        let mut refused = with_errors(&[], "upstream_connect", 200);
        refused
            .taps
            .get_mut("web")
            .unwrap()
            .connect_failures
            .insert("refused".to_owned(), 200);
        let f = diagnose(&refused).into_iter().next().unwrap();
        assert_eq!(f.id, "upstream_errors");
        assert!(
            f.summary
                .contains("connection refused: nothing listens on 127.0.0.1:27999"),
            "{}",
            f.summary
        );
        assert!(f.fix.contains("127.0.0.1:27999"));
        // Fewer than five failures are information too, and none is nothing.
        assert_eq!(severity(&with_errors(&[], "upstream_connect", 4)), info);
        assert!(ids(&with_errors(&[], "upstream_connect", 0)).is_empty());
    }

    #[test]
    fn waiting_longer_for_a_cpu_than_running_is_a_finding() {
        // 1000 requests: 1 ms of CPU and 2 ms of waiting for one per request.
        let s = snapshot(&QUICK, Some(upstream(1.0, 2.0, &[])));
        let found = diagnose(&s);
        let f = found.iter().find(|f| f.id == "upstream_runqueue").unwrap();
        assert!((f.impact.seconds_per_request - 2e-3).abs() < 1e-9);
        // Each threshold is written in its figure's unit: a ratio printed as a percentage
        // has its bound as one (it read `0.071 % (< 0.05)` before).
        let thresholds: Vec<&str> = f
            .evidence
            .iter()
            .filter_map(|e| e.threshold.as_deref())
            .collect();
        assert_eq!(thresholds, ["≥ 100 %", "≥ 5 %"], "{:?}", f.evidence);
        // Less waiting than running: none.
        let s = snapshot(&QUICK, Some(upstream(2.0, 1.0, &[])));
        assert!(!ids(&s).contains(&"upstream_runqueue".to_owned()));
    }

    #[test]
    fn a_wait_for_a_cpu_with_no_cpu_counted_is_written_and_read_back() {
        // A process the kernel's ticks found waiting but never running (a loaded CI
        // machine): the ratio of the two was infinite, written `null`, and the snapshot
        // `/api/snapshot` served could not be read back.
        let mut s = snapshot(&QUICK, Some(upstream(0.0, 2.0, &[])));
        s.findings = diagnose(&s);
        let back = Snapshot::from_json(&serde_json::to_string(&s).unwrap()).unwrap();
        let f = back
            .findings
            .iter()
            .find(|f| f.id == "upstream_runqueue")
            .unwrap();
        assert_eq!(
            f.evidence[0].name,
            "waiting for a CPU, with no CPU time counted"
        );
        assert!((f.evidence[0].value - 2.0).abs() < 1e-9);
    }

    #[test]
    fn the_parser_what_if_is_a_finding_either_way() {
        let total = [("total", 2e-3)];
        // 1 ms of CPU a request, half of it in the parser: twice as fast saves 250 µs of
        // a 2 ms request.
        let s = snapshot(
            &total,
            Some(upstream(1.0, 0.0, &[("http_parser", 500), ("server", 500)])),
        );
        let f = diagnose(&s)
            .into_iter()
            .find(|f| f.id.starts_with("parser_"))
            .unwrap();
        assert_eq!(f.id, "parser_worth_replacing");
        assert!((f.impact.seconds_per_request - 250e-6).abs() < 1e-9);
        // 1 % of the CPU: 5 µs of 2 ms.
        let s = snapshot(
            &total,
            Some(upstream(1.0, 0.0, &[("http_parser", 10), ("server", 990)])),
        );
        let f = diagnose(&s)
            .into_iter()
            .find(|f| f.id.starts_with("parser_"))
            .unwrap();
        assert_eq!(f.id, "parser_not_the_problem");
        assert_eq!(f.severity, crate::snapshot::Severity::Info);
        // Too few samples to say: nothing.
        let s = snapshot(
            &total,
            Some(upstream(1.0, 0.0, &[("http_parser", 10), ("server", 90)])),
        );
        assert!(!ids(&s).iter().any(|id| id.starts_with("parser_")));
    }

    /// 1000 samples of a server whose CPU goes through `main` and a loop into a URI
    /// builder (50 %), `write` (30 %, the kernel below it) and the parser (20 %).
    fn with_stacks(mut u: UpstreamSnapshot) -> UpstreamSnapshot {
        let frame = |name: &str, object: &str, component: &str| crate::snapshot::Frame {
            name: name.into(),
            object: object.into(),
            component: component.into(),
            line: None,
            at_line: None,
        };
        u.profile_mut().frames = Some(FrameKind::Native);
        u.profile_mut().stacks = Some(crate::snapshot::Stacks {
            frames: vec![
                frame("main", "server", "server"),
                frame("serve_loop", "server", "server"),
                frame("build_uri", "server", "server"),
                frame("write", "libc.so.6", "libc.so.6"),
                frame("tcp_sendmsg", "[kernel]", "kernel_network"),
                frame("http_parser_execute", "server", "http_parser"),
            ],
            stacks: [
                (vec![0, 1, 2], 500),
                (vec![0, 1, 3, 4], 300),
                (vec![0, 1, 5], 200),
            ]
            .into_iter()
            .map(|(frames, samples)| crate::snapshot::Stack { frames, samples })
            .collect(),
            truncated_samples: 0,
            unmapped_samples: 0,
        });
        u
    }

    #[test]
    fn the_hot_path_names_the_functions_where_the_cpu_goes() {
        let total = [("total", 2e-3)];
        let samples: [(&str, u64); 3] = [
            ("server", 500),
            ("kernel_network", 300),
            ("http_parser", 200),
        ];
        let s = snapshot(&total, Some(with_stacks(upstream(1.0, 0.0, &samples))));
        let found = diagnose(&s);
        let f = found.iter().find(|f| f.id == "hot_path").unwrap();
        // 1 ms of CPU a request: build_uri's half, twice as fast, saves 250 µs of 2 ms.
        assert!(
            (f.impact.seconds_per_request - 250e-6).abs() < 1e-9,
            "{f:?}"
        );
        assert_eq!(f.severity, crate::snapshot::Severity::Warn);
        assert!(
            f.summary.starts_with("server's CPU goes to build_uri 50 % (500 µs per request, from serve_loop), write 30 % (300 µs per request, from serve_loop), http_parser_execute 20 %"),
            "{}",
            f.summary
        );
        let n = f
            .evidence
            .iter()
            .find(|e| e.name == "build_uri: samples")
            .unwrap();
        assert_eq!(n.value, 500.0);
        // The parser's finding names the largest hot function besides the parser.
        let p = found.iter().find(|f| f.id.starts_with("parser_")).unwrap();
        assert!(
            p.fix.contains("Its largest part is build_uri (50 % of its CPU with what it calls, 500 µs per request)."),
            "{}",
            p.fix
        );
        // Without call stacks: no hot path, the component as before.
        let s = snapshot(&total, Some(upstream(1.0, 0.0, &samples)));
        let found = diagnose(&s);
        assert!(found.iter().all(|f| f.id != "hot_path"));
        let p = found.iter().find(|f| f.id.starts_with("parser_")).unwrap();
        assert!(
            p.fix
                .contains("Its largest part is server (own code) (50 % of its CPU)."),
            "{}",
            p.fix
        );
    }

    #[test]
    fn a_quiet_window_says_nothing() {
        let mut s = snapshot(&[("total", 1.0), ("write_blocked", 0.9)], None);
        for routes in s.taps.get_mut("web").unwrap().phases.values_mut() {
            for x in routes.values_mut() {
                *x = series(MIN_REQUESTS - 1, x.mean);
            }
        }
        assert!(diagnose(&s).is_empty());
    }
}

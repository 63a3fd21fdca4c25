//! The note on the inside of the upstreams a comparison's sides watched: CPU and waiting
//! per request on each side, and the parser's share when sampled.

use crate::snapshot::summary::{Inside, DEFAULT_WHAT_IF, PARSER};
use crate::snapshot::Snapshot;
use crate::snapshot::UpstreamSnapshot;
use crate::units;

/// One side of a compare: the tap's upstream merged over the side's snapshots that have
/// it, with the requests (the `total` count) and mean `total` of the same windows (a
/// bench's first windows may come before its watcher found the process). Where both
/// sides are one process in the same windows, the snapshots come with its CPU measured
/// once ([`super::one_process::measured_once`]): per request of both sides' exchanges.
fn side(runs: &[Snapshot], tap: &str) -> Option<Inside> {
    let mut merged: Option<UpstreamSnapshot> = None;
    let (mut requests, mut total_sum) = (0u64, 0.0);
    for snap in runs {
        let Some(t) = snap.taps.get(tap) else {
            continue;
        };
        let Some(u) = t.upstream.as_ref() else {
            continue;
        };
        merged = Some(match merged {
            Some(acc) => crate::snapshot::upstream::merge(acc, u),
            None => u.clone(),
        });
        for s in t.phases.get("total").into_iter().flat_map(|r| r.values()) {
            requests += s.count;
            total_sum += s.sum;
        }
    }
    let mean = (requests > 0).then(|| total_sum / requests as f64);
    merged.map(|u| Inside::new(&u, requests, mean, DEFAULT_WHAT_IF))
}

/// `compare`'s lines for taps whose upstream was watched on both sides: CPU and waiting
/// per request, and the parser's share when sampled. Aggregates of each side's
/// snapshots; their intervals and verdicts are the `cpu` rows' ([`super::cpu`]).
pub(super) fn compare_notes(a: &[Snapshot], b: &[Snapshot]) -> Vec<String> {
    // A bench's B tap comes here renamed as A's (`selection::select`): one tap name.
    let taps: std::collections::BTreeSet<&String> = a.iter().flat_map(|s| s.taps.keys()).collect();
    let once = super::one_process::measured_once(a, b);
    let (a, b) = once
        .as_ref()
        .map_or((a, b), |(x, y)| (x.as_slice(), y.as_slice()));
    let mut out = Vec::new();
    for tap in taps {
        let (Some(x), Some(y)) = (side(a, tap), side(b, tap)) else {
            continue;
        };
        let us = crate::units::duration;
        let mut line = format!(
            "inside the upstream of tap {tap} ({} → {}): CPU per request {} → {} (user {} → {}, system {} → {}), waiting for a CPU {} → {}",
            x.comm,
            y.comm,
            us(x.cpu_user + x.cpu_system),
            us(y.cpu_user + y.cpu_system),
            us(x.cpu_user),
            us(y.cpu_user),
            us(x.cpu_system),
            us(y.cpu_system),
            us(x.runqueue),
            us(y.runqueue)
        );
        let parser = |i: &Inside| i.components.iter().find(|c| c.name == PARSER).cloned();
        if let (Some(p), Some(q)) = (parser(&x), parser(&y)) {
            // Where both sides took call stacks: its own work, what a faster parser could
            // save at most (docs/report.md, "A component's own work"), with its share with
            // all it calls beside it (in Webdis the callbacks it runs handle the whole
            // request). With the inclusive counts alone (a window's part without its
            // stacks), that share and the parsing alone.
            match (p.work.zip(q.work), p.inclusive.zip(q.inclusive)) {
                (Some((pw, qw)), Some((pi, qi))) => line.push_str(&format!(
                    "; HTTP parser {} → {} of its CPU, its own work ({} → {} with all it calls)",
                    units::share(pw),
                    units::share(qw),
                    units::share(pi),
                    units::share(qi)
                )),
                (None, Some((pi, qi))) => line.push_str(&format!(
                    "; HTTP parser {} → {} of its CPU with all it calls ({} → {} itself)",
                    units::share(pi),
                    units::share(qi),
                    units::share(p.share),
                    units::share(q.share)
                )),
                _ => line.push_str(&format!(
                    "; HTTP parser {} → {} of its CPU",
                    units::share(p.share),
                    units::share(q.share)
                )),
            }
        }
        line.push_str(": thread-time per request over each side's snapshots; the rows of phase cpu compare them with an interval (several runs or paired windows a side)");
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::FrameKind;

    fn run(cpu_user: f64, parser: u64) -> crate::snapshot::Snapshot {
        let text = format!(
            r#"{{"format":"phasescope-snapshot","format_version":1,"version":"0","clock":"os",
            "taken_at":"x","taken_at_unix":1.0,"since":"x","since_unix":0.0,"metrics_enabled":true,
            "hdr":{{"significant_figures":2,"lowest_ns":1,"highest_ns":3600000000000}},
            "taps":{{"w":{{"protocol":"http","phases":{{"total":{{"all":{{"count":1000,"sum":0.1,
            "mean":0.0001,"min":0.0001,"p50":0.0001,"p90":0.0001,"p99":0.0001,"p999":0.0001,
            "max":0.0001,"histogram":[[100000,1000]]}}}}}},
            "totals":{{"requests":1000,"errors":{{}},"connections_open":{{}},"connections":{{}},"bytes":{{}}}},
            "upstream":{{"pid":1,"comm":"srv","exe":"/bin/srv","threads":1,"interval_seconds":1.0,
            "cpu_user_seconds":{cpu_user},"cpu_system_seconds":0.01,"runqueue_seconds":0.002,
            "context_switches_voluntary":0,"context_switches_involuntary":0,"restarts":0,
            "samples":{{"http_parser":{parser},"srv":{}}}}}}}}}}}"#,
            100 - parser
        );
        crate::snapshot::Snapshot::from_json(&text).unwrap()
    }

    /// `s` watching another process than [`run`]'s (pid 2): two sides of one window
    /// watching one pid are one process ([`super::super::one_process`]).
    fn other(mut s: crate::snapshot::Snapshot) -> crate::snapshot::Snapshot {
        if let Some(u) = s.taps.get_mut("w").and_then(|t| t.upstream.as_mut()) {
            u.pid = Some(2);
        }
        s
    }

    /// One process behind both sides of the same windows: its CPU over both sides'
    /// exchanges, the same on each side, not twice as much.
    #[test]
    fn one_process_on_both_sides_is_counted_once() {
        let notes = compare_notes(&[run(0.05, 30)], &[run(0.05, 30)]);
        let n = &notes[0];
        // 60 ms over 1000 + 1000 requests.
        assert!(n.contains("CPU per request 30.0 µs → 30.0 µs"), "{n}");
    }

    #[test]
    fn compare_puts_both_sides_cpu_per_request_and_parser_share_side_by_side() {
        let notes = compare_notes(&[run(0.05, 30)], &[other(run(0.03, 10)), run(0.03, 10)]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        let n = &notes[0];
        // 1000 requests: (0.05 + 0.01) s → 60 µs; the other side 2000 requests, 80 ms → 40 µs.
        assert!(n.contains("CPU per request 60.0 µs → 40.0 µs"), "{n}");
        assert!(n.contains("waiting for a CPU 2.00 µs → 2.00 µs"), "{n}");
        assert!(n.contains("HTTP parser 30 % → 10 % of its CPU"), "{n}");
    }

    /// Call stacks on both sides: the note gives the share with all the parser calls (what
    /// a faster parser could save at most) and its own beside it.
    #[test]
    fn compare_gives_the_parsers_inclusive_and_own_share_when_both_sides_took_stacks() {
        let stacks = |mut s: crate::snapshot::Snapshot, inclusive: u64| {
            if let Some(u) = s.taps.get_mut("w").and_then(|t| t.upstream.as_mut()) {
                u.profile_mut().frames = Some(FrameKind::Native);
                u.profile_mut().inclusive = Some(
                    [("http_parser", inclusive), ("srv", 100)]
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), *v))
                        .collect(),
                );
            }
            s
        };
        let notes = compare_notes(
            &[stacks(run(0.05, 1), 7)],
            &[other(stacks(run(0.05, 2), 6))],
        );
        let n = &notes[0];
        assert!(
            n.contains("HTTP parser 7 % → 6 % of its CPU with all it calls (1 % → 2 % itself)"),
            "{n}"
        );
        // One side without stacks: its own shares on both sides, never one of each.
        let notes = compare_notes(&[stacks(run(0.05, 1), 7)], &[other(run(0.05, 2))]);
        assert!(
            notes[0].contains("HTTP parser 1 % → 2 % of its CPU:"),
            "{}",
            notes[0]
        );
    }
}

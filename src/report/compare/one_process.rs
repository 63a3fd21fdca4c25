//! One process on both sides at once: a bench whose `--a` and `--b` reach the same server
//! (an A/A against itself), or `compare` of a bench's kept windows with one server behind
//! both taps. Each tap watches the process, and a window's CPU is the process's over the
//! window, spent on both sides' requests; divided by one side's exchanges it counted the
//! other side's work too (an A/A of one Webdis read 42.1 µs of CPU a request against
//! about 22 µs for the same build alone). Here that CPU is measured once: divided by
//! both sides' exchanges, the same figure on each side, and not compared (two readings
//! of one counter have no difference to test).

use super::row::{Draft, Key};
use crate::snapshot::{RouteSlices, Snapshot};
use crate::stats::paired::Cell;
use crate::stats::{Method, Statistic};

/// The process `tap` watched on both sides when A's snapshot and B's at the same position
/// are one window and watched one process, in every pair that watched a process on both
/// sides (at least one); else `None`.
pub(super) fn of(a: &[Snapshot], b: &[Snapshot], tap: &str) -> Option<u32> {
    let pid = |s: &Snapshot| s.taps.get(tap)?.upstream.as_ref()?.pid;
    let mut shared = None;
    for (x, y) in a.iter().zip(b) {
        let (Some(px), Some(py)) = (pid(x), pid(y)) else {
            continue;
        };
        // One proxy's snapshot on both sides (a bench's window, B's tap read as A's):
        // its taps read one /proc, so one pid is one process. Two proxies' snapshots
        // never share both instants, and may share a pid (each container's own 1).
        let one_window = x.since_unix == y.since_unix && x.taken_at_unix == y.taken_at_unix;
        if px != py || !one_window {
            return None;
        }
        shared = Some(px);
    }
    shared
}

/// The row of a figure of one process seen by both sides: each pair's seconds once (A's
/// reading) over both sides' exchanges, the same value on each side, no interval, and a
/// note that says why.
pub(super) fn draft(key: Key, pid: u32, oa: &[Option<Cell>], ob: &[Option<Cell>]) -> Draft {
    let (mut count, mut sum, mut pairs) = (0.0, 0.0, 0usize);
    let mut counts = [0u64; 2];
    for (x, y) in oa.iter().zip(ob) {
        if let (Some(x), Some(y)) = (x, y) {
            count += x.count + y.count;
            sum += x.sum;
            pairs += 1;
            counts[0] += x.count as u64;
            counts[1] += y.count as u64;
        }
    }
    let value = (count > 0.0).then(|| sum / count);
    Draft {
        key,
        stat: Statistic::PerRequest,
        primary: false,
        runs: [pairs; 2],
        counts,
        values: [value, value],
        method: Method::None,
        measured: None,
        note: Some(note(pid)),
    }
}

/// Why a figure of the process has no comparison.
pub(super) fn note(pid: u32) -> String {
    format!(
        "one process (pid {pid}) serves both sides at once: its CPU is measured once, over \
         both sides' exchanges, and there is nothing to compare it with"
    )
}

/// The notes of the taps whose sides are one process: why their functions have no rows.
pub(super) fn notes(a: &[Snapshot], b: &[Snapshot]) -> Vec<String> {
    let taps: std::collections::BTreeSet<&String> = a.iter().flat_map(|s| s.taps.keys()).collect();
    taps.into_iter()
        .filter_map(|tap| {
            let pid = of(a, b, tap)?;
            Some(format!(
                "tap {tap}: {}; its functions and components are not compared either",
                note(pid)
            ))
        })
        .collect()
}

/// The exchanges of `tap` in one snapshot: the `total` count over every route (what the
/// `cpu` rows divide by).
fn exchanges(snap: &Snapshot, tap: &str) -> u64 {
    snap.taps
        .get(tap)
        .and_then(|t| t.phases.get("total"))
        .map(|routes| routes.values().map(|s| s.count).sum())
        .unwrap_or(0)
}

/// Each side's snapshots with the CPU of every tap whose sides are one process measured
/// once: in each window, the process's CPU (user, system, on-CPU clock, waiting, per
/// process) shared between the sides by their exchanges, so that what a reader divides by
/// one side's exchanges is the process's CPU over both sides' (the `cpu` rows' figure).
/// The reads that held a tap's traffic are dropped: under a duet every read held both
/// sides' traffic, under the interleave a read straddles A's slice and B's, and the CPU
/// over them was both sides' work either way. `None` when no tap is one process (the
/// sides are then read as they are).
pub(super) fn measured_once(
    a: &[Snapshot],
    b: &[Snapshot],
) -> Option<(Vec<Snapshot>, Vec<Snapshot>)> {
    let taps: std::collections::BTreeSet<&String> = a.iter().flat_map(|s| s.taps.keys()).collect();
    let shared: Vec<&String> = taps.into_iter().filter(|t| of(a, b, t).is_some()).collect();
    if shared.is_empty() {
        return None;
    }
    let (mut a2, mut b2) = (a.to_vec(), b.to_vec());
    for tap in shared {
        for (x, y) in a2.iter_mut().zip(b2.iter_mut()) {
            let (nx, ny) = (exchanges(x, tap), exchanges(y, tap));
            let both = (nx + ny) as f64;
            for (snap, n) in [(x, nx), (y, ny)] {
                let share = if both > 0.0 { n as f64 / both } else { 0.0 };
                if let Some(u) = snap.taps.get_mut(tap).and_then(|t| t.upstream.as_mut()) {
                    scale_cpu(u, share);
                }
            }
        }
    }
    Some((a2, b2))
}

/// The process's CPU figures of one reading times `share` (its traffic reads dropped).
fn scale_cpu(u: &mut crate::snapshot::UpstreamSnapshot, share: f64) {
    u.cpu_user_seconds *= share;
    u.cpu_system_seconds *= share;
    u.cpu_seconds = u.cpu_seconds.map(|s| s * share);
    u.runqueue_seconds *= share;
    u.traffic = None;
    for p in u.processes.iter_mut().flatten() {
        p.cpu_seconds *= share;
    }
    if let Some(p) = u.profile.as_mut() {
        p.unsampled_cpu_seconds = p.unsampled_cpu_seconds.map(|s| s * share);
    }
}

/// The route slices of `tap` whose sides are one process, measured once: each window's
/// slices as A's watcher cut them (the process's CPU in each, read once), with B's
/// exchanges per route added into the slice of A's that was open when B's slice ended.
/// The two taps' watchers cut their slices at their own instants; a B slice lands in the
/// A slice that holds its end, a shift of at most one slice that the fit over a window's
/// hundreds of slices absorbs.
pub(super) fn slices(a: &[Snapshot], b: &[Snapshot], tap: &str) -> Option<RouteSlices> {
    let slices_of = |s: &Snapshot| {
        s.taps
            .get(tap)
            .and_then(|t| t.upstream.as_ref())
            .and_then(|u| u.slices.clone())
    };
    let mut all: Option<RouteSlices> = None;
    for (x, y) in a.iter().zip(b) {
        let Some(mut window) = slices_of(x) else {
            continue;
        };
        if let Some(other) = slices_of(y) {
            add_exchanges(&mut window, &other);
        }
        all.get_or_insert_with(RouteSlices::default).append(&window);
    }
    all
}

/// `other`'s exchanges per route into the slices of `window` that held their ends (the
/// last slice for one that ended after it), its columns matched by route name.
fn add_exchanges(window: &mut RouteSlices, other: &RouteSlices) {
    if window.slices.is_empty() {
        return;
    }
    let columns: Vec<usize> = other
        .routes
        .iter()
        .map(|r| match window.routes.iter().position(|x| x == r) {
            Some(i) => i,
            None => {
                window.routes.push(r.clone());
                window.routes.len() - 1
            }
        })
        .collect();
    let width = window.routes.len();
    for s in &mut window.slices {
        s.exchanges.resize(width, 0);
    }
    let last = window.slices.len() - 1;
    for s in &other.slices {
        let at = window
            .slices
            .iter()
            .position(|w| w.end_unix >= s.end_unix)
            .unwrap_or(last);
        for (&col, &n) in columns.iter().zip(&s.exchanges) {
            window.slices[at].exchanges[col] += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::snapshot::summary::{Inside, DEFAULT_WHAT_IF};
    use crate::snapshot::Slice;

    /// One window of tap `w`, `requests` exchanges over two routes, its upstream pid 7
    /// with `cpu` seconds of user time.
    fn window(requests: u64, cpu: f64) -> Snapshot {
        let series = |n: u64| {
            format!(
                r#"{{"count":{n},"sum":0.1,"mean":0.0001,"min":0.0001,"p50":0.0001,"p90":0.0001,
                "p99":0.0001,"p999":0.0001,"max":0.0001,"histogram":[[100000,{n}]]}}"#
            )
        };
        let text = format!(
            r#"{{"format":"phasescope-snapshot","format_version":1,"version":"0","clock":"os",
            "taken_at":"x","taken_at_unix":60.0,"since":"x","since_unix":0.0,"metrics_enabled":true,
            "hdr":{{"significant_figures":2,"lowest_ns":1,"highest_ns":3600000000000}},
            "taps":{{"w":{{"protocol":"http","phases":{{"total":{{"/a":{},"/b":{}}}}},
            "totals":{{"requests":{requests},"errors":{{}},"connections_open":{{}},"connections":{{}},"bytes":{{}}}},
            "upstream":{{"pid":7,"comm":"srv","exe":"/bin/srv","threads":1,"interval_seconds":0.25,
            "watched_seconds":60.0,"cpu_user_seconds":{cpu},"cpu_system_seconds":0.0,"cpu_seconds":{cpu},
            "runqueue_seconds":0.0,"context_switches_voluntary":0,"context_switches_involuntary":0,
            "restarts":0}}}}}}}}"#,
            series(requests / 2),
            series(requests - requests / 2)
        );
        serde_json::from_str(&text).unwrap()
    }

    fn upstream(s: &mut Snapshot) -> &mut crate::snapshot::UpstreamSnapshot {
        s.taps.get_mut("w").unwrap().upstream.as_mut().unwrap()
    }

    /// A's 1000 exchanges and B's 3000 in one window of one process that spent 0.4 s:
    /// 100 µs a request on each side (not 400 µs on A's and 133 µs on B's), whatever
    /// the traffic reads said.
    #[test]
    fn the_process_cpu_is_shared_by_exchanges() {
        let (mut a, b) = (window(1000, 0.4), window(3000, 0.4));
        upstream(&mut a).traffic = Some(crate::snapshot::Traffic {
            seconds: 30.0,
            cpu_user_seconds: 0.35,
            exchanges: Some(1000),
            ..Default::default()
        });
        let (a2, b2) = measured_once(&[a], &[b]).unwrap();
        for (side, n) in [(&a2[0], 1000), (&b2[0], 3000)] {
            let u = side.taps["w"].upstream.as_ref().unwrap();
            let i = Inside::new(u, n, None, DEFAULT_WHAT_IF);
            let us = (i.cpu_user + i.cpu_system) * 1e6;
            assert!((us - 100.0).abs() < 1e-6, "{us} µs a request");
        }
        // Another process on one side: nothing is shared.
        let mut c = window(3000, 0.4);
        upstream(&mut c).pid = Some(8);
        assert!(measured_once(&[window(1000, 0.4)], &[c]).is_none());
    }

    /// Each side's slices of one process, cut at instants of their own (B's 0.1 s before
    /// A's), each holding that side's exchanges and the whole process's CPU. Each route
    /// costs 20 and 80 µs; read once, both sides' rows say so, the same on each side
    /// (each side's slices alone held the other side's CPU beside its own exchanges).
    #[test]
    fn route_rows_of_one_process_read_its_slices_once() {
        let costs = [20e-6, 80e-6];
        let mut rng = Rng::new(5);
        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        for s in 0..200 {
            let idle = s % 10 == 9;
            let mut counts = || -> Vec<u64> {
                (0..2)
                    .map(|_| {
                        if idle {
                            0
                        } else {
                            (rng.unit() * 400.0) as u64 + 10
                        }
                    })
                    .collect()
            };
            let (na, nb) = (counts(), counts());
            let cpu: f64 = (0..2)
                .map(|r| (na[r] + nb[r]) as f64 * costs[r])
                .sum::<f64>()
                + 0.0005 * rng.normal().abs();
            let end = 1.0 + s as f64 * 0.25;
            let slice = |exchanges: Vec<u64>, end_unix: f64| Slice {
                end_unix,
                seconds: 0.25,
                cpu_seconds: cpu,
                exchanges,
            };
            sa.push(slice(na, end));
            sb.push(slice(nb, end - 0.1));
        }
        let routes = vec!["/a".to_owned(), "/b".to_owned()];
        let (mut a, mut b) = (window(1000, 1.0), window(1000, 1.0));
        upstream(&mut a).slices = Some(RouteSlices {
            routes: routes.clone(),
            slices: sa,
        });
        upstream(&mut b).slices = Some(RouteSlices { routes, slices: sb });
        let (a, b) = ([a], [b]);
        let drafts = super::super::route_cpu::drafts(&a, &b, &Default::default());
        let keys: Vec<&Key> = drafts.iter().map(|d| &d.key).collect();
        assert_eq!(drafts.len(), 2, "{keys:?}");
        for d in &drafts {
            let cost = if d.key.2 == "/a" { costs[0] } else { costs[1] };
            let [x, y] = d.values;
            assert_eq!(x, y, "{:?}", d.key);
            let x = x.unwrap();
            assert!(
                (x - cost).abs() < 0.1 * cost,
                "{} µs against {} µs",
                x * 1e6,
                cost * 1e6
            );
            assert!(
                d.note.as_deref().unwrap_or("").contains("one process"),
                "{:?}",
                d.note
            );
        }
    }
}

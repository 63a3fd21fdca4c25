//! One process on both sides at once: a bench whose `--a` and `--b` reach the same server
//! (an A/A against itself), or `compare` of a bench's kept windows with one server behind
//! both taps. Each tap watches the process, and a window's CPU is the process's over the
//! window, spent on both sides' requests; divided by one side's exchanges it counted the
//! other side's work too (an A/A of one Webdis read 42.1 µs of CPU a request against
//! about 22 µs for the same build alone). Here that CPU is measured once: divided by
//! both sides' exchanges, the same figure on each side, and not compared (two readings
//! of one counter have no difference to test).

use super::row::{Draft, Key};
use crate::snapshot::Snapshot;
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

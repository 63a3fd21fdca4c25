//! The findings of the last minute, for the `phasescope_finding` gauge. Each scrape of
//! `/metrics` refreshes them, at most once every [`EVERY`]: a snapshot joins a ring of
//! the snapshots of the last [`WINDOW`], the window between the newest and the oldest is
//! diagnosed, and the result is left on the registry's board for the exposition. A
//! finding therefore shows at the first scrape after a minute's requests have it, and
//! goes within a [`WINDOW`] of its cause going away. The CPU per route gauges are
//! estimated over the same window at the same moment. Nothing is evaluated while nobody
//! scrapes: a proxy nobody watches does no work for it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use crate::metrics::Registry;

use crate::snapshot::Snapshot;
use crate::sync::lock;

/// The shortest time between two evaluations.
pub const EVERY: Duration = Duration::from_secs(10);
/// The window they are evaluated over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The ring of recent snapshots (trimmed to what the rules read).
#[derive(Debug, Default)]
pub struct Recent {
    ring: Mutex<VecDeque<Snapshot>>,
}

impl Recent {
    /// Evaluates the findings of the last minute onto `registry`'s board, unless the last
    /// evaluation is less than [`EVERY`] old. Takes a snapshot: call it off the runtime's
    /// workers (the admin server runs it on its blocking pool, with the scrape).
    pub fn refresh(&self, registry: &Registry) {
        let mut ring = lock(&self.ring);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if ring
            .back()
            .is_some_and(|last| now - last.taken_at_unix < EVERY.as_secs_f64())
        {
            return;
        }
        let snapshot = registry.snapshot();
        let start = snapshot.taken_at_unix - WINDOW.as_secs_f64();
        // Those older than the window leave, but the newest of them: the window's start.
        while ring.len() > 1 && ring.get(1).is_some_and(|s| s.taken_at_unix <= start) {
            ring.pop_front();
        }
        let window = match ring.front() {
            Some(oldest) => snapshot.since(oldest),
            None => snapshot.clone(),
        };
        let mut found = super::diagnose(&window);
        found.extend(stack_findings(&window, &snapshot));
        registry.findings().set(&found);
        registry
            .route_cpu()
            .set(super::route_cpu::estimates(&window));
        ring.push_back(trimmed(snapshot));
    }
}

/// The findings that read call stacks (`hot_path`), over the whole `snapshot` (since the
/// last reset) for each tap whose stacks the `window` lacks: stacks are not kept per part
/// of a window (`snapshot::upstream::since`), so the last minute has none, and the gauge
/// would miss a finding the report of the same proxy gives.
fn stack_findings(window: &Snapshot, snapshot: &Snapshot) -> Vec<crate::snapshot::Finding> {
    let has_stacks = |s: &Snapshot, tap: &str| {
        s.taps
            .get(tap)
            .and_then(|t| t.upstream.as_ref())
            .and_then(|u| u.stacks())
            .is_some()
    };
    let lacking: Vec<&String> = snapshot
        .taps
        .keys()
        .filter(|tap| has_stacks(snapshot, tap) && !has_stacks(window, tap))
        .collect();
    if lacking.is_empty() {
        return Vec::new();
    }
    super::diagnose(snapshot)
        .into_iter()
        .filter(|f| STACK_RULES.contains(&f.id.as_str()) && lacking.contains(&&f.tap))
        .collect()
}

/// The rules that read call stacks.
const STACK_RULES: [&str; 1] = ["hot_path"];

/// What the ring keeps of a snapshot: what the rules read. The rules read counts and sums
/// of every phase but the histogram of one only (`upstream_recv_gap`, for the pauses in a
/// range), and none of the upstream's stacks; a minute of whole snapshots would otherwise
/// hold every series' histogram several times over.
fn trimmed(mut s: Snapshot) -> Snapshot {
    for tap in s.taps.values_mut() {
        for (phase, routes) in &mut tap.phases {
            if phase != "upstream_recv_gap" {
                for series in routes.values_mut() {
                    series.histogram = Vec::new();
                }
            }
        }
    }
    for p in s
        .taps
        .values_mut()
        .filter_map(|t| t.upstream.as_mut()?.profile.as_mut())
    {
        p.stacks = None;
        p.functions = None;
        p.top_symbols = None;
    }
    s
}

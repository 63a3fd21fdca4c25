//! What a comparison is about: which taps take part, which of them face the clients
//! (their `total` and request rate are the primary question), and — for an A/B bench —
//! a tap of B compared as a differently named tap of A.

use std::collections::BTreeSet;

use crate::metrics::snapshot::Snapshot;

/// Keeps the taps in `taps` (all when empty); with `rename = Some((from, to))` the tap
/// `from` is kept alone and renamed `to` (B's tap compared as A's).
pub fn select(snaps: &[Snapshot], taps: &[String], rename: Option<(&str, &str)>) -> Vec<Snapshot> {
    snaps
        .iter()
        .map(|s| {
            let mut s = s.clone();
            match rename {
                Some((from, to)) => {
                    let kept = s.taps.remove(from);
                    s.taps.clear();
                    if let Some(t) = kept {
                        s.taps.insert(to.to_owned(), t);
                    }
                }
                None if !taps.is_empty() => s.taps.retain(|name, _| taps.contains(name)),
                None => {}
            }
            s
        })
        .collect()
}

/// The client-facing taps of these snapshots. An HTTP tap is always in front. A RESP tap
/// is in front unless an HTTP tap of the same snapshot correlated requests with backend
/// commands (then the RESP tap sits behind it, between Webdis and Redis, and its `total`
/// is a part of the HTTP tap's wait, not what a client sees).
pub fn front_taps(snaps: &[Snapshot]) -> BTreeSet<String> {
    let mut front = BTreeSet::new();
    for s in snaps {
        let correlated = s
            .taps
            .values()
            .any(|t| t.protocol == "http" && t.totals.correlations.matched > 0);
        for (name, t) in &s.taps {
            if t.protocol != "resp" || !correlated {
                front.insert(name.clone());
            }
        }
    }
    front
}

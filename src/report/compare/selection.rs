//! What a comparison is about: which taps take part, which of them face the clients
//! (their `total` and request rate are the primary question), and — for an A/B bench —
//! a tap of B compared as a differently named tap of A.

use std::collections::BTreeSet;

use crate::snapshot::Snapshot;

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

/// Every tap `--tap` names must be in A's snapshots, and B's tap (`--vs-tap`, or the same
/// names without it) in B's: a misspelt tap would otherwise compare nothing and look like
/// a comparison that found nothing.
pub fn check_named(
    a: &[Snapshot],
    b: &[Snapshot],
    taps: &[String],
    vs_tap: Option<&str>,
) -> anyhow::Result<()> {
    let missing = |snaps: &[Snapshot], name: &str, side: &str, flag: &str| {
        if snaps.iter().any(|s| s.taps.contains_key(name)) {
            return Ok(());
        }
        let known: BTreeSet<&str> = snaps
            .iter()
            .flat_map(|s| s.taps.keys().map(String::as_str))
            .collect();
        let known: Vec<&str> = known.into_iter().collect();
        anyhow::bail!(
            "{flag} {name}: no tap of that name in {side}'s snapshots (their taps: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )
    };
    for name in taps {
        missing(a, name, "A", "--tap")?;
        if vs_tap.is_none() {
            missing(b, name, "B", "--tap")?;
        }
    }
    if let Some(vs) = vs_tap {
        missing(b, vs, "B", "--vs-tap")?;
    }
    Ok(())
}

//! The typical request, read from a phasescope tap in front of the probed server: the
//! mean head size and field count of what the tap read in its current window. The
//! probe's own requests are not in it: they carry the probe's marker field and the tap
//! records them under the route `probe`, outside these statistics.

use anyhow::{bail, Context};

use super::grid::Shape;
use crate::report::source::Source;
use crate::snapshot::Snapshot;

/// The shape, and a sentence saying where it came from.
#[derive(Debug, Clone)]
pub struct FromTap {
    pub shape: Shape,
    pub source: String,
}

/// Reads `admin` (`http://host:port`) and takes the mean head of `tap`, or of the HTTP tap
/// that read the most heads.
pub fn from_admin(admin: &str, tap: Option<&str>) -> anyhow::Result<FromTap> {
    let source = Source::parse(admin)?;
    if !matches!(source, Source::Admin(_)) {
        bail!("{admin}: --from must be the admin server's http:// URL");
    }
    let snap = source
        .load()
        .with_context(|| format!("reading the typical request from {admin}"))?;
    from_snapshot(&snap, admin, tap)
}

pub fn from_snapshot(snap: &Snapshot, admin: &str, tap: Option<&str>) -> anyhow::Result<FromTap> {
    let heads = |name: &str| snap.taps.get(name).and_then(|t| t.request_heads.as_ref());
    let name = match tap {
        Some(name) => {
            if !snap.taps.contains_key(name) {
                bail!("{admin} has no tap {name:?}");
            }
            name.to_owned()
        }
        None => snap
            .taps
            .keys()
            .filter_map(|n| Some((n, heads(n)?.count)))
            .max_by_key(|&(n, count)| (count, std::cmp::Reverse(n.clone())))
            .map(|(n, _)| n.clone())
            .with_context(|| format!("{admin} has no HTTP tap (or is older than --from needs)"))?,
    };
    let Some(h) = heads(&name).filter(|h| h.count > 0) else {
        bail!(
            "tap {name} at {admin} has read no request head since {} (the probe's own are not \
             counted): send it some traffic, or give --typical-bytes and --typical-headers",
            snap.since
        );
    };
    Ok(FromTap {
        shape: Shape {
            bytes: h.mean_bytes.round().max(1.0) as usize,
            headers: h.mean_fields.round().max(1.0) as usize,
        },
        source: format!(
            "the mean of {} request heads tap {name} read since {} ({admin}), the probe's own left out",
            h.count, snap.since
        ),
    })
}

//! `slow_client`: most of a request's time is the client sending its request
//! (`client_recv`) or taking the response (`write` beyond `upstream_recv`): the server is
//! not where the time goes.
//!
//! `write` overlaps `upstream_recv` while a response streams through (docs/phases.md), so
//! a large response from a fast client has a long `write` too; only the part of `write`
//! beyond the transfer from the upstream is the client's. A client slow enough to hold
//! back the upstream (its buffers along the path full) stretches `upstream_recv` with it
//! and is not told apart here.

use super::{met, per_request, shown, Draft};
use crate::findings::TapView;
use crate::metrics::Finding;
use crate::units::share;

/// `client_recv` and `write` over `total` from which it is a finding.
pub const MIN_SHARE: f64 = 0.5;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let (recv, write) = (v.phase("client_recv"), v.phase("write"));
    let taking = (write.sum - v.phase("upstream_recv").sum).max(0.0);
    let seconds = per_request(v, recv.sum + taking);
    let of_total = v.of_total(seconds)?;
    if of_total < MIN_SHARE {
        return None;
    }
    let reading = taking >= recv.sum;
    let what = if reading {
        "reads the responses slowly (write: waiting for the client's socket to take them)"
    } else {
        "sends its requests slowly (client_recv: the head arriving in pieces)"
    };
    Some(
        Draft {
            id: "slow_client",
            route: None,
            summary: format!(
                "{} of a request's time is the client's: it {what}",
                share(of_total)
            ),
            evidence: vec![
                met(
                    "client_recv and write beyond upstream_recv, over total",
                    of_total,
                    "ratio",
                    format!("≥ {MIN_SHARE}"),
                ),
                shown("client_recv per request", per_request(v, recv.sum), "seconds"),
                shown("write beyond upstream_recv per request", per_request(v, taking), "seconds"),
            ],
            seconds,
            share: Some(of_total),
            fix: if reading {
                "Look at the client, not the server: its network (bandwidth, distance) or its read loop. For large responses: compression, smaller pages, or a buffering proxy closer to the clients.".to_owned()
            } else {
                "Look at the client, not the server: it writes its requests in pieces or over a slow network. Send each request in one write (with TCP_NODELAY), or move the client closer.".to_owned()
            },
        }
        .scaled(v),
    )
}

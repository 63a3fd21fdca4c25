//! `slow_client`: most of a request's time is the client sending its request
//! (`client_recv`) or taking the response (`write_blocked`: response bytes waiting for its
//! socket): the server is not where the time goes.
//!
//! `write` itself overlaps `upstream_recv` while a response streams through
//! (docs/phases.md), so a large response to a fast client has a long `write` too; only
//! the time the client's socket refused bytes is the client's.

use super::{met, per_request, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::Finding;
use crate::units::share;

/// `client_recv` and `write` over `total` from which it is a finding.
pub const MIN_SHARE: f64 = 0.5;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let recv = v.phase("client_recv");
    let taking = v.phase("write_blocked").sum;
    let seconds = per_request(v, recv.sum + taking);
    let of_total = v.of_total(seconds)?;
    if of_total < MIN_SHARE {
        return None;
    }
    let reading = taking >= recv.sum;
    let what = if reading {
        "reads the responses slowly (write_blocked: response bytes waiting for its socket)"
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
                    "client_recv and write_blocked, over total",
                    of_total,
                    "ratio",
                    "≥",
                    MIN_SHARE,
                ),
                shown("client_recv per request", per_request(v, recv.sum), "seconds"),
                shown("write_blocked per request", per_request(v, taking), "seconds"),
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

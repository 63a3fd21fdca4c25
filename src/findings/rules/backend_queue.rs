//! `backend_queue`: behind Webdis, a request's Redis command waits behind other commands'
//! replies on one of Webdis's pooled Redis connections (the "Redis queue" part of
//! `backend`, docs/phases.md): the pool is too small for the requests in flight.

use super::{met, per_request, shown, Draft};
use crate::findings::{TapView, MIN_REQUESTS};
use crate::snapshot::Finding;
use crate::units::{duration, share};

/// The Redis queue's share of `upstream_wait` from which it is a finding.
pub const MIN_SHARE_OF_WAIT: f64 = 0.2;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let queue = v.phase("backend_queue");
    let wait = v.phase("upstream_wait");
    if queue.count < MIN_REQUESTS {
        return None;
    }
    let (q, w) = (queue.mean()?, wait.mean()?);
    let of_wait = if w > 0.0 { q / w } else { 0.0 };
    if of_wait < MIN_SHARE_OF_WAIT {
        return None;
    }
    let seconds = per_request(v, queue.sum);
    let mut evidence = vec![
        met(
            "Redis queue (backend_queue) over upstream_wait",
            of_wait,
            "ratio",
            "≥",
            MIN_SHARE_OF_WAIT,
        ),
        shown("backend_queue mean", q, "seconds"),
        shown("upstream_wait mean", w, "seconds"),
        shown(
            "requests matched to their Redis command",
            queue.count as f64,
            "count",
        ),
    ];
    if let Some(backend) = v.mean("backend") {
        evidence.push(shown("backend mean", backend, "seconds"));
    }
    Some(
        Draft {
            id: "backend_queue",
            route: None,
            summary: format!(
                "requests wait {} (mean) for their Redis command to come out of Webdis's connection pool, {} of upstream_wait: more requests are in flight than Webdis has Redis connections",
                duration(q),
                share(of_wait)
            ),
            evidence,
            seconds,
            share: v.of_total(seconds),
            fix: "Give Webdis more Redis connections: raise `pool_size` in webdis.json (Webdis opens threads × pool_size of them) to about the number of requests in flight, or raise `threads`; or send fewer requests at once.".to_owned(),
        }
        .scaled(v),
    )
}

//! The one line that answers "where does the time go?".
//!
//! Every phase's share of the mean total, in timeline order, with the Webdis
//! decomposition in parentheses after `upstream_wait` when the correlator produced it:
//! `backend` is Redis, split into "Redis queue" (`backend_queue`: the command queued
//! behind earlier replies on Webdis's pooled connection) and "Redis" (the rest: Redis
//! answering it), and `backend_in` + `backend_out` is Webdis (reading the HTTP request,
//! building the command; formatting the reply).

use super::row::Row;
use crate::phase::Phase;
use crate::units;

/// Phases the headline never lists on their own: `total` is the denominator, and the
/// backend phases appear inside `upstream_wait`.
const NOT_LISTED: [Phase; 5] = [
    Phase::Total,
    Phase::BackendIn,
    Phase::Backend,
    Phase::BackendOut,
    Phase::BackendQueue,
];

/// E.g. `mean total 1.20 ms over 5000 requests: parse 0.4 %, upstream_wait 91 %
/// (Redis 23 %, Webdis 68 %), write 2 %`. Rows must carry shares (a section with a
/// `total`); without one the headline says so.
pub fn headline(rows: &[Row]) -> String {
    headline_with(rows, None)
}

/// [`headline`], with Redis's process per command (the RESP tap behind watches it): the
/// "Redis" part then reads as its CPU, its wait for a CPU and the rest
/// ([`super::backend_split`]).
pub fn headline_with(rows: &[Row], redis: Option<super::backend_split::RedisWork>) -> String {
    let Some(total) = rows.iter().find(|r| r.phase == Phase::Total.name()) else {
        return "no total phase recorded: shares cannot be computed".to_owned();
    };
    let mut parts = Vec::new();
    for row in rows {
        let known = Phase::from_name(&row.phase);
        if known.is_some_and(|p| NOT_LISTED.contains(&p)) {
            continue;
        }
        let Some(s) = row.share else { continue };
        let mut part = format!("{} {}", row.phase, units::share(s));
        if known == Some(Phase::UpstreamWait) {
            // Snapshots from before backend_queue existed have backend alone; requests
            // the correlator could not pair keep their wait undivided.
            if let Some(split) = super::backend_split::BackendSplit::new(rows, redis) {
                part.push_str(&format!(" ({})", split.shown()));
            }
        }
        parts.push(part);
    }
    let noun = if total.count == 1 {
        "request"
    } else {
        "requests"
    };
    format!(
        "mean total {} over {} {noun}: {}",
        units::duration(total.mean),
        total.count,
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(phase: &str, sum: f64, total: f64) -> Row {
        Row::of_sum(phase, 100, sum, total)
    }

    #[test]
    fn the_webdis_split_follows_upstream_wait() {
        let t = 1.0;
        let rows = [
            row("parse", 0.004, t),
            row("upstream_wait", 0.91, t),
            row("write", 0.02, t),
            row("total", 1.0, t),
            row("backend_in", 0.40, t),
            row("backend", 0.23, t),
            row("backend_out", 0.28, t),
        ];
        assert_eq!(
            headline(&rows),
            "mean total 10.0 ms over 100 requests: parse 0.4 %, upstream_wait 91 % \
             (Redis 23 %, Webdis 68 %), write 2 %"
        );
    }

    #[test]
    fn the_redis_queue_is_named_apart_from_redis() {
        let t = 1.0;
        let rows = [
            row("upstream_wait", 0.91, t),
            row("total", 1.0, t),
            row("backend_in", 0.40, t),
            row("backend", 0.23, t),
            row("backend_queue", 0.21, t),
            row("backend_out", 0.28, t),
        ];
        assert!(
            headline(&rows)
                .ends_with("upstream_wait 91 % (Redis queue 21 %, Redis 2 %, Webdis 68 %)"),
            "{}",
            headline(&rows)
        );
    }

    #[test]
    fn without_backend_phases_there_is_no_split_and_without_total_no_shares() {
        let rows = [row("upstream_wait", 0.5, 1.0), row("total", 1.0, 1.0)];
        let h = headline(&rows);
        assert!(h.ends_with("upstream_wait 50 %"), "{h}");
        assert!(!h.contains("Redis"));
        let partly = [
            row("upstream_wait", 0.9, 1.0),
            row("backend", 0.2, 1.0),
            row("backend_in", 0.1, 1.0),
            row("total", 1.0, 1.0),
        ];
        assert!(
            headline(&partly)
                .ends_with("upstream_wait 90 % (Redis 20 %, Webdis 10 %, unpaired 60 %)"),
            "{}",
            headline(&partly)
        );
        assert!(headline(&rows[..1]).starts_with("no total"));
    }
}

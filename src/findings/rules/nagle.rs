//! `nagle_delayed_ack`: a response written in pieces waits between them for the proxy's
//! delayed ACK. With `TCP_NODELAY` off, a server's second small write is held back by
//! Nagle's algorithm until the first is acknowledged, and the receiver delays that ACK
//! (40 ms on Linux, up to 200 ms elsewhere): the response's reads are then separated by a
//! pause near that timer, on nearly every request, while the server's CPU is idle.

use super::{met, met_as, shown, Draft};
use crate::findings::{TapView, MIN_REQUESTS};
use crate::snapshot::Finding;
use crate::units::{duration, share};

/// Pauses between two reads of a response in this range (seconds) are taken as waits on
/// a delayed ACK: Linux's is 40 ms (its minimum), other stacks' up to 200 ms; twice that
/// covers a retransmitted or doubly delayed one.
pub const PAUSE_LOW: f64 = 0.030;
pub const PAUSE_HIGH: f64 = 0.500;
/// The share of a route's responses with such a pause from which it is a finding.
pub const MIN_SHARE: f64 = 0.1;
/// The server's CPU per request must stay under this fraction of the mean pause: a
/// server computing through the pause is not waiting on an ACK.
pub const MAX_CPU_OF_PAUSE: f64 = 0.5;
/// The time the responses waited for the client (`write_blocked`) must stay under this
/// fraction of the pauses: a proxy held back by a slow client stops reading the upstream,
/// and the pauses are then the client's.
pub const MAX_BLOCKED_OF_PAUSES: f64 = 0.1;

pub fn check(v: &TapView<'_>) -> Vec<Finding> {
    v.routes()
        .into_iter()
        .filter(|(_, n)| *n >= MIN_REQUESTS)
        .filter_map(|(route, n)| route_check(v, route, n))
        .collect()
}

fn route_check(v: &TapView<'_>, route: &str, requests: u64) -> Option<Finding> {
    let pauses = v.between("upstream_recv_gap", Some(route), PAUSE_LOW, PAUSE_HIGH);
    let stalled = pauses.count as f64 / requests as f64;
    let pause = pauses.mean()?;
    if stalled < MIN_SHARE {
        return None;
    }
    let blocked = v.route_phase("write_blocked", route).sum;
    if blocked >= MAX_BLOCKED_OF_PAUSES * pauses.sum {
        return None;
    }
    let mut evidence = vec![
        met(
            "responses with a pause of 30–500 ms between two reads",
            stalled,
            "ratio",
            "≥",
            MIN_SHARE,
        ),
        shown("mean pause", pause, "seconds"),
        met(
            "write_blocked over the pauses",
            blocked / pauses.sum,
            "ratio",
            "<",
            MAX_BLOCKED_OF_PAUSES,
        ),
    ];
    if let Some(recv) = v.route_phase("upstream_recv", route).mean() {
        evidence.push(shown("upstream_recv mean", recv, "seconds"));
    }
    if let Some(i) = &v.inside {
        let cpu = i.cpu_user + i.cpu_system;
        if cpu >= MAX_CPU_OF_PAUSE * pause {
            return None;
        }
        evidence.push(met_as(
            "upstream CPU per request",
            cpu,
            "seconds",
            format!(
                "< {} ({MAX_CPU_OF_PAUSE} × mean pause)",
                duration(MAX_CPU_OF_PAUSE * pause)
            ),
        ));
    }
    let seconds = pauses.sum / requests as f64;
    let share_of_total = v
        .route_phase("total", route)
        .mean()
        .filter(|t| *t > 0.0)
        .map(|t| seconds / t);
    let php = v.inside.as_ref().is_some_and(|i| i.comm.contains("php"));
    Some(
        Draft {
            id: "nagle_delayed_ack",
            route: Some(route.to_owned()),
            summary: format!(
                "{} of the responses of route {route} pause {} between two reads: the server writes them in pieces without TCP_NODELAY, and each later piece waits for the proxy's delayed ACK (Nagle's algorithm){}",
                share(stalled),
                duration(pause),
                share_of_total.map_or_else(String::new, |s| format!("; {} of the request's time", share(s))),
            ),
            evidence,
            seconds,
            share: share_of_total,
            fix: fix(php),
        }
        .scaled(v),
    )
}

fn fix(php: bool) -> String {
    let general = "Set TCP_NODELAY on the server's accepted sockets (setsockopt IPPROTO_TCP, TCP_NODELAY, 1), or write each response's head and body in one send (writev, or one buffered write)";
    if php {
        format!("{general}. amphp/http-server: listen with a bind context that sets it, `(new BindContext)->withTcpNoDelay()` passed to `SocketHttpServer::expose()`; a stream server: `socket_set_option(socket_import_stream($s), SOL_TCP, TCP_NODELAY, 1)`.")
    } else {
        format!("{general}. Python: `sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)`; nginx: `tcp_nodelay on` (its default); amphp/http-server: `BindContext::withTcpNoDelay()`.")
    }
}

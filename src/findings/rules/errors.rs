//! `upstream_errors`: exchanges failed on the upstream's side (refused, reset, timed out,
//! answered with something that is not HTTP or RESP). A window whose requests fail is not
//! a latency question: from [`MIN_SHARE`] of the exchanges and [`MIN_FAILURES`] failures
//! the finding is `critical`, naming the cause with its fix; below either it is `info`,
//! so that any failure is named with its count, whatever its share (two refused connects
//! in thousands of requests are a restart or a full backlog worth knowing of). It looks
//! at taps whatever their number of answered requests (a tap whose every request failed
//! has none).

use std::collections::BTreeMap;

use super::{met, shown, Draft};
use crate::findings::TapView;
use crate::recorder::{Culprit, ErrorKind};
use crate::snapshot::{Finding, Severity};
use crate::units::share;

/// The upstream's failures over all exchanges from which the finding is critical.
pub const MIN_SHARE: f64 = 0.01;
/// Fewer failures than this in the window are information only.
pub const MIN_FAILURES: u64 = 5;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let failures: BTreeMap<ErrorKind, u64> = v
        .tap
        .errors
        .iter()
        .filter_map(|(kind, &n)| Some((ErrorKind::from_name(kind)?, n)))
        .filter(|(kind, n)| {
            *n > 0 && kind.culprit() == Culprit::Upstream && *kind != ErrorKind::UnsolicitedResponse
        })
        .collect();
    let failed: u64 = failures.values().sum();
    let client_failed: u64 = v
        .tap
        .errors
        .iter()
        .filter(|(kind, _)| {
            ErrorKind::from_name(kind).is_some_and(|k| k.culprit() == Culprit::Client)
        })
        .map(|(_, n)| n)
        .sum();
    let all = v.requests + v.server_errors + failed + client_failed;
    if failed == 0 || all == 0 {
        return None;
    }
    let of_all = failed as f64 / all as f64;
    let critical = failed >= MIN_FAILURES && of_all >= MIN_SHARE;
    let (&main, &main_n) = failures.iter().max_by_key(|(_, &n)| n)?;
    let addr = v.tap.upstream_address.as_deref().unwrap_or("the upstream");
    let (cause, fix) = cause_and_fix(v, main, critical, addr)?;
    let kinds: Vec<String> = failures
        .iter()
        .map(|(k, n)| format!("{} {n}", k.name()))
        .collect();
    // Each figure with the side of its threshold it lies on: both met make it critical.
    let side = |met: bool| if met { "≥" } else { "<" };
    let mut evidence = vec![met(
        "exchanges failed by the upstream, over all exchanges",
        of_all,
        "ratio",
        side(of_all >= MIN_SHARE),
        MIN_SHARE,
    )];
    evidence.push(met(
        "failures",
        failed as f64,
        "count",
        side(failed >= MIN_FAILURES),
        MIN_FAILURES as f64,
    ));
    for (k, n) in &failures {
        evidence.push(shown(k.name(), *n as f64, "count"));
    }
    for (reason, n) in &v.tap.connect_failures {
        if *n > 0 {
            evidence.push(shown(&format!("connects {reason}"), *n as f64, "count"));
        }
    }
    evidence.push(shown("exchanges answered", v.requests as f64, "count"));
    let draft = Draft {
        id: "upstream_errors",
        route: None,
        summary: format!(
            "{} of the exchanges failed ({failed} of {all}: {}): {cause}{}",
            share(of_all),
            kinds.join(", "),
            if main_n < failed {
                format!(" ({} of them)", main.name())
            } else {
                String::new()
            }
        ),
        evidence,
        seconds: 0.0,
        share: None,
        fix,
    };
    Some(draft.with(
        v,
        if critical {
            Severity::Critical
        } else {
            Severity::Info
        },
    ))
}

/// The cause of the failures of kind `main` in words, and its fix: for refused connects
/// below the critical thresholds, a server that was not accepting at those moments.
fn cause_and_fix(
    v: &TapView<'_>,
    main: ErrorKind,
    critical: bool,
    addr: &str,
) -> Option<(String, String)> {
    let protocol = if v.tap.protocol == "resp" {
        "RESP"
    } else {
        "HTTP/1.x"
    };
    let connect = |reason: &str| v.tap.connect_failures.get(reason).copied().unwrap_or(0);
    Some(match main {
        ErrorKind::UpstreamConnect if !critical && connect("refused") >= connect("timeout").max(connect("other")) => (
            format!("connection refused {} time{}: nothing listened on {addr} then", connect("refused"), if connect("refused") == 1 { "" } else { "s" }),
            "The server was not accepting at those moments (a restart, a crash and its successor, a port that moved); its log at the times of the failures says which. Clients saw a 502 for each.".to_owned(),
        ),
        ErrorKind::UpstreamConnect if connect("refused") >= connect("timeout").max(connect("other")) => (
            format!("connection refused: nothing listens on {addr}"),
            format!("Start the server, or point the tap's `upstream` at the address it listens on (now {addr}); `ss -ltnp` lists what listens."),
        ),
        ErrorKind::UpstreamConnect if connect("timeout") >= connect("other") => (
            format!("connecting to {addr} timed out"),
            format!("Check that {addr} is reachable from the proxy (a firewall that drops, a host that is down) and that its accept backlog is not full; raise `timeouts.connect` only if the network is that slow."),
        ),
        ErrorKind::UpstreamConnect => (
            format!("could not connect to {addr}"),
            format!("Check the tap's `upstream` ({addr}): the name must resolve and the host be routable from the proxy; the proxy's log says why each connect failed."),
        ),
        ErrorKind::UpstreamReset => (
            format!("{addr} closed or reset connections before its response was complete"),
            "Look at the server's log for crashes, restarts or its own limits (max connections, request size, keep-alive timeout shorter than the clients'); a server that closes idle keep-alive connections should send `Connection: close` with its last response.".to_owned(),
        ),
        ErrorKind::UpstreamTimeout => (
            format!("{addr} gave no answer in time (within the response timeout)"),
            "Find what the server waits on (a backend, a lock, a full worker pool) or raise `timeouts.response` if such waits are expected.".to_owned(),
        ),
        ErrorKind::BadResponse => (
            format!("what {addr} answers is not {protocol}"),
            format!("Check that the tap's `protocol` and `upstream` match the server: {addr} speaks something else (TLS, another protocol, or a different port's service)."),
        ),
        _ => return None,
    })
}

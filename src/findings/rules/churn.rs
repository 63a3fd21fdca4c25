//! `connection_churn`: most requests open an upstream connection; a side does not keep
//! its connections alive.

use super::{met, met_as, per_request, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::Finding;
use crate::units::{duration, share};

/// The share of requests that opened an upstream connection from which it is a finding.
pub const MIN_SHARE: f64 = 0.5;
/// Client connections per request at or above which the clients are the ones that do not
/// reuse their connections.
pub const CLIENT_CHURN: f64 = 0.5;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let connect = v.phase("upstream_connect");
    let opened = connect.count as f64 / v.requests as f64;
    if opened < MIN_SHARE {
        return None;
    }
    let seconds = per_request(v, connect.sum);
    let totals = &v.tap.totals;
    let clients = totals.connections.get("client").copied().unwrap_or(0);
    let per_client = if totals.requests > 0 {
        clients as f64 / totals.requests as f64
    } else {
        0.0
    };
    let (who, fix) = if per_client >= CLIENT_CHURN {
        (
            "the clients open a new connection for nearly every request",
            "Reuse connections in the client: HTTP/1.1 keep-alive without `Connection: close`, a pooled client (ab -k, wrk, a session object); the proxy then keeps its upstream connections too.",
        )
    } else {
        (
            "the upstream closes its connection after nearly every response",
            "Turn on keep-alive in the server (an idle timeout of seconds, not 0; no `Connection: close` on its responses), and check that its keep-alive limit per connection is not tiny.",
        )
    };
    Some(
        Draft {
            id: "connection_churn",
            route: None,
            summary: format!(
                "{} of the requests opened an upstream connection ({} each): {who}",
                share(opened),
                duration(connect.mean().unwrap_or(0.0))
            ),
            evidence: vec![
                met(
                    "requests that opened an upstream connection",
                    opened,
                    "ratio",
                    "≥",
                    MIN_SHARE,
                ),
                shown(
                    "upstream_connect mean",
                    connect.mean().unwrap_or(0.0),
                    "seconds",
                ),
                met_as(
                    "client connections per request (since start)",
                    per_client,
                    "ratio",
                    format!(
                        "{} {}: {}",
                        if per_client >= CLIENT_CHURN {
                            "≥"
                        } else {
                            "<"
                        },
                        share(CLIENT_CHURN),
                        if per_client >= CLIENT_CHURN {
                            "the clients"
                        } else {
                            "the upstream"
                        }
                    ),
                ),
            ],
            seconds,
            share: v.of_total(seconds),
            fix: fix.to_owned(),
        }
        .scaled(v),
    )
}

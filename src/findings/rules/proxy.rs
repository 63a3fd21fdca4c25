//! `proxy_overhead`: phasescope's own time between reading a message and passing it on is
//! a sizeable part of a request.

use super::{met, per_request, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::Finding;
use crate::units::{duration, share};

/// `proxy_overhead` over `total` from which it is a finding.
pub const MIN_SHARE: f64 = 0.1;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let overhead = v.phase("proxy_overhead");
    let seconds = per_request(v, overhead.sum);
    let of_total = v.of_total(seconds)?;
    if of_total < MIN_SHARE {
        return None;
    }
    Some(
        Draft {
            id: "proxy_overhead",
            route: None,
            summary: format!(
                "phasescope itself adds {} per request, {} of a request's time",
                duration(seconds),
                share(of_total)
            ),
            evidence: vec![
                met(
                    "proxy_overhead over total",
                    of_total,
                    "ratio",
                    "≥",
                    MIN_SHARE,
                ),
                shown("proxy_overhead mean", overhead.mean().unwrap_or(0.0), "seconds"),
                shown("total mean", v.mean_total.unwrap_or(0.0), "seconds"),
            ],
            seconds,
            share: Some(of_total),
            fix: "Give the proxy cores of its own (on a shared machine it competes for CPUs with the upstream and the load generator: taskset, cpusets), set `workers` to the cores it has, and keep profiling at its default frequency. `phasescope bench` measures the proxy against a direct connection.".to_owned(),
        }
        .scaled(v),
    )
}

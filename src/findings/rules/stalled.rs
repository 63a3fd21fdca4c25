//! `proxy_stalled`: phasescope itself did not run for a while (stopped, throttled, given
//! no CPU), and the exchanges waiting on the upstream then waited on the proxy.
//!
//! Without it, a proxy stopped for 5 s under load read as a backend that took 5 s: the
//! wait landed in `upstream_wait` and `upstream_cpu_bound` and the hot path blamed the
//! upstream. The stall is now `proxy_stalled` (docs/phases.md), and this says so.

use super::{met, per_request, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::{Finding, Severity};
use crate::units::duration;

/// The longest stall from which the finding is critical: a second the clients waited on
/// the proxy alone.
pub const CRITICAL_LONGEST: f64 = 1.0;
/// … and a warning.
pub const WARN_LONGEST: f64 = 0.2;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let stalls = v.proxy?.stalls;
    if stalls.count == 0 {
        return None;
    }
    let stalled = v.phase("proxy_stalled");
    let seconds = per_request(v, stalled.sum);
    let (severity, at) = if stalls.longest_seconds >= CRITICAL_LONGEST {
        (Severity::Critical, CRITICAL_LONGEST)
    } else if stalls.longest_seconds >= WARN_LONGEST {
        (Severity::Warn, WARN_LONGEST)
    } else {
        (Severity::Info, crate::stalls::STALL_MIN.as_secs_f64())
    };
    let draft = Draft {
        id: "proxy_stalled",
        route: None,
        summary: format!(
            "phasescope itself did not run for {} ({} {}, the longest {}); the exchanges \
             waiting on the upstream meanwhile count {} per request of it as the proxy's \
             (proxy_stalled), not the upstream's",
            duration(stalls.seconds),
            stalls.count,
            if stalls.count == 1 { "stall" } else { "stalls" },
            duration(stalls.longest_seconds),
            duration(seconds),
        ),
        evidence: vec![
            met(
                "longest stall",
                stalls.longest_seconds,
                "seconds",
                "≥",
                at,
            ),
            shown("stalls", stalls.count as f64, "count"),
            shown("time stalled", stalls.seconds, "seconds"),
            shown("exchanges with proxy_stalled", stalled.count as f64, "count"),
        ],
        seconds,
        share: v.of_total(seconds),
        fix: "Find what stopped or starved the proxy: a signal (SIGSTOP, a debugger, a core being dumped), its cgroup's CPU quota (throttled periods in the cgroup's cpu.stat), a machine with no core to spare (the proxy's wait for a CPU in `phasescope itself`). While it did not run, the upstream's time is unknown within the stall: at least `upstream_wait`, at most that plus `proxy_stalled`.".to_owned(),
    };
    Some(draft.with(v, severity))
}

//! `proxy_competes`: phasescope itself takes a large part of the cores it shares with the
//! upstream, so the upstream's wait for a CPU — inside every phase the proxy times on it
//! — is partly the proxy's doing.

use super::{met, per_exchange, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::Finding;
use crate::units::{duration, share, three_digits};

/// The proxy's share of the CPU time the machine's cores did, from which it is a large
/// part of what they do.
pub const MIN_SHARE_OF_MACHINE: f64 = 0.2;
/// Cores the proxy must keep busy on average: below it nothing it does is felt.
pub const MIN_CORES: f64 = 0.1;
/// Seconds the proxy must have been read in the window.
pub const MIN_WATCHED: f64 = 2.0;

pub fn check(v: &TapView<'_>) -> Option<Finding> {
    let (p, u, i) = (v.proxy?, v.tap.upstream.as_ref()?, v.inside.as_ref()?);
    if p.watched_seconds < MIN_WATCHED || p.shares_cores_with(u) != Some(true) {
        return None;
    }
    let cores = p.cores_used();
    let of_machine = p.share_of_machine()?;
    if cores < MIN_CORES || of_machine < MIN_SHARE_OF_MACHINE {
        return None;
    }
    // The upstream waits for a CPU behind everything else that runs on the cores: the
    // proxy's part of that wait, in proportion to its part of the CPU the others used.
    let upstream_cpu = u.cpu_user_seconds + u.cpu_system_seconds;
    let others = (p.machine_busy_seconds - upstream_cpu).max(p.cpu());
    let proxy_of_others = if others > 0.0 { p.cpu() / others } else { 0.0 };
    let waited = per_exchange(v, u.runqueue_seconds);
    let seconds = waited * proxy_of_others;
    let proxy_cpu = per_exchange(v, p.cpu());
    Some(
        Draft {
            id: "proxy_competes",
            route: None,
            summary: format!(
                "phasescope keeps {} of the {} cores it shares with {} busy ({} of the CPU the machine did, {} per request): {}'s threads wait {} per request for a CPU, about {} of it behind the proxy, and every phase timed on {} carries that wait",
                three_digits(cores),
                p.cpus,
                i.comm,
                share(of_machine),
                duration(proxy_cpu),
                i.comm,
                duration(waited),
                duration(seconds),
                i.comm
            ),
            evidence: vec![
                met(
                    "the proxy's share of the CPU the machine did",
                    of_machine,
                    "ratio",
                    "≥",
                    MIN_SHARE_OF_MACHINE,
                ),
                met("cores the proxy kept busy", cores, "cpus", "≥", MIN_CORES),
                shown("the proxy's CPU per request", proxy_cpu, "seconds"),
                shown("CPUs of this machine", p.cpus as f64, "count"),
                shown(
                    "the upstream's wait for a CPU per request",
                    waited,
                    "seconds",
                ),
                shown(
                    "the proxy's share of the CPU besides the upstream's",
                    proxy_of_others,
                    "ratio",
                ),
            ],
            seconds,
            share: v.of_total(seconds),
            fix: format!(
                "Measure with the proxy off {}'s cores: give phasescope cores of its own (taskset -c, a cpuset) apart from the upstream's, run it with fewer workers (PHASESCOPE_WORKERS=1), and put the load generator on another machine or other cores. Then the upstream's run-queue wait, and the phases that hold it, are the upstream's own.",
                i.comm
            ),
        }
        .scaled(v),
    )
}

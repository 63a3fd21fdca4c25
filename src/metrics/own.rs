//! The `phasescope_proxy_*` and `phasescope_machine_*` families (docs/metrics.md): the
//! proxy's own CPU and the machine's, read at scrape time from [`Own`] as the upstream's
//! families are read from its accounting.

use prometheus::proto::{MetricFamily, MetricType};

use super::exposition::{family, sample};
use crate::upstream::Own;

pub const CPU: &str = "phasescope_proxy_cpu_seconds_total";
pub const RUNQUEUE: &str = "phasescope_proxy_runqueue_seconds_total";
pub const THREADS: &str = "phasescope_proxy_threads";
pub const MACHINE_CPUS: &str = "phasescope_machine_cpus";
pub const MACHINE_BUSY: &str = "phasescope_machine_cpu_busy_seconds_total";
pub const STALLS: &str = "phasescope_proxy_stalls_total";
pub const STALLED: &str = "phasescope_proxy_stalled_seconds_total";

/// The families, read now; none before the proxy's own process is read.
pub fn families(own: Option<&Own>) -> Vec<MetricFamily> {
    let Some(own) = own else {
        return Vec::new();
    };
    let t = own.totals();
    let s = |ns: u64| ns as f64 / 1e9;
    let (c, g) = (MetricType::COUNTER, MetricType::GAUGE);
    let table = [
        (
            CPU,
            "CPU time of phasescope's own process since it started, by mode (user, system).",
            c,
            vec![
                sample(c, &[("mode", "user")], s(t.user_ns)),
                sample(c, &[("mode", "system")], s(t.system_ns)),
            ],
        ),
        (
            RUNQUEUE,
            "Time phasescope's own threads were runnable but waiting for a CPU.",
            c,
            vec![sample(c, &[], s(t.runqueue_ns))],
        ),
        (
            THREADS,
            "Threads of phasescope's own process now.",
            g,
            vec![sample(g, &[], t.threads as f64)],
        ),
        (
            MACHINE_CPUS,
            "CPUs the machine has online.",
            g,
            vec![sample(g, &[], t.cpus as f64)],
        ),
        (
            MACHINE_BUSY,
            "CPU time the machine's CPUs were not idle (/proc/stat: user, nice, system, irq, softirq, steal), all CPUs, since phasescope started.",
            c,
            vec![sample(c, &[], s(t.machine_busy_ns))],
        ),
        (
            STALLS,
            "Times phasescope itself did not run for 50 ms or more (stopped, throttled, given no CPU) since it started.",
            c,
            vec![sample(c, &[], t.stalls.count as f64)],
        ),
        (
            STALLED,
            "Time phasescope itself did not run, summed over its stalls, since it started.",
            c,
            vec![sample(c, &[], s(t.stalls.nanos))],
        ),
    ];
    table
        .into_iter()
        .flat_map(|(name, help, kind, metrics)| family(name, help, kind, metrics))
        .collect()
}

//! The `phasescope_proxy_*` and `phasescope_machine_*` families (docs/metrics.md): the
//! proxy's own CPU and the machine's, read at scrape time from [`Own`] as the upstream's
//! families are read from its accounting.

use prometheus::proto::{MetricFamily, MetricType};

use super::exposition::{family, sample};
use crate::upstream::{Own, OwnTraffic};

pub const CPU: &str = "phasescope_proxy_cpu_seconds_total";
pub const RUNQUEUE: &str = "phasescope_proxy_runqueue_seconds_total";
pub const THREADS: &str = "phasescope_proxy_threads";
pub const MACHINE_CPUS: &str = "phasescope_machine_cpus";
pub const MACHINE_BUSY: &str = "phasescope_machine_cpu_busy_seconds_total";
pub const STALLS: &str = "phasescope_proxy_stalls_total";
pub const STALLED: &str = "phasescope_proxy_stalled_seconds_total";
pub const TRAFFIC: &str = "phasescope_proxy_traffic_seconds_total";
pub const TRAFFIC_CPU: &str = "phasescope_proxy_traffic_cpu_seconds_total";
pub const TRAFFIC_RUNQUEUE: &str = "phasescope_proxy_traffic_runqueue_seconds_total";
pub const MACHINE_TRAFFIC_BUSY: &str = "phasescope_machine_traffic_cpu_busy_seconds_total";

/// The families, read now; none before the proxy's own process is read.
pub fn families(own: Option<&Own>) -> Vec<MetricFamily> {
    let Some(own) = own else {
        return Vec::new();
    };
    let t = own.totals();
    let s = |ns: u64| ns as f64 / 1e9;
    let (c, g) = (MetricType::COUNTER, MetricType::GAUGE);
    // At 0 until a tap counts exchanges, as the others exist from the start.
    let w = t.traffic.unwrap_or(OwnTraffic {
        seconds_ns: 0,
        user_ns: 0,
        system_ns: 0,
        runqueue_ns: 0,
        machine_busy_ns: 0,
    });
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
        (
            TRAFFIC,
            "Wall time of the reads of phasescope's own process in which an exchange ended (the seconds that held traffic), since it started.",
            c,
            vec![sample(c, &[], s(w.seconds_ns))],
        ),
        (
            TRAFFIC_CPU,
            "CPU time of phasescope's own process over the reads that held traffic, by mode (user, system): what per-request figures divide.",
            c,
            vec![
                sample(c, &[("mode", "user")], s(w.user_ns)),
                sample(c, &[("mode", "system")], s(w.system_ns)),
            ],
        ),
        (
            TRAFFIC_RUNQUEUE,
            "Time phasescope's own threads waited for a CPU over the reads that held traffic.",
            c,
            vec![sample(c, &[], s(w.runqueue_ns))],
        ),
        (
            MACHINE_TRAFFIC_BUSY,
            "CPU time the machine's CPUs were not idle over phasescope's reads that held traffic.",
            c,
            vec![sample(c, &[], s(w.machine_busy_ns))],
        ),
    ];
    table
        .into_iter()
        .flat_map(|(name, help, kind, metrics)| family(name, help, kind, metrics))
        .collect()
}

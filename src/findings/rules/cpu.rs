//! `upstream_cpu_bound` and `upstream_runqueue`: the server's threads are busy all the
//! time, or wait for a CPU longer than they run.

use super::{met, met_as, per_exchange, per_request, shown, Draft};
use crate::findings::TapView;
use crate::snapshot::{Evidence, Finding, Severity};
use crate::units::{duration, share, three_digits};

/// The share of the time its busiest thread wants a CPU, or the CPUs all of its threads
/// want over those they can use, from which the server is CPU-bound.
pub const BUSY: f64 = 0.85;
/// Seconds a process must have been watched in the window for either rule.
pub const MIN_WATCHED: f64 = 2.0;
/// The wait for a CPU, per request, must be at least this share of the mean `total`.
pub const MIN_RUNQUEUE_OF_TOTAL: f64 = 0.05;

/// CPUs this machine offers: what the threads can use at most.
fn machine_cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

pub fn cpu_bound(v: &TapView<'_>) -> Option<Finding> {
    let (u, i) = (v.tap.upstream.as_ref()?, v.inside.as_ref()?);
    // Over the time the process was at work: idle seconds in the window (before or after
    // a load) say nothing of how busy it was under the load. Older snapshots: all of it.
    let (at_work, busiest_seconds) = match (u.active_seconds, u.active_busiest_thread_seconds) {
        (Some(a), Some(b)) => (a, b),
        _ => (u.watched_seconds, u.busiest_thread_seconds),
    };
    if at_work < MIN_WATCHED || i.threads == 0 {
        return None;
    }
    // Demand: the time the threads ran or were runnable and waiting. A server that would
    // use more CPU than it gets is as CPU-bound as one that gets all it wants.
    let busiest = busiest_seconds / at_work;
    let demand = (u.cpu_user_seconds + u.cpu_system_seconds + u.runqueue_seconds) / at_work;
    let cpus = machine_cpus();
    let capacity = i.threads.min(cpus) as f64;
    let one_thread = busiest >= BUSY;
    if !one_thread && demand < BUSY * capacity {
        return None;
    }
    let cpu = i.cpu_user + i.cpu_system;
    let rate = v.requests as f64 / v.window.max(f64::MIN_POSITIVE);
    // The impact is the time a request waits on the server's CPU: its own CPU and the
    // queue behind the others' (in the server's run queue, its event loop or the proxy's
    // queue for a connection), all of `upstream_wait` and `queue` but what the server
    // waited on its own backend (Webdis's `backend`). A saturated single thread spends
    // 98 µs of CPU on a request that waits 16 ms behind the others.
    let waited = per_request(v, v.phase("upstream_wait").sum + v.phase("queue").sum)
        - per_request(v, v.phase("backend").sum);
    let waited = waited.max(cpu);
    let largest = super::largest_part(i, |c| c.name == "kernel");
    let summary = if one_thread {
        format!(
            "{}'s busiest thread wants a CPU {} of the time it is at work: a request waits {} on its CPU, {} of it queued behind the others' ({} of CPU per request)",
            i.comm,
            share(busiest),
            duration(waited),
            duration(waited - cpu),
            duration(cpu)
        )
    } else {
        format!(
            "{}'s threads want {} CPUs of the {} they can use: it is CPU-bound, and a request waits {} on its CPU, {} of it queued behind the others' ({} of CPU per request)",
            i.comm,
            three_digits(demand),
            capacity,
            duration(waited),
            duration(waited - cpu),
            duration(cpu)
        )
    };
    Some(
        Draft {
            id: "upstream_cpu_bound",
            route: None,
            summary,
            evidence: vec![
                if one_thread {
                    met("busiest thread running or waiting to run", busiest, "ratio", "≥", BUSY)
                } else {
                    shown("busiest thread running or waiting to run", busiest, "ratio")
                },
                if one_thread {
                    shown("CPUs wanted (running or waiting)", demand, "cpus")
                } else {
                    met_as("CPUs wanted (running or waiting)", demand, "cpus", format!("≥ {} ({BUSY} × min(threads, CPUs))", three_digits(BUSY * capacity)))
                },
                shown("threads", i.threads as f64, "count"),
                shown("CPUs of this machine", cpus as f64, "count"),
                shown("seconds at work (its threads wanting ≥ 0.1 CPU)", at_work, "seconds"),
                shown("CPU per request", cpu, "seconds"),
                shown("queued behind the others' CPU per request (upstream_wait + queue − backend − CPU)", waited - cpu, "seconds"),
                shown("requests per second", rate, "per_second"),
            ],
            seconds: waited,
            share: v.of_total(waited),
            fix: format!("Spread the work over more threads or processes where cores are free (Webdis `threads`; a PHP server: more worker processes, e.g. amphp/cluster), or make a request cheaper.{largest}"),
        }
        .with(v, Severity::Warn),
    )
}

/// The first figure of `upstream_runqueue`: the wait over the CPU time, or, when no CPU
/// time was counted (a process whose CPU the kernel's ticks missed), the wait itself. A
/// ratio over zero is infinite, and JSON has no infinity: it was written `null`, and the
/// snapshot could not be read back.
fn waited_over_cpu(runqueue: f64, cpu: f64) -> Evidence {
    if cpu > 0.0 {
        met(
            "waiting for a CPU over CPU time",
            runqueue / cpu,
            "ratio",
            "≥",
            1.0,
        )
    } else {
        met_as(
            "waiting for a CPU, with no CPU time counted",
            runqueue,
            "seconds",
            "> 0 s of CPU time".to_owned(),
        )
    }
}

pub fn runqueue(v: &TapView<'_>) -> Option<Finding> {
    let (u, i) = (v.tap.upstream.as_ref()?, v.inside.as_ref()?);
    if u.watched_seconds < MIN_WATCHED {
        return None;
    }
    let cpu = u.cpu_user_seconds + u.cpu_system_seconds;
    let waited = per_exchange(v, u.runqueue_seconds);
    let of_total = v.of_total(waited)?;
    if u.runqueue_seconds < cpu || of_total < MIN_RUNQUEUE_OF_TOTAL {
        return None;
    }
    Some(
        Draft {
            id: "upstream_runqueue",
            route: None,
            summary: format!(
                "{}'s threads wait longer for a CPU ({} per request) than they run ({}): the machine has more runnable work than cores",
                i.comm,
                duration(waited),
                duration(i.cpu_user + i.cpu_system)
            ),
            evidence: vec![
                waited_over_cpu(u.runqueue_seconds, cpu),
                met(
                    "waiting for a CPU per request, over the mean total",
                    of_total,
                    "ratio",
                    "≥",
                    MIN_RUNQUEUE_OF_TOTAL,
                ),
                shown("waiting for a CPU per request", waited, "seconds"),
                shown("CPU per request", i.cpu_user + i.cpu_system, "seconds"),
            ],
            seconds: waited,
            share: Some(of_total),
            fix: "Give the server cores of its own: move other work (the load generator, the proxy, batch jobs) off them (taskset, cpusets), or run fewer server threads than cores.".to_owned(),
        }
        .scaled(v),
    )
}

//! The snapshot's top-level `proxy` (docs/metrics.md): phasescope's own process and the
//! machine it ran on over the window, and how two windows of it add up and subtract.
//!
//! `upstream::own` reads these figures from /proc; the report divides them by each tap's
//! requests and the findings reason over them, from a file as well as live.

use serde::{Deserialize, Serialize};

use super::traffic::Traffic;
use super::upstream::UpstreamSnapshot;

/// The snapshot's top-level `proxy` object (docs/metrics.md): what phasescope's own
/// process did since the snapshot's `since`, and the machine it ran on. Seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxySnapshot {
    pub pid: u32,
    pub threads: u64,
    /// Wall time, within the window, during which it was read.
    pub watched_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    /// Time on a CPU from its threads' schedstat, to the nanosecond; null when they could
    /// not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Time its threads were runnable but waiting for a CPU.
    pub runqueue_seconds: f64,
    /// CPUs the machine has online.
    pub cpus: u64,
    /// The CPUs the proxy may run on (its affinity); empty when unknown.
    #[serde(default)]
    pub cpus_allowed: Vec<u32>,
    /// The machine's CPU time not idle over the window (/proc/stat: user, nice, system,
    /// irq, softirq, steal of every CPU): what all its cores did, the proxy and the
    /// upstream included.
    pub machine_busy_seconds: f64,
    /// Of `watched_seconds`, the reads in which any tap counted exchanges, and its CPU and
    /// the machine's over them: what its cost per request and its cores are read over.
    /// Absent in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Traffic>,
    /// The times it did not run (`stalls`): stopped, throttled, given no CPU.
    #[serde(default)]
    pub stalls: Stalls,
}

/// The snapshot's `proxy.stalls`: wake-ups of the proxy's watching thread later than
/// `stalls::STALL_MIN`, over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stalls {
    pub count: u64,
    pub seconds: f64,
    /// The longest of them. In a difference of two snapshots, the later one's longest
    /// when a stall happened in between (it may be older: an upper bound).
    pub longest_seconds: f64,
}

impl ProxySnapshot {
    /// What per-request and per-core figures are read over: the reads that held traffic
    /// when the snapshot says them, else the whole time watched (older snapshots).
    pub fn work(&self) -> Traffic {
        self.traffic.unwrap_or(Traffic {
            seconds: self.watched_seconds,
            cpu_user_seconds: self.cpu_user_seconds,
            cpu_system_seconds: self.cpu_system_seconds,
            runqueue_seconds: self.runqueue_seconds,
            machine_busy_seconds: Some(self.machine_busy_seconds),
            exchanges: None,
        })
    }

    /// User + system.
    pub fn cpu(&self) -> f64 {
        self.cpu_user_seconds + self.cpu_system_seconds
    }

    /// Cores it kept busy on average over the time watched.
    pub fn cores_used(&self) -> f64 {
        if self.watched_seconds > 0.0 {
            self.cpu() / self.watched_seconds
        } else {
            0.0
        }
    }

    /// Whether it may run on a CPU the upstream may run on; `None` when either affinity
    /// is unknown.
    pub fn shares_cores_with(&self, u: &UpstreamSnapshot) -> Option<bool> {
        let theirs = u.cpus_allowed.as_ref()?;
        if self.cpus_allowed.is_empty() {
            return None;
        }
        Some(
            theirs
                .iter()
                .any(|c| self.cpus_allowed.binary_search(c).is_ok()),
        )
    }

    /// Its share of the CPU time the machine's cores did.
    pub fn share_of_machine(&self) -> Option<f64> {
        (self.machine_busy_seconds > 0.0).then(|| (self.cpu() / self.machine_busy_seconds).min(1.0))
    }
}

/// Two windows (snapshots of several runs) as one: times add; the later names the process.
pub fn merge(a: ProxySnapshot, b: &ProxySnapshot) -> ProxySnapshot {
    ProxySnapshot {
        pid: b.pid,
        threads: b.threads.max(a.threads),
        watched_seconds: a.watched_seconds + b.watched_seconds,
        cpu_user_seconds: a.cpu_user_seconds + b.cpu_user_seconds,
        cpu_system_seconds: a.cpu_system_seconds + b.cpu_system_seconds,
        cpu_seconds: a.cpu_seconds.zip(b.cpu_seconds).map(|(x, y)| x + y),
        runqueue_seconds: a.runqueue_seconds + b.runqueue_seconds,
        cpus: b.cpus.max(a.cpus),
        cpus_allowed: if b.cpus_allowed.is_empty() {
            a.cpus_allowed
        } else {
            b.cpus_allowed.clone()
        },
        machine_busy_seconds: a.machine_busy_seconds + b.machine_busy_seconds,
        stalls: Stalls {
            count: a.stalls.count + b.stalls.count,
            seconds: a.stalls.seconds + b.stalls.seconds,
            longest_seconds: a.stalls.longest_seconds.max(b.stalls.longest_seconds),
        },
        traffic: super::traffic::add(a.traffic, b.traffic),
    }
}

/// The part of `now`'s window after `before` was taken (no reset between).
pub fn since(now: &ProxySnapshot, before: &ProxySnapshot) -> ProxySnapshot {
    let sub = |a: f64, b: f64| (a - b).max(0.0);
    ProxySnapshot {
        watched_seconds: sub(now.watched_seconds, before.watched_seconds),
        cpu_user_seconds: sub(now.cpu_user_seconds, before.cpu_user_seconds),
        cpu_system_seconds: sub(now.cpu_system_seconds, before.cpu_system_seconds),
        cpu_seconds: now
            .cpu_seconds
            .zip(before.cpu_seconds)
            .map(|(a, b)| sub(a, b)),
        runqueue_seconds: sub(now.runqueue_seconds, before.runqueue_seconds),
        machine_busy_seconds: sub(now.machine_busy_seconds, before.machine_busy_seconds),
        stalls: if now.stalls.count > before.stalls.count {
            Stalls {
                count: now.stalls.count - before.stalls.count,
                seconds: sub(now.stalls.seconds, before.stalls.seconds),
                longest_seconds: now.stalls.longest_seconds,
            }
        } else {
            Stalls::default()
        },
        traffic: super::traffic::since(now.traffic, before.traffic),
        ..now.clone()
    }
}

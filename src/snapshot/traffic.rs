//! The window's work: of the time a process was watched, the reads that held traffic, and
//! what the process did over those reads only (docs/metrics.md, `traffic`).
//!
//! A window is as long as whoever reads it lets it run: ten seconds of load in a window of
//! ten minutes divided the proxy's idle CPU (its timers, its own reads, scrapes) by the
//! requests of those ten seconds, and spread its cores over ten minutes (45.0 µs a request
//! after the load where it read 30.3 µs under it; `0.03 of the 2 cores`). Per-request and
//! per-core figures are read over these seconds instead; the whole window's stay beside
//! them for what the process cost in all.

use serde::{Deserialize, Serialize};

/// Of a process's watched time, the reads between which its tap counted at least one
/// exchange (for the proxy's own process: any tap), and its figures over those reads.
/// Seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    /// Wall time of the reads that held traffic.
    pub seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    /// Time its threads were runnable but waiting for a CPU.
    pub runqueue_seconds: f64,
    /// The proxy's only: the machine's busy CPU time over the same reads, for its share
    /// of what the cores did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_busy_seconds: Option<f64>,
    /// The upstream's only: the tap's exchanges that ended in those reads, while the
    /// process was watched. What its CPU per request divides: exchanges served while no
    /// process was watched (it was gone, or its successor not found yet) had none of
    /// their CPU counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchanges: Option<u64>,
}

impl Traffic {
    /// User + system.
    pub fn cpu(&self) -> f64 {
        self.cpu_user_seconds + self.cpu_system_seconds
    }

    /// Cores it kept busy on average while it had traffic.
    pub fn cores_used(&self) -> f64 {
        if self.seconds > 0.0 {
            self.cpu() / self.seconds
        } else {
            0.0
        }
    }

    /// Two windows as one: every figure adds.
    pub fn add(&self, b: &Traffic) -> Traffic {
        Traffic {
            seconds: self.seconds + b.seconds,
            cpu_user_seconds: self.cpu_user_seconds + b.cpu_user_seconds,
            cpu_system_seconds: self.cpu_system_seconds + b.cpu_system_seconds,
            runqueue_seconds: self.runqueue_seconds + b.runqueue_seconds,
            machine_busy_seconds: self
                .machine_busy_seconds
                .zip(b.machine_busy_seconds)
                .map(|(x, y)| x + y),
            exchanges: self.exchanges.zip(b.exchanges).map(|(x, y)| x + y),
        }
    }

    /// The part of this window after `before` (no reset between): every figure
    /// subtracts, never below 0.
    pub fn since(&self, before: &Traffic) -> Traffic {
        let sub = |a: f64, b: f64| (a - b).max(0.0);
        Traffic {
            seconds: sub(self.seconds, before.seconds),
            cpu_user_seconds: sub(self.cpu_user_seconds, before.cpu_user_seconds),
            cpu_system_seconds: sub(self.cpu_system_seconds, before.cpu_system_seconds),
            runqueue_seconds: sub(self.runqueue_seconds, before.runqueue_seconds),
            machine_busy_seconds: self
                .machine_busy_seconds
                .zip(before.machine_busy_seconds)
                .map(|(a, b)| sub(a, b)),
            exchanges: self
                .exchanges
                .zip(before.exchanges)
                .map(|(a, b)| a.saturating_sub(b)),
        }
    }
}

/// `a + b` where both windows say it; `None` when either does not (the sum would not be
/// the traffic of them all).
pub fn add(a: Option<Traffic>, b: Option<Traffic>) -> Option<Traffic> {
    a.zip(b).map(|(a, b)| a.add(&b))
}

/// `now − before` where both say it; `None` when either does not.
pub fn since(now: Option<Traffic>, before: Option<Traffic>) -> Option<Traffic> {
    now.zip(before).map(|(n, b)| n.since(&b))
}

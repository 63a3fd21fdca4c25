//! The Webdis split of `upstream_wait` with Redis's own time in it (docs/webdis.md):
//! "Redis queue" (`backend_queue`: behind earlier replies on Webdis's pooled
//! connection), "Redis" (the rest of `backend`) and "Webdis" (`backend_in` +
//! `backend_out`); and, when the RESP tap behind watches Redis's process, "Redis" itself
//! in three parts: Redis's CPU per command (working), its wait for a CPU per command
//! (scheduling), and the rest (the other connections' commands it served first in the
//! same turn of its event loop, waking up, the loopback). "Redis" read 22–24 % of a
//! request, ~400 µs a command, where Redis spent 7.6 µs of CPU on one.

use serde::Serialize;

use super::row::Row;
use crate::phase::Phase;
use crate::snapshot::UpstreamSnapshot;

/// Redis's process per command of the RESP tap, over the same window. Seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RedisWork {
    pub commands: u64,
    /// Its CPU (user + system) per command.
    pub cpu: f64,
    /// Its threads' wait for a CPU per command.
    pub runqueue: f64,
}

impl RedisWork {
    /// From the RESP tap's watched process and its commands (its `total` count).
    pub fn new(u: &UpstreamSnapshot, commands: u64) -> Option<Self> {
        if commands == 0 || u.watched_seconds <= 0.0 {
            return None;
        }
        let n = commands as f64;
        Some(Self {
            commands,
            cpu: (u.cpu_user_seconds + u.cpu_system_seconds) / n,
            runqueue: u.runqueue_seconds / n,
        })
    }
}

/// The split, each part as a share of the mean `total` (the headline's unit), and per
/// paired request in seconds for Redis's parts. The parts add up: `redis_queue`,
/// `redis`, `webdis` and `unpaired` to `upstream_wait`, and Redis's CPU, its wait for a
/// CPU and the rest to `redis`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendSplit {
    pub upstream_wait: f64,
    /// Null for snapshots from before `backend_queue` existed (then `redis` is all of
    /// `backend`).
    pub redis_queue: Option<f64>,
    pub redis: f64,
    pub webdis: f64,
    /// What the correlator could not pair keeps its wait undivided.
    pub unpaired: f64,
    /// With Redis's process watched: its CPU per command, its wait for a CPU per command,
    /// the rest, as shares of the mean `total` (each at most what is left of `redis`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_parts: Option<RedisParts>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedisParts {
    pub cpu: f64,
    pub runqueue: f64,
    pub rest: f64,
    /// Per paired request, seconds: `redis` (backend − backend_queue), and its parts.
    pub redis_seconds: f64,
    pub cpu_seconds: f64,
    pub runqueue_seconds: f64,
    pub rest_seconds: f64,
    /// The figures per command they come from.
    pub per_command: RedisWork,
}

impl BackendSplit {
    /// From a section's rows (with shares); `None` without the backend phases.
    pub fn new(rows: &[Row], redis: Option<RedisWork>) -> Option<Self> {
        let row = |p: Phase| rows.iter().find(|r| r.phase == p.name());
        let total = row(Phase::Total)?;
        let wait = row(Phase::UpstreamWait)?.share?;
        let backend = row(Phase::Backend)?;
        let backend_share = backend.share?;
        let webdis = match (row(Phase::BackendIn), row(Phase::BackendOut)) {
            (None, None) => return None,
            (a, b) => {
                a.and_then(|r| r.share).unwrap_or(0.0) + b.and_then(|r| r.share).unwrap_or(0.0)
            }
        };
        let queue = row(Phase::BackendQueue);
        let queue_share = queue.and_then(|r| r.share);
        let redis_share = (backend_share - queue_share.unwrap_or(0.0)).max(0.0);
        let redis_parts = redis
            .filter(|_| backend.count > 0 && total.sum > 0.0)
            .map(|w| {
                let paired = backend.count as f64;
                let per = (backend.sum - queue.map_or(0.0, |q| q.sum)).max(0.0) / paired;
                let cpu = w.cpu.min(per);
                let runqueue = w.runqueue.min(per - cpu);
                let rest = per - cpu - runqueue;
                // Per paired request → share of the summed total.
                let share = |s: f64| s * paired / total.sum;
                RedisParts {
                    cpu: share(cpu),
                    runqueue: share(runqueue),
                    rest: share(rest),
                    redis_seconds: per,
                    cpu_seconds: cpu,
                    runqueue_seconds: runqueue,
                    rest_seconds: rest,
                    per_command: w,
                }
            });
        Some(Self {
            upstream_wait: wait,
            redis_queue: queue_share,
            redis: redis_share,
            webdis,
            unpaired: (wait - backend_share - webdis).max(0.0),
            redis_parts,
        })
    }

    /// The headline's parenthesis after `upstream_wait`: `Redis queue 17 %, Redis 5 %
    /// [its CPU 0.5 %, waiting for a CPU 1 %, rest 3.5 %], Webdis 76 %`.
    pub fn shown(&self) -> String {
        let pct = crate::units::share;
        let mut out = match self.redis_queue {
            Some(q) => format!("Redis queue {}, Redis {}", pct(q), pct(self.redis)),
            None => format!("Redis {}", pct(self.redis)),
        };
        if let Some(p) = &self.redis_parts {
            out.push_str(&format!(
                " [its CPU {}, waiting for a CPU {}, rest {}]",
                pct(p.cpu),
                pct(p.runqueue),
                pct(p.rest)
            ));
        }
        out.push_str(&format!(", Webdis {}", pct(self.webdis)));
        if self.unpaired >= 0.005 {
            out.push_str(&format!(", unpaired {}", pct(self.unpaired)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(phase: &str, count: u64, sum: f64, total: f64) -> Row {
        Row::of_sum(phase, count, sum, total)
    }

    #[test]
    fn redis_is_its_cpu_its_wait_for_one_and_the_rest_and_they_add_up() {
        // 100 requests of 1 ms: backend 300 µs each, 200 µs of it queued behind earlier
        // replies; Redis spent 8 µs of CPU and waited 30 µs for a CPU per command.
        let t = 0.1;
        let rows = [
            row("upstream_wait", 100, 0.09, t),
            row("total", 100, 0.1, t),
            row("backend_in", 100, 0.03, t),
            row("backend", 100, 0.03, t),
            row("backend_queue", 100, 0.02, t),
            row("backend_out", 100, 0.03, t),
        ];
        let work = RedisWork {
            commands: 120,
            cpu: 8e-6,
            runqueue: 30e-6,
        };
        let s = BackendSplit::new(&rows, Some(work)).unwrap();
        let p = s.redis_parts.as_ref().unwrap();
        assert!((p.redis_seconds - 100e-6).abs() < 1e-12);
        assert!((p.cpu_seconds - 8e-6).abs() < 1e-12);
        assert!((p.runqueue_seconds - 30e-6).abs() < 1e-12);
        assert!((p.rest_seconds - 62e-6).abs() < 1e-12);
        assert!((p.cpu + p.runqueue + p.rest - s.redis).abs() < 1e-12);
        let q = s.redis_queue.unwrap();
        assert!((q + s.redis + s.webdis + s.unpaired - s.upstream_wait).abs() < 1e-12);
        assert_eq!(
            s.shown(),
            "Redis queue 20 %, Redis 10 % [its CPU 0.8 %, waiting for a CPU 3 %, rest 6 %], Webdis 60 %"
        );
        // A Redis that waited longer than the part lasted: its parts stop at the part.
        let slow = RedisWork {
            runqueue: 1e-3,
            ..work
        };
        let p = BackendSplit::new(&rows, Some(slow))
            .unwrap()
            .redis_parts
            .unwrap();
        assert!((p.runqueue_seconds - 92e-6).abs() < 1e-12 && p.rest_seconds.abs() < 1e-12);
    }
}

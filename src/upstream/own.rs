//! The proxy's own cost, measured as the upstream's is: phasescope's process read from
//! /proc by the same [`Accountant`](super::account::Accountant) (user and system time, time
//! on a CPU, run-queue wait), and the machine's CPUs — how many, which ones each process
//! may run on, and how busy they all were — so that a report can say what the proxy costs
//! per request and how much of the cores it shares with the upstream it takes
//! (docs/report.md, "The proxy's own cost").
//!
//! A thread of its own reads every [`INTERVAL`]; a snapshot reads once more. Nothing here
//! runs on the data path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use super::Upstream;
use crate::clock::{self, Tick};
use crate::snapshot::{ProxySnapshot, Stalls, UpstreamSnapshot};
use crate::stalls;
use crate::sync::lock;

/// How often the proxy's own process and /proc/stat are read.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The proxy's own process and the machine, shared by the reading thread, `/metrics` and
/// snapshots.
pub struct Own {
    process: Arc<Upstream>,
    machine: Mutex<Machine>,
    cpus: u64,
}

/// The machine's busy CPU time: since start (`/metrics`) and at the last reset; and the
/// proxy's stalls at the last reset, with when it was.
#[derive(Default)]
struct Machine {
    stalls_baseline: stalls::Totals,
    window_start: Tick,
    /// Busy nanoseconds counted since the proxy started.
    busy_ns: u64,
    /// /proc/stat's busy ticks at the last read.
    last_ticks: Option<u64>,
    baseline_ns: u64,
    /// Of `busy_ns`, what the reads that held traffic counted, and its value at the last
    /// reset.
    traffic_ns: u64,
    traffic_baseline_ns: u64,
}

/// What `/metrics` reads: counters since start.
pub struct OwnTotals {
    pub user_ns: u64,
    pub system_ns: u64,
    pub runqueue_ns: u64,
    pub threads: u64,
    pub cpus: u64,
    pub machine_busy_ns: u64,
    /// The proxy's stalls since it started.
    pub stalls: stalls::Totals,
    /// Over the reads that held traffic since it started: `None` before a tap counts.
    pub traffic: Option<OwnTraffic>,
}

/// What the proxy's reads that held traffic added since it started.
pub struct OwnTraffic {
    /// Wall time of those reads.
    pub seconds_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    pub runqueue_ns: u64,
    /// The machine's busy CPU time over the same reads.
    pub machine_busy_ns: u64,
}

impl Own {
    /// Starts reading this process: now (its baseline), then every [`INTERVAL`] on a
    /// thread of its own, which ends when the last handle is dropped.
    pub fn start() -> anyhow::Result<Arc<Own>> {
        let process = Upstream::new("phasescope", INTERVAL);
        let pid = std::process::id();
        process
            .attach(&[pid])
            .with_context(|| format!("reading phasescope's own process (/proc/{pid})"))?;
        let own = Arc::new(Own {
            process,
            machine: Mutex::new(Machine::default()),
            cpus: online_cpus(),
        });
        own.read_machine(false);
        let weak = Arc::downgrade(&own);
        std::thread::Builder::new()
            .name("phasescope-own".to_owned())
            .spawn(move || loop {
                std::thread::sleep(INTERVAL);
                let Some(own) = weak.upgrade() else { break };
                own.refresh();
            })
            .context("cannot start the thread that reads phasescope's own CPU")?;
        Ok(own)
    }

    /// Reads the process and /proc/stat now.
    pub fn refresh(&self) {
        let held = self.process.refresh_held();
        self.read_machine(held);
    }

    /// A tap whose exchanges count as the proxy's traffic: its per-request and per-core
    /// figures are read over the reads in which some tap's exchanges ended.
    pub fn count_traffic(&self, routes: Arc<dyn super::slices::RouteCounts>) {
        self.process.count_traffic(routes);
    }

    /// Counters since start, read now.
    pub fn totals(&self) -> OwnTotals {
        self.refresh();
        let (t, info) = self.process.totals();
        let (machine_busy_ns, traffic_busy_ns) = {
            let m = lock(&self.machine);
            (m.busy_ns, m.traffic_ns)
        };
        OwnTotals {
            user_ns: t.user_ns,
            system_ns: t.system_ns,
            runqueue_ns: t.runqueue_ns,
            threads: info.map_or(0, |p| p.threads),
            cpus: self.cpus,
            machine_busy_ns,
            stalls: stalls::totals(),
            traffic: self.process.traffic_totals().map(|(t, _)| OwnTraffic {
                seconds_ns: t.watched_ns,
                user_ns: t.user_ns,
                system_ns: t.system_ns,
                runqueue_ns: t.runqueue_ns,
                machine_busy_ns: traffic_busy_ns,
            }),
        }
    }

    /// The window since the last reset.
    pub fn snapshot(&self) -> ProxySnapshot {
        self.refresh();
        let u = self.process.snapshot();
        let read = {
            let m = lock(&self.machine);
            (
                m.busy_ns.saturating_sub(m.baseline_ns),
                m.traffic_ns.saturating_sub(m.traffic_baseline_ns),
                m.stalls_since(),
            )
        };
        self.window(&u, read)
    }

    /// The window since the last reset, and a new window from the same read.
    pub fn cut(&self) -> ProxySnapshot {
        self.refresh();
        let u = self.process.cut();
        let read = {
            let mut m = lock(&self.machine);
            let read = (
                m.busy_ns.saturating_sub(m.baseline_ns),
                m.traffic_ns.saturating_sub(m.traffic_baseline_ns),
                m.stalls_since(),
            );
            m.baseline_ns = m.busy_ns;
            m.traffic_baseline_ns = m.traffic_ns;
            m.new_window();
            read
        };
        self.window(&u, read)
    }

    /// Starts a new window (`POST /api/reset`).
    pub fn reset(&self) {
        self.refresh();
        self.process.reset();
        let mut m = lock(&self.machine);
        m.baseline_ns = m.busy_ns;
        m.traffic_baseline_ns = m.traffic_ns;
        m.new_window();
    }

    /// The window from the process's and the machine's busy time, all of it and over
    /// the reads that held traffic, and the proxy's stalls.
    fn window(
        &self,
        u: &UpstreamSnapshot,
        (busy_ns, traffic_busy_ns, stalls): (u64, u64, Stalls),
    ) -> ProxySnapshot {
        ProxySnapshot {
            pid: std::process::id(),
            threads: u.threads,
            watched_seconds: u.watched_seconds,
            cpu_user_seconds: u.cpu_user_seconds,
            cpu_system_seconds: u.cpu_system_seconds,
            cpu_seconds: u.cpu_seconds,
            runqueue_seconds: u.runqueue_seconds,
            cpus: self.cpus,
            // Read each time: it may be pinned after it started (taskset -p).
            cpus_allowed: cpus_allowed(std::process::id()).unwrap_or_default(),
            machine_busy_seconds: busy_ns as f64 / 1e9,
            traffic: u.traffic.map(|t| crate::snapshot::Traffic {
                machine_busy_seconds: Some(traffic_busy_ns as f64 / 1e9),
                // Every tap's: the report divides by each tap's own.
                exchanges: None,
                ..t
            }),
            stalls,
        }
    }

    /// Adds the machine's busy time since the last read; to the traffic's too when
    /// `held` (the process's read at the same moment held traffic).
    fn read_machine(&self, held: bool) {
        let Some(ticks) = busy_ticks() else {
            return;
        };
        let per_second = procfs::ticks_per_second().max(1);
        let mut m = lock(&self.machine);
        if let Some(last) = m.last_ticks {
            let delta = ticks.saturating_sub(last);
            let ns = (u128::from(delta) * 1_000_000_000 / u128::from(per_second)) as u64;
            m.busy_ns += ns;
            if held {
                m.traffic_ns += ns;
            }
        }
        m.last_ticks = Some(ticks.max(m.last_ticks.unwrap_or(0)));
    }
}

impl Machine {
    /// The proxy's stalls since the window began.
    fn stalls_since(&self) -> Stalls {
        let now = stalls::totals();
        let count = now.count.saturating_sub(self.stalls_baseline.count);
        Stalls {
            count,
            seconds: now.nanos.saturating_sub(self.stalls_baseline.nanos) as f64 / 1e9,
            longest_seconds: if count > 0 {
                stalls::longest_since(self.window_start) as f64 / 1e9
            } else {
                0.0
            },
        }
    }

    fn new_window(&mut self) {
        self.stalls_baseline = stalls::totals();
        self.window_start = clock::now();
    }
}

/// The machine's busy CPU time so far, in clock ticks: the first line of /proc/stat, all
/// but idle and iowait (guest time is inside user already).
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_of(stat.lines().next()?)
}

fn busy_of(line: &str) -> Option<u64> {
    let mut fields = line.split_ascii_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal
    let &[user, nice, system, _idle, _iowait, irq, softirq, steal] = v.as_slice() else {
        return None;
    };
    Some(user + nice + system + irq + softirq + steal)
}

/// CPUs online (not those this process may use: the cores the machine shares).
fn online_cpus() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// The CPUs `pid` may run on (`Cpus_allowed_list` of /proc/PID/status), ascending.
pub fn cpus_allowed(pid: u32) -> Option<Vec<u32>> {
    let status = procfs::process::Process::new(pid as i32)
        .ok()?
        .status()
        .ok()?;
    let ranges = status.cpus_allowed_list?;
    let mut out: Vec<u32> = ranges.into_iter().flat_map(|(a, b)| a..=b).collect();
    out.sort_unstable();
    out.dedup();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_time_is_all_but_idle_and_iowait() {
        assert_eq!(
            busy_of("cpu  10 1 5 100 7 2 3 4 9 0"),
            Some(10 + 1 + 5 + 2 + 3 + 4)
        );
        assert_eq!(busy_of("cpu0 10 1 5 100 7 2 3 4 9 0"), None);
        assert_eq!(busy_of("cpu 1 2"), None);
    }

    #[test]
    fn its_own_cpu_is_counted_and_a_reset_starts_a_window() {
        let own = Own::start().unwrap();
        // 300 ms of this thread's CPU, not of the wall clock: beside other work (a load
        // of 10 on 2 cores here) 300 ms of wall time held 0.05 s of CPU.
        let thread_cpu = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid timespec for the call to fill.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            assert_eq!(rc, 0);
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        };
        let (start, wall) = (thread_cpu(), std::time::Instant::now());
        let mut x = 0u64;
        while thread_cpu() - start < Duration::from_millis(300)
            && wall.elapsed() < Duration::from_secs(20)
        {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let s = own.snapshot();
        assert!(s.cpu() >= 0.1, "{s:?}");
        assert!(s.cpus >= 1 && s.machine_busy_seconds >= 0.1, "{s:?}");
        assert!(!s.cpus_allowed.is_empty(), "{s:?}");
        own.reset();
        let after = own.snapshot();
        assert!(after.cpu() < s.cpu(), "{after:?} after {s:?}");
    }
}

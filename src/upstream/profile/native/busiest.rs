//! Which threads get a perf event when the process has more threads than the profiler
//! may hold events ([`super::budget`]): the busiest since the last collect, by each
//! thread's time on a CPU (the first field of /proc/PID/task/TID/schedstat). The sampled
//! set follows the work as it moves from thread to thread, one collect later.

use std::collections::HashMap;
use std::fs;

/// Each thread's time on a CPU at the last read.
#[derive(Debug, Default)]
pub struct ThreadCpu {
    last: HashMap<u32, u64>,
    /// Scratch for the threads that went away.
    gone: Vec<u32>,
}

impl ThreadCpu {
    /// Reads the CPU time of each of `tids` into `out` as (tid, nanoseconds since the
    /// previous read); a thread read for the first time counts all its time, a thread
    /// whose schedstat cannot be read counts 0. Forgets the threads not in `tids`.
    pub fn read(&mut self, pid: u32, tids: &[u32], out: &mut Vec<(u32, u64)>) {
        out.clear();
        for &tid in tids {
            let Some(now) = cpu_ns(pid, tid) else {
                out.push((tid, 0));
                continue;
            };
            let before = self.last.insert(tid, now).unwrap_or(0);
            out.push((tid, now.saturating_sub(before)));
        }
        if self.last.len() > tids.len() {
            self.gone.clear();
            self.gone
                .extend(self.last.keys().copied().filter(|tid| !tids.contains(tid)));
            for tid in &self.gone {
                self.last.remove(tid);
            }
        }
    }
}

fn cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    text.split_ascii_whitespace().next()?.parse().ok()
}

/// Orders `deltas` so that its first `n` are the threads to sample: the most CPU since
/// the last read first; at equal time those sampled already (`sampled`), so that idle
/// threads do not trade their events back and forth; then the lower tid.
pub fn rank(deltas: &mut [(u32, u64)], sampled: impl Fn(u32) -> bool) {
    deltas.sort_unstable_by(|&(a, da), &(b, db)| {
        db.cmp(&da)
            .then_with(|| sampled(b).cmp(&sampled(a)))
            .then_with(|| a.cmp(&b))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::thread_cpu_ns;

    #[test]
    fn the_busiest_come_first_and_the_sampled_win_ties() {
        let mut d = vec![(1, 0), (2, 50), (3, 0), (4, 900), (5, 50)];
        rank(&mut d, |tid| tid == 3 || tid == 5);
        let order: Vec<u32> = d.iter().map(|&(tid, _)| tid).collect();
        assert_eq!(order, [4, 5, 2, 3, 1]);
    }

    #[test]
    fn reads_deltas_of_this_process_and_forgets_exited_threads() {
        let pid = std::process::id();
        let tids = crate::upstream::find::threads(pid).unwrap();
        let mut cpu = ThreadCpu::default();
        let mut out = Vec::new();
        cpu.read(pid, &tids, &mut out);
        assert_eq!(out.len(), tids.len());
        let me = own_tid();
        assert!(out.iter().any(|&(tid, _)| tid == me), "{out:?}");
        // Spin for 20 ms of this thread's own CPU time, however loaded the machine.
        let start = thread_cpu_ns();
        while thread_cpu_ns() < start + 20_000_000 {
            std::hint::black_box(start);
        }
        cpu.read(pid, &[me], &mut out);
        assert_eq!(out.len(), 1);
        assert!(out[0].1 >= 15_000_000, "{out:?}: 20 ms on a CPU since");
        assert_eq!(cpu.last.len(), 1);
    }

    fn own_tid() -> u32 {
        // SAFETY: gettid has no arguments and cannot fail.
        unsafe { libc::gettid() as u32 }
    }
}

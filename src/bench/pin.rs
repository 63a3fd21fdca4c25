//! `--cpus A_CPUS:B_CPUS:LOAD_CPUS`: server A's threads on some cores, B's on others, the
//! bench's own threads (the embedded proxy and the load generator) on a third set.
//!
//! Why: on shared cores the busier server takes more of them, so a duet's latency shows
//! only part of a CPU difference (docs/compare.md). Given cores of its own, each server
//! keeps its whole difference, and other work on the machine can be kept off them. The
//! servers are processes the user runs: their affinity is read first and set back when
//! the bench ends, also on an error or a stopping signal (only SIGKILL escapes it).
//!
//! rustix's `sched_setaffinity` (the `thread` feature of a crate the build already has)
//! instead of raw libc: a safe `CpuSet` and `io::Result`s.

use std::fmt;

use anyhow::{bail, Context};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet, Pid};
use serde::Serialize;

use crate::upstream::find::threads;

/// The parsed `--cpus`: each a list of CPU numbers, ascending, without repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cpus {
    pub a: Vec<usize>,
    pub b: Vec<usize>,
    pub load: Vec<usize>,
}

impl Cpus {
    /// `0:1:0-1`, `0-3:4-7:8,9`: three CPU lists (the kernel's format: numbers and
    /// ranges, comma-separated) joined by `:`.
    pub fn parse(text: &str) -> Result<Cpus, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let [a, b, load] = parts[..] else {
            return Err(format!(
                "{text:?}: expected A_CPUS:B_CPUS:LOAD_CPUS, e.g. 0:1:0-1 or 0-1:2-3:4-7"
            ));
        };
        let list = |which: &str, t: &str| cpu_list(t).map_err(|e| format!("{which} {t:?}: {e}"));
        Ok(Cpus {
            a: list("A_CPUS", a)?,
            b: list("B_CPUS", b)?,
            load: list("LOAD_CPUS", load)?,
        })
    }
}

impl fmt::Display for Cpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |cpus: &[usize]| {
            cpus.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        write!(
            f,
            "A on CPU {}, B on CPU {}, proxy and load on CPU {}",
            list(&self.a),
            list(&self.b),
            list(&self.load)
        )
    }
}

/// `0-2,5` → [0, 1, 2, 5].
fn cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let number = |t: &str| {
        let n: usize = t
            .trim()
            .parse()
            .map_err(|_| format!("{t:?} is not a CPU number"))?;
        if n >= CpuSet::MAX_CPU {
            return Err(format!(
                "CPU {n} is beyond the {} a set holds",
                CpuSet::MAX_CPU
            ));
        }
        Ok(n)
    };
    let mut cpus = Vec::new();
    for item in text.split(',') {
        match item.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi {
                    return Err(format!("{item:?}: the range runs backwards"));
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(number(item)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn set_of(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    set
}

/// Threads whose affinity the bench changed, with what it was: set back on drop.
#[derive(Default)]
pub struct Pinned {
    previous: Vec<(Pid, CpuSet)>,
    /// Each pinned server: its pid, the set its threads were put on, and what its main
    /// thread had, which threads it started during the bench would have inherited.
    processes: Vec<(u32, CpuSet, CpuSet)>,
}

impl Pinned {
    /// Puts the calling thread on `cpus`; the threads it starts afterwards (the runtime's
    /// workers, the generator's threads) inherit it.
    pub fn this_thread(&mut self, cpus: &[usize]) -> anyhow::Result<()> {
        let before = sched_getaffinity(None).context("reading this thread's CPU affinity")?;
        sched_setaffinity(None, &set_of(cpus))
            .with_context(|| format!("putting the bench on CPU {cpus:?} (are they online?)"))?;
        self.previous.push((rustix::thread::gettid(), before));
        Ok(())
    }

    /// Puts every thread of process `pid` (`which`: `--a 127.0.0.1:7379`) on `cpus`.
    /// A thread that ends meanwhile is skipped; threads it starts later inherit the
    /// affinity of the thread that starts them.
    pub fn process(&mut self, pid: u32, cpus: &[usize], which: &str) -> anyhow::Result<()> {
        let set = set_of(cpus);
        let mut pinned = 0;
        let mut inherited = None;
        let tids =
            threads(pid).with_context(|| format!("{which}: listing the threads of pid {pid}"))?;
        for tid in tids {
            let Some(task) = task(tid) else {
                continue;
            };
            let before = match sched_getaffinity(Some(task)) {
                Ok(before) => before,
                Err(rustix::io::Errno::SRCH) => continue,
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("{which}: reading the CPU affinity of thread {tid} of pid {pid}")
                    })
                }
            };
            match sched_setaffinity(Some(task), &set) {
                Ok(()) => {}
                Err(rustix::io::Errno::SRCH) => continue,
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "{which}: putting thread {tid} of pid {pid} on CPU {cpus:?} \
                             (are they online? may this user change its affinity?)"
                        )
                    })
                }
            }
            self.previous.push((task, before));
            if tid == pid || inherited.is_none() {
                inherited = Some(before);
            }
            pinned += 1;
        }
        let Some(inherited) = inherited else {
            bail!("{which}: pid {pid} has no threads left to pin");
        };
        self.processes.push((pid, set, inherited));
        tracing::info!(%which, pid, threads = pinned, ?cpus, "pinned the server's threads");
        Ok(())
    }

    /// Threads a pinned server started during the bench inherited the pinned set: those
    /// still on exactly that set get what their process's main thread had before.
    fn set_back_new_threads(&self) {
        for &(pid, pinned, inherited) in &self.processes {
            let Ok(tids) = threads(pid) else {
                continue; // the server is gone
            };
            for task in tids.into_iter().filter_map(task) {
                let known = self.previous.iter().any(|(t, _)| *t == task);
                if !known && sched_getaffinity(Some(task)).is_ok_and(|now| now == pinned) {
                    set_back(task, &inherited);
                }
            }
        }
    }
}

/// Sets `task`'s affinity to `before`; a thread that ended has nothing to set back.
fn set_back(task: Pid, before: &CpuSet) {
    if let Err(e) = sched_setaffinity(Some(task), before) {
        if e != rustix::io::Errno::SRCH {
            tracing::warn!(tid = task.as_raw_nonzero().get(), error = %e,
                "could not set a thread's CPU affinity back");
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.set_back_new_threads();
        for (task, before) in self.previous.drain(..).rev() {
            set_back(task, &before);
        }
    }
}

/// A thread id as the scheduler calls take it.
fn task(tid: u32) -> Option<Pid> {
    i32::try_from(tid).ok().and_then(Pid::from_raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_parse_three_kernel_style_lists() {
        let c = Cpus::parse("0:1:0-1").unwrap();
        assert_eq!((c.a, c.b, c.load), (vec![0], vec![1], vec![0, 1]));
        let c = Cpus::parse("2-3,0:5,4:7-9").unwrap();
        assert_eq!(
            (c.a, c.b, c.load),
            (vec![0, 2, 3], vec![4, 5], vec![7, 8, 9])
        );
        for bad in ["0:1", "0:1:2:3", "a:1:2", "3-1:0:0", "0::1", "0:1:99999"] {
            assert!(Cpus::parse(bad).is_err(), "{bad}");
        }
        assert!(Cpus::parse("0:1")
            .unwrap_err()
            .contains("A_CPUS:B_CPUS:LOAD_CPUS"));
    }

    /// The tests that change this process's threads' affinity, one at a time.
    static AFFINITY: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn pinning_this_thread_is_set_back_on_drop() {
        let _one = AFFINITY.lock();
        // On a thread of its own, so that the test harness's threads keep theirs.
        std::thread::spawn(|| {
            let before = sched_getaffinity(None).unwrap();
            let first = (0..CpuSet::MAX_CPU).find(|&c| before.is_set(c)).unwrap();
            {
                let mut pinned = Pinned::default();
                pinned.this_thread(&[first]).unwrap();
                let now = sched_getaffinity(None).unwrap();
                assert_eq!(now.count(), 1);
                assert!(now.is_set(first));
            }
            assert_eq!(sched_getaffinity(None).unwrap(), before);
        })
        .join()
        .unwrap();
    }

    /// A thread a pinned server starts during the bench inherits the pinned set and is not
    /// among the threads the bench moved: dropping the guard gives it what the server's
    /// main thread had. This process stands in for the server, one thread of it for the
    /// new one.
    #[test]
    fn a_thread_started_while_pinned_is_set_back_too() {
        let _one = AFFINITY.lock();
        let all = sched_getaffinity(None).unwrap();
        let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| all.is_set(c)).collect();
        if cpus.len() < 2 {
            println!("SKIPPED: needs two CPUs");
            return;
        }
        let pinned_set = set_of(&cpus[..1]);
        let (started, stop) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let (started_tx, started_rx) = started;
        let (stop_tx, stop_rx) = stop;
        let new = std::thread::spawn(move || {
            sched_setaffinity(None, &pinned_set).unwrap();
            started_tx.send(()).unwrap();
            let _ = stop_rx.recv();
            sched_getaffinity(None).unwrap()
        });
        started_rx.recv().unwrap();
        drop(Pinned {
            previous: Vec::new(),
            processes: vec![(std::process::id(), pinned_set, all)],
        });
        stop_tx.send(()).unwrap();
        assert_eq!(new.join().unwrap(), all);
    }
}

//! Events that follow a process's new threads from their first instruction: one event per
//! thread and CPU with `inherit` (limited to threads, `inherit_thread`, so a forked worker
//! is not sampled with this process's maps), each CPU's events writing into one ring
//! buffer.
//!
//! Why: per-thread events are opened on the threads the sampler finds at each collect,
//! about once a second; a server that starts a thread per connection runs most of its CPU
//! in threads that live for one request and are never found (a burn upstream served one
//! request a thread: 6.7 % of its CPU in the samples). An inherited event is copied by the
//! kernel into every thread its thread creates, at the clone, so every thread born after
//! the open is sampled whole. The kernel refuses to map an inherited per-task event that
//! counts on any CPU (all of the children would write into one buffer from every CPU), so
//! the events are per CPU, and each CPU's are redirected (`PERF_EVENT_IOC_SET_OUTPUT`) into
//! the buffer of the first opened on it: as many buffers to drain as CPUs, whatever the
//! threads.
//!
//! The cost is descriptors: threads × CPUs of them, so this is used only when all of the
//! process's threads at the open fit in the descriptor budget that way ([`super::events`]
//! falls back to per-thread events on the busiest threads otherwise).
//!
//! The same rings serve `[tap.process] events = "per-cpu"`: one event per CPU bound to no
//! process, sampling whatever the CPU runs, the drain keeping the process's samples. The
//! kernel then does nothing at the process's context switches (an event bound to a
//! thread is switched out and in with it), every thread and forked child is sampled from
//! its first instruction, and it costs CPUs descriptors; but every other process's
//! samples are taken and dropped, and it needs CAP_PERFMON over the whole machine.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;

use perf_event::{Builder, Counter, Sampler};

/// `PERF_EVENT_IOC_SET_OUTPUT`: `_IO('$', 5)`.
const SET_OUTPUT: u64 = 0x2405;

/// The inherited events of one process.
pub struct Inherited {
    cpus: Vec<usize>,
    /// One ring buffer per CPU (in the order of `cpus`): the first event opened on it,
    /// mapped. Kept open until the end, even when its thread exits: the events of other
    /// threads write into it, and the events it passed on are its children.
    rings: Vec<Sampler>,
    /// The events of each thread opened on, one per CPU (those that are not a ring).
    threads: HashMap<u32, Vec<Counter>>,
    /// Threads of the process at the last look.
    live: usize,
}

impl Inherited {
    /// Opens the events of `tids` on every CPU of `cpus`, through `build(tid, cpu)`; the
    /// first thread's become the rings, mapped with the first size of `ring_bytes` the
    /// locked-memory limit allows. A thread that exited is skipped; any other failure is
    /// returned (the caller samples per thread instead).
    pub fn open(
        tids: &[u32],
        cpus: Vec<usize>,
        ring_bytes: &[usize],
        mut build: impl FnMut(u32, usize) -> io::Result<Counter>,
    ) -> io::Result<Inherited> {
        let mut inherited = Inherited {
            cpus,
            rings: Vec::new(),
            threads: HashMap::new(),
            live: tids.len(),
        };
        for &tid in tids {
            match inherited.open_thread(tid, ring_bytes, &mut build) {
                Ok(()) => {}
                Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {}
                Err(error) => return Err(error),
            }
        }
        if inherited.rings.len() != inherited.cpus.len() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no thread of the process could be opened on every CPU",
            ));
        }
        Ok(inherited)
    }

    /// One event per CPU of `cpus` over everything the CPU runs, from `build(cpu)`,
    /// each mapped with the first size of `ring_bytes` the locked-memory limit allows;
    /// `threads`: the process's now, all of them sampled.
    pub fn machine_wide(
        threads: usize,
        cpus: Vec<usize>,
        ring_bytes: &[usize],
        mut build: impl FnMut(usize) -> io::Result<Counter>,
    ) -> io::Result<Inherited> {
        let rings = cpus
            .iter()
            .map(|&cpu| map(|| build(cpu), ring_bytes))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Inherited {
            cpus,
            rings,
            threads: HashMap::new(),
            live: threads,
        })
    }

    fn open_thread(
        &mut self,
        tid: u32,
        ring_bytes: &[usize],
        build: &mut impl FnMut(u32, usize) -> io::Result<Counter>,
    ) -> io::Result<()> {
        let mut own = Vec::with_capacity(self.cpus.len());
        for (at, &cpu) in self.cpus.iter().enumerate() {
            match self.rings.get(at) {
                Some(ring) => {
                    let counter = build(tid, cpu)?;
                    set_output(&counter, ring)?;
                    own.push(counter);
                }
                None => {
                    let ring = map(|| build(tid, cpu), ring_bytes)?;
                    self.rings.push(ring);
                }
            }
        }
        self.threads.insert(tid, own);
        Ok(())
    }

    /// Notes the process's threads now: all of them are sampled, those born since the
    /// open through their creator's events. The events of threads that exited stay open:
    /// closing one would tear down the copies the kernel made of it in the threads it
    /// created (and theirs), and there are no more of them than threads at the open.
    pub fn follow(&mut self, tids: &[u32]) {
        self.live = tids.len();
    }

    /// Threads sampled, as of the open or the last [`Self::follow`].
    pub fn threads(&self) -> usize {
        self.live
    }

    /// The ring buffers to drain.
    pub fn rings(&mut self) -> impl Iterator<Item = &mut Sampler> {
        self.rings.iter_mut()
    }

    /// Descriptors held: one per thread opened on and CPU.
    pub fn descriptors(&self) -> usize {
        self.rings.len() + self.threads.values().map(Vec::len).sum::<usize>()
    }
}

/// Maps a ring buffer with the first of `sizes` the locked-memory limit allows, each try
/// on a fresh event from `build` (a failed map consumes the event).
fn map(mut build: impl FnMut() -> io::Result<Counter>, sizes: &[usize]) -> io::Result<Sampler> {
    let mut last = None;
    for &bytes in sizes {
        match build()?.sampled(bytes) {
            Ok(sampler) => return Ok(sampler),
            Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                tracing::debug!(bytes, "perf ring buffer over the locked-memory limit");
                last = Some(error);
            }
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no ring size")))
}

/// Sends `counter`'s samples into `ring`'s buffer (both on the same CPU).
fn set_output(counter: &Counter, ring: &Sampler) -> io::Result<()> {
    // SAFETY: both descriptors are open perf events owned by the caller; the ioctl reads
    // its integer argument and writes nothing.
    let done = unsafe {
        libc::ioctl(
            counter.as_raw_fd(),
            SET_OUTPUT as libc::Ioctl,
            ring.as_raw_fd(),
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The CPUs online, from /sys/devices/system/cpu/online (`0-3,6`); `None` when it cannot
/// be read or parsed.
pub fn online_cpus() -> Option<Vec<usize>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    parse_cpu_list(text.trim())
}

fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// A builder for an inherited event of `tid` on `cpu`, from the per-thread one.
pub fn per_cpu(builder: &mut Builder<'_>, tid: i32, cpu: usize) {
    builder
        .observe_pid(tid)
        .one_cpu(cpu)
        .inherit(true)
        .inherit_thread(true);
}

/// A builder for a machine-wide event on `cpu`, from the per-thread one: every process
/// the CPU runs is sampled (the drain keeps one process's samples).
pub fn machine_wide(builder: &mut Builder<'_>, cpu: usize) {
    builder.any_pid().one_cpu(cpu);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}

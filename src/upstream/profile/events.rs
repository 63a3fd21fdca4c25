//! One sampling perf event per thread of the upstream process, and draining their ring
//! buffers.
//!
//! perf-event2 is the maintained fork of the `perf-event` crate with sampling support: it
//! opens the event with the options we need (per-thread, software CPU clock, kernel and
//! user, callchains), maps the ring buffer and parses its records, so no raw syscall or
//! ring-buffer arithmetic lives here. (`perf-event` itself only counts; `perf-event-open`
//! is younger and has fewer users.)
//!
//! The event is the software CPU clock with a fixed period of 1/frequency of CPU time: a
//! thread gets one sample per period it runs, so sample counts are proportional to CPU time
//! (the frequency mode would retune the period and weigh samples unequally).

use std::collections::HashMap;
use std::fs;
use std::io;

use perf_event::events::Software;
use perf_event::{Builder, SampleFlag, Sampler};

use super::ProfileError;

/// Ring buffer per thread: a thread on CPU all the time at 1 kHz writes about 130 KiB/s
/// (a kernel callchain of up to [`KERNEL_STACK_DEPTH`] frames per sample); `collect` runs
/// about once a second. Without CAP_IPC_LOCK the buffers count against
/// kernel.perf_event_mlock_kb (516 KiB per user by default) and then RLIMIT_MEMLOCK, so a
/// process with many threads gets smaller buffers (and possibly lost samples, counted)
/// rather than none.
const RING_BYTES: [usize; 4] = [256 * 1024, 64 * 1024, 16 * 1024, 4 * 1024];

/// The first size to try for a process with `threads` threads: a process with hundreds of
/// threads has few of them busy at once, and 256 KiB each would pin tens of megabytes.
fn first_ring(threads: usize) -> usize {
    match threads {
        0..=32 => 0,
        33..=256 => 1,
        _ => 2,
    }
}

/// Kernel frames kept per sample: enough to climb from a leaf like `copy_user_generic`
/// to the network function or system call that called it.
const KERNEL_STACK_DEPTH: u16 = 12;

/// `PERF_RECORD_MISC_CPUMODE_MASK` and its kernel value, from the record header.
const CPUMODE_MASK: u16 = 0x7;
const CPUMODE_KERNEL: u16 = 1;

/// Callchain entries at or above this are context markers (`PERF_CONTEXT_KERNEL`, …).
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// What one drain of every ring buffer found.
#[derive(Debug, Default)]
pub struct Drained {
    /// User-space instruction pointer → samples.
    pub user: HashMap<u64, u64>,
    /// Kernel callchain, leaf first → samples.
    pub kernel: HashMap<Box<[u64]>, u64>,
    /// Samples the kernel dropped (ring buffer full).
    pub lost: u64,
}

impl Drained {
    pub fn clear(&mut self) {
        self.user.clear();
        self.kernel.clear();
        self.lost = 0;
    }
}

/// The per-thread events of one process.
pub struct ThreadEvents {
    pid: u32,
    period_ns: u64,
    threads: HashMap<u32, Sampler>,
    /// Index into [`RING_BYTES`] of the size that last worked.
    ring: usize,
    /// Scratch for one sample's kernel frames.
    chain: Vec<u64>,
}

impl ThreadEvents {
    /// Opens an event on every thread of `pid`. Fails when none can be opened; the error
    /// of the first thread says why (permission, no such process).
    pub fn open(pid: u32, frequency_hz: u32) -> Result<ThreadEvents, ProfileError> {
        if frequency_hz == 0 || frequency_hz > 100_000 {
            return Err(ProfileError::Frequency(frequency_hz));
        }
        let mut events = ThreadEvents {
            pid,
            period_ns: 1_000_000_000 / u64::from(frequency_hz),
            threads: HashMap::new(),
            ring: 0,
            chain: Vec::with_capacity(usize::from(KERNEL_STACK_DEPTH) + 4),
        };
        let tids = list_threads(pid).map_err(|source| ProfileError::Process { pid, source })?;
        events.ring = first_ring(tids.len());
        let mut first_error = None;
        for tid in tids {
            match events.open_thread(tid) {
                Ok(sampler) => {
                    events.threads.insert(tid, sampler);
                }
                // A thread that exited between the listing and the open.
                Err(error) if error.gone() => {}
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(ThreadError::Open(source)) if events.threads.is_empty() => {
                Err(ProfileError::open(pid, source))
            }
            Some(ThreadError::Map(source)) if events.threads.is_empty() => {
                Err(ProfileError::RingBuffer { pid, source })
            }
            _ if events.threads.is_empty() => Err(ProfileError::Process {
                pid,
                source: io::Error::new(io::ErrorKind::NotFound, "the process has no threads"),
            }),
            _ => Ok(events),
        }
    }

    fn open_thread(&mut self, tid: u32) -> Result<Sampler, ThreadError> {
        let tid = libc_pid(tid).map_err(ThreadError::Open)?;
        let mut builder = Builder::new(Software::CPU_CLOCK);
        builder
            .observe_pid(tid)
            .any_cpu()
            .include_kernel()
            .sample_period(self.period_ns)
            .sample(SampleFlag::IP | SampleFlag::CALLCHAIN)
            .exclude_callchain_user(true)
            .enabled(true);
        builder.attrs_mut().sample_max_stack = KERNEL_STACK_DEPTH;
        loop {
            let counter = builder.build().map_err(ThreadError::Open)?;
            match counter.sampled(RING_BYTES[self.ring]) {
                Ok(sampler) => return Ok(sampler),
                // Over the locked-memory limit: try a smaller buffer.
                Err(error)
                    if error.kind() == io::ErrorKind::PermissionDenied
                        && self.ring + 1 < RING_BYTES.len() =>
                {
                    self.ring += 1;
                    tracing::debug!(
                        pid = self.pid,
                        bytes = RING_BYTES[self.ring],
                        "perf ring buffer over the locked-memory limit, trying a smaller one"
                    );
                }
                Err(error) => return Err(ThreadError::Map(error)),
            }
        }
    }

    /// Picks up threads created since the last call and closes the events of threads that
    /// exited (after their last samples were drained). Returns the number of threads.
    pub fn refresh_threads(&mut self, drained: &mut Drained) -> Result<usize, ProfileError> {
        let pid = self.pid;
        let tids = list_threads(pid).map_err(|source| ProfileError::Process { pid, source })?;
        let exited: Vec<u32> = self
            .threads
            .keys()
            .copied()
            .filter(|tid| !tids.contains(tid))
            .collect();
        for tid in exited {
            if let Some(mut sampler) = self.threads.remove(&tid) {
                drain_one(&mut sampler, &mut self.chain, drained);
            }
        }
        for tid in tids {
            if self.threads.contains_key(&tid) {
                continue;
            }
            match self.open_thread(tid) {
                Ok(sampler) => {
                    self.threads.insert(tid, sampler);
                }
                Err(error) if error.gone() => {}
                Err(error) => {
                    tracing::debug!(
                        pid,
                        tid,
                        ?error,
                        "cannot sample a new thread of the upstream"
                    );
                }
            }
        }
        Ok(self.threads.len())
    }

    /// Reads every record waiting in the ring buffers into `drained`.
    pub fn drain(&mut self, drained: &mut Drained) {
        for sampler in self.threads.values_mut() {
            drain_one(sampler, &mut self.chain, drained);
        }
    }

    pub fn threads(&self) -> usize {
        self.threads.len()
    }
}

fn drain_one(sampler: &mut Sampler, chain: &mut Vec<u64>, drained: &mut Drained) {
    while let Some(record) = sampler.next_record() {
        let kernel = record.misc() & CPUMODE_MASK == CPUMODE_KERNEL;
        let ty = record.ty();
        if ty != RECORD_SAMPLE && ty != RECORD_LOST && ty != RECORD_LOST_SAMPLES {
            continue;
        }
        let bytes = record.to_contiguous();
        let mut words = bytes
            .chunks_exact(8)
            .map(|word| u64::from_ne_bytes(word.try_into().unwrap_or([0; 8])));
        match ty {
            RECORD_SAMPLE => {
                // `ip`, then the callchain: `nr` and `nr` frames, a context marker first.
                // Read by hand: for a user-mode sample with user callchains excluded, recent
                // kernels write an `nr` without the frames, which the crate's parser
                // refuses.
                let Some(ip) = words.next() else { continue };
                if !kernel {
                    *drained.user.entry(ip).or_insert(0) += 1;
                    continue;
                }
                let nr = words.next().unwrap_or(0);
                chain.clear();
                chain.push(ip);
                chain.extend(
                    words
                        .take(usize::try_from(nr).unwrap_or(usize::MAX))
                        .filter(|&frame| frame < PERF_CONTEXT_MAX)
                        .skip_while(|&frame| frame == ip),
                );
                match drained.kernel.get_mut(chain.as_slice()) {
                    Some(count) => *count += 1,
                    None => {
                        drained.kernel.insert(chain.as_slice().into(), 1);
                    }
                }
            }
            // PERF_RECORD_LOST: `id`, `lost`.
            RECORD_LOST => drained.lost += words.nth(1).unwrap_or(0),
            // PERF_RECORD_LOST_SAMPLES: `lost`.
            _ => drained.lost += words.next().unwrap_or(0),
        }
    }
}

/// Record types of the perf ABI (`enum perf_event_type`).
const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;
const RECORD_LOST_SAMPLES: u32 = 13;

const ESRCH: i32 = 3;

/// Why one thread's event could not be set up.
#[derive(Debug)]
enum ThreadError {
    /// perf_event_open failed.
    Open(io::Error),
    /// Mapping its ring buffer failed.
    Map(io::Error),
}

impl ThreadError {
    /// The thread exited between the listing and the open.
    fn gone(&self) -> bool {
        matches!(self, ThreadError::Open(error) if error.raw_os_error() == Some(ESRCH))
    }
}

fn libc_pid(tid: u32) -> io::Result<i32> {
    i32::try_from(tid).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "tid out of range"))
}

/// The thread ids under /proc/PID/task.
pub fn list_threads(pid: u32) -> io::Result<Vec<u32>> {
    let mut tids = Vec::new();
    for entry in fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_shrink_with_many_threads() {
        assert_eq!(RING_BYTES[first_ring(1)], 256 * 1024);
        assert_eq!(RING_BYTES[first_ring(32)], 256 * 1024);
        assert_eq!(RING_BYTES[first_ring(100)], 64 * 1024);
        assert_eq!(RING_BYTES[first_ring(5000)], 16 * 1024);
    }
}

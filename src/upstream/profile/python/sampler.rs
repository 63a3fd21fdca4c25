//! The sampler thread: woken by the threads' CPU-clock records ([`clocks`]), it walks each
//! record's copy of the native stack (the native profiler's unwinder, refreshed every
//! second for libraries loaded since), reads the sampled thread's Python stack at once,
//! and counts both, with the record's instruction, once per record; the two are merged
//! into one stack at collect ([`super::mixed`]). Samples are CPU time by construction (a thread waiting for the GIL, a
//! lock or a socket makes none), and an idle server costs the sampler no wake-up.
//!
//! The stack is read a moment after the period ended, while the thread runs on, as the
//! PHP sampler does (its module comment says why that is sound and how lateness is
//! counted); the instruction is the one the period ended in, so a native leaf and the
//! Python stack read just after it belong together as long as the Python function did
//! not return in between (tens of microseconds against functions that burn
//! milliseconds). The sampler thread asks for the lowest real-time priority so its reads
//! are not late on a busy machine.
//!
//! At a budget ([`crate::upstream::profile::rate`]) the profiler asks for a period of
//! `2^shift` times the configured one ([`PySampler::set_shift`]); the clocks apply it at
//! the thread's next wake-up, and each record counts `2^shift` from then on.
//!
//! [`clocks`]: super::clocks

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::clocks::Clocks;
use super::walk::{Walker, MAX_DEPTH};
use super::{PyError, PyFrame, PyTarget};
use crate::sync::lock;
use crate::upstream::profile::native::{StackUse, Unwinder, Walk};

/// How often the unwinder looks for libraries mapped since.
const REFRESH_UNWIND: Duration = Duration::from_secs(1);
/// Native frames a walk holds at most (the unwinder's own bound).
const UNWIND_DEPTH: usize = 128;

/// Distinct (stack, instruction) pairs kept between two collects; past it, new ones count
/// under `[truncated]`.
const MAX_STACKS: usize = 64 * 1024;
/// How long the sampler waits for a record before it looks whether it should stop.
const POLL: Duration = Duration::from_millis(50);
pub const TRUNCATED: &str = "[truncated]";
pub const NO_PYTHON: &str = "[no Python code]";

/// A sampled stack: the Python frames, leaf first, with which of them an eval loop
/// entered ([`super::mixed`]), the instruction the thread ran when the period ended, and
/// its native stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sampled {
    pub frames: Vec<PyFrame>,
    pub entries: Vec<bool>,
    pub ip: u64,
    /// The user stack's frames, leaf first (the sampled user instruction, then each
    /// return address minus one); empty when it could not be walked.
    pub native: Vec<u64>,
    /// The native walk reached the thread's first frame.
    pub complete: bool,
}

/// Stacks sampled since the last collect, with the sampler's counters.
#[derive(Clone, Debug, Default)]
pub struct PyStacks {
    stacks: Vec<(Sampled, u64)>,
    counts: Counts,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    truncated: u64,
    /// Records sampled, each once (the counts weigh each by its period's multiple).
    taken: u64,
    errors: u64,
    lost: u64,
    reads: u64,
    torn: u64,
    late: u64,
    ended: bool,
    /// Threads without an event (more than the descriptor budget), and the CPU of those
    /// left out.
    unsampled_threads: u64,
    unsampled_cpu_ns: u64,
}

impl PyStacks {
    /// The stacks with their sample counts; empties them.
    pub fn take(&mut self) -> Vec<(Sampled, u64)> {
        std::mem::take(&mut self.stacks)
    }

    /// Samples (the sum of the counts; 0 once taken).
    pub fn samples(&self) -> u64 {
        self.stacks.iter().map(|(_, n)| n).sum()
    }

    /// Records sampled, each once, while the counts weigh each by its period's multiple
    /// of the configured one.
    pub fn taken(&self) -> u64 {
        self.counts.taken
    }

    /// Samples whose stack was cut (deeper than [`MAX_DEPTH`], or torn).
    pub fn truncated(&self) -> u64 {
        self.counts.truncated
    }

    /// Samples whose stack could not be read at all.
    pub fn errors(&self) -> u64 {
        self.counts.errors
    }

    /// Threads left without an event at the last ranking, and the CPU of the threads left
    /// out since the last collect, in nanoseconds.
    pub fn unsampled(&self) -> (u64, u64) {
        (self.counts.unsampled_threads, self.counts.unsampled_cpu_ns)
    }

    /// Records the kernel dropped since the last collect.
    pub fn lost(&self) -> u64 {
        self.counts.lost
    }

    /// process_vm_readv calls made (the cost of the samples).
    pub fn reads(&self) -> u64 {
        self.counts.reads
    }

    /// Walks cut by a read that failed midway.
    pub fn torn(&self) -> u64 {
        self.counts.torn
    }

    /// Samples whose stack read began more than a quarter of a period after the period
    /// ended.
    pub fn late(&self) -> u64 {
        self.counts.late
    }

    /// Whether the process has exited (the sampler stopped).
    pub fn ended(&self) -> bool {
        self.counts.ended
    }
}

/// A stack as walked, leaf first, compared by the identity of its names: the walker hands
/// out the same `Arc`s for a code object until its cache is emptied (at each collect), so
/// a sample hashes a few pointers, not every character of every name and file. The same
/// stack with new `Arc`s is merged by content in `collect`.
struct Walked(Vec<PyFrame>);

impl PartialEq for Walked {
    fn eq(&self, other: &Walked) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(a, b)| {
                Arc::ptr_eq(&a.function, &b.function)
                    && Arc::ptr_eq(&a.file, &b.file)
                    && a.line == b.line
                    && a.at_line == b.at_line
            })
    }
}

impl Eq for Walked {}

impl std::hash::Hash for Walked {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for frame in &self.0 {
            state.write_usize(Arc::as_ptr(&frame.function).cast::<u8>() as usize);
            state.write_usize(Arc::as_ptr(&frame.file).cast::<u8>() as usize);
        }
    }
}

/// A sample as counted: the walked stack, its entry flags, the instruction, the native
/// walk and whether it was complete.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    walked: Walked,
    entries: Box<[bool]>,
    ip: u64,
    native: Box<[u64]>,
    complete: bool,
}

#[derive(Default)]
struct Tally {
    stacks: HashMap<Key, u64>,
    counts: Counts,
}

/// A record waiting for its thread's stack read: its native walk is
/// `natives[native]`.
struct Pending {
    tid: u32,
    ip: u64,
    time: u64,
    native: std::ops::Range<usize>,
    complete: bool,
}

struct Shared {
    tally: Mutex<Tally>,
    stop: AtomicBool,
    generation: AtomicU64,
    tid: AtomicU32,
    /// The period's shift the profiler asks for, and the one the clocks sample at.
    wanted_shift: AtomicU32,
    shift: AtomicU32,
}

/// Samples one Python process's threads on a thread of its own; dropping it stops the
/// thread within [`POLL`].
pub struct PySampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    target: PyTarget,
}

impl PySampler {
    pub fn start(target: PyTarget, frequency_hz: u32) -> Result<PySampler, PyError> {
        if !(1..=10_000).contains(&frequency_hz) {
            return Err(PyError::Frequency(frequency_hz));
        }
        let period = Duration::from_secs(1) / frequency_hz;
        let pid = target.pid;
        // The process's unwind tables are read before the first sample, as its symbols.
        let unwinder = Unwinder::new(pid);
        let clocks = Clocks::open(pid, period).map_err(|source| PyError::Perf { pid, source })?;
        let threads = clocks.threads();
        let shared = Arc::new(Shared {
            tally: Mutex::new(Tally::default()),
            stop: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            tid: AtomicU32::new(0),
            wanted_shift: AtomicU32::new(0),
            shift: AtomicU32::new(0),
        });
        let (started, ready) = std::sync::mpsc::channel();
        let thread = {
            let shared = shared.clone();
            let target = target.clone();
            std::thread::Builder::new()
                .name("py-sampler".to_owned())
                .spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    shared.tid.store(tid as u32, Ordering::Relaxed);
                    let realtime = crate::sync::realtime();
                    let _ = started.send(realtime);
                    run(&shared, &target, (clocks, unwinder), period);
                })
                .map_err(PyError::Thread)?
        };
        let realtime = ready.recv().unwrap_or(false);
        tracing::info!(
            pid,
            version = %target.version,
            frequency_hz,
            threads,
            realtime,
            "sampling Python frames"
        );
        Ok(PySampler {
            shared,
            thread: Some(thread),
            target,
        })
    }

    /// Stacks sampled since the last call.
    pub fn collect(&mut self) -> PyStacks {
        let tally = std::mem::take(&mut *lock(&self.shared.tally));
        self.shared.generation.fetch_add(1, Ordering::Relaxed);
        let mut merged: HashMap<Sampled, u64> = HashMap::with_capacity(tally.stacks.len());
        for (key, n) in tally.stacks {
            let sampled = Sampled {
                frames: key.walked.0,
                entries: key.entries.into(),
                ip: key.ip,
                native: key.native.into(),
                complete: key.complete,
            };
            *merged.entry(sampled).or_insert(0) += n;
        }
        let stacks = merged.into_iter().collect();
        PyStacks {
            stacks,
            counts: tally.counts,
        }
    }

    pub fn target(&self) -> &PyTarget {
        &self.target
    }

    /// Samples from now on at `2^shift` times the configured period, each record counting
    /// `2^shift` (applied at the thread's next wake-up, within [`POLL`]).
    pub fn set_shift(&self, shift: u32) {
        self.shared.wanted_shift.store(shift, Ordering::Relaxed);
    }

    /// The shift the clocks sample at now.
    pub fn shift(&self) -> u32 {
        self.shared.shift.load(Ordering::Relaxed)
    }

    /// CPU time the sampler thread has used so far (its own cost).
    pub fn sampler_cpu(&self) -> Option<Duration> {
        let tid = self.shared.tid.load(Ordering::Relaxed);
        let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
        let ns = text.split_whitespace().next()?.parse().ok()?;
        Some(Duration::from_nanos(ns))
    }
}

impl Drop for PySampler {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A frame of the sampler's own, not read from the process.
fn marker(name: &str) -> PyFrame {
    PyFrame {
        function: name.into(),
        file: "".into(),
        line: 0,
        at_line: 0,
    }
}

fn run(
    shared: &Shared,
    target: &PyTarget,
    (mut clocks, mut unwinder): (Clocks, Unwinder),
    period: Duration,
) {
    let base_ns = period.as_nanos() as u64;
    let mut walker = Walker::new(target);
    let mut generation = 0;
    let mut pending: Vec<Pending> = Vec::new();
    let mut natives: Vec<u64> = Vec::new();
    let mut walked: Vec<u64> = Vec::with_capacity(UNWIND_DEPTH);
    let mut stack: Vec<PyFrame> = Vec::with_capacity(MAX_DEPTH + 1);
    let mut refreshed = Instant::now();
    let (truncated_root, no_python) = (marker(TRUNCATED), marker(NO_PYTHON));
    while !shared.stop.load(Ordering::Relaxed) {
        pending.clear();
        natives.clear();
        let wanted = shared.wanted_shift.load(Ordering::Relaxed);
        let waited = clocks.wait(POLL, wanted, |sample| {
            let start = natives.len();
            let mut complete = false;
            if let Some([bp, sp, ip]) = sample.regs {
                let mut used = StackUse::default();
                complete = unwinder.walk(ip, sp, bp, sample.stack, &mut walked, &mut used)
                    == Walk::Complete;
                natives.extend_from_slice(&walked);
            }
            pending.push(Pending {
                tid: sample.tid,
                ip: sample.ip,
                time: sample.time,
                native: start..natives.len(),
                complete,
            });
        });
        let Ok(weight) = waited else {
            lock(&shared.tally).counts.ended = true;
            break;
        };
        shared.shift.store(clocks.shift(), Ordering::Relaxed);
        let late_after = base_ns * weight / 4;
        // Libraries loaded since (an extension imported late) get their unwind tables.
        if refreshed.elapsed() >= REFRESH_UNWIND {
            refreshed = Instant::now();
            unwinder.refresh();
        }
        let seen = shared.generation.load(Ordering::Relaxed);
        if seen != generation {
            generation = seen;
            walker.clear_cache();
        }
        // Per thread, one read of its stack stands for its records of this wake-up.
        pending.sort_by_key(|s| s.tid);
        let reads = walker.reads();
        let torn = walker.torn;
        let now = monotonic_ns();
        let mut tally = lock(&shared.tally);
        let mut last_tid = None;
        let mut cut = Ok(false);
        for sample in &pending {
            if last_tid != Some(sample.tid) {
                last_tid = Some(sample.tid);
                cut = walker.walk(sample.tid, &mut stack);
                if let Ok(true) = cut {
                    stack.push(truncated_root.clone());
                    walker.entries.push(false);
                }
                if stack.is_empty() {
                    stack.push(no_python.clone());
                    walker.entries.push(false);
                }
            }
            tally.counts.late += u64::from(now.saturating_sub(sample.time) > late_after);
            tally.counts.taken += 1;
            match cut {
                Err(_) => tally.counts.errors += weight,
                Ok(cut) => {
                    tally.counts.truncated += u64::from(cut) * weight;
                    let key = Key {
                        walked: Walked(stack.clone()),
                        entries: walker.entries.as_slice().into(),
                        ip: sample.ip,
                        native: natives[sample.native.clone()].into(),
                        complete: sample.complete,
                    };
                    count(&mut tally, key, weight, &truncated_root);
                }
            }
        }
        tally.counts.reads += walker.reads() - reads;
        tally.counts.torn += walker.torn - torn;
        tally.counts.lost += std::mem::take(&mut clocks.lost);
        tally.counts.unsampled_threads = clocks.unsampled_threads;
        tally.counts.unsampled_cpu_ns += std::mem::take(&mut clocks.unsampled_cpu_ns);
    }
}

/// Counts one sample `weight` times (its period's multiple of the configured one).
fn count(tally: &mut Tally, key: Key, weight: u64, truncated_root: &PyFrame) {
    if let Some(n) = tally.stacks.get_mut(&key) {
        *n += weight;
    } else if tally.stacks.len() < MAX_STACKS {
        tally.stacks.insert(key, weight);
    } else {
        tally.counts.truncated += weight;
        let key = Key {
            walked: Walked(vec![truncated_root.clone()]),
            entries: Box::new([false]),
            ip: 0,
            native: Box::new([]),
            complete: false,
        };
        *tally.stacks.entry(key).or_insert(0) += weight;
    }
}

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

//! The CPU-clock perf events on a Python process's threads: one per thread, each writing a
//! record per period of CPU its thread uses (with the instruction it ran, its user
//! registers and the top of its user stack), all polled by
//! the sampler. Threads come and go (a ThreadingHTTPServer starts one per connection), so
//! the set is brought up to date from /proc/PID/task every [`RESCAN_EVERY`]. Each event
//! is a file descriptor of the proxy: they are held within the native profiler's budget
//! (at most 64 per process, a sixteenth of RLIMIT_NOFILE, none while fewer than a
//! quarter of it are free). With more threads than that, the busiest since the last
//! ranking hold them, ranked again every [`RANK_EVERY`] as the native profiler does, so
//! the events follow the work from thread to thread (the first threads in /proc's order
//! held them, and a server whose work moved to its 300th thread went unsampled); the
//! threads left out and their CPU are counted.
//!
//! At a budget the period is `2^shift` times the configured one
//! ([`crate::upstream::profile::rate`]): [`Clocks::wait`] changes it on every event in
//! place, and events opened later start at it.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::upstream::profile::native::{rank_busiest, Descriptors, ThreadCpu, REGS_MASK};
use crate::upstream::profile::rate;

/// How often the thread list is read again.
pub const RESCAN_EVERY: Duration = Duration::from_millis(50);
/// How often, with more threads than events, the busiest are chosen again (each ranking
/// reads every thread's schedstat).
pub const RANK_EVERY: Duration = Duration::from_secs(1);

/// Record types of the perf ABI (`enum perf_event_type`).
const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;

/// Bytes of the top of a thread's user stack each sample copies, for the native walk
/// between the Python frames ([`super::mixed`]): a handler thread of a threaded server
/// lies 4 to 8 KiB deep (two eval loops, the thread's start and the calls between).
pub const STACK_BYTES: u32 = 16 * 1024;
/// Ring buffer sizes per thread, tried in turn: a sample with its stack copy is 16 KiB,
/// so the first holds eight; a smaller one when the locked-memory limit refuses it, but
/// none smaller than two records (a ring that cannot hold one loses every sample).
const RING_BYTES: [usize; 3] = [32 * 4096, 16 * 4096, 8 * 4096];

/// One sample: the thread, the instruction it ran and when its period ended
/// (CLOCK_MONOTONIC), with the user registers and the copy of the top of its user stack
/// (`stack`, the part the kernel filled; empty without user registers).
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    pub tid: u32,
    pub ip: u64,
    pub time: u64,
    /// The user bp, sp and ip at the sample (as the thread entered the kernel for a
    /// kernel-mode sample).
    pub regs: Option<[u64; 3]>,
    pub stack: &'a [u8],
}

/// The events, by thread id.
pub struct Clocks {
    pid: u32,
    /// The configured period; the events sample every `period_ns << shift`.
    period_ns: u64,
    shift: u32,
    events: HashMap<u32, perf_event::Sampler>,
    scanned: Option<Instant>,
    pollfds: Vec<libc::pollfd>,
    /// Records the kernel dropped (a full ring buffer) since the sampler last took them.
    pub lost: u64,
    /// Each thread's CPU at the last ranking, and when that was.
    cpu: ThreadCpu,
    deltas: Vec<(u32, u64)>,
    ranked: Option<Instant>,
    /// Threads without an event at the last ranking, and the CPU of those left out since
    /// (taken by the sampler at each pass).
    pub unsampled_threads: u64,
    pub unsampled_cpu_ns: u64,
}

/// A CPU-clock event on `tid` sampling every `period_ns` of its CPU time, kernel time too
/// where allowed.
fn open(tid: u32, period_ns: u64) -> io::Result<perf_event::Sampler> {
    use perf_event::events::Software;
    use perf_event::{Builder, Clock, SampleFlag};
    let tid = i32::try_from(tid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut last = io::Error::from(io::ErrorKind::PermissionDenied);
    for kernel in [true, false] {
        let mut builder = Builder::new(Software::CPU_CLOCK);
        builder
            .observe_pid(tid)
            .any_cpu()
            .sample_period(period_ns.max(1))
            .sample(
                SampleFlag::IP
                    | SampleFlag::TID
                    | SampleFlag::TIME
                    | SampleFlag::REGS_USER
                    | SampleFlag::STACK_USER,
            )
            .sample_regs_user(REGS_MASK)
            .sample_stack_user(STACK_BYTES)
            .clockid(Clock::MONOTONIC)
            .wakeup_events(1)
            .enabled(true);
        if kernel {
            builder.include_kernel();
        } else {
            builder.exclude_kernel(true);
        }
        // A smaller ring when the locked-memory limit refuses the larger one.
        for bytes in RING_BYTES {
            match builder.build().and_then(|c| c.sampled(bytes)) {
                Ok(sampler) => return Ok(sampler),
                Err(e) => last = e,
            }
        }
    }
    Err(last)
}

/// A sample record's body as [`open`] asks for it: `ip`, `pid` and `tid`, `time`, the
/// registers' `abi` and the registers of [`REGS_MASK`] (absent when `abi` is 0: no user
/// context), then the stack copy's `size`, `size` bytes and `dyn_size` (the part the
/// kernel filled; absent when `size` is 0).
fn parse(bytes: &[u8]) -> Option<Sample<'_>> {
    let (ip, ids, time) = (word(bytes, 0)?, word(bytes, 8)?, word(bytes, 16)?);
    let mut regs = None;
    let mut stack: &[u8] = &[];
    let mut at = 32;
    if word(bytes, 24).is_some_and(|abi| abi != 0) {
        regs = Some([word(bytes, 32)?, word(bytes, 40)?, word(bytes, 48)?]);
        at = 56;
    }
    let size = usize::try_from(word(bytes, at).unwrap_or(0)).ok()?;
    if size > 0 {
        let data = bytes.get(at + 8..(at + 8).checked_add(size)?)?;
        let filled = word(bytes, at + 8 + size).unwrap_or(0);
        stack = &data[..usize::try_from(filled).unwrap_or(0).min(size)];
    }
    Some(Sample {
        tid: (ids >> 32) as u32,
        ip,
        time,
        regs,
        stack,
    })
}

fn word(bytes: &[u8], at: usize) -> Option<u64> {
    bytes
        .get(at..at + 8)
        .and_then(|w| w.try_into().ok())
        .map(u64::from_ne_bytes)
}

impl Clocks {
    /// Opens an event on every thread of `pid`; an error when not even one could be opened
    /// (no permission).
    pub fn open(pid: u32, period: Duration) -> io::Result<Clocks> {
        let mut clocks = Clocks {
            pid,
            period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX),
            shift: 0,
            events: HashMap::new(),
            scanned: None,
            pollfds: Vec::new(),
            lost: 0,
            cpu: ThreadCpu::default(),
            deltas: Vec::new(),
            ranked: None,
            unsampled_threads: 0,
            unsampled_cpu_ns: 0,
        };
        clocks.rescan()?;
        Ok(clocks)
    }

    pub fn threads(&self) -> usize {
        self.events.len()
    }

    /// Opens events on new threads and drops those of exited ones; an error when the
    /// process is gone or no event could be opened at all.
    pub fn rescan(&mut self) -> io::Result<()> {
        self.scanned = Some(Instant::now());
        let mut alive = Vec::new();
        for entry in std::fs::read_dir(format!("/proc/{}/task", self.pid))? {
            let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            alive.push(tid);
        }
        self.events.retain(|tid, _| alive.contains(tid));
        // Listing the proxy's descriptors costs: only when a thread has no event, and,
        // with more threads than events, at the next ranking.
        if alive.iter().all(|tid| self.events.contains_key(tid))
            || (self.unsampled_threads > 0
                && self.ranked.is_some_and(|at| at.elapsed() < RANK_EVERY))
        {
            return Ok(());
        }
        let budget = Descriptors::now().events(self.events.len());
        if alive.len() > budget {
            self.keep_busiest(&mut alive, budget);
        } else {
            self.unsampled_threads = 0;
        }
        self.open_on(alive)
    }

    /// Leaves in `alive` the `budget` threads that ran most since the last ranking,
    /// closes the events of the others and counts them with their CPU.
    fn keep_busiest(&mut self, alive: &mut Vec<u32>, budget: usize) {
        self.ranked = Some(Instant::now());
        self.cpu.read(self.pid, alive, &mut self.deltas);
        let events = &self.events;
        rank_busiest(&mut self.deltas, |tid| events.contains_key(&tid));
        let (kept, left) = self.deltas.split_at(budget.min(self.deltas.len()));
        self.unsampled_threads = left.len() as u64;
        self.unsampled_cpu_ns += left.iter().map(|&(_, ns)| ns).sum::<u64>();
        alive.clear();
        alive.extend(kept.iter().map(|&(tid, _)| tid));
        self.events.retain(|tid, _| alive.contains(tid));
    }

    /// Opens an event on each of `tids` that has none; an error when none could be opened
    /// and none is held.
    fn open_on(&mut self, tids: Vec<u32>) -> io::Result<()> {
        let mut failed = None;
        for tid in tids {
            if self.events.contains_key(&tid) {
                continue;
            }
            match open(tid, self.period_ns << self.shift) {
                Ok(event) => {
                    self.events.insert(tid, event);
                }
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) if self.events.is_empty() => Err(e),
            _ => Ok(()),
        }
    }

    /// Samples from now on every `2^shift` configured periods. An event whose period
    /// cannot be changed is closed, and opened again at the next rescan at the new one,
    /// so that every event samples at the same rate.
    fn set_shift(&mut self, shift: u32) {
        let period_ns = self.period_ns << shift;
        let before = self.events.len();
        self.events
            .retain(|_, event| rate::set_period(event, period_ns).is_ok());
        if self.events.len() < before {
            tracing::debug!(
                pid = self.pid,
                closed = before - self.events.len(),
                "events whose period could not be changed were closed"
            );
            self.scanned = None;
        }
        self.shift = shift;
    }

    /// Waits up to `timeout` for records, rescans the threads when due, applies the
    /// period's `shift` when it changed, and hands each sample to `each`. Returns what
    /// each of those samples counts, in configured periods: the weight of the period
    /// they were taken at.
    pub fn wait(
        &mut self,
        timeout: Duration,
        shift: u32,
        mut each: impl FnMut(Sample<'_>),
    ) -> io::Result<u64> {
        if self.scanned.is_none_or(|at| at.elapsed() >= RESCAN_EVERY) {
            self.rescan()?;
        }
        self.pollfds.clear();
        self.pollfds
            .extend(self.events.values().map(|event| libc::pollfd {
                fd: event.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }));
        let timeout = libc::c_int::try_from(timeout.as_millis()).unwrap_or(100);
        // SAFETY: `pollfds` is a valid array of as many pollfds as its length; EINTR and
        // errors lead to reading the buffers anyway, which finds nothing.
        unsafe { libc::poll(self.pollfds.as_mut_ptr(), self.pollfds.len() as _, timeout) };
        // The period changes before the drain: every record drained now is of the old
        // one (the first at the new one comes a whole new period later).
        let weight = 1u64 << self.shift;
        if shift != self.shift {
            self.set_shift(shift);
        }
        for event in self.events.values_mut() {
            while let Some(record) = event.next_record() {
                let bytes = record.to_contiguous();
                match record.ty() {
                    RECORD_SAMPLE => {
                        if let Some(sample) = parse(&bytes) {
                            each(sample);
                        }
                    }
                    // `id`, then `lost`.
                    RECORD_LOST => self.lost += word(&bytes, 8).unwrap_or(0) * weight,
                    _ => {}
                }
            }
        }
        Ok(weight)
    }

    /// The shift the events sample at.
    pub fn shift(&self) -> u32 {
        self.shift
    }
}

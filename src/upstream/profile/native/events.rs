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
use std::io;

use perf_event::events::Software;
use perf_event::{Builder, SampleFlag, Sampler};

use super::thread_kind::{ThreadKind, ThreadKinds};

use super::budget::Descriptors;
use super::busiest::{self, ThreadCpu};
use super::inherited::{self, Inherited};
use super::stack_size::StackSize;
use super::unwind::{self, StackUse, Unwinder, Walk};
use crate::upstream::find::threads;
use crate::upstream::profile::ProfileError;

/// Ring buffer per thread, leaf-only sampling: a thread on CPU all the time at 1 kHz writes
/// about 130 KiB/s (a kernel callchain of up to [`KERNEL_STACK_DEPTH`] frames per sample);
/// `collect` runs about once a second. Without CAP_IPC_LOCK the buffers count against
/// kernel.perf_event_mlock_kb (516 KiB per user by default) and then RLIMIT_MEMLOCK, so a
/// process with many threads gets smaller buffers (and possibly lost samples, counted)
/// rather than none.
const RING_BYTES: [usize; 5] = [1024 * 1024, 256 * 1024, 64 * 1024, 16 * 1024, 4 * 1024];

/// The first size to try for a process with `threads` threads: a process with hundreds of
/// threads has few of them busy at once, and 256 KiB each would pin tens of megabytes.
/// With user stacks each sample carries `stack_bytes` of copied stack (32 KiB by default,
/// until the copy shrinks to what the walks read):
/// the buffers start larger and are drained every [`super::DRAIN_EVERY`] in between.
fn first_ring(threads: usize, stacks: bool) -> usize {
    match (threads, stacks) {
        (0..=8, true) => 0,
        (0..=32, _) => 1,
        (33..=256, _) => 2,
        _ => 3,
    }
}

/// Kernel frames kept per sample without call stacks: enough to climb from a leaf like
/// `copy_user_generic` to the network function or system call that called it.
const KERNEL_STACK_DEPTH: u16 = 12;

/// Kernel frames kept per sample with call stacks: all of a system call's, down to its
/// entry (`entry_SYSCALL_64` → `do_syscall_64` → … → a softirq's TCP transmit is 30 to 40
/// frames). At 12 a send's stack lost its entry frames: `do_syscall_64` read 8.5 % with
/// all it calls where perf, walking it whole, said 17.2 %. The frames cost 8 bytes each
/// beside the kilobytes of user stack a sample carries.
const KERNEL_STACK_DEPTH_WITH_STACKS: u16 = 96;

/// `PERF_RECORD_MISC_CPUMODE_MASK` and its kernel value, from the record header.
const CPUMODE_MASK: u16 = 0x7;
const CPUMODE_KERNEL: u16 = 1;

/// Callchain entries at or above this are context markers (`PERF_CONTEXT_KERNEL`, …).
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// What the drains since the last `clear` found.
///
/// A stack is one key: its first word [`StackHead`] says how many kernel frames come
/// first and whether the walk was cut short; then the kernel frames, leaf first; then the
/// user frames, leaf first (the sampled instruction, then the callers' return addresses
/// minus one). A user-mode sample has no kernel frames; without user stacks a sample has
/// one user frame at most (a kernel-mode sample then none).
#[derive(Debug, Default)]
pub struct Drained {
    pub stacks: HashMap<Box<[u64]>, u64>,
    /// Samples the kernel dropped (ring buffer full).
    pub lost: u64,
    /// Samples read, each counted once: the counts in `stacks` weigh each sample by its
    /// period ([`super::rate`]).
    pub taken: u64,
}

impl Drained {
    pub fn clear(&mut self) {
        self.stacks.clear();
        self.lost = 0;
        self.taken = 0;
    }
}

/// The first word of a [`Drained`] stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackHead {
    pub kernel_frames: usize,
    pub truncated: bool,
    /// The sampled thread's kind, by its name ([`ThreadKind`]).
    pub thread: ThreadKind,
}

impl StackHead {
    const TRUNCATED: u64 = 1 << 63;
    /// Two bits of the thread's kind.
    const KIND_SHIFT: u32 = 61;

    fn word(self) -> u64 {
        self.kernel_frames as u64
            | if self.truncated { Self::TRUNCATED } else { 0 }
            | self.thread.bits() << Self::KIND_SHIFT
    }

    /// The head and the frames of a drained stack (kernel frames first).
    pub fn split(stack: &[u64]) -> (StackHead, &[u64]) {
        let Some((&word, frames)) = stack.split_first() else {
            return (
                StackHead {
                    kernel_frames: 0,
                    truncated: false,
                    thread: ThreadKind::Other,
                },
                stack,
            );
        };
        let kernel_frames = usize::try_from(word & ((1 << Self::KIND_SHIFT) - 1))
            .unwrap_or(0)
            .min(frames.len());
        (
            StackHead {
                kernel_frames,
                truncated: word & Self::TRUNCATED != 0,
                thread: ThreadKind::from_bits(word >> Self::KIND_SHIFT),
            },
            frames,
        )
    }
}

/// The per-thread events of one process: on its busiest threads, as many as
/// [`Descriptors::events`] allows ([`busiest`]).
pub struct ThreadEvents {
    pid: u32,
    period_ns: u64,
    /// The events' period is `period_ns × 2^shift` ([`super::rate`]); a sample counts
    /// `2^shift`.
    shift: u32,
    threads: HashMap<u32, Sampler>,
    /// Index into [`RING_BYTES`] of the size that last worked.
    ring: usize,
    /// Bytes of user stack copied per sample, at most the configured size; 0 samples the
    /// leaf only.
    stack_bytes: u32,
    /// Scratch for one sample's stack, and how deep the walks read.
    scratch: Scratch,
    /// Each thread's CPU time, to find the busiest.
    cpu: ThreadCpu,
    /// Scratch: (tid, CPU since the last read) of every thread.
    deltas: Vec<(u32, u64)>,
    /// Threads of the process without an event, at the last open or refresh.
    unsampled_threads: usize,
    /// CPU time of threads that had no event, since the last [`Self::take_unsampled_cpu_ns`].
    unsampled_cpu_ns: u64,
    /// When every thread fits in the budget once per CPU: inherited per-CPU events, which
    /// sample the threads born since from their first instruction ([`inherited`]); the
    /// per-thread `threads` are then empty. Under `per_cpu`, the machine-wide events.
    inherited: Option<Inherited>,
    /// One event per CPU over everything it runs, the samples of other processes dropped
    /// as they are drained (`[tap.process] events = "per-cpu"`).
    per_cpu: bool,
}

/// Buffers reused from one sample to the next, and what the walks used of the copies.
struct Scratch {
    stack: Vec<u64>,
    user: Vec<u64>,
    used: StackUse,
    size: StackSize,
    /// Which threads are a runtime's GC or compiler threads, by name.
    kinds: ThreadKinds,
}

impl ThreadEvents {
    /// Opens an event on each of the busiest threads of `pid`, as many as the descriptor
    /// budget allows. Fails when threads were chosen and none could be opened; the error
    /// of the first thread says why (permission, no such process).
    pub fn open(
        pid: u32,
        frequency_hz: u32,
        stack_bytes: u32,
        per_cpu: bool,
    ) -> Result<ThreadEvents, ProfileError> {
        if frequency_hz == 0 || frequency_hz > 100_000 {
            return Err(ProfileError::Frequency(frequency_hz));
        }
        let mut events = ThreadEvents {
            pid,
            period_ns: 1_000_000_000 / u64::from(frequency_hz),
            shift: 0,
            threads: HashMap::new(),
            ring: 0,
            stack_bytes,
            scratch: Scratch {
                stack: Vec::new(),
                user: Vec::new(),
                used: StackUse::default(),
                size: StackSize::new(stack_bytes),
                kinds: ThreadKinds::new(pid),
            },
            cpu: ThreadCpu::default(),
            deltas: Vec::new(),
            unsampled_threads: 0,
            unsampled_cpu_ns: 0,
            inherited: None,
            per_cpu,
        };
        let tids = threads(pid).map_err(|source| ProfileError::Process { pid, source })?;
        let budget = Descriptors::now().events(0);
        if events.inherit(&tids, budget) {
            return Ok(events);
        }
        events.ring = first_ring(tids.len().min(budget), stack_bytes > 0);
        // The first read ranks by all the CPU time each thread ever had.
        events.cpu.read(pid, &tids, &mut events.deltas);
        busiest::rank(&mut events.deltas, |_| false);
        let chosen: Vec<u32> = events.deltas.iter().take(budget).map(|&(t, _)| t).collect();
        let mut first_error = None;
        for tid in chosen {
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
        events.unsampled_threads = tids.len().saturating_sub(events.threads.len());
        if budget == 0 && !tids.is_empty() {
            tracing::warn!(
                pid,
                "no file descriptor to spare for a perf event (a quarter of RLIMIT_NOFILE stays \
                 free for the data path): no thread is sampled until some are free"
            );
            return Ok(events);
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

    /// Opens inherited per-CPU events on every thread of `tids` when threads × CPUs fit
    /// in `budget`; false (nothing open) when they do not or the kernel refuses them (an
    /// `inherit_thread` older than Linux 5.13, a missing permission: the per-thread open
    /// then says which).
    fn inherit(&mut self, tids: &[u32], budget: usize) -> bool {
        let Some(cpus) = inherited::online_cpus() else {
            return false;
        };
        if self.per_cpu {
            return self.machine_wide(tids, cpus, budget);
        }
        if tids.is_empty() || tids.len().saturating_mul(cpus.len()) > budget {
            return false;
        }
        // A CPU runs one thread at a time: its buffer fills like one busy thread's.
        let sizes = &RING_BYTES[first_ring(1, self.stack_bytes > 0)..];
        let build = |tid: u32, cpu: usize| {
            let mut builder = self.builder();
            inherited::per_cpu(&mut builder, libc_pid(tid)?, cpu);
            builder.build()
        };
        match Inherited::open(tids, cpus, sizes, build) {
            Ok(events) => {
                tracing::debug!(
                    pid = self.pid,
                    threads = tids.len(),
                    descriptors = events.descriptors(),
                    "sampling every thread with inherited per-CPU events"
                );
                self.unsampled_threads = 0;
                self.inherited = Some(events);
                true
            }
            Err(error) => {
                tracing::debug!(
                    pid = self.pid,
                    %error,
                    "inherited per-CPU events refused: sampling per thread"
                );
                false
            }
        }
    }

    /// Opens one event per CPU over everything it runs (`per_cpu`); false when the CPUs
    /// do not fit in `budget` or the kernel refuses (machine-wide events need CAP_PERFMON
    /// or perf_event_paranoid at 0 or less: said once, and the process is sampled per
    /// thread instead).
    fn machine_wide(&mut self, tids: &[u32], cpus: Vec<usize>, budget: usize) -> bool {
        if cpus.len() > budget {
            return false;
        }
        let sizes = &RING_BYTES[first_ring(1, self.stack_bytes > 0)..];
        let build = |cpu: usize| {
            let mut builder = self.builder();
            inherited::machine_wide(&mut builder, cpu);
            builder.build()
        };
        match Inherited::machine_wide(tids.len(), cpus, sizes, build) {
            Ok(events) => {
                tracing::debug!(
                    pid = self.pid,
                    cpus = events.descriptors(),
                    "sampling every CPU, other processes' samples dropped"
                );
                self.unsampled_threads = 0;
                self.inherited = Some(events);
                true
            }
            Err(error) => {
                tracing::warn!(
                    pid = self.pid,
                    %error,
                    "events = \"per-cpu\" refused (it needs CAP_PERFMON over the whole \
                     machine): sampling per thread"
                );
                self.per_cpu = false;
                self.inherit(tids, budget)
            }
        }
    }

    /// The event every thread gets: the CPU clock at the period, with callchains and, with
    /// user stacks, the registers and the top of the stack.
    fn builder(&self) -> Builder<'static> {
        let mut builder = Builder::new(Software::CPU_CLOCK);
        // The thread id tells a runtime's GC and compiler threads (inherited per-CPU
        // events sample every thread).
        let mut sample = SampleFlag::IP | SampleFlag::TID | SampleFlag::CALLCHAIN;
        if self.stack_bytes > 0 {
            // The user registers and the top of the user stack, for a kernel-mode sample
            // too (as they were when the thread entered the kernel): the user frames
            // are unwound from them; the user callchain the kernel could walk itself
            // would follow frame pointers only.
            sample |= SampleFlag::REGS_USER | SampleFlag::STACK_USER;
            builder
                .sample_regs_user(unwind::REGS_MASK)
                .sample_stack_user(self.stack_bytes);
        }
        builder
            .include_kernel()
            .sample_period(self.period_ns << self.shift)
            .sample(sample)
            .exclude_callchain_user(true)
            .enabled(true);
        builder.attrs_mut().sample_max_stack = if self.stack_bytes > 0 {
            KERNEL_STACK_DEPTH_WITH_STACKS
        } else {
            KERNEL_STACK_DEPTH
        };
        builder
    }

    fn open_thread(&mut self, tid: u32) -> Result<Sampler, ThreadError> {
        let tid = libc_pid(tid).map_err(ThreadError::Open)?;
        let mut builder = self.builder();
        builder.observe_pid(tid).any_cpu();
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

    /// Moves the events to the threads busiest since the last call, within the
    /// descriptor budget: closes the events of threads that exited or fell out of the
    /// busiest (after their last samples were drained) before opening the new ones, and
    /// counts the CPU time of the threads that had none. Returns the number of events.
    pub fn refresh_threads(
        &mut self,
        unwinder: Option<&mut Unwinder>,
        drained: &mut Drained,
    ) -> Result<usize, ProfileError> {
        let pid = self.pid;
        let tids = threads(pid).map_err(|source| ProfileError::Process { pid, source })?;
        if let Some(inherited) = &mut self.inherited {
            inherited.follow(&tids);
            return Ok(inherited.threads());
        }
        self.cpu.read(pid, &tids, &mut self.deltas);
        let threads = &self.threads;
        self.unsampled_cpu_ns += self
            .deltas
            .iter()
            .filter(|(tid, _)| !threads.contains_key(tid))
            .map(|&(_, ns)| ns)
            .sum::<u64>();
        let budget = Descriptors::now().events(self.threads.len());
        busiest::rank(&mut self.deltas, |tid| threads.contains_key(&tid));
        let chosen: Vec<u32> = self.deltas[..budget.min(self.deltas.len())]
            .iter()
            .map(|&(tid, _)| tid)
            .collect();
        let dropped: Vec<u32> = self
            .threads
            .keys()
            .copied()
            .filter(|tid| !chosen.contains(tid))
            .collect();
        let mut unwinder = unwinder;
        for tid in dropped {
            self.close(tid, unwinder.as_deref_mut(), drained);
        }
        for tid in chosen {
            if !self.threads.contains_key(&tid) {
                self.open_new(tid);
            }
        }
        self.unsampled_threads = tids.len().saturating_sub(self.threads.len());
        Ok(self.threads.len())
    }

    /// Opens the event of a thread newly chosen; a failure is logged.
    fn open_new(&mut self, tid: u32) {
        match self.open_thread(tid) {
            Ok(sampler) => {
                self.threads.insert(tid, sampler);
            }
            Err(error) if error.gone() => {}
            Err(error) => {
                tracing::debug!(
                    pid = self.pid,
                    tid,
                    ?error,
                    "cannot sample a thread of the upstream"
                );
            }
        }
    }

    /// Reopens every event with the copy's size [`StackSize`] now wants, when it wants
    /// another; the records of the old events are drained first. A thread whose event
    /// cannot be reopened is picked up again by the next refresh.
    pub fn resize_stacks(&mut self, unwinder: Option<&mut Unwinder>, drained: &mut Drained) {
        if self.stack_bytes == 0 {
            return;
        }
        let Some(fit) = self.inherited_fit() else {
            return;
        };
        let Some(bytes) = self.scratch.size.next() else {
            return;
        };
        tracing::debug!(
            pid = self.pid,
            from = self.stack_bytes,
            to = bytes,
            "user stack copied per sample resized to what the walks use"
        );
        self.reopen(|e| e.stack_bytes = bytes, fit, unwinder, drained);
    }

    /// Reopens every event with the period `2^shift` times the configured one
    /// ([`super::rate`]); false when it cannot (inherited events that would no longer
    /// fit in the budget), and the period stays.
    pub fn set_shift(
        &mut self,
        shift: u32,
        unwinder: Option<&mut Unwinder>,
        drained: &mut Drained,
    ) -> bool {
        let Some(fit) = self.inherited_fit() else {
            return false;
        };
        tracing::debug!(
            pid = self.pid,
            from = self.shift,
            to = shift,
            "sampling period changed"
        );
        self.reopen(|e| e.shift = shift, fit, unwinder, drained);
        true
    }

    /// `Some(None)` for per-thread events (they can always be reopened); with inherited
    /// events, `Some(Some((threads now, budget)))` when all of them fit in the budget
    /// once per CPU (reopening on some would leave the others unsampled), else `None`.
    #[allow(clippy::option_option)]
    fn inherited_fit(&self) -> Option<Option<(Vec<u32>, usize)>> {
        let Some(held) = self.inherited.as_ref().map(Inherited::descriptors) else {
            return Some(None);
        };
        let tids = threads(self.pid).ok()?;
        let cpus = inherited::online_cpus()?;
        let budget = Descriptors::now().events(held);
        // Machine-wide events are one per CPU, whatever the threads.
        let needed = if self.per_cpu {
            cpus.len()
        } else {
            tids.len().saturating_mul(cpus.len())
        };
        (needed <= budget).then_some(Some((tids, budget)))
    }

    /// Drains and closes every event, applies `change` (the copy's size, the period),
    /// and opens them again: inherited ones on `fit`'s threads, per-thread ones on the
    /// same threads. Should the kernel refuse inherited events now, the next refresh
    /// samples per thread.
    fn reopen(
        &mut self,
        change: impl FnOnce(&mut Self),
        fit: Option<(Vec<u32>, usize)>,
        mut unwinder: Option<&mut Unwinder>,
        drained: &mut Drained,
    ) {
        match fit {
            Some((tids, budget)) => {
                self.drain(unwinder, drained);
                self.inherited = None;
                change(self);
                self.inherit(&tids, budget);
            }
            None => {
                let tids: Vec<u32> = self.threads.keys().copied().collect();
                for &tid in &tids {
                    self.close(tid, unwinder.as_deref_mut(), drained);
                }
                change(self);
                for tid in tids {
                    self.open_new(tid);
                }
            }
        }
    }

    /// Closes the event of thread `tid`, if it has one, after draining its last records.
    fn close(&mut self, tid: u32, unwinder: Option<&mut Unwinder>, drained: &mut Drained) {
        if let Some(mut sampler) = self.threads.remove(&tid) {
            let how = self.how();
            drain_one(&mut sampler, unwinder, how, &mut self.scratch, drained);
        }
    }

    /// How the records of the events now read: see [`How`].
    fn how(&self) -> How {
        How {
            stacks: self.stack_bytes > 0,
            weight: 1 << self.shift,
            only_pid: self.per_cpu.then_some(self.pid),
        }
    }

    /// Bytes of user stack each sample copies now (0: the leaf only).
    pub fn stack_bytes(&self) -> u32 {
        self.stack_bytes
    }

    /// Threads of the process without an event, as of the last open or refresh.
    pub fn unsampled_threads(&self) -> usize {
        self.unsampled_threads
    }

    /// The CPU time of threads without an event since the last call.
    pub fn take_unsampled_cpu_ns(&mut self) -> u64 {
        std::mem::take(&mut self.unsampled_cpu_ns)
    }

    /// Reads every record waiting in the ring buffers into `drained`, unwinding user
    /// stacks with `unwinder` (when sampled).
    pub fn drain(&mut self, mut unwinder: Option<&mut Unwinder>, drained: &mut Drained) {
        let how = self.how();
        let inherited = self.inherited.iter_mut().flat_map(Inherited::rings);
        for sampler in self.threads.values_mut().chain(inherited) {
            drain_one(
                sampler,
                unwinder.as_deref_mut(),
                how,
                &mut self.scratch,
                drained,
            );
        }
    }

    /// Threads sampled: those with an event, or with inherited events every thread.
    pub fn threads(&self) -> usize {
        self.inherited
            .as_ref()
            .map_or(self.threads.len(), Inherited::threads)
    }
}

/// How a ring's records are read.
#[derive(Clone, Copy)]
struct How {
    /// User stacks are sampled, and a sample drained before the unwinder is ready (it
    /// loads in the background) is a leaf cut short.
    stacks: bool,
    /// What a sample counts, in periods of the configured rate.
    weight: u64,
    /// Machine-wide events: the process whose samples are kept.
    only_pid: Option<u32>,
}

/// Drains one ring's records.
fn drain_one(
    sampler: &mut Sampler,
    mut unwinder: Option<&mut Unwinder>,
    How {
        stacks,
        weight,
        only_pid,
    }: How,
    scratch: &mut Scratch,
    drained: &mut Drained,
) {
    while let Some(record) = sampler.next_record() {
        let ty = record.ty();
        if ty != RECORD_SAMPLE && ty != RECORD_LOST && ty != RECORD_LOST_SAMPLES {
            continue;
        }
        let kernel = record.misc() & CPUMODE_MASK == CPUMODE_KERNEL;
        let bytes = record.to_contiguous();
        match ty {
            RECORD_SAMPLE => {
                if let Some(sample) = Sample::parse(&bytes, kernel)
                    .filter(|sample| only_pid.is_none_or(|pid| sample.pid == pid))
                {
                    sample.stack(unwinder.as_deref_mut(), stacks, scratch);
                    drained.taken += 1;
                    match drained.stacks.get_mut(scratch.stack.as_slice()) {
                        Some(count) => *count += weight,
                        None => {
                            drained
                                .stacks
                                .insert(scratch.stack.as_slice().into(), weight);
                        }
                    }
                }
            }
            // PERF_RECORD_LOST: `id`, `lost`. Machine-wide events count the lost
            // samples of every process: an upper bound on the process's.
            RECORD_LOST => drained.lost += word(&bytes, 1).unwrap_or(0) * weight,
            // PERF_RECORD_LOST_SAMPLES: `lost`.
            _ => drained.lost += word(&bytes, 0).unwrap_or(0) * weight,
        }
    }
}

/// The `index`th u64 of a record's body.
fn word(bytes: &[u8], index: usize) -> Option<u64> {
    let start = index.checked_mul(8)?;
    let word = bytes.get(start..start + 8)?;
    Some(u64::from_ne_bytes(word.try_into().ok()?))
}

/// One PERF_RECORD_SAMPLE, laid out as our `sample_type` asks: `ip`; `pid` and `tid`
/// (two u32); the callchain (`nr`
/// and `nr` frames, context markers among them); with user stacks, `abi` and the
/// registers of [`unwind::REGS_MASK`] (absent when `abi` is 0: no user context), then
/// `size`, `size` bytes of stack and `dyn_size`, the part of them the kernel filled.
/// Read by hand: for a user-mode sample with user callchains excluded, recent kernels
/// write an `nr` of 0 and the crate's parser refuses the record.
struct Sample<'a> {
    ip: u64,
    pid: u32,
    tid: u32,
    kernel: bool,
    /// The callchain's words, markers included.
    chain: &'a [u8],
    /// bp, sp, ip of user space, when sampled.
    regs: Option<[u64; 3]>,
    /// The copied user stack (its filled part).
    stack: &'a [u8],
    /// The kernel filled the whole copy (else the stack ended before it).
    full_copy: bool,
}

impl<'a> Sample<'a> {
    fn parse(bytes: &'a [u8], kernel: bool) -> Option<Sample<'a>> {
        let ip = word(bytes, 0)?;
        let ids = word(bytes, 1)?;
        // Two u32 in the record's order, pid first: the low half on this
        // little-endian ABI.
        let (pid, tid) = (ids as u32, (ids >> 32) as u32);
        let nr = usize::try_from(word(bytes, 2).unwrap_or(0)).ok()?;
        let chain_end = 24usize.checked_add(nr.checked_mul(8)?)?;
        let chain = bytes.get(24..chain_end).unwrap_or(&[]);
        let rest = bytes.get(chain_end..).unwrap_or(&[]);
        let mut regs = None;
        let mut stack: &[u8] = &[];
        let mut full_copy = false;
        if let Some(abi) = word(rest, 0) {
            let mut at = 1;
            if abi != 0 {
                regs = Some([word(rest, 1)?, word(rest, 2)?, word(rest, 3)?]);
                at = 4;
            }
            let size = usize::try_from(word(rest, at).unwrap_or(0)).ok()?;
            if size > 0 {
                let start = (at + 1) * 8;
                let data = rest.get(start..start.checked_add(size)?)?;
                let dyn_size = usize::try_from(word(rest, at + 1 + size / 8).unwrap_or(0))
                    .unwrap_or(0)
                    .min(size);
                stack = &data[..dyn_size];
                full_copy = dyn_size == size;
            }
        }
        Some(Sample {
            ip,
            pid,
            tid,
            kernel,
            chain,
            regs,
            stack,
            full_copy,
        })
    }

    /// Writes this sample's drained stack (see [`Drained`]) into `scratch.stack`.
    fn stack(&self, unwinder: Option<&mut Unwinder>, stacks: bool, scratch: &mut Scratch) {
        let out = &mut scratch.stack;
        out.clear();
        out.push(0);
        let mut kernel_frames = 0;
        if self.kernel {
            out.push(self.ip);
            out.extend(
                self.chain
                    .chunks_exact(8)
                    .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])))
                    .filter(|&frame| frame < PERF_CONTEXT_MAX)
                    .skip_while(|&frame| frame == self.ip),
            );
            kernel_frames = out.len() - 1;
        }
        let mut truncated = false;
        match (unwinder, self.regs) {
            (Some(unwinder), Some([bp, sp, ip])) => {
                let used = &mut scratch.used;
                truncated = unwinder.walk(ip, sp, bp, self.stack, &mut scratch.user, used)
                    == Walk::Truncated;
                scratch
                    .size
                    .walked(used.bytes, used.past_copy, self.full_copy);
                out.extend_from_slice(&scratch.user);
            }
            // Call stacks asked for, but the unwinder is still loading the process's unwind
            // tables: the leaf, and a walk cut short.
            (None, Some([_, _, ip])) if stacks => {
                out.push(if self.kernel { ip } else { self.ip });
                truncated = true;
            }
            // Leaf only: a user-mode sample's instruction.
            _ if !self.kernel => out.push(self.ip),
            _ => {}
        }
        out[0] = StackHead {
            kernel_frames,
            truncated,
            thread: scratch.kinds.get(self.tid),
        }
        .word();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_shrink_with_many_threads() {
        assert_eq!(RING_BYTES[first_ring(1, false)], 256 * 1024);
        assert_eq!(RING_BYTES[first_ring(32, false)], 256 * 1024);
        assert_eq!(RING_BYTES[first_ring(100, false)], 64 * 1024);
        assert_eq!(RING_BYTES[first_ring(5000, false)], 16 * 1024);
        assert_eq!(RING_BYTES[first_ring(3, true)], 1024 * 1024);
        assert_eq!(RING_BYTES[first_ring(100, true)], 64 * 1024);
    }
}

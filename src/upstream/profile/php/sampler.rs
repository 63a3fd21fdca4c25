//! The sampler thread: paced by the PHP thread's own CPU time where perf events may be
//! opened on it, else ticking at a fixed rate; at each sample it reads the stack and
//! counts it.
//!
//! **Paced by CPU time** (the default where phasescope may sample the process, as it needs
//! to for native profiles): a perf software CPU-clock event on the PHP thread writes one
//! record per period of CPU the thread uses (1 ms at 1 kHz) and wakes the sampler, which
//! then reads the stack once and counts it once per record. Samples are then CPU time by
//! construction: a thread waiting for a CPU makes none (the timer's `R` below counts
//! those too, which on a busy machine dilutes every share with where the thread was
//! woken), and an idle server costs the sampler no wake-up at all. The stack is read a
//! moment after the period ended, while the thread goes on running, so it is the code the
//! thread runs then; the wake-up latency is tens of microseconds against a period of a
//! millisecond, once the sampler has a CPU to run on.
//!
//! **On time.** A sampler that waits for a CPU reads the stack late, and where it reads
//! then is not where the period ended: it gets a CPU when another task blocks or yields,
//! and those moments follow the request cycle (the client that was just answered goes
//! back to waiting, say), so late reads pile up in whatever the server does right after
//! a response. The sampler thread therefore asks for the lowest real-time priority
//! (SCHED_FIFO 1, where it may: root or CAP_SYS_NICE), so that its wake-up preempts
//! whatever runs instead of queueing behind it; it runs for a stack read at most once a
//! period, a few per cent of a core. Each record carries the time its period ended
//! (CLOCK_MONOTONIC), and a read that began more than a quarter of a period after it
//! counts as late ([`PhpStacks::late`]), so a run says how often it happened.
//!
//! **Ticking** (without that permission): on-CPU is decided from /proc, never from the
//! stack: an event loop blocked in
//! `stream_select` or `epoll_wait` still has `{main}` → `Loop::run` → `stream_select` on
//! its stack, and counting it would show idle time as work. A tick counts when the
//! thread's state in /proc/PID/task/TID/stat is `R` (running, or runnable and waiting for
//! a CPU). Telling those two apart from /proc does not work: schedstat's CPU time of a
//! thread that is running is only brought up to date at scheduler ticks and context
//! switches, so "did its CPU time grow since the last tick" drops ticks of a thread that
//! never left the CPU (12 % of them for a PHP loop without system calls, measured). The
//! run-queue wait counted as `R` is time the function was due to run; on a machine with
//! a free core it is small, and it does not favour one function over another.
//!
//! The file stays open and is read with pread, so a tick off CPU costs one small system
//! call and no stack read. The deadline of tick n is start + n × period on the
//! monotonic clock (clock_nanosleep with TIMER_ABSTIME), so the rate does not drift with
//! the time a tick takes; a sampler that falls behind by more than a period skips the
//! missed ticks (counted) instead of bursting.
//!
//! **At a budget** ([`crate::upstream::profile::rate`]): the profiler asks for a period of
//! `2^shift` times the configured one ([`PhpSampler::set_shift`]) and the thread applies it
//! at its next wake-up: the CPU clock's period is changed in place, the timer's tick is
//! made longer. Each read then counts `2^shift` periods of the configured rate, so the
//! counts stay in its units whatever the rate.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::walk::{marker, Walker, MAX_DEPTH};
use super::{PhpError, PhpFrame, PhpTarget};
use crate::sync::lock;
use crate::upstream::profile::rate;

/// Distinct stacks kept between two collects; past it, new stacks count as truncated
/// into one `[truncated]` stack instead of growing the map without bound.
const MAX_STACKS: usize = 64 * 1024;

/// Stacks sampled since the last take, with the sampler's own counters.
#[derive(Clone, Debug, Default)]
pub struct PhpStacks {
    stacks: Vec<(Vec<PhpFrame>, u64)>,
    counts: Counts,
}

/// The sampler's own counters, as the thread keeps them and as `collect` hands them on
/// (the accessors of [`PhpStacks`] say what each means).
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    truncated: u64,
    taken: u64,
    ticks: u64,
    off_cpu: u64,
    errors: u64,
    missed: u64,
    reads: u64,
    torn: u64,
    late: u64,
    ended: bool,
}

impl PhpStacks {
    /// The stacks and their sample counts, root first; empties them.
    pub fn take(&mut self) -> Vec<(Vec<PhpFrame>, u64)> {
        std::mem::take(&mut self.stacks)
    }

    /// Samples whose stack was deeper than [`MAX_DEPTH`] (or could not be read to its
    /// root): their stacks hold the leaf-most frames under a `[truncated]` root. Also the
    /// samples of new stacks past the bound on distinct stacks per collect (64 Ki), which
    /// count as the stack `[truncated]` alone.
    pub fn truncated(&self) -> u64 {
        self.counts.truncated
    }

    /// On-CPU samples (the sum of the counts; 0 once taken).
    pub fn samples(&self) -> u64 {
        self.stacks.iter().map(|(_, n)| n).sum()
    }

    /// Stacks read (or tried) on CPU, each once, while the counts weigh each by its
    /// period's multiple of the configured one.
    pub fn taken(&self) -> u64 {
        self.counts.taken
    }

    /// Ticks in the period, on CPU or not (at the rate of the time, unweighted).
    pub fn ticks(&self) -> u64 {
        self.counts.ticks
    }

    /// Ticks at which the PHP thread was not on CPU (no stack read).
    pub fn off_cpu(&self) -> u64 {
        self.counts.off_cpu
    }

    /// On-CPU ticks whose stack could not be read at all (the process exiting, or its
    /// memory changing under the read).
    pub fn errors(&self) -> u64 {
        self.counts.errors
    }

    /// Ticks skipped because the sampler fell behind.
    pub fn missed(&self) -> u64 {
        self.counts.missed
    }

    /// process_vm_readv calls made (the cost of the samples).
    pub fn reads(&self) -> u64 {
        self.counts.reads
    }

    /// Walks that read a stack torn by the running process and were tried again (a
    /// sample whose every attempt was torn counts in [`PhpStacks::errors`]).
    pub fn torn(&self) -> u64 {
        self.counts.torn
    }

    /// CPU-paced samples whose stack read began more than a quarter of a period after
    /// the period ended (the sampler waited for a CPU): they show where the thread was
    /// then, not where it was when the period ended.
    pub fn late(&self) -> u64 {
        self.counts.late
    }

    /// Whether the PHP thread has exited (the sampler stopped).
    pub fn ended(&self) -> bool {
        self.counts.ended
    }
}

/// A stack as walked, leaf first, compared by the identity of its names: the walker hands
/// out the same `Arc`s for a function until its cache is emptied, so a sample hashes a
/// few pointers, not every character of every name. After the cache is emptied the same
/// stack comes back with new `Arc`s and a second entry, merged by content in `collect`.
struct Walked(Vec<PhpFrame>);

impl PartialEq for Walked {
    fn eq(&self, other: &Walked) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(a, b)| {
                Arc::ptr_eq(&a.function, &b.function)
                    && Arc::ptr_eq(&a.file, &b.file)
                    && a.line == b.line
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
            state.write_u32(frame.line);
        }
    }
}

/// What the thread hands to `collect`.
#[derive(Default)]
struct Tally {
    /// Leaf first, as walked (reversed once per collect, not per sample).
    stacks: HashMap<Walked, u64>,
    counts: Counts,
}

struct Shared {
    tally: Mutex<Tally>,
    stop: AtomicBool,
    /// Bumped by each collect: the thread empties its name cache when it changes.
    generation: AtomicU64,
    /// The sampler thread's id, for its CPU time.
    tid: AtomicU32,
    /// Whether the sampler thread runs at a real-time priority (see the module comment).
    realtime: AtomicBool,
    /// The period's shift the profiler asks for, and the one the thread applied.
    wanted_shift: AtomicU32,
    shift: AtomicU32,
}

/// Samples one PHP process's stacks on a thread of its own; dropping it stops the thread
/// within one tick (or [`CPU_PACED_POLL`]).
pub struct PhpSampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    target: PhpTarget,
    cpu_paced: bool,
}

/// What paces the samples (see the module comment).
enum Pace {
    Cpu(perf_event::Sampler),
    Timer,
}

/// How long a CPU-paced sampler waits for a record before it looks whether it should
/// stop or the thread is gone.
pub const CPU_PACED_POLL: Duration = Duration::from_millis(100);

/// A CPU-clock event on `tid` sampling every `period` of its CPU time (kernel time too
/// where allowed, as the native profiler), or `None` without the permission to open one.
fn cpu_clock(tid: u32, period: Duration) -> Option<perf_event::Sampler> {
    use perf_event::events::Software;
    use perf_event::{Builder, Clock, SampleFlag};
    let tid = i32::try_from(tid).ok()?;
    let period_ns = u64::try_from(period.as_nanos()).ok()?.max(1);
    for kernel in [true, false] {
        let mut builder = Builder::new(Software::CPU_CLOCK);
        builder
            .observe_pid(tid)
            .any_cpu()
            .sample_period(period_ns)
            .sample(SampleFlag::TID | SampleFlag::TIME)
            .clockid(Clock::MONOTONIC)
            .wakeup_events(1)
            .enabled(true);
        if kernel {
            builder.include_kernel();
        } else {
            builder.exclude_kernel(true);
        }
        if let Ok(sampler) = builder.build().and_then(|c| c.sampled(16 * 4096)) {
            return Some(sampler);
        }
    }
    None
}

/// What a sampler is asked to pace its reads by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhpPace {
    /// The PHP thread's CPU clock, or a timer where a perf event cannot be opened.
    CpuTime,
    /// A timer and the thread's state, as without perf permission (for tests of that path
    /// on a machine that has it).
    Timer,
}

impl PhpSampler {
    pub fn start(target: PhpTarget, frequency_hz: u32) -> Result<PhpSampler, PhpError> {
        PhpSampler::start_paced(target, frequency_hz, PhpPace::CpuTime)
    }

    /// Starts the sampler thread on `target`'s PHP thread at `frequency_hz`, its reads
    /// paced as `asked` (a CPU clock that cannot be opened falls back to the timer).
    pub fn start_paced(
        target: PhpTarget,
        frequency_hz: u32,
        asked: PhpPace,
    ) -> Result<PhpSampler, PhpError> {
        if !(1..=10_000).contains(&frequency_hz) {
            return Err(PhpError::Frequency(frequency_hz));
        }
        let proc_file = |name: &str| {
            let path = format!("/proc/{}/task/{}/{name}", target.pid, target.tid);
            File::open(&path)
        };
        let stat = proc_file("stat").map_err(|source| PhpError::Process {
            pid: target.pid,
            what: "thread state",
            source,
        })?;
        let shared = Arc::new(Shared {
            tally: Mutex::new(Tally::default()),
            stop: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            tid: AtomicU32::new(0),
            realtime: AtomicBool::new(false),
            wanted_shift: AtomicU32::new(0),
            shift: AtomicU32::new(0),
        });
        let period = Duration::from_secs(1) / frequency_hz;
        let clock = match asked {
            PhpPace::CpuTime => cpu_clock(target.tid, period),
            PhpPace::Timer => None,
        };
        let pace = match clock {
            Some(sampler) => Pace::Cpu(sampler),
            None => Pace::Timer,
        };
        let cpu_paced = matches!(pace, Pace::Cpu(_));
        let (started, ready) = std::sync::mpsc::channel();
        let thread = {
            let shared = shared.clone();
            let target = target.clone();
            std::thread::Builder::new()
                .name("php-sampler".to_owned())
                .spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    shared.tid.store(tid as u32, Ordering::Relaxed);
                    let realtime = crate::sync::realtime();
                    if !realtime {
                        tracing::debug!(
                            "the PHP sampler runs at normal priority: its reads may be late on a busy machine"
                        );
                    }
                    shared.realtime.store(realtime, Ordering::Relaxed);
                    let _ = started.send(());
                    match pace {
                        Pace::Timer => run_timer(&shared, &target, period, stat),
                        Pace::Cpu(sampler) => {
                            run_cpu_paced(&shared, &target, sampler, period, stat)
                        }
                    }
                })
                .map_err(PhpError::Thread)?
        };
        // Its id is known once start returns (for `sampler_cpu`); a thread that died
        // before saying so has dropped the sender, which ends the wait too.
        let _ = ready.recv();
        tracing::info!(
            pid = target.pid,
            version = %target.version,
            frequency_hz,
            paced_by = if cpu_paced { "its CPU time" } else { "a timer and its state" },
            realtime = shared.realtime.load(Ordering::Relaxed),
            "sampling PHP frames"
        );
        Ok(PhpSampler {
            shared,
            thread: Some(thread),
            target,
            cpu_paced,
        })
    }

    /// Stacks sampled since the last call (on-CPU samples only), root first.
    pub fn collect(&mut self) -> PhpStacks {
        let tally = {
            let mut tally = lock(&self.shared.tally);
            std::mem::take(&mut *tally)
        };
        self.shared.generation.fetch_add(1, Ordering::Relaxed);
        let mut merged: HashMap<Vec<PhpFrame>, u64> = HashMap::with_capacity(tally.stacks.len());
        for (Walked(mut stack), count) in tally.stacks {
            stack.reverse();
            *merged.entry(stack).or_insert(0) += count;
        }
        let stacks = merged.into_iter().collect();
        PhpStacks {
            stacks,
            counts: tally.counts,
        }
    }

    pub fn version(&self) -> &str {
        &self.target.version
    }

    /// Samples from now on at `2^shift` times the configured period, each read counting
    /// `2^shift` (applied by the thread at its next wake-up, within [`CPU_PACED_POLL`]
    /// or a tick).
    pub fn set_shift(&self, shift: u32) {
        self.shared.wanted_shift.store(shift, Ordering::Relaxed);
    }

    /// The shift the thread samples at now.
    pub fn shift(&self) -> u32 {
        self.shared.shift.load(Ordering::Relaxed)
    }

    /// Whether the samples are paced by the PHP thread's CPU time (a perf event on it),
    /// else by a timer and its state in /proc.
    pub fn cpu_paced(&self) -> bool {
        self.cpu_paced
    }

    pub fn target(&self) -> &PhpTarget {
        &self.target
    }

    /// Whether the sampler thread got its real-time priority (else its reads may be late
    /// on a busy machine: [`PhpStacks::late`]).
    pub fn realtime(&self) -> bool {
        self.shared.realtime.load(Ordering::Relaxed)
    }

    /// CPU time the sampler thread has used so far (its own cost), None where schedstat
    /// is missing.
    pub fn sampler_cpu(&self) -> Option<Duration> {
        let tid = self.shared.tid.load(Ordering::Relaxed);
        if tid == 0 {
            return None;
        }
        let text = std::fs::read(format!("/proc/self/task/{tid}/schedstat")).ok()?;
        parse_cpu(&text).map(Duration::from_nanos)
    }
}

impl Drop for PhpSampler {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the pacing counted since the last sample.
struct Paced {
    /// Ticks or periods.
    ticks: u64,
    /// Of those, the ones skipped or lost.
    missed: u64,
    /// Whether this read begins late (CPU-paced: a quarter of a period after it ended).
    late: bool,
}

/// The walk and what it keeps from one sample to the next.
struct Sampling {
    walker: Walker,
    stack: Vec<PhpFrame>,
    truncated_root: PhpFrame,
    no_code: PhpFrame,
    generation: u64,
    reads: u64,
    torn: u64,
}

impl Sampling {
    fn new(shared: &Shared, target: &PhpTarget) -> Sampling {
        let walker = Walker::new(target);
        Sampling {
            reads: walker.reads(),
            torn: walker.torn,
            walker,
            stack: Vec::with_capacity(MAX_DEPTH + 1),
            truncated_root: marker("[truncated]"),
            no_code: marker("[no PHP code]"),
            generation: shared.generation.load(Ordering::Relaxed),
        }
    }

    /// Reads the stack when `on_cpu` and counts it `weight` times, with the pacing's
    /// counts since the last call.
    fn sample(
        &mut self,
        shared: &Shared,
        target: &PhpTarget,
        on_cpu: bool,
        weight: u64,
        paced: Paced,
    ) {
        let seen = shared.generation.load(Ordering::Relaxed);
        if seen != self.generation {
            self.generation = seen;
            self.walker.clear_cache();
        }
        let walked = on_cpu.then(|| self.walker.walk(target.pid, &mut self.stack));
        let mut tally = lock(&shared.tally);
        tally.counts.taken += u64::from(on_cpu);
        tally.counts.ticks += paced.ticks;
        tally.counts.missed += paced.missed;
        tally.counts.late += u64::from(paced.late);
        match walked {
            None => tally.counts.off_cpu += 1,
            Some(Err(_)) => tally.counts.errors += weight,
            Some(Ok(cut)) => {
                // On CPU with no PHP frame: the engine starting, compiling the script,
                // or an FPM worker between requests. Its own stack, so that the shares
                // of the PHP functions stay shares of all the thread's CPU.
                if self.stack.is_empty() {
                    self.stack.push(self.no_code.clone());
                }
                if cut {
                    tally.counts.truncated += weight;
                    self.stack.push(self.truncated_root.clone());
                }
                // The lookup borrows the walk's buffer; only a new stack is copied.
                let key = Walked(std::mem::take(&mut self.stack));
                if let Some(count) = tally.stacks.get_mut(&key) {
                    *count += weight;
                    self.stack = key.0;
                } else if tally.stacks.len() < MAX_STACKS {
                    tally.stacks.insert(Walked(key.0.clone()), weight);
                    self.stack = key.0;
                } else {
                    self.stack = key.0;
                    tally.counts.truncated += weight;
                    *tally
                        .stacks
                        .entry(Walked(vec![self.truncated_root.clone()]))
                        .or_insert(0) += weight;
                }
            }
        }
        let now_reads = self.walker.reads();
        tally.counts.reads += now_reads - self.reads;
        self.reads = now_reads;
        tally.counts.torn += self.walker.torn - self.torn;
        self.torn = self.walker.torn;
    }
}

/// Whether the thread is gone (the read fails once it is reaped) or exited and not yet
/// reaped (Z, X): nothing more to sample. Else its state letter.
fn alive_state(stat: &File, buf: &mut [u8]) -> Option<u8> {
    thread_state(stat, buf)
        .ok()
        .filter(|state| !matches!(state, b'Z' | b'X'))
}

fn run_timer(shared: &Shared, target: &PhpTarget, period: Duration, stat: File) {
    let mut sampling = Sampling::new(shared, target);
    let mut buf = [0u8; 1024];
    let base_ns = period.as_nanos().max(1) as i128;
    let mut deadline = monotonic_ns();
    while !shared.stop.load(Ordering::Relaxed) {
        // A new rate takes effect from this tick on: the tick after it comes a new period
        // later, and counts as many configured periods.
        let shift = shared.wanted_shift.load(Ordering::Relaxed);
        shared.shift.store(shift, Ordering::Relaxed);
        let period_ns = base_ns << shift;
        deadline += period_ns;
        let now = monotonic_ns();
        let mut missed = 0;
        if now > deadline + period_ns {
            missed = ((now - deadline) / period_ns) as u64;
            deadline += missed as i128 * period_ns;
        }
        sleep_until(deadline);
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let Some(state) = alive_state(&stat, &mut buf) else {
            lock(&shared.tally).counts.ended = true;
            break;
        };
        let paced = Paced {
            ticks: 1 + missed,
            missed,
            late: false,
        };
        sampling.sample(shared, target, state == b'R', 1 << shift, paced);
    }
}

/// Record types of the perf ABI (`enum perf_event_type`).
const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;

/// Records of the CPU clock since the last call: periods ended, records lost, and when the
/// last period ended (CLOCK_MONOTONIC).
fn drain(clock: &mut perf_event::Sampler) -> (u64, u64, Option<u64>) {
    let (mut periods, mut lost, mut ended) = (0u64, 0u64, None);
    while let Some(record) = clock.next_record() {
        match record.ty() {
            RECORD_SAMPLE => {
                periods += 1;
                // `pid`, `tid`, then `time`: when the period ended.
                let bytes = record.to_contiguous();
                ended = bytes
                    .get(8..16)
                    .and_then(|w| w.try_into().ok())
                    .map(u64::from_ne_bytes)
                    .or(ended);
            }
            // `id`, then `lost`.
            RECORD_LOST => {
                let bytes = record.to_contiguous();
                lost += bytes
                    .get(8..16)
                    .and_then(|w| w.try_into().ok())
                    .map_or(0, u64::from_ne_bytes);
            }
            _ => {}
        }
    }
    (periods, lost, ended)
}

fn run_cpu_paced(
    shared: &Shared,
    target: &PhpTarget,
    mut clock: perf_event::Sampler,
    period: Duration,
    stat: File,
) {
    use std::os::fd::AsRawFd;
    let base_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
    let mut shift = 0;
    let mut sampling = Sampling::new(shared, target);
    let mut buf = [0u8; 1024];
    let timeout = libc::c_int::try_from(CPU_PACED_POLL.as_millis()).unwrap_or(100);
    while !shared.stop.load(Ordering::Relaxed) {
        let mut pollfd = libc::pollfd {
            fd: clock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; EINTR and errors just lead to the checks below.
        unsafe { libc::poll(&mut pollfd, 1, timeout) };
        // A new rate: the period changes before the drain, so that every record drained
        // now is of the old period (the first at the new one comes a whole new period
        // later) and counts the old weight.
        let weight = 1u64 << shift;
        let wanted = shared.wanted_shift.load(Ordering::Relaxed);
        if wanted != shift {
            match rate::set_period(&clock, base_ns << wanted) {
                Ok(()) => {
                    shift = wanted;
                    shared.shift.store(shift, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::debug!(pid = target.pid, "changing the PHP sampler's period: {e}")
                }
            }
        }
        let (periods, lost, ended) = drain(&mut clock);
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        if periods == 0 {
            // Idle, or gone: an exited thread writes no more records.
            if alive_state(&stat, &mut buf).is_none() {
                lock(&shared.tally).counts.ended = true;
                break;
            }
            if lost > 0 {
                lock(&shared.tally).counts.missed += lost;
            }
            continue;
        }
        // The periods since the last wake-up: one read of the stack stands for them all
        // (more than one only when the sampler itself waited for a CPU).
        let late_after = i128::from(base_ns * weight / 4);
        let paced = Paced {
            ticks: periods + lost,
            missed: lost,
            late: ended.is_some_and(|ended| monotonic_ns() - i128::from(ended) > late_after),
        };
        sampling.sample(shared, target, true, (periods + lost) * weight, paced);
    }
}

/// The state letter of /proc/PID/task/TID/stat: after the command name's closing
/// parenthesis (the name itself may hold spaces and parentheses).
fn thread_state(stat: &File, buf: &mut [u8]) -> io::Result<u8> {
    let n = stat.read_at(buf, 0)?;
    parse_state(&buf[..n]).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
}

fn parse_state(text: &[u8]) -> Option<u8> {
    let close = text.iter().rposition(|&byte| byte == b')')?;
    text.get(close + 2).copied()
}

/// The first field of schedstat: nanoseconds the thread has spent on CPU.
fn parse_cpu(text: &[u8]) -> Option<u64> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&text[..digits]).ok()?.parse().ok()
}

fn monotonic_ns() -> i128 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as i128 * 1_000_000_000 + now.tv_nsec as i128
}

fn sleep_until(deadline_ns: i128) {
    let until = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // EINTR: sleep again to the same absolute deadline.
    loop {
        // SAFETY: `until` is a valid timespec; no remainder is asked for with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &until,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_follows_the_last_parenthesis() {
        assert_eq!(parse_state(b"1234 (php8.2) R 1 1234"), Some(b'R'));
        assert_eq!(parse_state(b"1234 (a) b) (c) S 1 1234"), Some(b'S'));
        assert_eq!(parse_state(b"1234 (php"), None);
        assert_eq!(parse_state(b""), None);
    }

    #[test]
    fn schedstat_runtime() {
        assert_eq!(parse_cpu(b"123456789 5000 42\n"), Some(123456789));
        assert_eq!(parse_cpu(b"x"), None);
    }
}

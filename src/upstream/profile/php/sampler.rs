//! The sampler thread: ticks at a fixed rate, and at each tick where the PHP thread is on
//! CPU reads its stack and counts it.
//!
//! On-CPU is decided from /proc, never from the stack: an event loop blocked in
//! `stream_select` or `epoll_wait` still has `{main}` → `Loop::run` → `stream_select` on
//! its stack, and counting it would show idle time as work. A tick counts when
//! - the thread's state in /proc/PID/task/TID/stat is `R` (running or runnable), and
//! - its CPU time in /proc/PID/task/TID/schedstat grew since the previous tick, which drops
//!   ticks where it was runnable but waiting for a CPU all along (just woken, or preempted
//!   on a busy machine): `R` alone counts time in the run queue as the function's. (Where
//!   schedstat is missing, a kernel without CONFIG_SCHED_INFO, the state alone decides.)
//!
//! Both files stay open and are read with pread, so a tick off CPU costs two small
//! system calls and no stack read. The deadline of tick n is start + n × period on the
//! monotonic clock (clock_nanosleep with TIMER_ABSTIME), so the rate does not drift with
//! the time a tick takes; a sampler that falls behind by more than a period skips the
//! missed ticks (counted) instead of bursting.

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

/// Distinct stacks kept between two collects; past it, new stacks count as truncated
/// into one `[truncated]` stack instead of growing the map without bound.
const MAX_STACKS: usize = 64 * 1024;

/// Stacks sampled since the last take, with the sampler's own counters.
#[derive(Clone, Debug, Default)]
pub struct PhpStacks {
    stacks: Vec<(Vec<PhpFrame>, u64)>,
    truncated: u64,
    ticks: u64,
    off_cpu: u64,
    errors: u64,
    missed: u64,
    reads: u64,
    torn: u64,
    ended: bool,
}

impl PhpStacks {
    /// The stacks and their sample counts, root first; empties them.
    pub fn take(&mut self) -> Vec<(Vec<PhpFrame>, u64)> {
        std::mem::take(&mut self.stacks)
    }

    /// Samples whose stack was deeper than [`MAX_DEPTH`] (or could not be read to its
    /// root): their stacks hold the leaf-most frames under a `[truncated]` root.
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    /// On-CPU samples (the sum of the counts).
    pub fn samples(&self) -> u64 {
        self.stacks.iter().map(|(_, n)| n).sum()
    }

    /// Ticks in the period, on CPU or not.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Ticks at which the PHP thread was not on CPU (no stack read).
    pub fn off_cpu(&self) -> u64 {
        self.off_cpu
    }

    /// On-CPU ticks whose stack could not be read at all (the process exiting, or its
    /// memory changing under the read).
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Ticks skipped because the sampler fell behind.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// process_vm_readv calls made (the cost of the samples).
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Walks that read a stack torn by the running process and were tried again (a
    /// sample whose every attempt was torn counts in [`PhpStacks::errors`]).
    pub fn torn(&self) -> u64 {
        self.torn
    }

    /// Whether the PHP thread has exited (the sampler stopped).
    pub fn ended(&self) -> bool {
        self.ended
    }
}

/// What the thread hands to `collect`.
#[derive(Default)]
struct Tally {
    /// Leaf first, as walked (reversed once per collect, not per sample).
    stacks: HashMap<Vec<PhpFrame>, u64>,
    truncated: u64,
    ticks: u64,
    off_cpu: u64,
    errors: u64,
    missed: u64,
    reads: u64,
    torn: u64,
    ended: bool,
}

struct Shared {
    tally: Mutex<Tally>,
    stop: AtomicBool,
    /// Bumped by each collect: the thread empties its name cache when it changes.
    generation: AtomicU64,
    /// The sampler thread's id, for its CPU time.
    tid: AtomicU32,
}

/// Samples one PHP process's stacks on a thread of its own; dropping it stops the thread
/// within one tick.
pub struct PhpSampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    target: PhpTarget,
}

impl PhpSampler {
    pub fn start(target: PhpTarget, frequency_hz: u32) -> Result<PhpSampler, PhpError> {
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
        let schedstat = proc_file("schedstat").ok();
        let shared = Arc::new(Shared {
            tally: Mutex::new(Tally::default()),
            stop: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            tid: AtomicU32::new(0),
        });
        let period = Duration::from_secs(1) / frequency_hz;
        let thread = {
            let shared = shared.clone();
            let target = target.clone();
            std::thread::Builder::new()
                .name("php-sampler".to_owned())
                .spawn(move || run(&shared, &target, period, stat, schedstat))
                .map_err(PhpError::Thread)?
        };
        tracing::info!(
            pid = target.pid,
            version = %target.version,
            frequency_hz,
            "sampling PHP frames"
        );
        Ok(PhpSampler {
            shared,
            thread: Some(thread),
            target,
        })
    }

    /// Stacks sampled since the last call (on-CPU samples only), root first.
    pub fn collect(&mut self) -> PhpStacks {
        let tally = {
            let mut tally = lock(&self.shared.tally);
            std::mem::take(&mut *tally)
        };
        self.shared.generation.fetch_add(1, Ordering::Relaxed);
        let stacks = tally
            .stacks
            .into_iter()
            .map(|(mut stack, count)| {
                stack.reverse();
                (stack, count)
            })
            .collect();
        PhpStacks {
            stacks,
            truncated: tally.truncated,
            ticks: tally.ticks,
            off_cpu: tally.off_cpu,
            errors: tally.errors,
            missed: tally.missed,
            reads: tally.reads,
            torn: tally.torn,
            ended: tally.ended,
        }
    }

    pub fn version(&self) -> &str {
        &self.target.version
    }

    pub fn target(&self) -> &PhpTarget {
        &self.target
    }

    /// CPU time the sampler thread has used so far (its own cost), None before it started
    /// or where schedstat is missing.
    pub fn sampler_cpu(&self) -> Option<Duration> {
        let tid = self.shared.tid.load(Ordering::Relaxed);
        if tid == 0 {
            return None;
        }
        let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
        let nanos = text.split_whitespace().next()?.parse::<u64>().ok()?;
        Some(Duration::from_nanos(nanos))
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

fn lock(tally: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    tally
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn run(shared: &Shared, target: &PhpTarget, period: Duration, stat: File, schedstat: Option<File>) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    shared.tid.store(tid as u32, Ordering::Relaxed);
    let mut walker = Walker::new(target);
    let mut stack: Vec<PhpFrame> = Vec::with_capacity(MAX_DEPTH + 1);
    let mut buf = [0u8; 1024];
    let truncated_root = marker("[truncated]");
    let mut generation = shared.generation.load(Ordering::Relaxed);
    let period_ns = period.as_nanos().max(1) as i128;
    let mut deadline = monotonic_ns();
    let mut last_cpu = schedstat.as_ref().and_then(|f| cpu_ns(f, &mut buf));
    let mut reads = walker.reads();
    let mut torn = walker.torn;
    while !shared.stop.load(Ordering::Relaxed) {
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
        let state = match thread_state(&stat, &mut buf) {
            Ok(state) => state,
            Err(_) => {
                // The thread (or process) is gone: nothing more to sample.
                let mut tally = lock(&shared.tally);
                tally.ended = true;
                break;
            }
        };
        let ran = match (&schedstat, last_cpu) {
            (Some(file), Some(before)) => {
                let now = cpu_ns(file, &mut buf);
                last_cpu = now;
                now.is_some_and(|now| now > before)
            }
            _ => true,
        };
        let on_cpu = state == b'R' && ran;
        let seen = shared.generation.load(Ordering::Relaxed);
        if seen != generation {
            generation = seen;
            walker.clear_cache();
        }
        let walked = on_cpu.then(|| walker.walk(target.pid, &mut stack));
        let mut tally = lock(&shared.tally);
        tally.ticks += 1 + missed;
        tally.missed += missed;
        match walked {
            None => tally.off_cpu += 1,
            Some(Err(_)) => tally.errors += 1,
            Some(Ok(cut)) => {
                if cut {
                    tally.truncated += 1;
                    stack.push(truncated_root.clone());
                }
                if let Some(count) = tally.stacks.get_mut(stack.as_slice()) {
                    *count += 1;
                } else if tally.stacks.len() < MAX_STACKS {
                    tally.stacks.insert(stack.clone(), 1);
                } else {
                    tally.truncated += 1;
                    *tally
                        .stacks
                        .entry(vec![truncated_root.clone()])
                        .or_insert(0) += 1;
                }
            }
        }
        let now_reads = walker.reads();
        tally.reads += now_reads - reads;
        reads = now_reads;
        tally.torn += walker.torn - torn;
        torn = walker.torn;
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
fn cpu_ns(schedstat: &File, buf: &mut [u8]) -> Option<u64> {
    let n = schedstat.read_at(buf, 0).ok()?;
    parse_cpu(&buf[..n])
}

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

//! Reading the upstream's threads from /proc and keeping counters that never go backwards.
//!
//! User and system time come from /proc/PID/stat, which the kernel keeps for the whole
//! thread group, exited threads included. Run-queue delay and context switches exist only
//! per thread (/proc/PID/task/TID/schedstat and status), and a thread's values vanish with
//! it: so each thread's last values are kept and only the deltas are added to the totals.
//! A thread that exits between two reads loses what it did since the last read (at most
//! one `interval`); nothing already counted is ever taken back.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{ensure, Context};
use procfs::process::Process;

/// Counters of everything the tap's upstream processes did while watched, in
/// nanoseconds and counts. Only ever grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub user_ns: u64,
    pub system_ns: u64,
    pub runqueue_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// Times a watched process went away and another took its place.
    pub restarts: u64,
    /// Nanoseconds of wall time between reads of a live process.
    pub watched_ns: u64,
    /// Per read, the busiest thread's demand for a CPU since the previous read (its time
    /// running plus its time runnable but waiting), added up: over `watched_ns`, how much
    /// of the time its busiest thread wanted a CPU. A saturated event loop reads near 1
    /// even while other threads idle.
    pub busiest_ns: u64,
    /// Of `watched_ns`, the reads in which its threads together wanted a CPU at least
    /// [`ACTIVE`] of the time: the process was at work, not idle between two loads. A
    /// window that holds idle seconds would otherwise read as a server busy a fraction of
    /// the time, though it was saturated while it had requests.
    pub active_ns: u64,
    /// `busiest_ns` over the reads of `active_ns` only.
    pub active_busiest_ns: u64,
    /// Time on a CPU from each thread's scheduler statistics (schedstat): to the
    /// nanosecond, where user and system time come in clock ticks the kernel charges to
    /// whichever thread a tick finds running (over 223 windows of 250 ms of a busy
    /// server, ticks and this differed by 16 %, one standard deviation). A thread that exits between two reads loses what it ran since
    /// the last one, which user and system time keep.
    pub cpu_ns: u64,
    /// Time on a CPU of the whole process from its kernel CPU clock
    /// (`clock_getcpuclockid`): to the nanosecond like `cpu_ns`, but with the running
    /// threads' time up to the read (schedstat's lags by up to a scheduler tick for a
    /// thread on a CPU) and exited threads' kept. What the slices of CPU per route read;
    /// 0 where the clock cannot be read.
    pub process_cpu_ns: u64,
}

impl Totals {
    /// `self − earlier`, each field saturating at 0.
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            system_ns: self.system_ns.saturating_sub(earlier.system_ns),
            runqueue_ns: self.runqueue_ns.saturating_sub(earlier.runqueue_ns),
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
            restarts: self.restarts.saturating_sub(earlier.restarts),
            watched_ns: self.watched_ns.saturating_sub(earlier.watched_ns),
            busiest_ns: self.busiest_ns.saturating_sub(earlier.busiest_ns),
            active_ns: self.active_ns.saturating_sub(earlier.active_ns),
            active_busiest_ns: self
                .active_busiest_ns
                .saturating_sub(earlier.active_busiest_ns),
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            process_cpu_ns: self.process_cpu_ns.saturating_sub(earlier.process_cpu_ns),
        }
    }
}

/// The share of one CPU its threads together must want (running or waiting) over a read
/// for that read to count as active ([`Totals::active_ns`]): an idle server's timers and
/// housekeeping stay well under it.
pub const ACTIVE: f64 = 0.1;

/// Who is being watched now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub comm: String,
    /// The main binary, when /proc/PID/exe is readable.
    pub exe: Option<PathBuf>,
    pub threads: u64,
    /// The CPUs it may run on (its main thread's affinity), when readable.
    pub cpus_allowed: Option<Vec<u32>>,
}

/// One thread's values at the last read.
#[derive(Debug, Clone, Copy, Default)]
struct ThreadLast {
    /// Time on a CPU (schedstat's first field).
    cpu_ns: u64,
    runqueue_ns: u64,
    voluntary: u64,
    involuntary: u64,
}

/// One process being read: its identity and the last values of each thread.
///
/// A process is its pid *and* its start time (/proc/PID/stat's field 22, clock ticks
/// since boot): a pid freed by an exit may be handed to any process started later, which
/// is not the one watched. What runs in it is its image: an `exec` keeps the pid and the
/// start time and replaces the program ([`Image`]).
struct Watched {
    process: Process,
    /// Start time in clock ticks since boot: a reused pid has another.
    starttime: u64,
    /// The program it ran when attached; another one since is an exec in place.
    image: Image,
    info: ProcessInfo,
    user_ticks: u64,
    system_ticks: u64,
    threads: HashMap<i32, ThreadLast>,
    read_at: std::time::Instant,
    /// Whether the per-thread files could be read at the last read (not always, without
    /// permission): one warning when they cannot.
    threads_readable: bool,
    /// The process's CPU clock and its reading at the last read, when it can be read.
    clock: Option<(libc::clockid_t, u64)>,
}

/// What a process runs: its executable file (device and inode, through /proc/PID/exe,
/// so a binary replaced on disk or deleted is still the same file) and where `exec` laid
/// out its code and stack (/proc/PID/stat's `startcode` and `startstack`, which address
/// randomisation moves at every exec and nothing else moves; 0 when the kernel hides them
/// from a reader without ptrace access). A process that execs its own binary again, with
/// randomisation off and the fields hidden, reads as the same image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Image {
    exe: Option<(u64, u64)>,
    startcode: u64,
    startstack: u64,
}

impl Image {
    fn of(pid: u32, stat: &procfs::process::Stat) -> Image {
        use std::os::unix::fs::MetadataExt;
        let exe = std::fs::metadata(format!("/proc/{pid}/exe"))
            .ok()
            .map(|m| (m.dev(), m.ino()));
        Image {
            exe,
            startcode: stat.startcode,
            startstack: stat.startstack,
        }
    }

    /// Whether `now` is another program than `self`: a field both readings have differs
    /// (an unreadable one, `None` or 0, says nothing).
    fn replaced_by(&self, now: &Image) -> bool {
        let differs = |a: u64, b: u64| a != 0 && b != 0 && a != b;
        matches!((self.exe, now.exe), (Some(a), Some(b)) if a != b)
            || differs(self.startcode, now.startcode)
            || differs(self.startstack, now.startstack)
    }
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The process is alive; the totals include this read.
    Alive,
    /// The process is gone (or its pid now names another process, started later);
    /// nothing was added.
    Gone,
    /// The process exec'd another program under the same pid and start time: what it
    /// is now is not what was attached (another binary, other maps, other threads).
    /// Nothing was added; every read says so until the next attach, which counts it as
    /// a restart.
    Exec,
    /// No process is attached.
    Detached,
    /// The process's files could not be read this time (say, out of file descriptors)
    /// though it exists: nothing was added, and the next read takes up from the last one.
    Skipped,
}

/// The counters of one tap and the process they are read from.
pub struct Accountant {
    totals: Totals,
    current: Option<Watched>,
    ticks_per_second: u64,
    /// Whether some process was ever attached: the next one is a restart.
    attached_before: bool,
}

impl Default for Accountant {
    fn default() -> Self {
        Self::new()
    }
}

impl Accountant {
    pub fn new() -> Self {
        Self {
            totals: Totals::default(),
            current: None,
            ticks_per_second: procfs::ticks_per_second().max(1),
            attached_before: false,
        }
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    pub fn process(&self) -> Option<&ProcessInfo> {
        self.current.as_ref().map(|w| &w.info)
    }

    /// Whether the last read could see the threads' schedstat and status files.
    pub fn threads_readable(&self) -> bool {
        self.current.as_ref().is_some_and(|w| w.threads_readable)
    }

    /// Starts watching `pid`. Its first read is the baseline: what it did before it was
    /// found is not counted, so the counters cover only time phasescope watched. Any
    /// previous process is dropped first (its last interval is lost, never mixed in).
    pub fn attach(&mut self, pid: u32) -> anyhow::Result<&ProcessInfo> {
        let process = Process::new(pid as i32).with_context(|| format!("opening /proc/{pid}"))?;
        let stat = process
            .stat()
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        let exe = process.exe().ok();
        let mut watched = Watched {
            starttime: stat.starttime,
            image: Image::of(pid, &stat),
            info: ProcessInfo {
                pid,
                comm: stat.comm.clone(),
                exe,
                threads: stat.num_threads.max(0) as u64,
                cpus_allowed: super::own::cpus_allowed(pid),
            },
            user_ticks: stat.utime,
            system_ticks: stat.stime,
            threads: HashMap::new(),
            read_at: std::time::Instant::now(),
            threads_readable: true,
            clock: process_clock(pid).and_then(|id| Some((id, read_clock(id)?))),
            process,
        };
        // Baseline every thread; deltas start from here.
        let threads = read_threads(&watched.process);
        watched.threads_readable = threads.readable();
        watched.threads = threads.ok;
        if self.attached_before {
            self.totals.restarts += 1;
        }
        self.attached_before = true;
        Ok(&self.current.insert(watched).info)
    }

    /// Forgets the current process (it went away).
    pub fn detach(&mut self) {
        self.current = None;
    }

    /// Reads the current process and adds what it did since the last read.
    pub fn read(&mut self) -> Read {
        let ticks = self.ticks_per_second;
        let Some(w) = self.current.as_mut() else {
            return Read::Detached;
        };
        let stat = match w.process.stat() {
            Ok(s) if s.starttime == w.starttime => s,
            Ok(_) => return Read::Gone,
            Err(_) => return after_failed_read(w.info.pid, w.starttime),
        };
        // A zombie's threads are gone and its stat stays frozen: treat it as gone.
        if stat.state == 'Z' || stat.state == 'X' {
            return Read::Gone;
        }
        if w.image.replaced_by(&Image::of(w.info.pid, &stat)) {
            return Read::Exec;
        }
        let now = std::time::Instant::now();
        let t = &mut self.totals;
        t.user_ns += ticks_to_ns(stat.utime.saturating_sub(w.user_ticks), ticks);
        t.system_ns += ticks_to_ns(stat.stime.saturating_sub(w.system_ticks), ticks);
        let interval = now.saturating_duration_since(w.read_at).as_nanos() as u64;
        t.watched_ns += interval;
        if let Some((id, last)) = &mut w.clock {
            if let Some(now) = read_clock(*id) {
                t.process_cpu_ns += now.saturating_sub(*last);
                *last = now.max(*last);
            }
        }
        w.user_ticks = w.user_ticks.max(stat.utime);
        w.system_ticks = w.system_ticks.max(stat.stime);
        w.read_at = now;
        w.info.threads = stat.num_threads.max(0) as u64;
        w.info.comm = stat.comm;
        // Pinned after it started (taskset -p, bench --cpus): read again each time.
        if let Some(cpus) = super::own::cpus_allowed(w.info.pid) {
            w.info.cpus_allowed = Some(cpus);
        }
        let mut threads = read_threads(&w.process);
        if !threads.listed {
            // Keep every thread's last values for the next read that can list them.
            return Read::Alive;
        }
        let readable = threads.readable();
        // A known thread whose files failed this time keeps its last values: counting it
        // as new at the next read would add its whole life again.
        for tid in &threads.failed {
            if let Some(last) = w.threads.get(tid) {
                threads.ok.insert(*tid, *last);
            }
        }
        let threads = threads.ok;
        let mut busiest = 0;
        let mut demand_all = 0u64;
        for (tid, now) in &threads {
            // A thread first seen now started since the last read: all of its values
            // happened while watched. A tid whose values went down is a new thread that
            // reused the id: likewise.
            let last = w.threads.get(tid).copied().unwrap_or_default();
            let delta = |now: u64, last: u64| if now >= last { now - last } else { now };
            t.cpu_ns += delta(now.cpu_ns, last.cpu_ns);
            t.runqueue_ns += delta(now.runqueue_ns, last.runqueue_ns);
            t.voluntary += delta(now.voluntary, last.voluntary);
            t.involuntary += delta(now.involuntary, last.involuntary);
            // A thread new since the last read brings its whole life: at most the
            // interval of it is this read's.
            let demand = delta(now.cpu_ns, last.cpu_ns) + delta(now.runqueue_ns, last.runqueue_ns);
            busiest = busiest.max(demand.min(interval));
            demand_all += demand;
        }
        t.busiest_ns += busiest;
        if demand_all as f64 >= ACTIVE * interval as f64 {
            t.active_ns += interval;
            t.active_busiest_ns += busiest;
        }
        w.threads = threads;
        w.threads_readable = readable;
        Read::Alive
    }
}

/// The read of a watched process's stat through its own /proc directory failed. That
/// directory stays bound to the process it was opened for, so once the process exits it
/// fails for good, even when the pid names a new process since: the pid's /proc entry
/// read afresh tells which. Gone when the pid names no process, or one started at another
/// time (the pid was reused: the watcher looks for the server again); skipped when it is
/// still the same process (the failure was this read's: no descriptor left, say).
fn after_failed_read(pid: u32, starttime: u64) -> Read {
    match Process::new(pid as i32).and_then(|p| p.stat()) {
        Ok(stat) if stat.starttime == starttime => Read::Skipped,
        Ok(_) => Read::Gone,
        Err(_) if std::path::Path::new(&format!("/proc/{pid}")).exists() => Read::Skipped,
        Err(_) => Read::Gone,
    }
}

/// The CPU clock of process `pid`, if the kernel gives one.
fn process_clock(pid: u32) -> Option<libc::clockid_t> {
    let mut id: libc::clockid_t = 0;
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: a pid and a pointer to a clockid_t on the stack.
    let rc = unsafe { libc::clock_getcpuclockid(pid, &mut id) };
    (rc == 0).then_some(id)
}

/// A CPU clock's reading in nanoseconds; `None` once the process is gone.
fn read_clock(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a clock id and a pointer to a timespec on the stack.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

fn ticks_to_ns(ticks: u64, per_second: u64) -> u64 {
    (ticks as u128 * 1_000_000_000 / per_second as u128) as u64
}

/// One listing of a process's threads.
struct Threads {
    /// Run-queue delay and context switches of every thread whose files were read.
    ok: HashMap<i32, ThreadLast>,
    /// Threads listed whose files could not be read (exited meanwhile, or no permission).
    failed: Vec<i32>,
    /// Whether the thread list itself could be read.
    listed: bool,
}

impl Threads {
    /// False when threads exist but none of their files could be read.
    fn readable(&self) -> bool {
        self.listed && (!self.ok.is_empty() || self.failed.is_empty())
    }
}

/// Every thread's run-queue delay and context switches.
fn read_threads(process: &Process) -> Threads {
    let mut out = Threads {
        ok: HashMap::new(),
        failed: Vec::new(),
        listed: false,
    };
    let Ok(tasks) = process.tasks() else {
        return out;
    };
    out.listed = true;
    for task in tasks.flatten() {
        match (task.schedstat(), task.status()) {
            (Ok(sched), Ok(status)) => {
                out.ok.insert(
                    task.tid,
                    ThreadLast {
                        cpu_ns: sched.sum_exec_runtime,
                        runqueue_ns: sched.run_delay,
                        voluntary: status.voluntary_ctxt_switches.unwrap_or(0),
                        involuntary: status.nonvoluntary_ctxt_switches.unwrap_or(0),
                    },
                );
            }
            _ => out.failed.push(task.tid),
        }
    }
    out
}

/// Checks that this kernel has the per-thread schedstat files accounting needs.
pub fn check_kernel() -> anyhow::Result<()> {
    ensure!(
        std::path::Path::new("/proc/self/schedstat").exists(),
        "this kernel has no /proc/PID/schedstat (CONFIG_SCHED_INFO): run-queue delay cannot be read"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::thread_cpu_ns;

    /// Burns `ms` milliseconds of this thread's CPU, however long that takes on a busy
    /// machine.
    fn burn(ms: u64) {
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < ms * 1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }

    #[test]
    fn counts_own_cpu_and_keeps_what_exited_threads_did() {
        let mut a = Accountant::new();
        a.attach(std::process::id()).unwrap();
        // Threads that burn and exit between two reads: their user time stays (the
        // process-wide stat keeps it).
        let handles: Vec<_> = (0..2).map(|_| std::thread::spawn(|| burn(150))).collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(a.read(), Read::Alive);
        let t1 = a.totals();
        assert!(
            t1.user_ns + t1.system_ns >= 200_000_000,
            "two exited threads burnt 300 ms of CPU, counted {t1:?}"
        );
        assert!(t1.watched_ns > 0);
        // Counters never go backwards.
        assert_eq!(a.read(), Read::Alive);
        let t2 = a.totals();
        assert!(t2.user_ns >= t1.user_ns && t2.runqueue_ns >= t1.runqueue_ns);
        assert!(t2.voluntary >= t1.voluntary && t2.involuntary >= t1.involuntary);
        assert_eq!(t2.restarts, 0);
    }

    #[test]
    fn a_process_that_exits_is_gone_and_the_next_one_is_a_restart() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut a = Accountant::new();
        a.attach(child.id()).unwrap();
        assert_eq!(a.read(), Read::Alive);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(a.read(), Read::Gone);
        let before = a.totals();
        a.attach(std::process::id()).unwrap();
        assert_eq!(a.totals().restarts, before.restarts + 1);
        assert_eq!(a.process().map(|p| p.pid), Some(std::process::id()));
    }
}

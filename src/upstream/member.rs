//! One process of the upstream read from /proc: who it is (its pid, its start time and
//! the program it runs) and what its threads did since the last read.
//!
//! User and system time come from /proc/PID/stat, which the kernel keeps for the whole
//! thread group, exited threads included. Run-queue delay and context switches exist only
//! per thread (/proc/PID/task/TID/schedstat and status), and a thread's values vanish with
//! it: so each thread's last values are kept and only the deltas are handed on. A thread
//! that exits between two reads loses what it did since the last read (at most one
//! `interval`); nothing already counted is ever taken back.

use std::collections::HashMap;

use anyhow::Context;
use procfs::process::Process;

use super::account::ProcessInfo;

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
pub(super) struct Member {
    process: Process,
    /// Start time in clock ticks since boot: a reused pid has another.
    starttime: u64,
    /// The program it ran when attached; another one since is an exec in place.
    image: Image,
    info: ProcessInfo,
    user_ticks: u64,
    system_ticks: u64,
    /// Its reaped children's user and system time (`cutime`, `cstime`) at the last read.
    children_ticks: (u64, u64),
    /// Its parent's pid: the process whose `cutime` its CPU joins when it is reaped.
    ppid: u32,
    ticks_per_second: u64,
    threads: HashMap<i32, ThreadLast>,
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

/// What one process did between two reads, in nanoseconds and counts.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Delta {
    pub user_ns: u64,
    pub system_ns: u64,
    pub process_cpu_ns: u64,
    pub cpu_ns: u64,
    pub runqueue_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// With its threads listed: its busiest thread's demand for a CPU (running or
    /// waiting, at most the interval) and all its threads' together.
    pub demand: Option<(u64, u64)>,
    /// What its children reaped since the last read ran, user and system (`cutime`,
    /// `cstime`): not in the figures above. Children the group watched are in it too;
    /// the accountant takes theirs out before it counts the rest.
    pub reaped_user_ns: u64,
    pub reaped_system_ns: u64,
}

/// What one read of a process found.
pub(super) enum MemberRead {
    Alive(Delta),
    /// Exited, or its pid names another process (started later).
    Gone,
    /// Another program runs under its pid (an exec in place).
    Exec,
    /// Its files could not be read this time though it exists (out of descriptors, say):
    /// the next read takes up from the last one.
    Skipped,
}

impl Member {
    /// Starts reading `pid`: its first read is the baseline, so what it did before is not
    /// counted.
    pub fn open(pid: u32) -> anyhow::Result<Member> {
        let process = Process::new(pid as i32).with_context(|| format!("opening /proc/{pid}"))?;
        let stat = process
            .stat()
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        let exe = process.exe().ok();
        let mut member = Member {
            starttime: stat.starttime,
            image: Image::of(pid, &stat),
            info: ProcessInfo {
                pid,
                comm: stat.comm.clone(),
                exe,
                threads: stat.num_threads.max(0) as u64,
                cpus_allowed: super::own::cpus_allowed(pid),
                processes: 1,
            },
            user_ticks: stat.utime,
            system_ticks: stat.stime,
            children_ticks: (children(stat.cutime), children(stat.cstime)),
            ppid: stat.ppid.max(0) as u32,
            ticks_per_second: procfs::ticks_per_second().max(1),
            threads: HashMap::new(),
            threads_readable: true,
            clock: process_clock(pid).and_then(|id| Some((id, read_clock(id)?))),
            process,
        };
        // Baseline every thread; deltas start from here.
        let threads = read_threads(&member.process);
        member.threads_readable = threads.readable();
        member.threads = threads.ok;
        Ok(member)
    }

    pub fn info(&self) -> &ProcessInfo {
        &self.info
    }

    /// Its identity: pid and start time.
    pub fn key(&self) -> (u32, u64) {
        (self.info.pid, self.starttime)
    }

    pub fn threads_readable(&self) -> bool {
        self.threads_readable
    }

    /// Its parent's pid, at the last read.
    pub fn ppid(&self) -> u32 {
        self.ppid
    }

    /// Its whole life's CPU at the last read, its reaped children's included,
    /// nanoseconds: what its parent's `cutime` and `cstime` will bring when it is reaped,
    /// less what it runs after that read. Counted already, or from before it was
    /// watched: owed back either way (account.rs).
    pub fn lifetime_ns(&self) -> u64 {
        let (c, s) = self.children_ticks;
        ticks_to_ns(
            self.user_ticks + self.system_ticks + c + s,
            self.ticks_per_second,
        )
    }

    /// Reads the process: what it did since the last read, with each thread's demand
    /// for a CPU capped at `interval_ns` (a thread new since brings its whole life).
    pub fn read(&mut self, ticks: u64, interval_ns: u64) -> MemberRead {
        let pid = self.info.pid;
        let stat = match self.process.stat() {
            Ok(s) if s.starttime == self.starttime => s,
            Ok(_) => return MemberRead::Gone,
            Err(_) => return after_failed_read(pid, self.starttime),
        };
        // A zombie's threads are gone and its stat stays frozen: treat it as gone.
        if stat.state == 'Z' || stat.state == 'X' {
            return MemberRead::Gone;
        }
        if self.image.replaced_by(&Image::of(pid, &stat)) {
            return MemberRead::Exec;
        }
        let (cutime, cstime) = (children(stat.cutime), children(stat.cstime));
        let mut d = Delta {
            user_ns: ticks_to_ns(stat.utime.saturating_sub(self.user_ticks), ticks),
            system_ns: ticks_to_ns(stat.stime.saturating_sub(self.system_ticks), ticks),
            reaped_user_ns: ticks_to_ns(cutime.saturating_sub(self.children_ticks.0), ticks),
            reaped_system_ns: ticks_to_ns(cstime.saturating_sub(self.children_ticks.1), ticks),
            ..Delta::default()
        };
        self.children_ticks = (
            cutime.max(self.children_ticks.0),
            cstime.max(self.children_ticks.1),
        );
        self.ppid = stat.ppid.max(0) as u32;
        if let Some((id, last)) = &mut self.clock {
            if let Some(now) = read_clock(*id) {
                d.process_cpu_ns = now.saturating_sub(*last);
                *last = now.max(*last);
            }
        }
        self.user_ticks = self.user_ticks.max(stat.utime);
        self.system_ticks = self.system_ticks.max(stat.stime);
        self.info.threads = stat.num_threads.max(0) as u64;
        self.info.comm = stat.comm;
        // Pinned after it started (taskset -p, bench --cpus): read again each time.
        if let Some(cpus) = super::own::cpus_allowed(pid) {
            self.info.cpus_allowed = Some(cpus);
        }
        self.read_threads(interval_ns, &mut d);
        MemberRead::Alive(d)
    }

    /// Adds the threads' deltas to `d`; leaves `d.demand` at `None` when the threads
    /// cannot be listed (their last values are kept for the next read that can).
    fn read_threads(&mut self, interval_ns: u64, d: &mut Delta) {
        let mut threads = read_threads(&self.process);
        if !threads.listed {
            return;
        }
        let readable = threads.readable();
        // A known thread whose files failed this time keeps its last values: counting it
        // as new at the next read would add its whole life again.
        for tid in &threads.failed {
            if let Some(last) = self.threads.get(tid) {
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
            let last = self.threads.get(tid).copied().unwrap_or_default();
            let delta = |now: u64, last: u64| if now >= last { now - last } else { now };
            d.cpu_ns += delta(now.cpu_ns, last.cpu_ns);
            d.runqueue_ns += delta(now.runqueue_ns, last.runqueue_ns);
            d.voluntary += delta(now.voluntary, last.voluntary);
            d.involuntary += delta(now.involuntary, last.involuntary);
            // A thread new since the last read brings its whole life: at most the
            // interval of it is this read's.
            let demand = delta(now.cpu_ns, last.cpu_ns) + delta(now.runqueue_ns, last.runqueue_ns);
            busiest = busiest.max(demand.min(interval_ns));
            demand_all += demand;
        }
        d.demand = Some((busiest, demand_all));
        self.threads = threads;
        self.threads_readable = readable;
    }
}

/// The read of a process's stat through its own /proc directory failed. That directory
/// stays bound to the process it was opened for, so once the process exits it fails for
/// good, even when the pid names a new process since: the pid's /proc entry read afresh
/// tells which. Gone when the pid names no process, or one started at another time (the
/// pid was reused: the watcher looks for the server again); skipped when it is still the
/// same process (the failure was this read's: no descriptor left, say).
fn after_failed_read(pid: u32, starttime: u64) -> MemberRead {
    match Process::new(pid as i32).and_then(|p| p.stat()) {
        Ok(stat) if stat.starttime == starttime => MemberRead::Skipped,
        Ok(_) => MemberRead::Gone,
        Err(_) if std::path::Path::new(&format!("/proc/{pid}")).exists() => MemberRead::Skipped,
        Err(_) => MemberRead::Gone,
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

/// `cutime` or `cstime`, which the kernel keeps signed.
fn children(ticks: i64) -> u64 {
    ticks.max(0) as u64
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

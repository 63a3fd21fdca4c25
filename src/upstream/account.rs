//! The upstream's counters, kept over the group of processes that serve it, never going
//! backwards.
//!
//! A server is every process that serves its socket ([`super::find::Target::locate_group`]):
//! one process, or a master and the workers it forked, or independent processes bound to
//! the address with SO_REUSEPORT. Each is read on its own ([`super::member`]) and what
//! they did is added up: CPU, the wait for a CPU, context switches; per read, the busiest
//! thread of the whole group and whether the group was at work. Each process's own CPU is
//! kept too, for the share each took ([`Share`]). A process leaves the group when it
//! exits (a worker the master replaces, the new one joins when found); the group is gone
//! when its last process is.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use anyhow::{ensure, Context};

use super::member::{Delta, Member, MemberRead};

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

/// Who is being watched now: the group's first process (the lowest pid: as a rule the
/// parent of the others) names it, its threads are all the group's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub comm: String,
    /// The main binary, when /proc/PID/exe is readable.
    pub exe: Option<PathBuf>,
    /// Threads of every process of the group.
    pub threads: u64,
    /// The CPUs it may run on (its main thread's affinity), when readable.
    pub cpus_allowed: Option<Vec<u32>>,
    /// Processes in the group (1 for a server of one process).
    pub processes: usize,
}

/// One process's CPU (user + system) while watched: what its share of the group's is
/// made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub pid: u32,
    pub comm: String,
    pub cpu_ns: u64,
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The group is alive; the totals include this read.
    Alive,
    /// Every process of the group is gone (or its pid now names another process, started
    /// later); nothing was added. Every read says so until the next attach.
    Gone,
    /// The group's one process exec'd another program under the same pid and start
    /// time: what it is now is not what was attached (another binary, other maps, other
    /// threads). Nothing was added; every read says so until the next attach, which
    /// counts it as a restart.
    Exec,
    /// No process is attached.
    Detached,
    /// The processes' files could not be read this time (say, out of file descriptors)
    /// though they exist: nothing was added, and the next read takes up from the last one.
    Skipped,
}

/// The counters of one tap and the processes they are read from.
pub struct Accountant {
    totals: Totals,
    /// Lowest pid first.
    members: Vec<Member>,
    /// How the last group ended, repeated by every read until the next attach: whichever
    /// reader saw it first, the watcher sees it too.
    ended: Option<Read>,
    /// The group as one, after the last attach or read.
    info: Option<ProcessInfo>,
    read_at: std::time::Instant,
    ticks_per_second: u64,
    /// Whether some process was ever attached: the next one is a restart.
    attached_before: bool,
    /// Each process's CPU while watched, by pid and start time, kept after it leaves
    /// until [`Self::forget_departed`].
    shares: BTreeMap<(u32, u64), Share>,
    /// A process left the group since the last [`Self::take_left`]: its workers may
    /// have been replaced.
    left: bool,
    /// By pid of a process of the group: the lifetime CPU of its children that left the
    /// group, which its `cutime` will bring when it reaps them ([`Self::count_reaped`]).
    owed: HashMap<u32, u64>,
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
            members: Vec::new(),
            ended: None,
            info: None,
            read_at: std::time::Instant::now(),
            ticks_per_second: procfs::ticks_per_second().max(1),
            attached_before: false,
            shares: BTreeMap::new(),
            left: false,
            owed: HashMap::new(),
        }
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    pub fn process(&self) -> Option<&ProcessInfo> {
        self.info.as_ref()
    }

    /// Whether the last read could see every process's threads' schedstat and status
    /// files.
    pub fn threads_readable(&self) -> bool {
        !self.members.is_empty() && self.members.iter().all(Member::threads_readable)
    }

    /// The pids of the group, lowest first.
    pub fn members(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.info().pid).collect()
    }

    /// Each process's CPU while watched, by pid and start time (those gone since the
    /// last [`Self::forget_departed`] included).
    pub fn shares(&self) -> &BTreeMap<(u32, u64), Share> {
        &self.shares
    }

    /// Forgets the shares of processes no longer in the group (a new window starts).
    pub fn forget_departed(&mut self) {
        let current: Vec<(u32, u64)> = self.members.iter().map(Member::key).collect();
        self.shares.retain(|key, _| current.contains(key));
    }

    /// Whether a process left the group since the last call.
    pub fn take_left(&mut self) -> bool {
        std::mem::take(&mut self.left)
    }

    /// Starts watching the group `pids`. Their first read is the baseline: what they did
    /// before they were found is not counted, so the counters cover only time phasescope
    /// watched. Any previous group is dropped first (its last interval is lost, never
    /// mixed in). Fails when none of them can be read (the first error says why).
    pub fn attach(&mut self, pids: &[u32]) -> anyhow::Result<ProcessInfo> {
        let mut members = Vec::new();
        let mut first_error = None;
        for &pid in pids {
            match Member::open(pid) {
                Ok(m) => members.push(m),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if members.is_empty() {
            return Err(first_error.unwrap_or_else(|| anyhow::anyhow!("no process to watch")));
        }
        members.sort_by_key(|m| m.info().pid);
        self.members = members;
        self.owed.clear();
        self.ended = None;
        self.left = false;
        self.read_at = std::time::Instant::now();
        if self.attached_before {
            self.totals.restarts += 1;
        }
        self.attached_before = true;
        self.update_info();
        self.info.clone().context("the group has no process")
    }

    /// Adds `pid` to the group (a worker forked since, a new SO_REUSEPORT process): its
    /// first read is its baseline. Not a restart. A pid already in the group is left as
    /// it is.
    pub fn join(&mut self, pid: u32) -> anyhow::Result<ProcessInfo> {
        if self.members.is_empty() {
            return self.attach(&[pid]);
        }
        if !self.members.iter().any(|m| m.info().pid == pid) {
            let member = Member::open(pid)?;
            let at = self.members.partition_point(|m| m.info().pid < pid);
            self.members.insert(at, member);
            self.update_info();
        }
        self.info.clone().context("the group has no process")
    }

    /// Forgets the group (it went away).
    pub fn detach(&mut self) {
        self.members.clear();
        self.ended = None;
        self.info = None;
    }

    /// Reads every process of the group and adds what they did since the last read.
    pub fn read(&mut self) -> Read {
        if self.members.is_empty() {
            return self.ended.clone().unwrap_or(Read::Detached);
        }
        let now = std::time::Instant::now();
        let interval = now.saturating_duration_since(self.read_at).as_nanos() as u64;
        let ticks = self.ticks_per_second;
        let (mut sum, mut alive, mut exec, mut busiest) = (Delta::default(), false, false, None);
        let shares = &mut self.shares;
        let mut left = false;
        let (mut reaped, mut departed) = (Vec::new(), Vec::new());
        self.members.retain_mut(|m| match m.read(ticks, interval) {
            MemberRead::Alive(d) => {
                alive = true;
                if d.reaped_user_ns + d.reaped_system_ns > 0 {
                    reaped.push((m.key(), d.reaped_user_ns, d.reaped_system_ns));
                }
                let share = shares.entry(m.key()).or_insert_with(|| Share {
                    pid: m.info().pid,
                    comm: m.info().comm.clone(),
                    cpu_ns: 0,
                });
                share.comm.clone_from(&m.info().comm);
                share.cpu_ns += d.user_ns + d.system_ns;
                add(&mut sum, &d, &mut busiest);
                true
            }
            MemberRead::Skipped => true,
            MemberRead::Gone => {
                departed.push((m.ppid(), m.lifetime_ns()));
                left = true;
                false
            }
            MemberRead::Exec => {
                (left, exec) = (true, true);
                false
            }
        });
        self.left |= left;
        if self.members.is_empty() {
            let ended = if exec { Read::Exec } else { Read::Gone };
            self.ended = Some(ended.clone());
            return ended;
        }
        self.update_info();
        if !alive {
            return Read::Skipped;
        }
        self.count_reaped(&departed, &reaped, &mut sum);
        self.read_at = now;
        self.add_read(&sum, busiest, interval);
        Read::Alive
    }

    /// Adds to `sum` the CPU of the children the group's processes reaped since the last
    /// read (`reaped`: each process's growth of `cutime` and `cstime`) that the group did
    /// not count while they lived: a forking server's child per request, which lives
    /// milliseconds and is never read, reaches the group only so. A child the group did
    /// watch (`departed`: its parent and its lifetime CPU at its last read) comes back
    /// whole in its parent's `cutime` when reaped, what it did before it was watched
    /// included (an nginx worker replaced after hours): that much is owed and taken out
    /// first, whichever read it comes in, and only what it ran after its last read counts.
    fn count_reaped(
        &mut self,
        departed: &[(u32, u64)],
        reaped: &[((u32, u64), u64, u64)],
        sum: &mut Delta,
    ) {
        for &(ppid, ns) in departed {
            if self.members.iter().any(|m| m.info().pid == ppid) {
                *self.owed.entry(ppid).or_default() += ns;
            }
        }
        for &(key, user, system) in reaped {
            let all = user + system;
            let owed = self.owed.entry(key.0).or_default();
            let paid = all.min(*owed);
            *owed -= paid;
            let extra = all - paid;
            if extra == 0 {
                continue;
            }
            let extra_user = (u128::from(extra) * u128::from(user) / u128::from(all)) as u64;
            sum.user_ns += extra_user;
            sum.system_ns += extra - extra_user;
            sum.process_cpu_ns += extra;
            sum.cpu_ns += extra;
            if let Some(share) = self.shares.get_mut(&key) {
                share.cpu_ns += extra;
            }
        }
        let members = &self.members;
        self.owed
            .retain(|pid, owed| *owed > 0 && members.iter().any(|m| m.info().pid == *pid));
    }

    /// Adds one read of the group, `interval` after the previous one.
    fn add_read(&mut self, d: &Delta, demand: Option<(u64, u64)>, interval: u64) {
        let t = &mut self.totals;
        t.user_ns += d.user_ns;
        t.system_ns += d.system_ns;
        t.process_cpu_ns += d.process_cpu_ns;
        t.cpu_ns += d.cpu_ns;
        t.runqueue_ns += d.runqueue_ns;
        t.voluntary += d.voluntary;
        t.involuntary += d.involuntary;
        t.watched_ns += interval;
        if let Some((busiest, all)) = demand {
            t.busiest_ns += busiest;
            if all as f64 >= ACTIVE * interval as f64 {
                t.active_ns += interval;
                t.active_busiest_ns += busiest;
            }
        }
    }

    /// The group as one: its first process's name, every process's threads.
    fn update_info(&mut self) {
        let Some(first) = self.members.first() else {
            self.info = None;
            return;
        };
        let mut info = first.info().clone();
        info.threads = self.members.iter().map(|m| m.info().threads).sum();
        info.processes = self.members.len();
        self.info = Some(info);
    }
}

/// Adds one process's read to the group's: the busiest thread of the group is the
/// busiest of each process's, the demand of all threads the sum.
fn add(sum: &mut Delta, d: &Delta, demand: &mut Option<(u64, u64)>) {
    sum.user_ns += d.user_ns;
    sum.system_ns += d.system_ns;
    sum.process_cpu_ns += d.process_cpu_ns;
    sum.cpu_ns += d.cpu_ns;
    sum.runqueue_ns += d.runqueue_ns;
    sum.voluntary += d.voluntary;
    sum.involuntary += d.involuntary;
    if let Some((busiest, all)) = d.demand {
        let (b, a) = demand.get_or_insert((0, 0));
        *b = (*b).max(busiest);
        *a += all;
    }
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
        a.attach(&[std::process::id()]).unwrap();
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
        a.attach(&[child.id()]).unwrap();
        assert_eq!(a.read(), Read::Alive);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(a.read(), Read::Gone);
        let before = a.totals();
        a.attach(&[std::process::id()]).unwrap();
        assert_eq!(a.totals().restarts, before.restarts + 1);
        assert_eq!(a.process().map(|p| p.pid), Some(std::process::id()));
    }

    /// A shell that forks `python3` burning `burn_s` of CPU, sleeping `sleep_s`, then
    /// waits for it (reaping it: its CPU joins the shell's `cutime`) and waits on its
    /// standard input, which only its end closes.
    fn forking_shell(burn_s: f64, sleep_s: f64) -> (std::process::Child, u32) {
        let script = format!(
            "import time\nt = time.process_time()\nwhile time.process_time() - t < {burn_s}: pass\ntime.sleep({sleep_s})"
        );
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "python3 -c \"$0\" & echo $!; wait; read x", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let out = shell.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
        let child = line.trim().parse().unwrap();
        (shell, child)
    }

    fn cpu_ns(t: &Totals) -> u64 {
        t.user_ns + t.system_ns
    }

    #[test]
    fn a_child_reaped_unwatched_is_counted_and_a_watched_one_not_twice() {
        if std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("SKIPPED: no python3");
            return;
        }
        // Unwatched: the shell alone is watched while its child burns 300 ms and is
        // reaped; the child's CPU comes in through the shell's cutime.
        let (mut shell, _) = forking_shell(0.3, 0.0);
        let mut a = Accountant::new();
        a.attach(&[shell.id()]).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while cpu_ns(&a.totals()) < 250_000_000 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert_eq!(a.read(), Read::Alive);
        }
        // 300 ms burnt plus Python's own start (450 ms counted in all once, beside a full
        // run of the suite); counted twice would be 600 ms or more.
        let got = cpu_ns(&a.totals());
        assert!(
            (250_000_000..600_000_000).contains(&got),
            "a child that burnt 300 ms unwatched, counted {got} ns"
        );
        let _ = shell.kill();
        let _ = shell.wait();

        // Watched from after its burn: what it ran before is not the window's, though
        // its parent's cutime brings it whole when it is reaped.
        let (mut shell, child) = forking_shell(0.3, 1.0);
        let burnt = wait_until_cpu(child, 300);
        let mut a = Accountant::new();
        a.attach(&[shell.id(), child]).unwrap();
        for _ in 0..25 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            a.read();
        }
        let got = cpu_ns(&a.totals());
        assert!(burnt, "the child never burnt its 300 ms");
        assert!(
            got < 100_000_000,
            "a child that burnt 300 ms before it was watched, then slept and was reaped: \
             counted {got} ns"
        );
        let _ = shell.kill();
        let _ = shell.wait();
    }

    /// Waits (up to 20 s) until `pid` has used `ms` of CPU and stopped using it (its burn
    /// counts from after Python's start, whose CPU comes first: a watch that began at
    /// `ms` saw the last 100 ms of the burn); whether it did.
    fn wait_until_cpu(pid: u32, ms: u64) -> bool {
        let per_second = procfs::ticks_per_second().max(1);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut last = None;
        while std::time::Instant::now() < deadline {
            if let Ok(stat) = procfs::process::Process::new(pid as i32).and_then(|p| p.stat()) {
                let used = stat.utime + stat.stime;
                if used * 1000 / per_second >= ms - 20 && last == Some(used) {
                    return true;
                }
                last = Some(used);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    }
}

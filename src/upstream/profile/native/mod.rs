//! Sampling a native process: perf events on its threads, the sampled instructions
//! named, its user stacks unwound, folded into a [`ProfileDelta`].
//!
//! [`Profiler::start`] opens one software-CPU-clock event per thread of the process (user
//! and kernel, a fixed period of CPU time, kernel callchains, and with `stack_bytes` the
//! user registers and a copy of the top of the user stack, which [`unwind`] follows to the
//! callers on a drainer thread every [`DRAIN_EVERY`]; the copy is cut down to what the
//! walks read, [`stack_size`]), on its busiest threads only: at most
//! [`MAX_SAMPLED_THREADS`], and never more than the descriptor budget allows ([`budget`]:
//! a sixteenth of RLIMIT_NOFILE, with a quarter of it kept free for the data path). Each
//! [`Profiler::collect`] drains the ring buffers, moves the events to the threads busiest
//! since the last collect ([`busiest`]: threads that exited or fell out lose theirs, and
//! the CPU time of the threads left out is counted in [`ProfileDelta::unsampled_cpu_ns`]),
//! names each distinct address once (blazesym, cached per process) and folds the samples:
//! each counts once under the component of its running function (self) and once under
//! every component on its stack (inclusive). A kernel sample whose leaf function is
//! generic (`copy_user_generic`, `_raw_spin_unlock`) takes the component of the first
//! caller that has one, so time spent copying for `tcp_recvmsg` counts as
//! `kernel_network`.
//!
//! What it needs of the kernel:
//! - perf_event_open on another process's threads, user and kernel: root, or CAP_PERFMON
//!   (plus CAP_SYS_PTRACE when the process belongs to another user), or
//!   kernel.perf_event_paranoid ≤ 1 for a process of the same user. Missing, `start` fails
//!   with [`ProfileError::Permission`], whose message says what to grant.
//! - Ring buffers: without CAP_IPC_LOCK they count against kernel.perf_event_mlock_kb and
//!   RLIMIT_MEMLOCK; over the limit each thread gets a smaller buffer (down to 4 KiB), and
//!   what does not fit between two collects is counted in [`ProfileDelta::lost`].
//! - Kernel names: /proc/kallsyms shows addresses with CAP_SYSLOG, or with
//!   kernel.kptr_restrict = 0 and perf_event_paranoid ≤ 1; otherwise every kernel sample
//!   is `kernel` ([`Profiler::kernel_symbols`] says which, and `start` logs it).
//! - The process's files: through /proc/PID/map_files when readable (CAP_SYS_ADMIN or
//!   CAP_CHECKPOINT_RESTORE), else through /proc/PID/root (CAP_SYS_PTRACE for another
//!   user), so a sidecar sharing the pod's process namespace names the other container's
//!   binaries.

mod budget;
mod busiest;
mod events;
mod inherited;
mod jit;
mod stack_size;
mod symbols;
mod thread_kind;
mod unnamed;
mod unwind;

use std::io;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub use budget::MAX_SAMPLED_THREADS;
pub use symbols::UNKNOWN_SYMBOL;
pub use unnamed::UNMAPPED_OBJECT;
// The Python sampler names the native leaf of its samples with the same symbolizer.
pub(super) use symbols::Symbols as Symbolizer;
// And holds its perf events within the same descriptor budget.
pub(super) use budget::Descriptors;
pub(super) use busiest::{rank as rank_busiest, ThreadCpu};
// And walks the native stack between the Python frames with the same unwinder.
pub(super) use unwind::{StackUse, Unwinder, Walk, REGS_MASK};

use super::fold::Fold;
use super::rate::Adaptive;
use super::rules::KERNEL_COMPONENT;
use super::{ComponentRules, ProfileDelta, ProfileError, MAX_STACK_BYTES};
use crate::snapshot::stacks::{Frame, FrameKind, THREAD_ROOTS, TRUNCATED};
use crate::sync::{lock, Background};
use events::{Drained, StackHead, ThreadEvents};
use symbols::{NameId, Symbols};

/// With user stacks, how often the ring buffers are drained between two collects: each
/// sample carries its copied stack, so a buffer holds tens of milliseconds of one busy
/// thread's samples.
pub const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Samples the threads of one process and folds them into components.
pub struct Profiler {
    pid: u32,
    rules: ComponentRules,
    sampling: Arc<Mutex<Sampling>>,
    /// Drains the ring buffers every [`DRAIN_EVERY`] when user stacks are sampled.
    drainer: Option<Background>,
    symbols: Symbols,
    drained: Drained,
    /// Component of each interned name by its leaf rule, indexed by `NameId`.
    components: Vec<String>,
    kernel_symbols: bool,
    /// The configured rate, and the rate adapting to the budget ([`super::rate`]).
    pace: Adaptive,
}

/// The perf events and what was drained from them: shared by `collect` and the drainer.
struct Sampling {
    events: ThreadEvents,
    unwinder: Option<Unwinder>,
    drained: Drained,
    /// The drainer thread's CPU time since the last collect (it drains and unwinds).
    drainer_cpu_ns: u64,
}

impl Sampling {
    fn drain(&mut self) {
        self.events.drain(self.unwinder.as_mut(), &mut self.drained);
    }
}

/// Starts the thread that drains between collects; it ends when the `Background` is
/// dropped (its wait ends at once then).
fn spawn_drainer(sampling: Arc<Mutex<Sampling>>, pid: u32) -> io::Result<Background> {
    Background::spawn("ps-up-drain", move |stopped| {
        let mut cpu = super::thread_cpu_ns();
        while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(DRAIN_EVERY) {
            let mut sampling = lock(&sampling);
            sampling.drain();
            // Counted under the lock, so a collect takes all of it up to its own drain.
            let now = super::thread_cpu_ns();
            sampling.drainer_cpu_ns += now.saturating_sub(cpu);
            cpu = now;
        }
        tracing::trace!(pid, "upstream sample drainer stopped");
    })
}

/// Reads the process's unwind tables on a thread of its own and hands the unwinder to the
/// sampling once ready: a binary of a hundred megabytes (node) takes seconds to read, and
/// sampling starts at once meanwhile, its first samples a leaf each, cut short. The thread
/// ends when the tables are read; a profiler dropped before gets nothing.
fn spawn_unwinder_loader(sampling: &Arc<Mutex<Sampling>>, pid: u32) -> io::Result<()> {
    let sampling = Arc::downgrade(sampling);
    std::thread::Builder::new()
        .name("ps-up-unwind".into())
        .spawn(move || {
            let unwinder = Unwinder::new(pid);
            if let Some(sampling) = sampling.upgrade() {
                lock(&sampling).unwinder = Some(unwinder);
                tracing::debug!(pid, "upstream unwind tables read");
            }
        })
        .map(drop)
}

/// What the perf events sample besides the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Events {
    /// Bytes of each sample's user stack copied (0: the leaf only).
    pub stack_bytes: u32,
    /// One event per CPU over the whole machine, the samples of other processes dropped
    /// as they are read, instead of events bound to the process's threads.
    pub per_cpu: bool,
}

impl Profiler {
    /// Opens sampling perf events (software CPU clock, user+kernel) on every thread of
    /// `pid`, copying `stack_bytes` of each sample's user stack (0: the leaf only).
    /// Errors say what permission is missing (CAP_PERFMON / perf_event_paranoid) in one
    /// sentence.
    pub fn start(
        pid: u32,
        frequency_hz: u32,
        stack_bytes: u32,
        rules: ComponentRules,
    ) -> Result<Profiler, ProfileError> {
        let events = Events {
            stack_bytes,
            per_cpu: false,
        };
        Profiler::start_with(pid, frequency_hz, events, rules)
    }

    /// [`Self::start`] with its events bound as `events` says: to the threads, or one
    /// per CPU (`events.per_cpu`).
    pub fn start_with(
        pid: u32,
        frequency_hz: u32,
        events: Events,
        rules: ComponentRules,
    ) -> Result<Profiler, ProfileError> {
        // perf wants a multiple of 8 and less than a record's 64 KiB.
        let stack_bytes = events.stack_bytes.min(MAX_STACK_BYTES) / 8 * 8;
        let events = ThreadEvents::open(pid, frequency_hz, stack_bytes, events.per_cpu)?;
        let mut symbols = Symbols::new(pid)?;
        // The symbol tables of a large binary take seconds to read: the symbolizer starts
        // on them now, beside the first samples, not at the first collect.
        symbols.warm_up();
        let kernel_symbols = kernel_symbols_visible();
        if !kernel_symbols {
            tracing::warn!(
                pid,
                "/proc/kallsyms hides kernel addresses: kernel samples fold into `kernel` \
                 without names; grant CAP_SYSLOG, or set kernel.kptr_restrict=0 with \
                 kernel.perf_event_paranoid at 1 or less"
            );
        }
        let stacks = stack_bytes > 0;
        let sampling = Arc::new(Mutex::new(Sampling {
            events,
            unwinder: None,
            drained: Drained::default(),
            drainer_cpu_ns: 0,
        }));
        let drainer = if stacks {
            spawn_unwinder_loader(&sampling, pid).map_err(ProfileError::Symbolizer)?;
            Some(spawn_drainer(sampling.clone(), pid).map_err(ProfileError::Symbolizer)?)
        } else {
            None
        };
        Ok(Profiler {
            pid,
            rules,
            sampling,
            drainer,
            symbols,
            drained: Drained::default(),
            components: Vec::new(),
            kernel_symbols,
            pace: Adaptive::new(frequency_hz),
        })
    }

    /// Samples per second the whole process may give: the period doubles while it gives
    /// more, and comes back to the configured one while it gives under a third
    /// ([`super::rate`]); 0 keeps the configured rate.
    pub fn set_budget(&mut self, samples_per_second: u32) {
        self.pace.set_budget(samples_per_second);
    }

    /// Samples per second of a thread's CPU now: the configured rate over the period's
    /// multiple.
    pub fn rate_hz(&self) -> f64 {
        self.pace.rate_hz()
    }

    /// Bytes of user stack each sample copies now: the configured size at first, then
    /// what the walks need ([`stack_size`]); 0 without call stacks.
    pub fn stack_bytes(&self) -> u32 {
        lock(&self.sampling).events.stack_bytes()
    }

    /// Whether user stacks are sampled (else the leaf and kernel callchains only).
    pub fn user_stacks(&self) -> bool {
        self.drainer.is_some()
    }

    /// Whether kernel samples get function names (/proc/kallsyms shows addresses to us);
    /// without them every kernel sample is `kernel`, none `kernel_network`.
    pub fn kernel_symbols(&self) -> bool {
        self.kernel_symbols
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Threads with an open event (as of the last `start` or `collect`).
    pub fn threads(&self) -> usize {
        lock(&self.sampling).events.threads()
    }

    /// Whether the process's unwind tables are read, so that samples from now on carry
    /// their whole stack (before, each is a leaf cut short: `spawn_unwinder_loader`). A
    /// comparison with another profiler waits for it.
    pub fn stacks_ready(&self) -> bool {
        lock(&self.sampling).unwinder.is_some()
    }

    /// Drains the ring buffers, picks up threads created since the last call, symbolizes
    /// and folds. Returns the samples since the previous call.
    pub fn collect(&mut self) -> Result<ProfileDelta, ProfileError> {
        let unsampled;
        let drainer_cpu_ns;
        let unwinding_pending;
        {
            let mut sampling = lock(&self.sampling);
            let sampling = &mut *sampling;
            unwinding_pending = sampling.events.stack_bytes() > 0 && sampling.unwinder.is_none();
            sampling.drain();
            sampling
                .events
                .refresh_threads(sampling.unwinder.as_mut(), &mut sampling.drained)?;
            sampling
                .events
                .resize_stacks(sampling.unwinder.as_mut(), &mut sampling.drained);
            let before = self.pace.shift();
            if let Some(shift) = self.pace.collected(sampling.drained.taken) {
                let events = &mut sampling.events;
                if !events.set_shift(shift, sampling.unwinder.as_mut(), &mut sampling.drained) {
                    self.pace.set_shift(before);
                }
            }
            // A library loaded since: its frames unwind from the next samples on.
            if let Some(unwinder) = &mut sampling.unwinder {
                unwinder.refresh();
            }
            self.drained.clear();
            std::mem::swap(&mut self.drained, &mut sampling.drained);
            unsampled = (
                sampling.events.unsampled_threads() as u64,
                sampling.events.take_unsampled_cpu_ns(),
            );
            drainer_cpu_ns = std::mem::take(&mut sampling.drainer_cpu_ns);
        }
        self.symbols.refresh_maps()?;
        fn split(stack: &[u64]) -> (&[u64], &[u64]) {
            let (head, frames) = StackHead::split(stack);
            frames.split_at(head.kernel_frames)
        }
        self.symbols.resolve_user(
            self.drained
                .stacks
                .keys()
                .flat_map(|s| split(s).1.iter().copied()),
        )?;
        self.symbols.resolve_kernel(
            self.drained
                .stacks
                .keys()
                .flat_map(|s| split(s).0.iter().copied()),
        )?;
        self.update_components();
        let mut delta = self.fold();
        (delta.unsampled_threads, delta.unsampled_cpu_ns) = unsampled;
        delta.sampler_cpu_ns = drainer_cpu_ns;
        delta.taken = self.drained.taken;
        delta.period_multiple = self.pace.weight();
        delta.unwinding_pending = unwinding_pending;
        Ok(delta)
    }

    fn update_components(&mut self) {
        for id in self.components.len()..self.symbols.names() {
            let name = self.symbols.name(id as NameId);
            let component = self
                .rules
                .component(&name.symbol, &name.object, name.kernel)
                .to_owned();
            self.components.push(component);
        }
    }

    fn component(&self, id: NameId) -> &str {
        self.components
            .get(id as usize)
            .map_or(KERNEL_COMPONENT, String::as_str)
    }

    /// The component a sample counts under (self): its leaf's, except that a generic
    /// kernel leaf (`copy_user_generic`) takes the component of its first kernel caller
    /// that has one, so copying for `tcp_recvmsg` counts as `kernel_network`.
    fn self_component(&self, names: &[NameId], kernel_frames: usize) -> NameId {
        let leaf = names[0];
        if kernel_frames == 0 || self.component(leaf) != KERNEL_COMPONENT {
            return leaf;
        }
        names[1..kernel_frames.min(names.len())]
            .iter()
            .copied()
            .find(|&id| self.component(id) != KERNEL_COMPONENT)
            .unwrap_or(leaf)
    }

    fn fold(&self) -> ProfileDelta {
        let mut fold: Fold<NameId, NameId, &str> = Fold::new();
        let mut names: Vec<NameId> = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        let with_stacks = self.user_stacks();
        for (stack, &n) in &self.drained.stacks {
            let (head, addrs) = StackHead::split(stack);
            let (kernel, user) = addrs.split_at(head.kernel_frames);
            // Leaf first; an address that could not be named is left out.
            names.clear();
            names.extend(kernel.iter().filter_map(|&ip| self.symbols.kernel(ip)));
            let kernel_frames = names.len();
            names.extend(user.iter().filter_map(|&ip| self.symbols.user(ip)));
            if names.is_empty() {
                continue;
            }
            // A walk that failed past a thread's first frame reached the root: what it
            // read beyond (Go's goroutine stacks end at runtime.goexit with no marker
            // above it) is not a frame. Only a failed walk is cut: a complete one may pass
            // a `clone` its code calls.
            let mut truncated = head.truncated;
            if truncated {
                let root = names[kernel_frames..]
                    .iter()
                    .rposition(|&id| THREAD_ROOTS.contains(&self.symbols.name(id).symbol.as_str()));
                if let Some(i) = root {
                    names.truncate(kernel_frames + i + 1);
                    truncated = false;
                }
            }
            // A runtime's GC or compiler thread is that whatever function it runs.
            let by = head
                .thread
                .component()
                .unwrap_or_else(|| self.component(self.self_component(&names, kernel_frames)));
            fold.leaf(names[0], by, n);
            if !with_stacks {
                continue;
            }

            seen.clear();
            seen.push(by);
            for &id in &names {
                let component = self.component(id);
                if !seen.contains(&component) {
                    seen.push(component);
                }
            }
            let mut frames: Vec<u32> = Vec::with_capacity(names.len() + 1);
            if truncated {
                frames.push(fold.frame(NameId::MAX, truncated_frame));
                fold.truncated(n);
            }
            if names[kernel_frames..]
                .iter()
                .any(|&id| self.symbols.name(id).object == UNMAPPED_OBJECT)
            {
                fold.unmapped(n);
            }
            for &id in names.iter().rev() {
                frames.push(fold.frame(id, || self.frame(id)));
            }
            fold.stack(frames, &seen, n);
        }
        fold.finish(
            |&leaf| {
                let name = self.symbols.name(leaf);
                (name.symbol.clone(), name.object.clone())
            },
            with_stacks.then_some(FrameKind::Native),
            self.drained.lost,
        )
    }

    /// A named frame as the snapshot carries it.
    fn frame(&self, id: NameId) -> Frame {
        let name = self.symbols.name(id);
        Frame {
            name: name.symbol.clone(),
            object: name.object.clone(),
            component: self.component(id).to_owned(),
            line: None,
            at_line: None,
        }
    }
}

/// The frame at the root of a stack whose walk was cut short.
fn truncated_frame() -> Frame {
    Frame {
        name: TRUNCATED.to_owned(),
        object: String::new(),
        component: String::new(),
        line: None,
        at_line: None,
    }
}

/// Whether /proc/kallsyms shows real addresses to this process: it shows zeros without
/// CAP_SYSLOG unless kptr_restrict is 0 and perf_event_paranoid at most 1.
fn kernel_symbols_visible() -> bool {
    use std::io::BufRead;

    let Ok(file) = std::fs::File::open("/proc/kallsyms") else {
        return false;
    };
    io::BufReader::new(file)
        .lines()
        .take(16)
        .map_while(Result::ok)
        .any(|line| {
            line.split_whitespace()
                .next()
                .and_then(|addr| u64::from_str_radix(addr, 16).ok())
                .is_some_and(|addr| addr != 0)
        })
}

/// True when the object (the upstream's main binary) has no symbol table: its own code
/// reads as one component named after the file and any parser inside it is an upper
/// bound. An unreadable or non-ELF file is not called stripped (nothing is known).
pub fn is_stripped(path: &Path) -> bool {
    use object::Object;

    // Read lazily: only the headers and the section table, not the whole binary.
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let cache = object::ReadCache::new(file);
    match object::File::parse(&cache) {
        Ok(file) => file.section_by_name(".symtab").is_none(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watcher may run it on any thread.
    #[test]
    fn profiler_is_send() {
        fn send<T: Send>() {}
        send::<Profiler>();
        send::<ProfileDelta>();
        send::<ProfileError>();
    }

    #[test]
    fn stripped_and_not() {
        // This test binary is built with symbols; a missing file is not "stripped".
        let exe = std::env::current_exe().unwrap();
        assert!(!is_stripped(&exe), "{} has a .symtab", exe.display());
        assert!(!is_stripped(Path::new("/nonexistent/binary")));
        // Debian's binaries are stripped of .symtab (their names are in -dbgsym packages).
        assert!(is_stripped(Path::new("/bin/ls")));
        assert!(!is_stripped(Path::new("/etc/hostname")), "not ELF");
    }
}

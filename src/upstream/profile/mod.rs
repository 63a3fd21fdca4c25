//! Where the upstream's CPU goes: sampling its threads with perf events, naming the sampled
//! instructions, and folding them into components (`http_parser`, `event_loop`,
//! `kernel_network`, the server's own code, …).
//!
//! [`Profiler::start`] opens one software-CPU-clock event per thread of the process (user
//! and kernel, a fixed period of CPU time, kernel callchains); each [`Profiler::collect`]
//! drains the ring buffers, opens events on threads created since, closes those of threads
//! that exited, names each distinct address once (blazesym, cached per process) and folds
//! the samples. A kernel sample whose leaf function is generic (`copy_user_generic`,
//! `_raw_spin_unlock`) takes the component of the first caller that has one, so time
//! spent copying for `tcp_recvmsg` counts as `kernel_network`.
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

mod events;
pub mod php;
mod rules;
mod symbols;

use std::collections::HashMap;
use std::io;
use std::path::Path;

pub use rules::{ComponentRules, UserComponentRule, ANON_EXEC_OBJECT, KERNEL_OBJECT};
pub use symbols::{UNKNOWN_SYMBOL, UNMAPPED_OBJECT};

use events::{Drained, ThreadEvents};
use rules::KERNEL_COMPONENT;
use symbols::{NameId, Symbols};

/// The sampling frequency the figures use: one sample per millisecond of CPU.
pub const DEFAULT_FREQUENCY_HZ: u32 = 1000;

/// Why profiling cannot start or go on.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(
        "cannot sample pid {pid}: {source}; grant CAP_PERFMON (and CAP_SYS_PTRACE for another \
         user's process), run as root, or set kernel.perf_event_paranoid to 1 or less for a \
         process of the same user (it is {paranoid} now)"
    )]
    Permission {
        pid: u32,
        paranoid: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot sample pid {pid}: perf_event_open failed: {source}")]
    Open {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot map a perf ring buffer for pid {pid}: {source}; raise the locked-memory limit \
         (kernel.perf_event_mlock_kb, RLIMIT_MEMLOCK) or grant CAP_IPC_LOCK"
    )]
    RingBuffer {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the threads or maps of pid {pid}: {source}")]
    Process {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("sampling frequency {0} Hz is out of range (1 to 100000)")]
    Frequency(u32),
    #[error("component rule {name:?}: bad {field} regex: {source}")]
    Rule {
        name: String,
        field: &'static str,
        #[source]
        source: Box<regex::Error>,
    },
    #[error("a component rule has an empty name")]
    RuleName,
    #[error("cannot start the symbolizer thread: {0}")]
    Symbolizer(#[source] io::Error),
    #[error("symbolizing samples failed: {0}")]
    Symbolize(String),
}

impl ProfileError {
    /// Maps a failed perf_event_open: EACCES and EPERM mean a missing privilege, and the
    /// message says which to grant.
    fn open(pid: u32, source: io::Error) -> ProfileError {
        if source.kind() == io::ErrorKind::PermissionDenied {
            let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map(|text| text.trim().to_owned())
                .unwrap_or_else(|_| "unreadable".to_owned());
            ProfileError::Permission {
                pid,
                paranoid,
                source,
            }
        } else {
            ProfileError::Open { pid, source }
        }
    }

    /// Whether this is a missing privilege (the caller logs it once and goes on without
    /// sampling).
    pub fn is_permission(&self) -> bool {
        matches!(
            self,
            ProfileError::Permission { .. } | ProfileError::RingBuffer { .. }
        )
    }
}

/// The samples of one `collect`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileDelta {
    /// Component name → samples, most samples first.
    pub by_component: Vec<(String, u64)>,
    /// Every distinct (symbol, object, component) seen, most samples first. A kernel
    /// function may appear under two components when it was reached from different
    /// callers (`copy_user_generic` for a socket read and for a file read).
    pub symbols: Vec<SymbolSamples>,
    /// Samples the kernel dropped (a ring buffer was full).
    pub lost: u64,
}

impl ProfileDelta {
    /// All samples of this delta.
    pub fn total(&self) -> u64 {
        self.by_component.iter().map(|(_, n)| n).sum()
    }

    /// The samples of one component (0 when absent).
    pub fn component(&self, name: &str) -> u64 {
        self.by_component
            .iter()
            .find(|(component, _)| component == name)
            .map_or(0, |&(_, n)| n)
    }
}

/// Samples of one symbol in one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolSamples {
    pub symbol: String,
    pub object: String,
    pub component: String,
    pub samples: u64,
}

/// Samples the threads of one process and folds them into components.
pub struct Profiler {
    pid: u32,
    rules: ComponentRules,
    events: ThreadEvents,
    symbols: Symbols,
    drained: Drained,
    /// Component of each interned name by its leaf rule, indexed by `NameId`.
    components: Vec<String>,
    kernel_symbols: bool,
}

impl Profiler {
    /// Opens sampling perf events (software CPU clock, user+kernel) on every thread of
    /// `pid`. Errors say what permission is missing (CAP_PERFMON / perf_event_paranoid) in
    /// one sentence.
    pub fn start(
        pid: u32,
        frequency_hz: u32,
        rules: ComponentRules,
    ) -> Result<Profiler, ProfileError> {
        let events = ThreadEvents::open(pid, frequency_hz)?;
        let symbols = Symbols::new(pid)?;
        let kernel_symbols = kernel_symbols_visible();
        if !kernel_symbols {
            tracing::warn!(
                pid,
                "/proc/kallsyms hides kernel addresses: kernel samples fold into `kernel` \
                 without names; grant CAP_SYSLOG, or set kernel.kptr_restrict=0 with \
                 kernel.perf_event_paranoid at 1 or less"
            );
        }
        Ok(Profiler {
            pid,
            rules,
            events,
            symbols,
            drained: Drained::default(),
            components: Vec::new(),
            kernel_symbols,
        })
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
        self.events.threads()
    }

    /// Drains the ring buffers, picks up threads created since the last call, symbolizes
    /// and folds. Returns the samples since the previous call.
    pub fn collect(&mut self) -> Result<ProfileDelta, ProfileError> {
        self.drained.clear();
        self.events.drain(&mut self.drained);
        self.events.refresh_threads(&mut self.drained)?;
        self.symbols.refresh_maps()?;
        self.symbols
            .resolve_user(self.drained.user.keys().copied())?;
        self.symbols.resolve_kernel(
            self.drained
                .kernel
                .keys()
                .flat_map(|chain| chain.iter().copied()),
        )?;
        self.update_components();
        Ok(self.fold())
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

    fn fold(&self) -> ProfileDelta {
        // (name, component) → samples; component ids are indices into `components`.
        let mut counts: HashMap<(NameId, NameId), u64> = HashMap::new();
        for (&ip, &n) in &self.drained.user {
            if let Some(id) = self.symbols.user(ip) {
                *counts.entry((id, id)).or_insert(0) += n;
            }
        }
        for (chain, &n) in &self.drained.kernel {
            let Some(leaf) = chain.first().and_then(|&ip| self.symbols.kernel(ip)) else {
                continue;
            };
            // A generic leaf takes the component of its first caller that has one.
            let mut by = leaf;
            if self.component(leaf) == KERNEL_COMPONENT {
                if let Some(caller) = chain[1..]
                    .iter()
                    .filter_map(|&ip| self.symbols.kernel(ip))
                    .find(|&id| self.component(id) != KERNEL_COMPONENT)
                {
                    by = caller;
                }
            }
            *counts.entry((leaf, by)).or_insert(0) += n;
        }

        let mut by_component: HashMap<&str, u64> = HashMap::new();
        let mut symbols: HashMap<(NameId, &str), u64> = HashMap::new();
        for (&(leaf, by), &n) in &counts {
            let component = self.component(by);
            *by_component.entry(component).or_insert(0) += n;
            *symbols.entry((leaf, component)).or_insert(0) += n;
        }
        let mut by_component: Vec<(String, u64)> = by_component
            .into_iter()
            .map(|(component, n)| (component.to_owned(), n))
            .collect();
        by_component.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut symbols: Vec<SymbolSamples> = symbols
            .into_iter()
            .map(|((leaf, component), samples)| {
                let name = self.symbols.name(leaf);
                SymbolSamples {
                    symbol: name.symbol.clone(),
                    object: name.object.clone(),
                    component: component.to_owned(),
                    samples,
                }
            })
            .collect();
        symbols.sort_unstable_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.symbol.cmp(&b.symbol))
                .then_with(|| a.object.cmp(&b.object))
        });
        ProfileDelta {
            by_component,
            symbols,
            lost: self.drained.lost,
        }
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

    #[test]
    fn permission_errors_say_what_to_grant() {
        for errno in [1, 13] {
            // EPERM, EACCES
            let error = ProfileError::open(42, io::Error::from_raw_os_error(errno));
            assert!(error.is_permission(), "errno {errno}: {error:?}");
            let text = error.to_string();
            for needle in [
                "pid 42",
                "CAP_PERFMON",
                "perf_event_paranoid",
                "CAP_SYS_PTRACE",
            ] {
                assert!(text.contains(needle), "{needle:?} missing from: {text}");
            }
        }
        let ring = ProfileError::RingBuffer {
            pid: 42,
            source: io::Error::from_raw_os_error(1),
        };
        assert!(ring.is_permission());
        assert!(ring.to_string().contains("CAP_IPC_LOCK"), "{ring}");
        let other = ProfileError::open(42, io::Error::from_raw_os_error(22)); // EINVAL
        assert!(!other.is_permission());
        assert!(other.to_string().contains("perf_event_open"), "{other}");
    }

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

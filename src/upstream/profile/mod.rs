//! Where the upstream's CPU goes: sampling its threads, naming what they run, and folding
//! the samples into components (`http_parser`, `event_loop`, `kernel_network`, the
//! server's own code, …) and call stacks.
//!
//! Two samplers, one per kind of frame, each in its own module, and the choice between
//! them here ([`Sampler`]):
//! - [`native`]: perf events on the process's threads, the sampled instructions named and
//!   the user stacks unwound (machine code: the binary, its libraries, the kernel);
//! - [`php`]: a PHP interpreter's own call stacks, read from outside the process (its
//!   machine code would only name the VM's handlers);
//! - [`python`]: CPython's call stacks, read the same way, with the native function a
//!   sample ran in when Python called into C.
//!
//! Both use the component rules ([`rules`]) and /proc/PID/maps ([`maps`]: the native
//! symbolizer and unwinder, and finding the PHP engine), and both give a collect's samples
//! as one [`ProfileDelta`], so that the snapshot, the report and the exporters read them
//! alike.
mod fold;
mod maps;
pub mod native;
pub mod php;
pub mod python;
mod rate;
mod rules;
mod script_frame;

use std::collections::HashMap;
use std::io;

pub use native::{is_stripped, Events, Profiler, DRAIN_EVERY, MAX_SAMPLED_THREADS};
pub use native::{UNKNOWN_SYMBOL, UNMAPPED_OBJECT};
pub use php::{PhpPace, PhpProfiler};
pub use python::PyProfiler;
pub use rate::MAX_SHIFT as MAX_RATE_SHIFT;
pub use rules::{ComponentRules, UserComponentRule, ANON_EXEC_OBJECT, KERNEL_OBJECT};
pub use script_frame::ScriptFrame;

use crate::snapshot::{FrameKind, Stacks};

// The stack sizes are the config's: it validates `stack_bytes` against them, and the
// config sits below this module (it may not import it).
pub use crate::config::{DEFAULT_STACK_BYTES, MAX_STACK_BYTES};

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
    #[error("cannot start a sampler thread (symbolizer or drainer): {0}")]
    Symbolizer(#[source] io::Error),
    #[error("symbolizing samples failed: {0}")]
    Symbolize(String),
    #[error("cannot read PHP frames: {0}")]
    Php(#[source] php::PhpError),
    #[error("cannot read Python frames: {0}")]
    Python(#[source] python::PyError),
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
    /// Component → samples whose stack holds a frame of it (with user stacks; without,
    /// the kernel frames and the leaf only), most first.
    pub inclusive: Vec<(String, u64)>,
    /// The sampled stacks, root first.
    pub stacks: Stacks,
    /// What the stacks' frames are: native, or `None` without call stacks (`inclusive`
    /// and `stacks` are then empty).
    pub frames: Option<FrameKind>,
    /// Threads of the process left without a perf event at this collect (more threads
    /// than the descriptor budget: the busiest are sampled).
    pub unsampled_threads: u64,
    /// CPU time, since the previous collect, of the threads that had no event: the
    /// samples stand for the rest of the process's CPU.
    pub unsampled_cpu_ns: u64,
    /// The proxy's own CPU time spent sampling since the previous collect: the drainer
    /// thread's and the collect's own (naming, unwinding, folding).
    pub sampler_cpu_ns: u64,
    /// Samples read, each once: with a rate that adapts, a sample counts its period's
    /// multiple of the configured one in the counts above, which are in periods of the
    /// configured rate.
    pub taken: u64,
    /// The period at the end of the collect as a multiple of the configured one (the rate
    /// is the configured one over it): every sampler (native, PHP, Python) keeps its rate
    /// to the budget the same way; 0 where it is not known, read as 1.
    pub period_multiple: u64,
    /// The process's unwind tables were not read yet at this collect (the native
    /// profiler reads them on a thread of its own): its samples so far are a leaf each,
    /// cut short. False where no tables are read (PHP, Python frames).
    pub unwinding_pending: bool,
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
/// What samples the process: perf events and its machine code's stacks, or, for a PHP
/// interpreter, its PHP call stacks. One per watched process, so its size does not
/// matter.
#[allow(clippy::large_enum_variant)]
pub enum Sampler {
    Native(Profiler),
    Php(PhpProfiler),
    Python(PyProfiler),
}

impl Sampler {
    /// The samples since the last collect, with the CPU this collect took on the calling
    /// thread counted in [`ProfileDelta::sampler_cpu_ns`].
    pub fn collect(&mut self) -> Result<ProfileDelta, ProfileError> {
        let start = thread_cpu_ns();
        let mut delta = match self {
            Sampler::Native(p) => p.collect()?,
            Sampler::Php(p) => p.collect(),
            Sampler::Python(p) => p.collect()?,
        };
        delta.sampler_cpu_ns += thread_cpu_ns().saturating_sub(start);
        Ok(delta)
    }
}

/// This thread's CPU time in nanoseconds: what the sampler costs the proxy is counted
/// on the threads that do its work (the collects, the drainer).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec on the stack.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Counts by name, most first, then by name.
fn sorted<K: AsRef<str>>(counts: HashMap<K, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = counts
        .into_iter()
        .map(|(name, n)| (name.as_ref().to_owned(), n))
        .collect();
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// Most samples first, then by symbol and object.
fn sort_symbols(symbols: &mut [SymbolSamples]) {
    symbols.sort_unstable_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.symbol.cmp(&b.symbol))
            .then_with(|| a.object.cmp(&b.object))
    });
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
}

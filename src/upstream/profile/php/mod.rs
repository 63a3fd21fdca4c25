//! Where a PHP upstream's CPU goes, by PHP function: the interpreter's own call stack, read
//! from outside the process.
//!
//! perf samples of a PHP process name the VM's handlers (`execute_ex`,
//! `ZEND_DO_FCALL_SPEC_…`), not the PHP functions they run; the PHP functions are in the
//! interpreter's data. [`detect`] finds the Zend engine in a process (its executable, or a
//! mapped libphp*.so), the address of `executor_globals` and the PHP version, which picks
//! the struct layout ([`Offsets`]). [`PhpSampler`] then reads `EG(current_execute_data)`
//! and walks `prev_execute_data` with process_vm_readv, paced by the PHP thread's CPU
//! time (a perf CPU-clock event on it; a timer without the permission), without stopping
//! the process, and counts the stacks it saw while the PHP thread was on CPU.
//!
//! What it supports: PHP 8.1–8.4, NTS (CLI, FPM workers, embed), x86-64 Linux. A
//! thread-safe (ZTS) build keeps the globals per thread behind TSRM and is refused with
//! [`PhpError::Zts`], a version outside the table with [`PhpError::UnknownVersion`].
//!
//! What it needs of the kernel: process_vm_readv on the PHP process, which takes the same
//! permission as ptrace attach: the same user with kernel.yama.ptrace_scope 0, or
//! CAP_SYS_PTRACE (root). Missing, [`detect`] fails with [`PhpError::Read`] and a message
//! that says so.
//!
//! Names read as PHP's exception traces print them, with `::` for `->`: `Class::method`
//! for methods (static or not), `Ns\function`, closures by their engine name with the
//! class they are bound to (`Foo::{closure}`, `Ns\Foo::Ns\{closure}` in a namespace; 8.4
//! names them `{closure:file:line}`), `Fiber::resume` for the internal method that
//! resumed a fiber, and `{main}` for a script's top-level code (Excimer names that frame
//! by its file instead; the file is in [`PhpFrame::file`] either way, and a name that
//! cannot be mistaken for a file keeps "which function" and "where" apart). Top-level
//! code of an included file reads `{include}`.

mod binary;
pub(super) mod memory;
mod offsets;
mod profiler;
mod sampler;
mod walk;

use std::io;

pub use offsets::Offsets;
pub use profiler::PhpProfiler;
pub use sampler::{PhpPace, PhpSampler, PhpStacks};
pub use walk::MAX_DEPTH;

/// One frame of a PHP stack.
pub use super::ScriptFrame as PhpFrame;

/// Why PHP frames cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PhpError {
    #[error("pid {pid} is not a PHP process (no Zend engine in its executable or libraries)")]
    NotPhp { pid: u32 },
    #[error(
        "{path} is a thread-safe (ZTS) PHP build, whose executor globals are per thread \
         behind TSRM; PHP frames can be read from NTS builds only (the default of CLI and \
         FPM packages)"
    )]
    Zts { path: String },
    #[error(
        "{0} is not supported: PHP frames can be read from PHP 8.1 to 8.4; profile by \
         native functions only, or run a supported PHP"
    )]
    UnknownVersion(String),
    #[error(
        "{path} does not export executor_globals (built with hidden symbols?); PHP frames \
         need a build that exports it, as distribution packages do"
    )]
    NoSymbol { path: String },
    #[error("{path} is not mapped in pid {pid} (has it exited?)")]
    NotMapped { pid: u32, path: String },
    #[error("cannot read the {what} of pid {pid}: {source}")]
    Process {
        pid: u32,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot read {what} at {addr:#x} in pid {pid}: {source}{}",
        permission_hint(source)
    )]
    Read {
        pid: u32,
        addr: u64,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the PHP stack of pid {pid} kept changing while it was read")]
    Torn { pid: u32 },
    #[error("PHP sampling frequency {0} Hz is out of range (1 to 10000)")]
    Frequency(u32),
    #[error("cannot start the PHP sampler thread: {0}")]
    Thread(#[source] io::Error),
}

fn permission_hint(source: &io::Error) -> &'static str {
    if source.raw_os_error() == Some(libc::EPERM) {
        "; reading another process's memory needs CAP_SYS_PTRACE (or root), or the same user \
         with kernel.yama.ptrace_scope = 0"
    } else {
        ""
    }
}

/// A PHP process whose stacks can be read: where its executor globals are and how its
/// structs are laid out.
#[derive(Clone, Debug)]
pub struct PhpTarget {
    pid: u32,
    /// NTS PHP runs its interpreter on one thread: the process's main thread for CLI, FPM
    /// workers and prefork Apache.
    tid: u32,
    version: String,
    binary: String,
    executor_globals: u64,
    offsets: &'static Offsets,
}

impl PhpTarget {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The interpreter's thread.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// `8.2.36`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The file that holds the engine: the executable or a libphp.
    pub fn binary(&self) -> &str {
        &self.binary
    }

    /// The run-time address of `executor_globals`.
    pub fn executor_globals(&self) -> u64 {
        self.executor_globals
    }

    pub fn offsets(&self) -> &'static Offsets {
        self.offsets
    }
}

/// Detects a PHP process (its exe or a mapped libphp); Ok(None) when it is not PHP.
///
/// Also reads `EG(current_execute_data)` once, so that a missing permission shows here
/// and not as a sampler that never counts anything.
pub fn detect(pid: u32) -> Result<Option<PhpTarget>, PhpError> {
    let Some(engine) = binary::find_engine(pid)? else {
        return Ok(None);
    };
    let target = PhpTarget {
        pid,
        tid: pid,
        version: engine.version.to_string(),
        binary: engine.path,
        executor_globals: engine.executor_globals,
        offsets: engine.offsets,
    };
    let at = target.executor_globals + target.offsets.eg_current_execute_data;
    memory::Memory::new(pid)
        .read_u64(at)
        .map_err(|source| PhpError::Read {
            pid,
            addr: at,
            what: "EG(current_execute_data)",
            source,
        })?;
    tracing::debug!(
        pid,
        version = %target.version,
        binary = %target.binary,
        executor_globals = format_args!("{:#x}", target.executor_globals),
        "PHP engine found"
    );
    Ok(Some(target))
}

/// One read of the current stack, leaf first (tests and the sampler use it): Ok(true) when
/// it was truncated. This one starts with an empty name cache; the sampler keeps the same
/// walker, and so its names, from sample to sample.
pub fn read_stack(target: &PhpTarget, out: &mut Vec<PhpFrame>) -> Result<bool, PhpError> {
    walk::Walker::new(target).walk(target.pid, out)
}

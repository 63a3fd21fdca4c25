//! Where a Python upstream's CPU goes, by Python function: CPython's own call stacks, read
//! from outside the process, with the native function a sample ran in when Python had
//! called into C.
//!
//! perf samples of a CPython process name the interpreter's loop
//! (`_PyEval_EvalFrameDefault`), not the Python functions it runs; those are in the
//! interpreter's data. [`detect`] finds CPython in a process (its executable, or a mapped
//! libpython), the address of `_PyRuntime` from the file's dynamic symbols and the version
//! from `Py_Version` (exported since 3.11), which picks the struct layout ([`Offsets`]).
//! The sampler then reads, for a sampled thread, its thread state (found by its Linux
//! thread id in the interpreters' lists), `cframe->current_frame` and the
//! `_PyInterpreterFrame`s behind it through `previous`, each frame's code object naming
//! the function (`co_qualname`), its file (`co_filename`) and its first line
//! (`co_firstlineno`), and the frame's last instruction (`prev_instr`) the line it runs
//! ([`lines`]), with process_vm_readv, without stopping the process.
//!
//! **Mixed stacks.** Each sample is paced by the thread's own CPU time (a perf CPU-clock
//! event per thread, as the PHP sampler) and carries the instruction the thread was
//! running, its user registers and a copy of the top of its user stack, which the native
//! profiler's unwinder walks. Each native frame of the eval loop is replaced by the Python
//! frames that call of it ran, and the native frames of other objects are kept where they
//! are ([`mixed`]): a C function between two Python functions (libc's `qsort` calling a
//! ctypes callback, a C extension calling back into Python) is shown where it ran, and a
//! C leaf (libm's `__sin_fma` under `math.sin`, json's accelerator in `_json.*.so`, the
//! kernel) lies under its Python caller, so `compute_report → __sin_fma` reads as one
//! path. The interpreter's own native frames are left out; inside the interpreter, the
//! leaf is the Python function itself (its bytecode's own work).
//!
//! **The GIL.** A thread that waits for the GIL sleeps in a futex (3.11's `take_gil`
//! waits on a condition variable with a timeout, it does not spin), so it is off CPU and
//! its CPU-clock event records nothing: waiting threads are never counted as running
//! Python code. A thread that runs C code with the GIL released (hashing, compression, a
//! socket's system call) is on CPU and is counted, under its Python caller.
//!
//! What it supports: CPython 3.11 on x86-64 Linux (the offsets table,
//! [`offsets::OFFSETS`], says how each row was checked). Another version is refused with
//! [`PyError::UnknownVersion`], and the upstream is sampled by native functions instead.
//!
//! What it needs of the kernel: process_vm_readv on the process (the permission of
//! ptrace attach: root or CAP_SYS_PTRACE, or the same user with kernel.yama.ptrace_scope
//! 0), and perf_event_open on its threads (as the native profiler).

mod binary;
mod clocks;
mod lines;
mod mixed;
mod offsets;
mod profiler;
mod sampler;
mod walk;

use std::io;

pub use offsets::Offsets;
pub use profiler::PyProfiler;
pub use sampler::{PySampler, PyStacks};
pub use walk::MAX_DEPTH;

/// One frame of a Python stack.
pub use super::ScriptFrame as PyFrame;

/// Why Python frames cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PyError {
    #[error(
        "{0} is not supported: Python frames can be read from CPython 3.11; profile by \
         native functions only, or run a supported Python"
    )]
    UnknownVersion(String),
    #[error(
        "{path} does not export _PyRuntime (built with hidden symbols?); Python frames need \
         a build that exports it, as distribution packages do"
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
    #[error("Python sampling frequency {0} Hz is out of range (1 to 10000)")]
    Frequency(u32),
    #[error(
        "cannot open a perf CPU-clock event on the threads of pid {pid}: {source}; grant \
         CAP_PERFMON, run as root, or set kernel.perf_event_paranoid to 1 or less"
    )]
    Perf {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("cannot start the Python sampler thread: {0}")]
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

/// A CPython process whose stacks can be read: where its runtime state is, how its structs
/// are laid out, and which code is the interpreter's own.
#[derive(Clone, Debug)]
pub struct PyTarget {
    pid: u32,
    version: String,
    binary: String,
    runtime: u64,
    offsets: &'static Offsets,
    /// The executable mappings of the interpreter's file: a sampled instruction in them is
    /// the interpreter's work for the Python leaf, not a native frame of its own.
    interpreter_code: Vec<(u64, u64)>,
}

impl PyTarget {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `3.11.2`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The file that holds the interpreter: the executable or a libpython.
    pub fn binary(&self) -> &str {
        &self.binary
    }

    /// The run-time address of `_PyRuntime`.
    pub fn runtime(&self) -> u64 {
        self.runtime
    }

    pub fn offsets(&self) -> &'static Offsets {
        self.offsets
    }

    /// Whether a sampled instruction lies in the interpreter's own code.
    pub fn in_interpreter(&self, ip: u64) -> bool {
        self.interpreter_code
            .iter()
            .any(|&(start, end)| (start..end).contains(&ip))
    }
}

/// Detects a CPython process (its exe or a mapped libpython); Ok(None) when it is not one.
///
/// Also reads the interpreters' list once, so that a missing permission shows here and not
/// as a sampler that never counts anything.
pub fn detect(pid: u32) -> Result<Option<PyTarget>, PyError> {
    let Some(target) = binary::find_interpreter(pid)? else {
        return Ok(None);
    };
    let at = target.runtime + target.offsets.runtime_interpreters_head;
    walk::Memory::new(pid)
        .read_u64(at)
        .map_err(|source| PyError::Read {
            pid,
            addr: at,
            what: "_PyRuntime.interpreters.head",
            source,
        })?;
    tracing::debug!(
        pid,
        version = %target.version,
        binary = %target.binary,
        runtime = format_args!("{:#x}", target.runtime),
        "CPython found"
    );
    Ok(Some(target))
}

/// One read of the Python stack of thread `tid`, leaf first (tests use it): Ok(true) when
/// it was truncated; an empty stack when the thread runs no Python code.
pub fn read_stack(target: &PyTarget, tid: u32, out: &mut Vec<PyFrame>) -> Result<bool, PyError> {
    walk::Walker::new(target).walk(tid, out)
}

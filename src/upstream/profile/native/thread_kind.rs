//! A runtime's garbage collector and JIT compiler threads, told by their names: all the
//! CPU of such a thread is the runtime's cost of the code, whatever function it runs
//! (HotSpot's GC workers spend much of theirs in libc's `memset`/`memcpy` and the kernel's
//! page faults, which no function rule calls `gc`).
//!
//! The names are the ones HotSpot gives its threads (Linux keeps 15 characters): `GC
//! Thread#0`, `G1 Main Marker`, `G1 Conc#0`, `G1 Refine#0`, `G1 Service`, `ZWorker…`,
//! `Shenandoah…`; `C1 CompilerThre`, `C2 CompilerThre`. V8's worker threads (`V8
//! DefaultWorke` in node) run both concurrent marking and concurrent compiles, and node's
//! libuv pool runs the application's work: their names say neither, so their samples are
//! told by function, by the rules (`gc`, `jit_compiler`).

use std::collections::HashMap;

/// What a sampled thread is, by its name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadKind {
    #[default]
    Other,
    Gc,
    Compiler,
}

/// Name prefixes of garbage collector threads.
const GC: [&str; 7] = [
    "GC Thread",
    "G1 Main Marker",
    "G1 Conc",
    "G1 Refine",
    "G1 Service",
    "ZWorker",
    "Shenandoah",
];
/// Name prefixes of JIT compiler threads.
const COMPILER: [&str; 3] = ["C1 CompilerThre", "C2 CompilerThre", "JVMCI"];

/// Threads remembered at most; past it the cache starts again (threads come and go).
const MAX_THREADS: usize = 4096;

impl ThreadKind {
    pub fn of_name(name: &str) -> ThreadKind {
        if GC.iter().any(|p| name.starts_with(p)) {
            ThreadKind::Gc
        } else if COMPILER.iter().any(|p| name.starts_with(p)) {
            ThreadKind::Compiler
        } else {
            ThreadKind::Other
        }
    }

    /// The component every sample of such a thread counts under, if any.
    pub fn component(self) -> Option<&'static str> {
        match self {
            ThreadKind::Other => None,
            ThreadKind::Gc => Some("gc"),
            ThreadKind::Compiler => Some("jit_compiler"),
        }
    }

    /// Two bits, for a drained stack's head word.
    pub fn bits(self) -> u64 {
        match self {
            ThreadKind::Other => 0,
            ThreadKind::Gc => 1,
            ThreadKind::Compiler => 2,
        }
    }

    pub fn from_bits(bits: u64) -> ThreadKind {
        match bits & 3 {
            1 => ThreadKind::Gc,
            2 => ThreadKind::Compiler,
            _ => ThreadKind::Other,
        }
    }
}

/// The kinds of one process's threads, each read once from /proc/PID/task/TID/comm.
#[derive(Debug, Default)]
pub struct ThreadKinds {
    pid: u32,
    kinds: HashMap<u32, ThreadKind>,
}

impl ThreadKinds {
    pub fn new(pid: u32) -> ThreadKinds {
        ThreadKinds {
            pid,
            kinds: HashMap::new(),
        }
    }

    /// The kind of thread `tid`; `Other` when its name cannot be read (it exited).
    pub fn get(&mut self, tid: u32) -> ThreadKind {
        if let Some(&kind) = self.kinds.get(&tid) {
            return kind;
        }
        if self.kinds.len() >= MAX_THREADS {
            self.kinds.clear();
        }
        let name = std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid));
        let kind = name.map_or(ThreadKind::Other, |n| ThreadKind::of_name(n.trim_end()));
        self.kinds.insert(tid, kind);
        kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hotspot_threads_by_name_and_v8_workers_left_to_the_functions() {
        for gc in ["GC Thread#0", "G1 Main Marker", "G1 Conc#0", "G1 Refine#0"] {
            assert_eq!(ThreadKind::of_name(gc), ThreadKind::Gc, "{gc}");
        }
        for jit in ["C1 CompilerThre", "C2 CompilerThre"] {
            assert_eq!(ThreadKind::of_name(jit), ThreadKind::Compiler, "{jit}");
        }
        for other in [
            "V8 DefaultWorke",
            "node",
            "HTTP-Dispatcher",
            "VM Thread",
            "java",
        ] {
            assert_eq!(ThreadKind::of_name(other), ThreadKind::Other, "{other}");
        }
        for kind in [ThreadKind::Other, ThreadKind::Gc, ThreadKind::Compiler] {
            assert_eq!(ThreadKind::from_bits(kind.bits()), kind);
        }
    }

    #[test]
    fn a_thread_of_this_process_is_read_from_proc() {
        let mut kinds = ThreadKinds::new(std::process::id());
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert_eq!(kinds.get(tid), ThreadKind::Other);
        assert_eq!(kinds.get(u32::MAX), ThreadKind::Other, "no such thread");
    }
}

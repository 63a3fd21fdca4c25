//! Reading one thread's Python stack: its thread state (found by Linux thread id in the
//! interpreters' lists, and kept), `cframe->current_frame`, then each
//! `_PyInterpreterFrame` through `previous` to the thread's first frame, naming each by
//! its code object.
//!
//! The process runs on while we read: a frame may be popped and its memory reused, a
//! thread state freed. Every value read is a claim: a code object must hold strings whose
//! header makes sense, a thread state must carry the thread id it was found under (else
//! the lists are read again), and a stack whose reads fail midway is kept up to where it
//! was read, under `[truncated]`, and counted as torn.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lines;
use super::{Offsets, PyError, PyFrame, PyTarget};

pub(super) use crate::upstream::profile::php::memory::Memory;

/// Frames read per stack at most; deeper stacks keep their leaf-most frames.
pub const MAX_DEPTH: usize = 256;
/// Thread states read per scan of the interpreters' lists at most (a bound against a
/// list torn into a cycle).
const MAX_THREADS: usize = 4096;
/// Characters of a name read at most.
const MAX_NAME: u64 = 512;
/// How long a thread found without a thread state is taken for one that has none.
const STRANGER_FOR: Duration = Duration::from_millis(100);
/// Bytes of a frame read at once: every field the walk needs in any row of the table
/// (checked by a test).
const FRAME_READ: usize = 128;
/// `_PyInterpreterFrame.owner` of a frame owned by C code (3.12's entry shims): no
/// Python function of its own.
const FRAME_OWNED_BY_CSTACK: u8 = 3;

/// Bytes of a location table read at most: a table a byte or two per instruction, so a
/// function of tens of thousands of instructions; a longer one (generated code) gives
/// its frames their first line.
const MAX_LINETABLE: u64 = 64 * 1024;

/// A code object's names and location table, shared by every frame of it.
#[derive(Clone)]
struct Code {
    function: Arc<str>,
    file: Arc<str>,
    first_line: u32,
    /// `co_linetable` ([`lines`]); empty when it could not be read.
    linetable: Arc<[u8]>,
}

/// Walks stacks of one process; keeps the thread states found and the code objects named.
pub struct Walker {
    pid: u32,
    memory: Memory,
    offsets: &'static Offsets,
    runtime: u64,
    threads: HashMap<u32, u64>,
    /// Threads without a thread state at the last scan (a C library's threads, or one
    /// that Python has not bound yet), and when: not scanned for again within
    /// [`STRANGER_FOR`], so a busy one costs no scan per sample.
    strangers: HashMap<u32, Instant>,
    codes: HashMap<u64, Code>,
    buf: Vec<u8>,
    /// Of each frame of the last walk, leaf first: whether an eval loop entered it
    /// ([`Offsets::frame_is_entry`]), which [`super::mixed`] matches to the native
    /// `_PyEval_EvalFrameDefault` frames.
    pub entries: Vec<bool>,
    /// Walks cut short by a read that failed or made no sense.
    pub torn: u64,
}

fn word(bytes: &[u8], at: u64) -> u64 {
    let at = at as usize;
    bytes
        .get(at..at + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

impl Walker {
    pub fn new(target: &PyTarget) -> Walker {
        Walker {
            pid: target.pid,
            memory: Memory::new(target.pid),
            offsets: target.offsets,
            runtime: target.runtime,
            threads: HashMap::new(),
            strangers: HashMap::new(),
            codes: HashMap::new(),
            buf: vec![0; 256],
            entries: Vec::with_capacity(MAX_DEPTH),
            torn: 0,
        }
    }

    /// process_vm_readv calls so far.
    pub fn reads(&self) -> u64 {
        self.memory.reads
    }

    /// Forgets the code objects named: their memory may since hold other objects.
    pub fn clear_cache(&mut self) {
        self.codes.clear();
    }

    fn read(&mut self, addr: u64, len: usize, what: &'static str) -> Result<&[u8], PyError> {
        let pid = self.pid;
        let buf = &mut self.buf[..len];
        self.memory
            .read(addr, buf)
            .map_err(|source| PyError::Read {
                pid,
                addr,
                what,
                source,
            })?;
        Ok(&self.buf[..len])
    }

    fn read_u64(&mut self, addr: u64, what: &'static str) -> Result<u64, PyError> {
        self.read(addr, 8, what).map(|b| word(b, 0))
    }

    /// Reads every interpreter's thread states into `threads`.
    fn scan_threads(&mut self) -> Result<(), PyError> {
        let o = self.offsets;
        self.threads.clear();
        let mut interp = self.read_u64(
            self.runtime + o.runtime_interpreters_head,
            "_PyRuntime.interpreters.head",
        )?;
        let mut seen = 0;
        while interp != 0 && seen < MAX_THREADS {
            let mut thread =
                self.read_u64(interp + o.interpreter_threads_head, "interp->threads.head")?;
            while thread != 0 && seen < MAX_THREADS {
                seen += 1;
                let bytes = self.read(thread, o.thread_bytes(), "a thread state")?;
                let tid = word(bytes, o.thread_native_id) as u32;
                let next = word(bytes, o.thread_next);
                self.threads.insert(tid, thread);
                thread = next;
            }
            interp = self.read_u64(interp + o.interpreter_next, "interp->next")?;
        }
        Ok(())
    }

    /// The current frame of thread `tid`, 0 when it runs no Python code; `None` when the
    /// thread has no thread state (a thread Python does not know).
    fn current_frame(&mut self, tid: u32) -> Result<Option<u64>, PyError> {
        let o = self.offsets;
        if let Some(since) = self.strangers.get(&tid) {
            if since.elapsed() < STRANGER_FOR {
                return Ok(None);
            }
            self.strangers.remove(&tid);
        }
        for attempt in 0..2 {
            if attempt == 1 || !self.threads.contains_key(&tid) {
                self.scan_threads()?;
            }
            let Some(&thread) = self.threads.get(&tid) else {
                self.strangers.insert(tid, Instant::now());
                return Ok(None);
            };
            let bytes = self.read(thread, o.thread_bytes(), "a thread state")?;
            if word(bytes, o.thread_native_id) as u32 != tid {
                continue;
            }
            let cframe = word(bytes, o.thread_cframe);
            if cframe == 0 {
                return Ok(Some(0));
            }
            return self
                .read_u64(cframe + o.cframe_current_frame, "cframe->current_frame")
                .map(Some);
        }
        Ok(None)
    }

    /// Reads the Python stack of thread `tid` into `out`, leaf first; Ok(true) when it was
    /// cut (deeper than [`MAX_DEPTH`], or a read failed midway: torn).
    pub fn walk(&mut self, tid: u32, out: &mut Vec<PyFrame>) -> Result<bool, PyError> {
        out.clear();
        self.entries.clear();
        let Some(mut frame) = self.current_frame(tid)? else {
            return Ok(false);
        };
        let o = self.offsets;
        // Frames live in the thread's data stack, callers below callees, as PHP's VM
        // stack: a window read ending at the current frame usually holds its callers too
        // (one system call for a stack, not one per frame). Bytes of the last walk are
        // not trusted.
        self.memory.reset();
        while frame != 0 {
            if out.len() == MAX_DEPTH {
                return Ok(true);
            }
            let Ok(bytes) = self.memory.read_stack::<FRAME_READ>(frame) else {
                self.torn += 1;
                return Ok(true);
            };
            let code_addr = word(&bytes, o.frame_code);
            let prev_instr = word(&bytes, o.frame_prev_instr);
            let previous = word(&bytes, o.frame_previous);
            let owner = bytes.get(o.frame_owner as usize).copied().unwrap_or(0);
            let entry = bytes.get(o.frame_is_entry as usize).copied().unwrap_or(0) != 0;
            if owner != FRAME_OWNED_BY_CSTACK {
                let Some(code) = self.code(code_addr) else {
                    self.torn += 1;
                    return Ok(true);
                };
                let at_line = self.line(&code, code_addr, prev_instr);
                out.push(PyFrame {
                    function: code.function,
                    file: code.file,
                    line: code.first_line,
                    at_line,
                });
                self.entries.push(entry);
            }
            frame = previous;
        }
        Ok(false)
    }

    /// The names of the code object at `addr` (cached); `None` when it does not read as one.
    fn code(&mut self, addr: u64) -> Option<Code> {
        if let Some(code) = self.codes.get(&addr) {
            return Some(code.clone());
        }
        let o = self.offsets;
        let bytes = self.read(addr, o.code_bytes(), "a code object").ok()?;
        let (qualname, filename) = (word(bytes, o.code_qualname), word(bytes, o.code_filename));
        let first_line = word(bytes, o.code_firstlineno) as u32;
        let table = word(bytes, o.code_linetable);
        let function: Arc<str> = self.string(qualname)?.into();
        let file: Arc<str> = self.string(filename)?.into();
        let linetable = self.bytes(table).unwrap_or_default().into();
        // Code objects are bounded by the program's functions; a bound keeps code made at
        // run time (exec, lambdas in a loop) from growing the cache forever.
        if self.codes.len() > 1 << 16 {
            self.codes.clear();
        }
        let code = Code {
            function,
            file,
            first_line,
            linetable,
        };
        self.codes.insert(addr, code.clone());
        Some(code)
    }

    /// The line a frame of `code` (at `addr`) runs: its last instruction started
    /// (`prev_instr`) looked up in the location table. Before its first instruction (a
    /// frame just pushed), or when the table or the instruction does not read, the
    /// function's first line, as CPython itself answers.
    fn line(&self, code: &Code, addr: u64, prev_instr: u64) -> u32 {
        let start = addr + self.offsets.code_adaptive;
        let Some(unit) = prev_instr.checked_sub(start).map(|b| b / 2) else {
            return code.first_line;
        };
        lines::line_at(&code.linetable, code.first_line, unit).unwrap_or(code.first_line)
    }

    /// A `bytes` object's content; `None` when it does not read as one.
    fn bytes(&mut self, addr: u64) -> Option<Vec<u8>> {
        let o = self.offsets;
        let size = self.read_u64(addr + o.bytes_size, "a bytes' size").ok()?;
        if size > MAX_LINETABLE {
            return None;
        }
        let mut out = vec![0; size as usize];
        self.memory.read(addr + o.bytes_data, &mut out).ok()?;
        Some(out)
    }

    /// A compact `str` object's text; `None` when its header makes no sense.
    fn string(&mut self, addr: u64) -> Option<String> {
        let o = self.offsets;
        let header = self
            .read(addr, o.unicode_compact_data as usize, "a str")
            .ok()?;
        let length = word(header, o.unicode_length);
        let state = header
            .get(o.unicode_state as usize..o.unicode_state as usize + 4)
            .and_then(|w| w.try_into().ok())
            .map(u32::from_ne_bytes)?;
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
        if compact == 0 || !matches!(kind, 1 | 2 | 4) || length > MAX_NAME {
            return None;
        }
        let data = if ascii == 1 {
            o.unicode_ascii_data
        } else {
            o.unicode_compact_data
        };
        let len = (length * u64::from(kind)) as usize;
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let bytes = self.read(addr + data, len, "a str's text").ok()?;
        decode(bytes, kind)
    }
}

/// The characters of a compact string of `kind` bytes each (Latin-1, UCS-2, UCS-4).
fn decode(bytes: &[u8], kind: u32) -> Option<String> {
    match kind {
        1 => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        2 => bytes
            .chunks_exact(2)
            .map(|c| char::from_u32(u32::from(u16::from_ne_bytes([c[0], c[1]]))))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_read_holds_every_field_of_every_row() {
        for (version, offsets) in super::super::offsets::OFFSETS {
            assert!(offsets.frame_bytes() <= FRAME_READ, "{version:?}");
        }
    }

    #[test]
    fn strings_of_each_kind() {
        assert_eq!(
            decode(b"compute_report", 1).as_deref(),
            Some("compute_report")
        );
        assert_eq!(decode(&[0xe9], 1).as_deref(), Some("é"));
        let ucs2: Vec<u8> = "λx".encode_utf16().flat_map(u16::to_ne_bytes).collect();
        assert_eq!(decode(&ucs2, 2).as_deref(), Some("λx"));
        let ucs4: Vec<u8> = "😀"
            .chars()
            .flat_map(|c| (c as u32).to_ne_bytes())
            .collect();
        assert_eq!(decode(&ucs4, 4).as_deref(), Some("😀"));
        assert_eq!(decode(&0xD800u32.to_ne_bytes(), 4), None, "a surrogate");
    }
}

//! One walk of the PHP call stack: from `EG(current_execute_data)` along
//! `prev_execute_data`, naming each frame's `zend_function` once and remembering the name
//! by the function's address.
//!
//! Fibers need no special case. `Fiber::start`, `::resume` and `::throw` write the
//! resumer's `EG(current_execute_data)` into the `prev_execute_data` of the fiber's bottom
//! frame (a zeroed frame whose func is the engine's nameless internal `zend_fiber_function`)
//! before switching, and `Fiber::suspend` clears it (Zend/zend_fibers.c). So while fiber
//! code runs, the walk goes leaf → fiber frames → that bottom frame (skipped: no name) →
//! the `Fiber::resume` frame → the event loop's frames → `{main}`, which is the stack a
//! reader wants. A suspended fiber's frames are not on the walk at all, which is right for
//! an on-CPU sample.
//!
//! What is read is not trusted: a frame or function is read while the VM changes it, a
//! freed closure's memory can be reused. Names longer than a bound or a type byte that is
//! no function type end in a placeholder frame, never in a large allocation, and the walk
//! stops after [`MAX_DEPTH`] frames or at the first frame it cannot read.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use super::memory::Memory;
use super::offsets::Offsets;
use super::{PhpError, PhpFrame, PhpTarget};

/// Frames kept per sample; a deeper stack keeps its leaf-most frames and is flagged as
/// truncated (a recursion gone deep, or a cycle read from torn memory).
pub const MAX_DEPTH: usize = 128;
/// Frames visited per sample, named or not (skipped bottom-of-fiber frames), before giving
/// up: bounds a walk that loops on torn pointers.
const MAX_HOPS: usize = 4 * MAX_DEPTH;
/// Function names (with the class) and file names longer than these are read as garbage.
const MAX_NAME: u64 = 1024;
const MAX_FILE: u64 = 4096;
/// Names kept before the cache is emptied: a long-running process that creates functions
/// (eval, closures in new files) keeps a bounded cache, refilled as they are met again.
pub const MAX_CACHED: usize = 16 * 1024;
/// The characters a string read brings with its header, enough for most names.
const INLINE_CHARS: usize = 96;

/// ZEND_INTERNAL_FUNCTION, ZEND_USER_FUNCTION, ZEND_EVAL_CODE (Zend/zend_compile.h).
const INTERNAL_FUNCTION: u8 = 1;
const USER_FUNCTION: u8 = 2;
const EVAL_CODE: u8 = 4;

/// What a `zend_function` turns into on a stack.
#[derive(Clone, Debug)]
enum Function {
    Named(PhpFrame),
    /// A script's top-level code (no function name): `{main}` at the bottom of the stack,
    /// `{include}` when an include/require/eval runs it from a caller's frame.
    TopLevel { main: PhpFrame, include: PhpFrame },
    /// The engine's nameless internal frames (a fiber's bottom frame): not a PHP function.
    Skip,
}

/// Walks one process's stack; keeps its name cache between walks.
pub struct Walker {
    memory: Memory,
    offsets: &'static Offsets,
    executor_globals: u64,
    functions: HashMap<u64, Function>,
    scratch: Vec<u8>,
    unknown: PhpFrame,
}

impl Walker {
    pub fn new(target: &PhpTarget) -> Walker {
        Walker {
            memory: Memory::new(target.pid),
            offsets: target.offsets,
            executor_globals: target.executor_globals,
            functions: HashMap::new(),
            scratch: Vec::new(),
            unknown: marker("[unknown]"),
        }
    }

    /// Forgets every name: a function's address may since hold another function (a freed
    /// closure's memory reused).
    pub fn clear_cache(&mut self) {
        self.functions.clear();
    }

    /// System calls made so far.
    pub fn reads(&self) -> u64 {
        self.memory.reads
    }

    /// Reads the current stack into `out`, leaf first; Ok(true) when it was cut (deeper
    /// than [`MAX_DEPTH`], or a frame could not be read after the first). An error means
    /// not even the leaf could be read; Ok with no frames means PHP runs no code (between
    /// requests, or still starting).
    pub fn walk(&mut self, pid: u32, out: &mut Vec<PhpFrame>) -> Result<bool, PhpError> {
        out.clear();
        self.memory.reset();
        let o = self.offsets;
        let leaf_at = self.executor_globals + o.eg_current_execute_data;
        let mut frame = self.memory.read_u64(leaf_at).map_err(|source| PhpError::Read {
            pid,
            addr: leaf_at,
            what: "EG(current_execute_data)",
            source,
        })?;
        let mut hops = 0;
        while frame != 0 {
            hops += 1;
            if out.len() == MAX_DEPTH || hops > MAX_HOPS || frame % 8 != 0 {
                return Ok(true);
            }
            // `func` through `prev_execute_data` in one piece (32 bytes in 8.1–8.4).
            let bytes: [u8; 32] = match self.memory.read_stack(frame + o.ex_func) {
                Ok(bytes) => bytes,
                Err(source) if out.is_empty() => {
                    return Err(PhpError::Read {
                        pid,
                        addr: frame,
                        what: "zend_execute_data",
                        source,
                    })
                }
                Err(_) => return Ok(true),
            };
            let func = word(&bytes, 0);
            let prev = word(&bytes, (o.ex_prev - o.ex_func) as usize);
            if func != 0 {
                match self.function(func) {
                    Some(Function::Named(named)) => out.push(named.clone()),
                    Some(Function::TopLevel { main, include }) => {
                        out.push(if prev == 0 { main.clone() } else { include.clone() })
                    }
                    Some(Function::Skip) => {}
                    None => out.push(self.unknown.clone()),
                }
            }
            frame = prev;
        }
        Ok(false)
    }

    /// The cached naming of the function at `addr`, reading it on a miss. None when it
    /// reads as garbage (not cached: the next sample tries again).
    fn function(&mut self, addr: u64) -> Option<&Function> {
        if !self.functions.contains_key(&addr) {
            let function = self.read_function(addr).ok()?;
            if self.functions.len() >= MAX_CACHED {
                self.functions.clear();
            }
            self.functions.insert(addr, function);
        }
        self.functions.get(&addr)
    }

    fn read_function(&mut self, addr: u64) -> io::Result<Function> {
        let o = self.offsets;
        if addr % 8 != 0 {
            return Err(garbage());
        }
        // The whole head at once; an internal function is shorter than a user one, and
        // when the longer read runs off the end of its mapping the common part will do.
        let mut head = [0u8; 256];
        let span = (o.function_span() as usize).min(head.len());
        if self.memory.read(addr, &mut head[..span]).is_err() {
            let common = (o.fn_scope + 8) as usize;
            self.memory.read(addr, &mut head[..common])?;
        }
        let kind = head[o.fn_type as usize];
        if !matches!(kind, INTERNAL_FUNCTION | USER_FUNCTION | EVAL_CODE) {
            return Err(garbage());
        }
        let name_at = word(&head, o.fn_name as usize);
        let scope_at = word(&head, o.fn_scope as usize);
        let user = kind != INTERNAL_FUNCTION;
        let (file, line) = if user {
            let file = self.read_string(word(&head, o.op_filename as usize), MAX_FILE)?;
            let at = o.op_line_start as usize;
            let line = u32::from_ne_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
            (file, line)
        } else {
            (Arc::from(""), 0)
        };
        if name_at == 0 {
            if !user {
                return Ok(Function::Skip);
            }
            let frame = |function: &str| PhpFrame {
                function: Arc::from(function),
                file: file.clone(),
                line: 0,
            };
            return Ok(Function::TopLevel {
                main: frame("{main}"),
                include: frame("{include}"),
            });
        }
        let name = self.read_string(name_at, MAX_NAME)?;
        // PHP prints methods, static or not, and closures bound in a class as
        // `Class::name`; a closure's own name is `{closure}` (8.1–8.3) or
        // `{closure:file:line}` (8.4), and a namespaced function's name carries its
        // namespace already.
        let function = if scope_at != 0 {
            let class_at = self.memory.read_u64(scope_at + o.ce_name)?;
            let class = self.read_string(class_at, MAX_NAME)?;
            Arc::from(format!("{class}::{name}"))
        } else {
            name
        };
        Ok(Function::Named(PhpFrame {
            function,
            file,
            line,
        }))
    }

    /// A `zend_string`'s characters: header and the first characters in one read, the rest
    /// in a second when the string is long. Not UTF-8 (PHP allows any bytes in names):
    /// replaced characters, never an error.
    fn read_string(&mut self, addr: u64, max: u64) -> io::Result<Arc<str>> {
        let o = self.offsets;
        if addr == 0 || addr % 8 != 0 {
            return Err(garbage());
        }
        let header = o.str_val as usize;
        let mut inline = [0u8; 24 + INLINE_CHARS];
        let inline = &mut inline[..header + INLINE_CHARS];
        let got = if self.memory.read(addr, inline).is_ok() {
            inline.len()
        } else {
            // A short string at the very end of a mapping.
            self.memory.read(addr, &mut inline[..header])?;
            header
        };
        let len = word(inline, o.str_len as usize);
        if len > max {
            return Err(garbage());
        }
        let len = len as usize;
        let text = if header + len <= got {
            String::from_utf8_lossy(&inline[header..header + len])
        } else {
            self.scratch.resize(len, 0);
            self.memory.read(addr + o.str_val, &mut self.scratch)?;
            String::from_utf8_lossy(&self.scratch)
        };
        Ok(Arc::from(text.as_ref()))
    }
}

/// A frame that is no PHP function: `[truncated]`, `[unknown]`.
pub fn marker(name: &str) -> PhpFrame {
    PhpFrame {
        function: Arc::from(name),
        file: Arc::from(""),
        line: 0,
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(word)
}

fn garbage() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "implausible interpreter data")
}

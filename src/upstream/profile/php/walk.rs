//! One walk of the PHP call stack: from `EG(current_execute_data)` along
//! `prev_execute_data`, naming each frame's `zend_function` once and remembering the name
//! by the fields it is made of, so that a frame costs one read once its function is known.
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
/// Walks tried per sample before a torn stack is given up.
pub const ATTEMPTS: usize = 3;
/// Names kept before the cache is emptied: a long-running process that creates functions
/// (eval, closures in new files) keeps a bounded cache, refilled as they are met again.
pub const MAX_CACHED: usize = 16 * 1024;
/// The characters a string read brings with its header, enough for most names.
const INLINE_CHARS: usize = 96;

/// ZEND_INTERNAL_FUNCTION, ZEND_USER_FUNCTION, ZEND_EVAL_CODE (Zend/zend_compile.h).
const INTERNAL_FUNCTION: u8 = 1;
const USER_FUNCTION: u8 = 2;
const EVAL_CODE: u8 = 4;

/// The fields of a `zend_function` its name is made of, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Head {
    user: bool,
    name: u64,
    scope: u64,
    filename: u64,
    line: u32,
}

/// What a `zend_function` turns into on a stack.
#[derive(Clone, Debug)]
enum Function {
    Named {
        frame: PhpFrame,
        user: bool,
    },
    /// A script's top-level code (no function name): `{main}` at the bottom of the stack,
    /// `{include}` when an include/require/eval runs it from a caller's frame.
    TopLevel {
        main: PhpFrame,
        include: PhpFrame,
    },
    /// The engine's nameless internal frames (a fiber's bottom frame): not a PHP function.
    Skip,
}

/// Walks one process's stack; keeps its name cache between walks.
pub struct Walker {
    memory: Memory,
    offsets: &'static Offsets,
    executor_globals: u64,
    functions: HashMap<Head, Function>,
    scratch: Vec<u8>,
    /// Walks found torn so far.
    pub torn: u64,
}

impl Walker {
    pub fn new(target: &PhpTarget) -> Walker {
        Walker {
            memory: Memory::new(target.pid),
            offsets: target.offsets,
            executor_globals: target.executor_globals,
            functions: HashMap::new(),
            scratch: Vec::new(),
            torn: 0,
        }
    }

    /// Forgets every name: the strings a cached head points to may since have been freed
    /// and their memory reused.
    pub fn clear_cache(&mut self) {
        self.functions.clear();
    }

    /// System calls made so far.
    pub fn reads(&self) -> u64 {
        self.memory.reads
    }

    /// Reads the current stack into `out`, leaf first; Ok(true) when it was cut (deeper
    /// than [`MAX_DEPTH`], or a frame could not be read after the first). Ok with no
    /// frames means PHP runs no code (between requests, or still starting).
    ///
    /// The process runs on while its stack is read, so a walk can mix two moments: the
    /// leaf frame's slot reused by the next call before it is read, a fiber suspended
    /// under the walk. Such a walk ends at a frame that no real stack ends at (an internal
    /// function, a fiber's bottom frame): a real one ends in user code, the script's
    /// `{main}` or a callback the engine called with no PHP caller (shutdown functions,
    /// destructors at shutdown). A torn walk is tried again, up to [`ATTEMPTS`] times, and
    /// then is an error: dropping it rather than keeping a stack that never happened.
    pub fn walk(&mut self, pid: u32, out: &mut Vec<PhpFrame>) -> Result<bool, PhpError> {
        for _ in 0..ATTEMPTS {
            if let Some(truncated) = self.walk_once(pid, out)? {
                return Ok(truncated);
            }
            self.torn += 1;
        }
        out.clear();
        Err(PhpError::Torn { pid })
    }

    /// One attempt: None when it was torn.
    fn walk_once(&mut self, pid: u32, out: &mut Vec<PhpFrame>) -> Result<Option<bool>, PhpError> {
        out.clear();
        self.memory.reset();
        let o = self.offsets;
        let leaf_at = self.executor_globals + o.eg_current_execute_data;
        let mut frame = self
            .memory
            .read_u64(leaf_at)
            .map_err(|source| PhpError::Read {
                pid,
                addr: leaf_at,
                what: "EG(current_execute_data)",
                source,
            })?;
        let mut hops = 0;
        // Whether the last frame seen runs user code.
        let mut bottom_user = true;
        while frame != 0 {
            hops += 1;
            if out.len() == MAX_DEPTH || hops > MAX_HOPS {
                return Ok(Some(true));
            }
            if frame % 8 != 0 {
                return Ok(None);
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
                Err(_) => return Ok(Some(true)),
            };
            let func = word(&bytes, 0);
            let prev = word(&bytes, (o.ex_prev - o.ex_func) as usize);
            if func != 0 {
                match self.function(func) {
                    Some(Function::Named { frame, user }) => {
                        bottom_user = *user;
                        out.push(frame.clone());
                    }
                    Some(Function::TopLevel { main, include }) => {
                        bottom_user = true;
                        out.push(if prev == 0 {
                            main.clone()
                        } else {
                            include.clone()
                        });
                    }
                    Some(Function::Skip) => bottom_user = false,
                    // Garbage where a function should be: the frame was reused under us.
                    None => return Ok(None),
                }
            }
            frame = prev;
        }
        Ok(bottom_user.then_some(false))
    }

    /// The naming of the function at `addr`: its head is read every time (one read), the
    /// names only for a head not seen before. None when it reads as garbage (not
    /// cached: the next sample tries again).
    ///
    /// The cache is keyed by the head, not by the function's address: a closure's
    /// `zend_function` is a copy inside its Closure object, freed with it, and the next
    /// closure, often of another declaration (same name `{closure}`, another line), is
    /// allocated at the same address; a script's functions are freed at the end of an FPM
    /// request (without opcache) and the next request's may land where they were. The
    /// head's pointers to the name, class and file strings and its line only match when
    /// the names do.
    fn function(&mut self, addr: u64) -> Option<&Function> {
        let head = self.read_head(addr).ok()?;
        if !self.functions.contains_key(&head) {
            let function = self.name(&head).ok()?;
            if self.functions.len() >= MAX_CACHED {
                self.functions.clear();
            }
            self.functions.insert(head, function);
        }
        self.functions.get(&head)
    }

    /// The fields of a `zend_function` that decide its name, in one read.
    fn read_head(&mut self, addr: u64) -> io::Result<Head> {
        let o = self.offsets;
        if addr % 8 != 0 {
            return Err(garbage());
        }
        // An internal function is shorter than a user one: when the longer read runs off
        // the end of its mapping, the common part will do.
        let mut bytes = [0u8; 256];
        let span = (o.function_span() as usize).min(bytes.len());
        let mut got = span;
        if self.memory.read(addr, &mut bytes[..span]).is_err() {
            got = (o.fn_scope + 8) as usize;
            self.memory.read(addr, &mut bytes[..got])?;
        }
        let kind = bytes[o.fn_type as usize];
        if !matches!(kind, INTERNAL_FUNCTION | USER_FUNCTION | EVAL_CODE) {
            return Err(garbage());
        }
        let user = kind != INTERNAL_FUNCTION;
        if user && got < span {
            return Err(garbage());
        }
        let (filename, line) = if user {
            let at = o.op_line_start as usize;
            let line = u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
            (word(&bytes, o.op_filename as usize), line)
        } else {
            (0, 0)
        };
        Ok(Head {
            user,
            name: word(&bytes, o.fn_name as usize),
            scope: word(&bytes, o.fn_scope as usize),
            filename,
            line,
        })
    }

    /// Reads the names a head points to.
    fn name(&mut self, head: &Head) -> io::Result<Function> {
        let o = self.offsets;
        let file = if head.user {
            self.read_string(head.filename, MAX_FILE)?
        } else {
            Arc::from("")
        };
        if head.name == 0 {
            if !head.user {
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
        let name = self.read_string(head.name, MAX_NAME)?;
        // PHP prints methods, static or not, and closures bound in a class as
        // `Class::name`; a closure's own name is `{closure}` (8.1–8.3, with the namespace:
        // `Ns\{closure}`) or `{closure:file:line}` (8.4), and a namespaced function's name
        // carries its namespace already.
        let function = if head.scope != 0 {
            let class_at = self.memory.read_u64(head.scope + o.ce_name)?;
            let class = self.read_string(class_at, MAX_NAME)?;
            Arc::from(format!("{class}::{name}"))
        } else {
            name
        };
        Ok(Function::Named {
            frame: PhpFrame {
                function,
                file,
                line: head.line,
            },
            user: head.user,
        })
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

/// A frame that is no PHP function: `[truncated]`.
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

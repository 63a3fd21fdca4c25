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
//! freed closure's memory can be reused. A name longer than a bound, a type byte that is
//! no function type or a misaligned pointer makes the walk torn (tried again, then
//! dropped), never a large allocation; the walk keeps at most [`MAX_DEPTH`] frames and
//! stops at the first frame it cannot read.

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
/// The most of a function's head read (the user-function fields end before 200 bytes in
/// 8.1–8.4).
const HEAD_BYTES: usize = 256;
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
    /// Per walk: the frames' functions and callers, and the functions' heads.
    funcs: Vec<u64>,
    prevs: Vec<u64>,
    heads: Vec<u8>,
    head_len: Vec<usize>,
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
            funcs: Vec::with_capacity(MAX_HOPS),
            prevs: Vec::with_capacity(MAX_HOPS),
            heads: Vec::new(),
            head_len: Vec::with_capacity(MAX_HOPS),
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
    ///
    /// Two passes: the frames first (func and caller of each, from the VM stack windows),
    /// then the heads of all their functions in one batched read, so that a sample costs
    /// a handful of system calls however deep the stack.
    fn walk_once(&mut self, pid: u32, out: &mut Vec<PhpFrame>) -> Result<Option<bool>, PhpError> {
        out.clear();
        self.memory.reset();
        self.funcs.clear();
        self.prevs.clear();
        let Some(chain_cut) = self.chain(pid)? else {
            return Ok(None);
        };
        let span = (self.offsets.function_span() as usize).min(HEAD_BYTES);
        if !self.read_heads(span) {
            return Ok(None);
        }
        let Some((depth_cut, bottom_user)) = self.name_frames(span, out) else {
            return Ok(None);
        };
        if chain_cut || depth_cut {
            return Ok(Some(true));
        }
        Ok(bottom_user.then_some(false))
    }

    /// The first pass: from `EG(current_execute_data)` down the callers, each frame's
    /// function and caller into `funcs` and `prevs`. Whether the chain was cut (too long,
    /// or unreadable past its first frame); None when it was torn.
    fn chain(&mut self, pid: u32) -> Result<Option<bool>, PhpError> {
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
        while frame != 0 {
            hops += 1;
            if hops > MAX_HOPS {
                return Ok(Some(true));
            }
            if !frame.is_multiple_of(8) {
                return Ok(None);
            }
            // `func` through `prev_execute_data` in one piece (32 bytes in 8.1–8.4).
            let bytes: [u8; 32] = match self.memory.read_stack(frame + o.ex_func) {
                Ok(bytes) => bytes,
                Err(source) if self.funcs.is_empty() => {
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
                if !func.is_multiple_of(8) {
                    return Ok(None);
                }
                self.funcs.push(func);
                self.prevs.push(prev);
            }
            frame = prev;
        }
        Ok(Some(false))
    }

    /// The second pass: the heads of all the frames' functions, `span` bytes each, in one
    /// batched read (and one by one past where it stopped). False when one is unreadable.
    fn read_heads(&mut self, span: usize) -> bool {
        let o = self.offsets;
        let n = self.funcs.len();
        self.heads.resize(n * span, 0);
        self.head_len.clear();
        self.head_len.resize(n, span);
        let whole = self.memory.read_many(&self.funcs, span, &mut self.heads);
        for i in whole..n {
            // An internal function is shorter than a user one: when the longer read runs
            // off the end of its mapping, the common part will do.
            let common = (o.fn_scope + 8) as usize;
            let head = &mut self.heads[i * span..(i + 1) * span];
            if self.memory.read(self.funcs[i], head).is_err() {
                if self
                    .memory
                    .read(self.funcs[i], &mut head[..common])
                    .is_err()
                {
                    return false;
                }
                self.head_len[i] = common;
            }
        }
        true
    }

    /// The frames named from their heads into `out`, leaf first: whether they were cut at
    /// [`MAX_DEPTH`], and whether the last frame seen runs user code. None when a head
    /// reads as garbage.
    fn name_frames(&mut self, span: usize, out: &mut Vec<PhpFrame>) -> Option<(bool, bool)> {
        let o = self.offsets;
        let mut bottom_user = true;
        for i in 0..self.funcs.len() {
            if out.len() == MAX_DEPTH {
                return Some((true, bottom_user));
            }
            // Garbage where a function should be: the frame was reused under us.
            let head = parse_head(o, &self.heads[i * span..i * span + self.head_len[i]])?;
            let bottom = self.prevs[i] == 0;
            match self.function(head)? {
                Function::Named { frame, user } => {
                    bottom_user = *user;
                    out.push(frame.clone());
                }
                Function::TopLevel { main, include } => {
                    bottom_user = true;
                    out.push(if bottom {
                        main.clone()
                    } else {
                        include.clone()
                    });
                }
                Function::Skip => bottom_user = false,
            }
        }
        Some((false, bottom_user))
    }

    /// The naming of a function from its head (read for every frame of every sample): the
    /// names are read only for a head not seen before. None when they read as garbage
    /// (not cached: the next sample tries again).
    ///
    /// The cache is keyed by the head, not by the function's address: a closure's
    /// `zend_function` is a copy inside its Closure object, freed with it, and the next
    /// closure, often of another declaration (same name `{closure}`, another line), is
    /// allocated at the same address; a script's functions are freed at the end of an FPM
    /// request (without opcache) and the next request's may land where they were. The
    /// head's pointers to the name, class and file strings and its line only match when
    /// the names do.
    fn function(&mut self, head: Head) -> Option<&Function> {
        if !self.functions.contains_key(&head) {
            let function = self.name(&head).ok()?;
            if self.functions.len() >= MAX_CACHED {
                self.functions.clear();
            }
            self.functions.insert(head, function);
        }
        self.functions.get(&head)
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
                at_line: 0,
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
                at_line: 0,
            },
            user: head.user,
        })
    }

    /// A `zend_string`'s characters: header and the first characters in one read, the rest
    /// in a second when the string is long. Not UTF-8 (PHP allows any bytes in names):
    /// replaced characters, never an error.
    fn read_string(&mut self, addr: u64, max: u64) -> io::Result<Arc<str>> {
        let o = self.offsets;
        if addr == 0 || !addr.is_multiple_of(8) {
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

/// The fields of a `zend_function` that decide its name, from the first bytes of it
/// (fewer for an internal function read near the end of its mapping). None when it is no
/// function.
fn parse_head(o: &Offsets, bytes: &[u8]) -> Option<Head> {
    let kind = *bytes.get(o.fn_type as usize)?;
    if !matches!(kind, INTERNAL_FUNCTION | USER_FUNCTION | EVAL_CODE) {
        return None;
    }
    let user = kind != INTERNAL_FUNCTION;
    let (filename, line) = if user {
        let at = o.op_line_start as usize;
        let line = bytes.get(at..at + 4)?;
        let line = u32::from_ne_bytes([line[0], line[1], line[2], line[3]]);
        (
            word(
                bytes.get(..o.op_filename as usize + 8)?,
                o.op_filename as usize,
            ),
            line,
        )
    } else {
        (0, 0)
    };
    Some(Head {
        user,
        name: word(bytes.get(..o.fn_name as usize + 8)?, o.fn_name as usize),
        scope: word(bytes.get(..o.fn_scope as usize + 8)?, o.fn_scope as usize),
        filename,
        line,
    })
}

/// A frame that is no PHP function: `[truncated]`.
pub fn marker(name: &str) -> PhpFrame {
    PhpFrame {
        function: Arc::from(name),
        file: Arc::from(""),
        line: 0,
        at_line: 0,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Interpreter structs laid out in this process's memory as PHP 8.2 lays them out, so
    /// that the walker reads them with process_vm_readv on itself.
    struct Fake {
        blocks: Vec<Box<[u64]>>,
        offsets: &'static Offsets,
    }

    impl Fake {
        fn new() -> Fake {
            let offsets = super::super::offsets::parse_version(b"8.2.0")
                .and_then(|v| v.offsets())
                .unwrap();
            Fake {
                blocks: Vec::new(),
                offsets,
            }
        }

        fn alloc(&mut self, words: usize) -> u64 {
            let block = vec![0u64; words].into_boxed_slice();
            let addr = block.as_ptr() as u64;
            self.blocks.push(block);
            addr
        }

        fn put(&mut self, addr: u64, at: u64, value: u64) {
            // SAFETY: every address handed out is the start of a live block, and callers
            // stay inside it.
            unsafe { ((addr + at) as *mut u64).write_unaligned(value) }
        }

        fn string(&mut self, text: &str) -> u64 {
            let addr = self.alloc(3 + text.len() / 8 + 1);
            self.put(addr, self.offsets.str_len, text.len() as u64);
            // SAFETY: the block has room for the characters after the 24-byte header.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    text.as_ptr(),
                    (addr + self.offsets.str_val) as *mut u8,
                    text.len(),
                )
            };
            addr
        }

        fn class(&mut self, name: &str) -> u64 {
            let addr = self.alloc(4);
            let name = self.string(name);
            self.put(addr, self.offsets.ce_name, name);
            addr
        }

        /// A function: `name` None for top-level code, `file` None for internal ones.
        fn function(&mut self, name: Option<&str>, scope: u64, file: Option<(&str, u32)>) -> u64 {
            let addr = self.alloc(HEAD_BYTES / 8);
            let o = self.offsets;
            let kind = if file.is_some() {
                USER_FUNCTION
            } else {
                INTERNAL_FUNCTION
            };
            self.put(addr, o.fn_type, u64::from(kind));
            if let Some(name) = name {
                let name = self.string(name);
                self.put(addr, o.fn_name, name);
            }
            self.put(addr, o.fn_scope, scope);
            if let Some((file, line)) = file {
                let file = self.string(file);
                self.put(addr, o.op_filename, file);
                self.put(addr, o.op_line_start, u64::from(line));
            }
            addr
        }

        /// Frames calling each other, root first, on one VM stack; returns the leaf.
        fn frames(&mut self, funcs: &[u64], below: u64) -> u64 {
            let size = 10; // words: a zend_execute_data without arguments
            let stack = self.alloc(size * funcs.len());
            let mut prev = below;
            for (i, &func) in funcs.iter().enumerate() {
                let frame = stack + (i * size * 8) as u64;
                self.put(frame, self.offsets.ex_func, func);
                self.put(frame, self.offsets.ex_prev, prev);
                prev = frame;
            }
            prev
        }

        /// Executor globals whose current frame is `leaf`, and a walker over them.
        fn walker(&mut self, leaf: u64) -> Walker {
            let globals = self.alloc(128);
            self.put(globals, self.offsets.eg_current_execute_data, leaf);
            Walker::new(&PhpTarget {
                pid: std::process::id(),
                tid: std::process::id(),
                version: "8.2.0".to_owned(),
                binary: "fake".to_owned(),
                executor_globals: globals,
                offsets: self.offsets,
            })
        }
    }

    fn names(frames: &[PhpFrame]) -> Vec<&str> {
        frames.iter().map(|f| &*f.function).collect()
    }

    #[test]
    fn names_read_as_php_prints_them() {
        let mut fake = Fake::new();
        let foo = fake.class("App\\Foo");
        let main = fake.function(None, 0, Some(("/srv/index.php", 1)));
        let bar = fake.function(Some("bar"), foo, Some(("/srv/Foo.php", 12)));
        let closure = fake.function(Some("App\\{closure}"), foo, Some(("/srv/Foo.php", 14)));
        let strlen = fake.function(Some("strlen"), 0, None);
        let leaf = fake.frames(&[main, bar, closure, strlen], 0);
        let mut walker = fake.walker(leaf);
        let mut out = Vec::new();
        assert!(!walker.walk(std::process::id(), &mut out).unwrap());
        assert_eq!(
            names(&out),
            [
                "strlen",
                "App\\Foo::App\\{closure}",
                "App\\Foo::bar",
                "{main}"
            ]
        );
        assert_eq!((&*out[2].file, out[2].line), ("/srv/Foo.php", 12));
        assert_eq!((&*out[0].file, out[0].line), ("", 0));
        assert_eq!((&*out[3].file, out[3].line), ("/srv/index.php", 0));

        // Known functions cost no name reads: the EG pointer, one window, one batch.
        let reads = walker.reads();
        walker.walk(std::process::id(), &mut out).unwrap();
        assert_eq!(walker.reads() - reads, 3);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn fiber_frames_chain_to_the_resumer() {
        let mut fake = Fake::new();
        let fiber_class = fake.class("Fiber");
        let main = fake.function(None, 0, Some(("/srv/loop.php", 1)));
        let loop_class = fake.class("Loop");
        let run = fake.function(Some("run"), loop_class, Some(("/srv/loop.php", 5)));
        let resume = fake.function(Some("resume"), fiber_class, None);
        let bottom = fake.function(None, 0, None);
        let handler = fake.function(Some("handler"), 0, Some(("/srv/app.php", 3)));
        // The fiber's frames are on a VM stack of their own.
        let resumer = fake.frames(&[main, run, resume], 0);
        let leaf = fake.frames(&[bottom, handler], resumer);
        let mut out = Vec::new();
        fake.walker(leaf)
            .walk(std::process::id(), &mut out)
            .unwrap();
        assert_eq!(
            names(&out),
            ["handler", "Fiber::resume", "Loop::run", "{main}"]
        );
    }

    #[test]
    fn a_stack_ending_in_an_internal_frame_is_torn() {
        let mut fake = Fake::new();
        let sqrt = fake.function(Some("sqrt"), 0, None);
        let spin = fake.function(Some("spin"), 0, Some(("/srv/a.php", 2)));
        // A reused slot: an internal function where the caller chain ended.
        let leaf = fake.frames(&[sqrt, spin], 0);
        let mut walker = fake.walker(leaf);
        let mut out = Vec::new();
        let walked = walker.walk(std::process::id(), &mut out);
        assert!(matches!(walked, Err(PhpError::Torn { .. })), "{walked:?}");
        assert_eq!(walker.torn, ATTEMPTS as u64);
        assert!(out.is_empty());
    }

    #[test]
    fn garbage_never_allocates_and_reads_as_torn() {
        let mut fake = Fake::new();
        let main = fake.function(None, 0, Some(("/srv/a.php", 1)));
        let liar = fake.function(Some("f"), 0, Some(("/srv/a.php", 2)));
        let name = fake.string("f");
        fake.put(name, fake.offsets.str_len, 1 << 40);
        fake.put(liar, fake.offsets.fn_name, name);
        let leaf = fake.frames(&[main, liar], 0);
        let mut out = Vec::new();
        let walked = fake.walker(leaf).walk(std::process::id(), &mut out);
        assert!(matches!(walked, Err(PhpError::Torn { .. })), "{walked:?}");

        // No function type at all.
        let junk = fake.alloc(HEAD_BYTES / 8);
        fake.put(junk, 0, 0x77);
        let leaf = fake.frames(&[main, junk], 0);
        let walked = fake.walker(leaf).walk(std::process::id(), &mut out);
        assert!(matches!(walked, Err(PhpError::Torn { .. })), "{walked:?}");

        // Unreadable leaf: an error, not a panic.
        let walked = fake.walker(8).walk(std::process::id(), &mut out);
        assert!(matches!(walked, Err(PhpError::Read { .. })), "{walked:?}");
    }

    #[test]
    fn deep_stacks_keep_the_leaf_frames_and_say_so() {
        let mut fake = Fake::new();
        let main = fake.function(None, 0, Some(("/srv/a.php", 1)));
        let recurse = fake.function(Some("recurse"), 0, Some(("/srv/a.php", 2)));
        let leafward = fake.function(Some("leaf"), 0, Some(("/srv/a.php", 9)));
        let mut funcs = vec![main];
        funcs.extend(std::iter::repeat_n(recurse, 300));
        funcs.push(leafward);
        let leaf = fake.frames(&funcs, 0);
        let mut out = Vec::new();
        assert!(fake
            .walker(leaf)
            .walk(std::process::id(), &mut out)
            .unwrap());
        assert_eq!(out.len(), MAX_DEPTH);
        assert_eq!(&*out[0].function, "leaf");
        assert_eq!(&*out[MAX_DEPTH - 1].function, "recurse");
    }
}

//! Following a sampled thread's user stack from the leaf to its root, with the DWARF call
//! frame information (`.eh_frame`) of the files the process maps.
//!
//! The kernel copies the top of the user stack (`stack_bytes`) and the user registers
//! (instruction, stack and frame pointers) into each sample; this module turns them into
//! the return addresses of the callers. framehop is the maintained Rust unwinder made for
//! exactly this (it is what samply unwinds perf samples with): given each module's unwind
//! sections and a function that reads a word of the copied stack, it applies the CFI rules
//! and falls back to frame pointers and prologue analysis where there are none. Debian
//! builds without frame pointers, so a frame-pointer walk alone would stop at the first
//! libc function.
//!
//! Modules are the executable mappings of /proc/PID/maps. Their unwind sections are read
//! once per file (through /proc/PID/map_files, else the process's own root), so a library
//! loaded later is added when the maps change and one unloaded is removed. The vDSO's are
//! the kernel's and the same in every process: they are read from phasescope's own vDSO.
//!
//! A stack is **truncated** when the walk stops before the thread's first frame: the copy
//! ended (a stack deeper than the copy, which is at most `stack_bytes`), a frame lies in
//! code with no unwind information that frame pointers cannot cross either, a caller's
//! address lies in no executable mapping (the walk went astray: it stops there rather
//! than report a frame that is not one), or it has more than [`MAX_DEPTH`] frames. Its
//! leaf frames are right; its root frames are missing.
//!
//! The layouts it is checked on, against `perf record --call-graph dwarf` on the same
//! process at the same time (tests/upstream_unwind.rs): a C server linked by GNU ld (PIE,
//! `-no-pie`, `-z noseparate-code`), gold, lld (PIE, `-no-pie`, `-z separate-code`,
//! stripped) and mold; phasescope's own binary (Rust, lld); and a Go HTTP server. What
//! differs between them is where each segment lies in the file, which the load bias
//! accounts for per mapping ([`maps::load_bias`]), and where the CFI is: `.eh_frame`, or
//! Go's `.debug_frame`, compressed (inflated here) and beside frame pointers. Go's runtime
//! switches stacks (`systemstack`, `mcall`, vDSO calls) where no CFI says how; the walk
//! stops there, as truncated (0.3 to 3 % of a Go server's stacks). A goroutine's stack
//! ends at `runtime.goexit` with nothing above it to stop the walk: the profiler counts a
//! walk that reached a thread's first frame as complete and drops what it read beyond.
//!
//! Code compiled at run time (V8's JavaScript and builtins, HotSpot's Java, stubs and
//! interpreter) lies in anonymous mappings with no unwind information, or, for V8's
//! embedded builtins, inside node's binary where no FDE covers it. There framehop applies
//! its fallback rule, the frame-pointer walk (`[rbp]` the caller's rbp, `[rbp+8]` the
//! return address), and goes back to the CFI at the first return address a module's
//! unwind table covers: from `computeReport` through V8's `JSEntry` to node's C++ and
//! libuv, from a Java method through HotSpot's call stub to `JavaCalls::call_helper`. Both
//! runtimes keep a frame pointer in their compiled frames (HotSpot with
//! `-XX:+PreserveFramePointer`; without it a compiled frame does not link rbp, so the walk
//! skips its caller, or, where C2's code uses rbp for data, may go astray: cut short
//! where the caller's address lies in no code, wrong where it happens to lie in code.
//! Without the flag, the test's server compiled by C1 alone still walked with 0.1 % cut
//! short: frames skipped are not seen as cut). C++ that omits the frame pointer and calls into JIT code saves rbp on the
//! way in (`JSEntry`, the call stub), so the chain holds across the switch. Checked on
//! node 20 (2 to 4 % of stacks cut short, all of them walks that began before the
//! unwind tables were read or ended in a prologue) and on OpenJDK 17 (0 to 0.2 %), in
//! tests/runtimes.rs. A node stack lies 12 KiB deeper than its callback (libuv's
//! `uv__io_poll` keeps 1,024 epoll events on the stack): with a copy of 16 KiB the walk
//! ended there, cut short; the default copy is 32 KiB for that (docs/config.md).
//!
//! Tested against real processes (tests/upstream_profile.rs): a parser that spends its
//! time in a helper it calls, under the threads of a C server, through libc.

use std::collections::HashMap;
use std::fs;
use std::ops::Range;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use object::{Object, ObjectSection, ObjectSegment as _};

/// User frames kept per sample, leaf first; deeper stacks are truncated.
pub const MAX_DEPTH: usize = 128;

/// The user registers a sample carries, in the order of their bits in
/// `PERF_SAMPLE_REGS_USER`'s mask (x86-64 `perf_event_x86_regs`: BP = 6, SP = 7, IP = 8).
pub const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);

use crate::upstream::profile::maps::{self, Mapping};

/// The user-space unwinder of one process.
pub struct Unwinder {
    pid: u32,
    unwinder: UnwinderX86_64<Vec<u8>>,
    cache: CacheX86_64,
    /// Modules added, by mapping.
    modules: HashMap<Mapping, ()>,
    /// The text of /proc/PID/maps the modules were made from.
    maps_text: Vec<u8>,
    /// Every executable mapping's `[start, end)`, JIT code included, sorted: a return
    /// address outside them is no return address.
    code: Vec<(u64, u64)>,
    vdso_added: bool,
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// Down to the thread's first frame.
    Complete,
    /// Stopped early (see the module comment); the frames found are right.
    Truncated,
}

/// How much of the copied stack a walk used: what sizes the copy
/// ([`super::stack_size`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackUse {
    /// Bytes from the stack pointer to the end of the deepest word read.
    pub bytes: usize,
    /// A word past the end of the copy was asked for: the walk stopped where the copy
    /// ended, not where the stack did.
    pub past_copy: bool,
}

impl Unwinder {
    pub fn new(pid: u32) -> Unwinder {
        let mut unwinder = Unwinder {
            pid,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            modules: HashMap::new(),
            maps_text: Vec::new(),
            code: Vec::new(),
            vdso_added: false,
        };
        unwinder.refresh();
        unwinder
    }

    /// Re-reads /proc/PID/maps and adds or removes modules where it changed. A failure
    /// (the process is exiting) keeps the modules as they were.
    pub fn refresh(&mut self) {
        let Ok(text) = fs::read(format!("/proc/{}/maps", self.pid)) else {
            return;
        };
        if text == self.maps_text {
            return;
        }
        let all = maps::parse(&String::from_utf8_lossy(&text));
        self.code = all
            .iter()
            .filter(|m| m.executable)
            .map(|m| (m.start, m.end))
            .collect();
        self.code.sort_unstable();
        let mappings = executable_mappings(&String::from_utf8_lossy(&text));
        self.maps_text = text;
        let gone: Vec<Mapping> = self
            .modules
            .keys()
            .filter(|m| !mappings.iter().any(|(n, _)| n == *m))
            .cloned()
            .collect();
        for mapping in gone {
            self.unwinder.remove_module(mapping.start);
            self.modules.remove(&mapping);
        }
        for (mapping, vdso) in mappings {
            if self.modules.contains_key(&mapping) {
                continue;
            }
            let module = if vdso {
                if self.vdso_added {
                    continue;
                }
                self.vdso_added = true;
                own_vdso().and_then(|image| module_from_image(&mapping, image))
            } else {
                maps::read_file(self.pid, &mapping)
                    .and_then(|data| module_from_file(&mapping, &data))
            };
            if let Some(module) = module {
                self.unwinder.add_module(module);
            }
            // A file without unwind sections is remembered too: it is not read again.
            self.modules.insert(mapping, ());
        }
    }

    /// Walks from the sampled registers through `stack`, the copy of the stack that
    /// starts at `sp`. `out` gets the frames' lookup addresses, leaf first: the sampled
    /// instruction, then each return address minus one, so that a call that is the last
    /// instruction of its function is named after that function. `used` says how much
    /// of the copy the walk read.
    pub fn walk(
        &mut self,
        ip: u64,
        sp: u64,
        bp: u64,
        stack: &[u8],
        out: &mut Vec<u64>,
        used: &mut StackUse,
    ) -> Walk {
        out.clear();
        *used = StackUse::default();
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let offset = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let end = offset.checked_add(8).ok_or(())?;
            let Some(word) = stack.get(offset..end) else {
                used.past_copy = true;
                return Err(());
            };
            used.bytes = used.bytes.max(end);
            Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(ip, sp, bp);
        let code = &self.code;
        let in_code = |addr: u64| {
            let i = code.partition_point(|&(start, _)| start <= addr);
            i.checked_sub(1).is_some_and(|i| addr < code[i].1)
        };
        let mut frames = self
            .unwinder
            .iter_frames(ip, regs, &mut self.cache, &mut read_stack);
        loop {
            match frames.next() {
                Ok(Some(frame)) => {
                    if out.len() == MAX_DEPTH {
                        return Walk::Truncated;
                    }
                    // A caller's address in no code is a word read from the wrong place
                    // (Go's runtime switches stacks, which no CFI describes): the walk
                    // went astray there, and what it would find beyond is not the stack.
                    if !out.is_empty() && !in_code(frame.address()) {
                        return Walk::Truncated;
                    }
                    out.push(frame.address_for_lookup());
                }
                Ok(None) => return Walk::Complete,
                Err(_) => return Walk::Truncated,
            }
        }
    }
}

/// The executable mappings of a maps text that name a file, and the vDSO (flagged true).
fn executable_mappings(text: &str) -> Vec<(Mapping, bool)> {
    maps::parse(text)
        .into_iter()
        .filter(|m| m.executable)
        .filter_map(|m| {
            let vdso = m.path == "[vdso]";
            // Anonymous code (a JIT) has no unwind sections to read.
            (vdso || m.is_file()).then_some((m, vdso))
        })
        .collect()
}

fn module_from_file(mapping: &Mapping, data: &[u8]) -> Option<Module<Vec<u8>>> {
    let file = object::File::parse(data).ok()?;
    let bias = maps::load_bias(&maps::segments(&file), mapping)?;
    Some(module(mapping, &file, bias))
}

/// The vDSO is an ELF image in memory; its sections' addresses are relative to its start.
fn module_from_image(mapping: &Mapping, image: &[u8]) -> Option<Module<Vec<u8>>> {
    let file = object::File::parse(image).ok()?;
    let first = file.segments().map(|s| s.address()).min().unwrap_or(0);
    Some(module(mapping, &file, mapping.start.wrapping_sub(first)))
}

fn module(mapping: &Mapping, file: &object::File<'_>, bias: u64) -> Module<Vec<u8>> {
    let range = |name: &str| -> Option<Range<u64>> {
        let s = file.section_by_name(name)?;
        Some(s.address()..s.address() + s.size())
    };
    let data = |name: &str| -> Option<Vec<u8>> { section_data(file, name) };
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        text: data(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame: data(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        eh_frame_hdr: data(".eh_frame_hdr"),
        debug_frame: data(".debug_frame"),
        ..Default::default()
    };
    Module::new(mapping.path.clone(), mapping.start..mapping.end, bias, info)
}

/// A section's bytes, inflated when the file compresses it (`SHF_COMPRESSED`, zlib): Go
/// compresses its `.debug_frame`, its only CFI (no `.eh_frame`), which describes the
/// assembly functions that use the frame pointer register for data (`crypto/sha256.block`)
/// where a frame-pointer walk goes astray. A section that cannot be inflated is left out.
fn section_data(file: &object::File<'_>, name: &str) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let compressed = file.section_by_name(name)?.compressed_data().ok()?;
    match compressed.format {
        object::CompressionFormat::None => Some(compressed.data.to_vec()),
        object::CompressionFormat::Zlib => {
            // The size is the file's word: a bound on the allocation, not a promise.
            let size = usize::try_from(compressed.uncompressed_size).ok()?;
            let mut out = Vec::with_capacity(size.min(64 << 20));
            flate2::read::ZlibDecoder::new(compressed.data)
                .take(compressed.uncompressed_size)
                .read_to_end(&mut out)
                .ok()?;
            Some(out)
        }
        _ => None,
    }
}

/// A copy of phasescope's own vDSO image (the kernel maps the same one into every
/// process), found through the auxiliary vector.
fn own_vdso() -> Option<&'static [u8]> {
    use std::sync::OnceLock;
    static IMAGE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            // SAFETY: getauxval only reads the auxiliary vector.
            let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
            if base == 0 {
                return None;
            }
            let maps = maps::parse(&fs::read_to_string("/proc/self/maps").ok()?);
            let end = maps
                .iter()
                .find(|m| m.path == "[vdso]" && m.start == base)?
                .end;
            let len = usize::try_from(end - base).ok()?;
            // SAFETY: [base, end) is this process's vDSO mapping, readable for its life.
            let image = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
            Some(image.to_vec())
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary is a PIE whose first segment starts at address 0, so every mapping
    /// of it has the bias of the mapping at offset 0. Rust links with lld, whose code
    /// segment starts mid-page (the layout the bias once went wrong on); the test says
    /// which layout it checked.
    #[test]
    fn each_mapping_of_the_own_binary_has_the_load_base_as_bias() {
        let exe = std::env::current_exe().unwrap();
        let data = fs::read(&exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let maps = maps::parse(&fs::read_to_string("/proc/self/maps").unwrap());
        let exe_name = exe.to_string_lossy().into_owned();
        let own: Vec<&Mapping> = maps.iter().filter(|m| m.path == exe_name).collect();
        let base = own.iter().find(|m| m.offset == 0).unwrap().start;
        let packed = file.segments().any(|s| {
            let (offset, _) = s.file_range();
            (s.address() - offset) % 0x1000 == 0 && s.address() != offset
        });
        eprintln!("segments packed in the file (lld, mold): {packed}");
        let segments = maps::segments(&file);
        for m in own {
            assert_eq!(maps::load_bias(&segments, m), Some(base), "{m:?}");
        }
    }

    #[test]
    fn executable_file_mappings_and_the_vdso() {
        let text = "\
55d0c7a00000-55d0c7a02000 r--p 00000000 08:01 12 /usr/bin/webdis
55d0c7a02000-55d0c7a10000 r-xp 00002000 08:01 12 /usr/bin/webdis
7fd6c2000000-7fd6c2100000 r-xp 00000000 00:00 0
7fd6c2400000-7fd6c2410000 r-xp 00001000 08:01 14 /opt/lib x.so
7ffd6c5fe000-7ffd6c600000 r-xp 00000000 00:00 0                          [vdso]
";
        let m = executable_mappings(text);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[0].0.offset, 0x2000);
        assert_eq!(m[0].0.path, "/usr/bin/webdis");
        assert!(!m[0].1);
        assert_eq!(m[1].0.path, "/opt/lib x.so");
        assert!(m[2].1, "the vdso is flagged");
    }
}

//! Naming sampled addresses: the symbol (blazesym) and the object they lie in
//! (/proc/PID/maps), cached per process so that each distinct address is looked up once.
//!
//! blazesym reads the process's maps itself, so shared libraries, PIE and ASLR are handled
//! by the library made for it, and kernel addresses come from /proc/kallsyms. It turns an
//! address into a file offset and that into the file's address through the segment that
//! holds the offset, so the layouts of lld and mold (code mid-page in the file) name right:
//! tests/upstream_unwind.rs checks the names of the heaviest functions against perf's on
//! binaries of every linker, Go's and phasescope's own.
//!
//! A distribution's shared libraries are stripped to their dynamic symbol table (`.dynsym`):
//! the exported functions. Debian's libc.so.6 is one, and the code its samples land in most
//! is not exported: the IFUNC variants `memmove` and `memcpy` resolve to
//! (`__memmove_avx_unaligned_erms`), `_int_malloc`, stdio internals. Those names are in the
//! library's separate debug file (Debian's libc6-dbg, any `-dbgsym` package), found by
//! build id or `.gnu_debuglink` under /usr/lib/debug. blazesym follows that link when
//! asked for debug symbols, and then names an address from the debug file's DWARF or full
//! symbol table; without a debug file it names what `.dynsym` covers, and the rest reads
//! `libc.so.6+0x9a1c0`, the start of its function in the file ([`super::unnamed`]),
//! grouped under the library's file name. A file with a full symbol table (`.symtab`) is
//! named from it, the debug files only for what it leaves unnamed: a table names a
//! function by its whole path, as perf does, where the DWARF of a binary built with
//! limited debug info (Rust's release profile with `debug = 1`) names it without
//! (`run_worker` for `tokio::runtime::blocking::pool::LockedImpl::run_worker`). Source lines and inlined
//! frames are not asked for: a component needs the function only. Its
//! `Symbolizer` keeps per-file caches that are not `Send`; it lives on a thread of its own
//! so that the `Profiler` can move between threads (a tokio blocking task, a watcher
//! thread) and the parsed symbol tables survive from one `collect` to the next.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use blazesym::helper::ElfResolver;
use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{
    Input, ProcessMemberInfo, ProcessMemberType, Resolve, Symbolized, Symbolizer,
};
use blazesym::{MaybeDefault, Pid};

use super::jit::{PerfMap, Runtime};
use super::unnamed::{Unnamed, UNMAPPED_OBJECT};
use crate::upstream::profile::maps::Mapping;
use crate::upstream::profile::rules::{ANON_EXEC_OBJECT, KERNEL_OBJECT};
use crate::upstream::profile::ProfileError;

/// The symbol name of a kernel address no symbol covers. A user-space address no symbol
/// covers is named by its place instead (`module+0xOFFSET`, see [`super::unnamed`]).
pub const UNKNOWN_SYMBOL: &str = "[unknown]";

/// How long one batch may take the symbolizer thread; the first batch of a process parses
/// the symbol tables of its binary and libraries.
const SYMBOLIZE_DEADLINE: Duration = Duration::from_secs(20);

/// Past this many cached addresses the cache starts over (JIT code can make the set of
/// distinct addresses grow without bound).
const CACHE_LIMIT: usize = 1 << 20;

/// An interned (symbol, object, space): what an address resolves to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Name {
    pub symbol: String,
    pub object: String,
    pub kernel: bool,
}

/// Index into [`Symbols::names`].
pub type NameId = u32;

/// Per-process naming of sampled addresses.
pub struct Symbols {
    pid: u32,
    map_files: bool,
    worker: Worker,
    maps: Maps,
    unnamed: Unnamed,
    /// The JIT runtime the process runs, if it is one, and its perf map ([`super::jit`]).
    runtime: Option<Runtime>,
    perf_map: PerfMap,
    user: HashMap<u64, NameId>,
    kernel: HashMap<u64, NameId>,
    names: Vec<Name>,
    interned: HashMap<Name, NameId>,
    scratch: Vec<u64>,
}

impl Symbols {
    pub fn new(pid: u32) -> Result<Symbols, ProfileError> {
        let maps = Maps::read(pid)?;
        let map_files = map_files_readable(pid, &maps);
        let files: Vec<&Mapping> = maps.ranges.iter().map(|(m, _)| m).collect();
        let runtime = Runtime::of(&files);
        let mut perf_map = PerfMap::of(pid);
        if runtime == Some(Runtime::Node) {
            perf_map.append_only();
        }
        perf_map.refresh();
        Ok(Symbols {
            pid,
            map_files,
            worker: Worker::spawn(pid, map_files).map_err(ProfileError::Symbolizer)?,
            maps,
            unnamed: Unnamed::default(),
            runtime,
            perf_map,
            user: HashMap::new(),
            kernel: HashMap::new(),
            names: Vec::new(),
            interned: HashMap::new(),
            scratch: Vec::new(),
        })
    }

    /// Asks the symbolizer to name the first address of each file the process maps
    /// executable, without waiting for the answer: it reads their symbol tables now, so
    /// that the first collect's batch does not wait for all of it.
    pub fn warm_up(&mut self) {
        let addrs: Vec<u64> = self
            .maps
            .ranges
            .iter()
            .filter(|(m, _)| m.is_file())
            .map(|(m, _)| m.start)
            .collect();
        if addrs.is_empty() {
            return;
        }
        self.worker.send_unanswered(Request::User {
            pid: self.pid,
            map_files: self.map_files,
            addrs,
        });
    }

    /// Re-reads /proc/PID/maps; when its executable mappings changed (a library loaded,
    /// JIT code mapped), the user-space cache starts over since an address may now mean
    /// something else. Data mappings come and go with the heap and do not matter. When the
    /// perf map changed, the JIT code's names start over.
    pub fn refresh_maps(&mut self) -> Result<(), ProfileError> {
        let maps = Maps::read(self.pid)?;
        if maps != self.maps {
            self.maps = maps;
            self.user.clear();
        }
        // JIT code named before the runtime wrote its line is named again.
        if self.perf_map.refresh() {
            let names = &self.names;
            self.user
                .retain(|_, id| names[*id as usize].object != ANON_EXEC_OBJECT);
        }
        Ok(())
    }

    pub fn name(&self, id: NameId) -> &Name {
        &self.names[id as usize]
    }

    pub fn user(&self, addr: u64) -> Option<NameId> {
        self.user.get(&addr).copied()
    }

    pub fn kernel(&self, addr: u64) -> Option<NameId> {
        self.kernel.get(&addr).copied()
    }

    /// Names the user-space addresses not cached yet, in one batch.
    pub fn resolve_user(&mut self, addrs: impl Iterator<Item = u64>) -> Result<(), ProfileError> {
        if self.user.len() > CACHE_LIMIT {
            self.user.clear();
        }
        self.scratch.clear();
        self.scratch
            .extend(addrs.filter(|addr| !self.user.contains_key(addr)));
        if self.scratch.is_empty() {
            return Ok(());
        }
        self.scratch.sort_unstable();
        self.scratch.dedup();
        let addrs = std::mem::take(&mut self.scratch);
        let symbols = self.worker.symbolize(Request::User {
            pid: self.pid,
            map_files: self.map_files,
            addrs: addrs.clone(),
        })?;
        for (&addr, symbol) in addrs.iter().zip(symbols) {
            let object = self.maps.object(addr).to_owned();
            let jit = object == ANON_EXEC_OBJECT;
            let symbol = symbol
                .or_else(|| jit.then(|| self.perf_map.name(addr).map(str::to_owned))?)
                .unwrap_or_else(|| match self.runtime {
                    Some(runtime) if jit => {
                        runtime.unnamed_frame(self.perf_map.exists()).to_owned()
                    }
                    _ => {
                        let mapping = self.maps.mapping(addr).map(|(m, _)| m);
                        self.unnamed.name(self.pid, addr, mapping, &object)
                    }
                });
            let id = self.intern(Name {
                symbol,
                object,
                kernel: false,
            });
            self.user.insert(addr, id);
        }
        self.scratch = addrs;
        Ok(())
    }

    /// Names the kernel addresses not cached yet, in one batch.
    pub fn resolve_kernel(&mut self, addrs: impl Iterator<Item = u64>) -> Result<(), ProfileError> {
        self.scratch.clear();
        self.scratch
            .extend(addrs.filter(|addr| !self.kernel.contains_key(addr)));
        if self.scratch.is_empty() {
            return Ok(());
        }
        self.scratch.sort_unstable();
        self.scratch.dedup();
        let addrs = std::mem::take(&mut self.scratch);
        let symbols = self.worker.symbolize(Request::Kernel {
            addrs: addrs.clone(),
        })?;
        for (&addr, symbol) in addrs.iter().zip(symbols) {
            let id = self.intern(Name {
                symbol: symbol.unwrap_or_else(|| UNKNOWN_SYMBOL.to_owned()),
                object: KERNEL_OBJECT.to_owned(),
                kernel: true,
            });
            self.kernel.insert(addr, id);
        }
        self.scratch = addrs;
        Ok(())
    }

    fn intern(&mut self, name: Name) -> NameId {
        if let Some(&id) = self.interned.get(&name) {
            return id;
        }
        // Distinct names are bounded by the symbols of the process's objects.
        let id = NameId::try_from(self.names.len()).unwrap_or(NameId::MAX);
        self.names.push(name.clone());
        self.interned.insert(name, id);
        id
    }

    /// Number of interned names; a `NameId` below it is valid.
    pub fn names(&self) -> usize {
        self.names.len()
    }
}

/// /proc/PID/maps, executable mappings only, sorted by start, each with its object name.
#[derive(Debug, Default, PartialEq, Eq)]
struct Maps {
    ranges: Vec<(Mapping, String)>,
}

impl Maps {
    fn read(pid: u32) -> Result<Maps, ProfileError> {
        let text = fs::read(format!("/proc/{pid}/maps"))
            .map_err(|source| ProfileError::Process { pid, source })?;
        Ok(Maps::parse(&String::from_utf8_lossy(&text)))
    }

    fn parse(text: &str) -> Maps {
        let mut ranges: Vec<(Mapping, String)> = crate::upstream::profile::maps::parse(text)
            .into_iter()
            .filter(|m| m.executable)
            .map(|m| {
                let name = object_name(&m.path);
                (m, name)
            })
            .collect();
        ranges.sort_unstable_by_key(|(m, _)| m.start);
        Maps { ranges }
    }

    /// The executable mapping `addr` lies in, and its object name.
    fn mapping(&self, addr: u64) -> Option<&(Mapping, String)> {
        let index = self.ranges.partition_point(|(m, _)| m.start <= addr);
        index
            .checked_sub(1)
            .and_then(|i| self.ranges.get(i))
            .filter(|(m, _)| addr < m.end)
    }

    fn object(&self, addr: u64) -> &str {
        self.mapping(addr)
            .map_or(UNMAPPED_OBJECT, |(_, name)| name.as_str())
    }

    fn first_file(&self) -> Option<(u64, u64)> {
        self.ranges
            .iter()
            .find(|(_, name)| !name.starts_with('['))
            .map(|(m, _)| (m.start, m.end))
    }
}

/// The object name of a mapping's path: the file name for a file, `[vdso]` as is, and
/// [`ANON_EXEC_OBJECT`] for code made at run time (anonymous or memfd mappings).
fn object_name(path: &str) -> String {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    if path == "[vdso]" || path == "[vsyscall]" {
        return path.to_owned();
    }
    if path.is_empty() || path.starts_with('[') || path.starts_with("/memfd:") {
        return ANON_EXEC_OBJECT.to_owned();
    }
    path.rsplit('/').next().unwrap_or(path).to_owned()
}

/// Whether /proc/PID/map_files can be opened (it needs CAP_SYS_ADMIN or
/// CAP_CHECKPOINT_RESTORE): it reaches the mapped file even across mount namespaces or
/// after the file was replaced. Without it the files are opened through /proc/PID/root,
/// which a sidecar in another mount namespace reaches with CAP_SYS_PTRACE.
fn map_files_readable(pid: u32, maps: &Maps) -> bool {
    let Some((start, end)) = maps.first_file() else {
        return false;
    };
    let path = PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"));
    fs::File::open(path).is_ok()
}

enum Request {
    User {
        pid: u32,
        map_files: bool,
        addrs: Vec<u64>,
    },
    Kernel {
        addrs: Vec<u64>,
    },
}

type Response = Result<Vec<Option<String>>, String>;

/// The thread that owns the blazesym `Symbolizer`; it ends when the `Worker` is dropped.
struct Worker {
    requests: mpsc::Sender<Request>,
    responses: mpsc::Receiver<Response>,
    /// Requests sent whose answers nobody waits for: skipped before the next answer.
    unanswered: usize,
}

impl Worker {
    fn spawn(pid: u32, map_files: bool) -> io::Result<Worker> {
        let (requests, request_rx) = mpsc::channel::<Request>();
        let (response_tx, responses) = mpsc::channel::<Response>();
        thread::Builder::new()
            .name("upstream-symbolize".into())
            .spawn(move || {
                let mut builder = Symbolizer::builder();
                if !map_files {
                    builder =
                        builder.set_process_dispatcher(move |member: ProcessMemberInfo<'_>| {
                            Ok(through_root(pid, &member))
                        });
                }
                let symbolizer = builder
                    .enable_code_info(false)
                    .enable_inlined_fns(false)
                    .build();
                let mut debug_syms = true;
                // Whether each file named in a response has a full symbol table.
                let mut stripped: HashMap<std::ffi::OsString, bool> = HashMap::new();
                while let Ok(request) = request_rx.recv() {
                    let mut response = if debug_syms {
                        tables_then_debug_files(&symbolizer, &request, &mut stripped)
                    } else {
                        symbolize(&symbolizer, &request, false)
                    };
                    // A debug file blazesym cannot read (a compression it was built
                    // without, a checksum that does not match) fails the whole batch: name
                    // from the symbol tables alone from then on.
                    if let (Err(error), true, Request::User { .. }) =
                        (&response, debug_syms, &request)
                    {
                        tracing::warn!(
                            pid,
                            %error,
                            "upstream profile: cannot read the debug symbols of the process's \
                             files; naming from their symbol tables only"
                        );
                        debug_syms = false;
                        response = symbolize(&symbolizer, &request, false);
                    }
                    if response_tx.send(response).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Worker {
            requests,
            responses,
            unanswered: 0,
        })
    }

    /// Sends a request whose answer is not waited for (a warm-up).
    fn send_unanswered(&mut self, request: Request) {
        if self.requests.send(request).is_ok() {
            self.unanswered += 1;
        }
    }

    fn symbolize(&mut self, request: Request) -> Result<Vec<Option<String>>, ProfileError> {
        let stopped = || ProfileError::Symbolize("the symbolizer thread stopped".into());
        self.requests.send(request).map_err(|_| stopped())?;
        // The answers come in order: those of the warm-ups first.
        while self.unanswered > 0 {
            match self.responses.recv_timeout(SYMBOLIZE_DEADLINE) {
                Ok(_) => self.unanswered -= 1,
                Err(_) => return Err(stopped()),
            }
        }
        match self.responses.recv_timeout(SYMBOLIZE_DEADLINE) {
            Ok(response) => response.map_err(ProfileError::Symbolize),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(ProfileError::Symbolize(format!(
                "no answer from the symbolizer within {SYMBOLIZE_DEADLINE:?}"
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(stopped()),
        }
    }
}

/// A resolver for a file of the process opened through /proc/PID/root (the process's own
/// view of the file system), or `None` to leave the member to blazesym.
fn through_root(pid: u32, member: &ProcessMemberInfo<'_>) -> Option<Box<dyn Resolve>> {
    let ProcessMemberType::Path(path) = member.member_entry else {
        return None;
    };
    let relative = path.symbolic_path.strip_prefix("/").ok()?;
    let resolver =
        ElfResolver::open(Path::new(&format!("/proc/{pid}/root")).join(relative)).ok()?;
    Some(Box::new(resolver))
}

/// The name glibc's code goes by: its internal calls go through hidden aliases
/// `__GI_name` (`__GI___libc_read` for `__libc_read`), which a full symbol table may offer
/// for the same address as the public name.
fn public_name(name: &str) -> &str {
    name.strip_prefix("__GI_").unwrap_or(name)
}

/// Names from the symbol tables where the file has a full one (`.symtab`), else from the
/// debug files: a table names a function by its whole path, as perf does, where the DWARF
/// of a binary built with limited debug info names it without (`run_worker` for
/// `tokio::runtime::blocking::pool::LockedImpl::run_worker`); a stripped library's
/// `.dynsym` covers its exported functions only, under another alias than perf's
/// (`write` for `__libc_write`), and its debug file names them all. A kernel request is
/// named from kallsyms alone.
fn tables_then_debug_files(
    symbolizer: &Symbolizer,
    request: &Request,
    stripped: &mut HashMap<std::ffi::OsString, bool>,
) -> Response {
    let Request::User {
        pid,
        map_files,
        addrs,
    } = request
    else {
        return symbolize(symbolizer, request, false);
    };
    let mut names: Vec<Option<String>> = Vec::with_capacity(addrs.len());
    let mut again: Vec<usize> = Vec::new();
    for (i, named) in symbolize_in(symbolizer, request, false)?
        .into_iter()
        .enumerate()
    {
        match named {
            Some((name, module)) => {
                let from_full_table = module.is_some_and(|m| {
                    !*stripped
                        .entry(m.clone())
                        .or_insert_with(|| super::is_stripped(Path::new(&m)))
                });
                if !from_full_table {
                    again.push(i);
                }
                names.push(Some(name));
            }
            None => {
                again.push(i);
                names.push(None);
            }
        }
    }
    if again.is_empty() {
        return Ok(names);
    }
    let debug = Request::User {
        pid: *pid,
        map_files: *map_files,
        addrs: again.iter().map(|&i| addrs[i]).collect(),
    };
    for (i, named) in again.into_iter().zip(symbolize(symbolizer, &debug, true)?) {
        if named.is_some() {
            names[i] = named;
        }
    }
    Ok(names)
}

fn symbolize(symbolizer: &Symbolizer, request: &Request, debug_syms: bool) -> Response {
    Ok(symbolize_in(symbolizer, request, debug_syms)?
        .into_iter()
        .map(|named| named.map(|(name, _)| name))
        .collect())
}

/// Each address's name and the file it was found in, as blazesym gives them.
type Named = Option<(String, Option<std::ffi::OsString>)>;

fn symbolize_in(
    symbolizer: &Symbolizer,
    request: &Request,
    debug_syms: bool,
) -> Result<Vec<Named>, String> {
    let (source, addrs) = match request {
        Request::User {
            pid,
            map_files,
            addrs,
        } => {
            let mut process = Process::new(Pid::from(*pid));
            process.debug_syms = debug_syms;
            process.map_files = *map_files;
            // JIT code is named from the perf map by `jit`, which reads a JVM's too.
            process.perf_map = false;
            (Source::Process(process), addrs)
        }
        Request::Kernel { addrs } => {
            let kernel = Kernel {
                kallsyms: MaybeDefault::Default,
                vmlinux: MaybeDefault::None,
                kaslr_offset: Some(0),
                debug_syms: false,
                ..Kernel::default()
            };
            (Source::Kernel(kernel), addrs)
        }
    };
    let symbolized = symbolizer
        .symbolize(&source, Input::AbsAddr(addrs))
        .map_err(|error| format!("{error:#}"))?;
    Ok(symbolized
        .into_iter()
        .map(|symbolized| match symbolized {
            Symbolized::Sym(sym) => Some((
                public_name(&sym.name).to_owned(),
                sym.module.map(std::borrow::Cow::into_owned),
            )),
            Symbolized::Unknown(_) => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path used when /proc/PID/map_files is not readable: files opened through
    /// /proc/PID/root name this test binary's own functions.
    #[test]
    fn symbolizes_through_proc_root() {
        let pid = std::process::id();
        let addr = through_root as *const () as u64;
        for map_files in [false, true] {
            let mut worker = Worker::spawn(pid, map_files).unwrap();
            let names = worker
                .symbolize(Request::User {
                    pid,
                    map_files,
                    addrs: vec![addr],
                })
                .unwrap();
            let name = names[0].as_deref().unwrap_or("");
            assert!(
                name.contains("through_root"),
                "map_files {map_files}: {name:?}"
            );
        }
    }

    /// The debug file of this machine's libc.so.6, by its build id, as Debian's libc6-dbg
    /// installs it; the test needs it (scripts/test installs the package).
    fn libc_debug_file() -> PathBuf {
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_ascii_whitespace().nth(5))
            .find(|p| p.ends_with("/libc.so.6"))
            .expect("this process maps libc.so.6");
        let id = blazesym::helper::read_elf_build_id(libc)
            .unwrap()
            .expect("libc.so.6 has a build id");
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let path = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ));
        assert!(
            path.exists(),
            "{} is missing: install libc6-dbg (libc's debug symbols)",
            path.display()
        );
        path
    }

    /// `memmove` and `strlen` are IFUNCs: the address the dynamic linker resolves them to
    /// is a CPU-specific variant (`__memmove_avx_unaligned_erms`, `__strlen_avx2`) that
    /// only the debug file names. `read` and `recv` are exported, and keep a name either
    /// way (the public one, never glibc's `__GI_` alias).
    #[test]
    fn libc_functions_are_named_from_its_debug_file() {
        libc_debug_file();
        let pid = std::process::id();
        let resolve = |name: &std::ffi::CStr| {
            // SAFETY: dlsym with RTLD_DEFAULT only looks a name up.
            let addr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as u64;
            assert_ne!(addr, 0, "{name:?} not found");
            addr
        };
        let names = [c"memmove", c"strlen", c"read", c"recv"];
        let addrs: Vec<u64> = names.iter().map(|n| resolve(n)).collect();
        for map_files in [false, true] {
            let mut worker = Worker::spawn(pid, map_files).unwrap();
            let got = worker
                .symbolize(Request::User {
                    pid,
                    map_files,
                    addrs: addrs.clone(),
                })
                .unwrap();
            let got: Vec<&str> = got.iter().map(|n| n.as_deref().unwrap_or("")).collect();
            assert!(got[0].contains("mem"), "memmove → {:?}", got[0]);
            assert!(got[1].contains("strlen"), "strlen → {:?}", got[1]);
            assert!(got[2].ends_with("read"), "read → {:?}", got[2]);
            assert!(got[3].contains("recv"), "recv → {:?}", got[3]);
            assert!(
                got.iter().all(|n| !n.starts_with("__GI_")),
                "map_files {map_files}: {got:?}"
            );
        }
    }

    #[test]
    fn glibc_hidden_aliases_read_as_the_public_name() {
        assert_eq!(public_name("__GI___libc_read"), "__libc_read");
        assert_eq!(public_name("__GI_memmove"), "memmove");
        assert_eq!(public_name("http_parser_execute"), "http_parser_execute");
    }

    #[test]
    fn through_root_opens_the_process_view_of_a_file() {
        let pid = std::process::id();
        let member = |path: PathBuf| {
            ProcessMemberType::Path(blazesym::symbolize::ProcessMemberPath {
                maps_file: PathBuf::from("/nonexistent"),
                symbolic_path: path,
                _non_exhaustive: (),
            })
        };
        let info = |entry| ProcessMemberInfo {
            range: 0..1,
            member_entry: entry,
            _non_exhaustive: (),
        };
        let exe = member(std::env::current_exe().unwrap());
        assert!(through_root(pid, &info(&exe)).is_some());
        let missing = member(PathBuf::from("/nonexistent/binary"));
        assert!(through_root(pid, &info(&missing)).is_none());
        let heap = ProcessMemberType::Component("[heap]".into());
        assert!(through_root(pid, &info(&heap)).is_none());
    }

    #[test]
    fn maps_name_objects() {
        let maps = Maps::parse(concat!(
            "56239c249000-56239c24b000 r--p 00000000 fe:00 247030  /usr/bin/webdis\n",
            "56239c24b000-56239c250000 r-xp 00002000 fe:00 247030  /usr/bin/webdis\n",
            "7fd6c1ff4000-7fd6c214a000 r-xp 00026000 fe:00 326279  /usr/lib/x86_64-linux-gnu/libc.so.6\n",
            "7fd6c2200000-7fd6c2210000 rwxp 00000000 00:00 0 \n",
            "7fd6c2300000-7fd6c2310000 r-xp 00000000 00:01 77  /memfd:pcre2jit (deleted)\n",
            "7fd6c2400000-7fd6c2410000 r-xp 00000000 fe:00 9  /opt/my app/lib x.so (deleted)\n",
            "7ffd6c5fe000-7ffd6c600000 r-xp 00000000 00:00 0  [vdso]\n",
            "garbage line\n",
        ));
        assert_eq!(maps.object(0x56239c24b100), "webdis");
        assert_eq!(
            maps.object(0x56239c249100),
            UNMAPPED_OBJECT,
            "not executable"
        );
        assert_eq!(maps.object(0x7fd6c1ff4000), "libc.so.6");
        assert_eq!(
            maps.object(0x7fd6c214a000),
            UNMAPPED_OBJECT,
            "end is exclusive"
        );
        assert_eq!(maps.object(0x7fd6c2200010), ANON_EXEC_OBJECT);
        assert_eq!(maps.object(0x7fd6c2300010), ANON_EXEC_OBJECT);
        assert_eq!(maps.object(0x7fd6c2400010), "lib x.so");
        assert_eq!(maps.object(0x7ffd6c5fe010), "[vdso]");
        assert_eq!(maps.object(0x10), UNMAPPED_OBJECT);
    }
}

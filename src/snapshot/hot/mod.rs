//! The hot path: from a window's call stacks, the functions where the server's CPU is
//! actually spent — each with what it calls — without the frames that only lead there
//! (thread start, `main`, an event loop's dispatch, `Fiber::resume`, syscall entry) and
//! without placeholders (`[truncated]`, `[other stacks]`, `[unknown]`, `[unmapped]`).
//! docs/report.md says how it reads; the report, the findings and the live page show it.
//!
//! How. The stacks are merged into a call tree from the roots. The tree is cut into
//! *units*, disjoint sets of nodes, each named by one function:
//!
//! - A node whose heaviest child carries at least [`PASS_THROUGH`] of its samples only
//!   leads there: the child continues the node's unit (a *chain*), unless the unit is
//!   named by a function already and the child is of another component that is no
//!   helper (a library's entry, the server's code a parser calls back, the event loop a
//!   worker runs): another piece of work begins there. Chains run from a root or a
//!   split-off callee down to the first node that splits its samples (a *split point*).
//! - A child of any other node starts a unit of its own when its *function* carries at
//!   least [`MIN_SPLIT`] of all samples over all its paths, and it is a piece of its own:
//!   its caller's unit names nothing yet (a loop's dispatch), or it is of another
//!   component, or it carries at least [`MIN_PART`] of its caller's samples, or its
//!   function is called from two places or more (so a `sprintf` called from ten places
//!   at 0.5 % each is split off everywhere and listed once). Else it and what it calls
//!   stay in the parent's unit: a function made of many small pieces (`json_reply`) is
//!   one unit.
//! - Below a user-space frame the kernel is that frame's cost (a `write` is its system
//!   call): kernel frames never start units there, nor do functions built into PHP
//!   below a PHP function (`parseHeaders` is its `preg_match_all`s), nor the runtime
//!   below JIT-compiled code (`Math.sin` is V8's). Likewise, below a unit named by a
//!   shared library's function, the same library's functions are that call's cost
//!   (`___sprintf_chk` → `__vfprintf_internal`), and below a Composer package's, its
//!   group's (`league/uri` → `league/uri-interfaces`).
//! - A unit is named by the top frame of its chain, unless that frame is a generic leader
//!   ([`is_generic`]: thread start, `main`, an event loop, a Fiber or closure runner,
//!   syscall entry) or a placeholder; then by the first chain frame below that is
//!   neither; a chain of generic frames only is named by its split point, and a chain of
//!   placeholders is not named at all (its samples stay unlisted).
//! - A unit's *listed* samples are its nodes' own samples: its inclusive samples minus
//!   those of the units inside it. A dispatcher whose CPU is all in split-off callees thus
//!   lists nothing and disappears; the listed shares partition the samples (they add up
//!   to at most 1).
//! - Units of the same function (reached by several paths) are one entry; its inclusive
//!   and self shares are the function's over all stacks (a recursive function counts
//!   once per sample), as `perf report --children` gives them. A unit whose chain only
//!   leads to a function listed in its own right is that function's (a leaf reached
//!   from several callers is listed once), and an entry lists no more than its stacks
//!   hold.
//! - An entry's what-if is over its listed share: what it calls and is listed apart is
//!   those entries' to save.
//!
//! Why not simply the functions by inclusive share: on a real server the top of that list
//! is `main`, the event loop and syscall entry at 90–99 %, the answer buried below. Why
//! not by self share: a `write` then reads as a dozen kernel functions, `json_reply` as
//! twenty small yajl pieces. The units keep the cost of a call with the call.

mod cut;
mod tree;
mod wait;

pub use wait::{is_wait, kernel_hand_off};

use std::collections::HashMap;

use serde::Serialize;

use super::stacks::{Frame, Stacks, THREAD_ROOTS};
use cut::{Cut, Kind, Unit};
use tree::{Table, Tree};

/// A node whose heaviest child carries at least this fraction of its samples only leads
/// there (docs/report.md, "hot path").
pub const PASS_THROUGH: f64 = 0.9;
/// A callee whose function carries less than this fraction of all samples is never a unit
/// of its own.
pub const MIN_SPLIT: f64 = 0.02;
/// Below a named function, a callee carrying less than this fraction of its caller's
/// samples (and called from nowhere else) is its caller's cost: a function made of many
/// small pieces is one place to act.
pub const MIN_PART: f64 = 0.1;
/// An entry lists at least this share: below it, it only says that a function on a hot
/// chain was also reached, now and then, some other way.
pub const MIN_LISTED: f64 = 0.005;
/// Entries kept; the report shows `--top` of them.
pub const MAX_HOT: usize = 20;
/// Entries the report shows without `--top`.
pub const DEFAULT_TOP: usize = 5;
/// Callers kept per entry.
pub const MAX_CALLERS: usize = 3;

/// One function of the hot path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotFunction {
    pub name: String,
    pub object: String,
    pub component: String,
    /// A PHP function's first line (`object` is then its script).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Where the chain it heads leads: its deepest user-space function below it that
    /// only it leads to (a wrapper's worker, a library's inner loop), when there is one;
    /// of the heaviest of its units when it has several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
    /// Fraction of all samples with this function anywhere on the stack.
    pub inclusive: f64,
    /// Fraction of all samples with this function running.
    #[serde(rename = "self")]
    pub self_share: f64,
    /// Fraction of all samples this entry stands for on the list: its inclusive samples
    /// less those of the entries listed inside it. The entries' listed shares add up to
    /// at most 1.
    pub listed: f64,
    /// Samples with this function on the stack.
    pub samples: u64,
    /// CPU per request this entry stands for, seconds: `listed` × the upstream's CPU per
    /// request (the entries' `cpu` add up to at most that CPU).
    pub cpu: f64,
    /// The frames that call it most, with the fraction of its samples through each.
    pub callers: Vec<Caller>,
    /// Named by a frame that only leads to the work (an interpreter's or an event loop,
    /// [`is_generic`]) for want of any other on its chain: it stands for what that frame
    /// runs itself, and its share with all it calls says nothing of a place to act.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub generic: bool,
    /// A wait ([`is_wait`]: a condition variable's, a thread parker's, `epoll_wait`):
    /// its CPU is the kernel's cost of putting the thread to sleep and waking it, which
    /// fewer hand-offs or wake-ups save, not a faster function.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waits: bool,
    /// The entry `factor`× faster, by Amdahl's law on its listed share: what it calls and
    /// is listed apart is those entries' to save.
    pub what_if: HotWhatIf,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Caller {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Fraction of the function's samples called from here.
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotWhatIf {
    pub factor: f64,
    /// CPU saved per request, seconds.
    pub saved: f64,
    /// `saved` over the mean `total`.
    pub saved_of_total: Option<f64>,
    /// If the server is CPU-bound: at most this much more throughput (a fraction).
    pub throughput_gain: f64,
}

impl HotFunction {
    /// Whether its share with all it calls stands for it: not when most of that is listed
    /// apart (more than twice its listed share: a driver or a loop whose callees are
    /// listed would read as nearly all of the CPU), nor when a frame that only leads to
    /// the work names it.
    pub fn inclusive_is_its_own(&self) -> bool {
        self.inclusive <= 2.0 * self.listed && !self.generic
    }

    /// The name as the report shows it: a PHP function with its script and first line
    /// (PHP names every closure of a namespace alike).
    /// `through` follows an arrow.
    pub fn shown(&self) -> String {
        let mut s = match self.line {
            Some(line) => {
                let script = self.object.rsplit('/').next().unwrap_or(&self.object);
                if script.is_empty() {
                    format!("{}:{line}", self.name)
                } else {
                    format!("{} ({script}:{line})", self.name)
                }
            }
            None => self.name.clone(),
        };
        if let Some(t) = &self.through {
            s.push_str(" → ");
            s.push_str(t);
        }
        s
    }
}

/// Amdahl's law: the share `p` of the work `factor`× faster.
pub fn throughput_gain(p: f64, factor: f64) -> f64 {
    1.0 / ((1.0 - p) + p / factor) - 1.0
}

/// A frame that stands for no function: `[truncated]`, `[other stacks]`, `[unknown]`,
/// `[unmapped]`.
pub fn is_placeholder(f: &Frame) -> bool {
    f.name.starts_with('[') && f.name.ends_with(']')
}

fn is_kernel(f: &Frame) -> bool {
    f.object.starts_with("[kernel")
}

/// A function built into PHP (`sqrt`, `preg_match`, `fwrite`): a PHP frame in no script.
/// Native frames always lie in an object.
fn is_php_builtin(f: &Frame) -> bool {
    f.object.is_empty() && !is_placeholder(f)
}

/// A function no symbol names, only its binary and offset (`python3.11+0x6543a0`, from
/// the start the unwind tables give): it names an entry only where nothing else can.
pub fn is_unnamed(f: &Frame) -> bool {
    f.name
        .rsplit_once("+0x")
        .is_some_and(|(_, hex)| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A function of CPython itself (`python3.11`, `libpython3.11.so.1.0`): until Python's own
/// frames are read, its call machinery (`type_call`, `slot_tp_init`, vector calls) and
/// its loop only lead to the Python code they run, and name a line only where nothing
/// else on its chain can.
fn is_python_interpreter(f: &Frame) -> bool {
    let file = f.object.strip_prefix("lib").unwrap_or(&f.object);
    file.strip_prefix("python")
        .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
}

/// Frames that only lead to the work on most servers: thread and process start, `main`,
/// event loops, Fiber and closure runners, syscall and interrupt entry. They never name a
/// unit they top if a frame below them in the chain can.
pub fn is_generic(f: &Frame) -> bool {
    const EXACT: &[&str] = &[
        // CPython's interpreter loop and the calls that enter it, and its threads' start.
        "_PyEval_EvalFrameDefault",
        "_PyEval_Vector",
        "PyEval_EvalCode",
        "_PyFunction_Vectorcall",
        "PyObject_Call",
        "_PyObject_Call",
        "_PyObject_MakeTpCall",
        "method_vectorcall",
        "slot_tp_call",
        "thread_run",
        "pythread_wrapper",
        "PyObject_Vectorcall",
        "_PyObject_VectorcallTstate",
        "_PyObject_FastCallDictTstate",
        "_PyObject_Call_Prepend",
        "pymain_run_python",
        "Py_RunMain",
        "Py_BytesMain",
        "run_mod",
        "run_eval_code_obj",
        // Node's event loop and V8's entries into JavaScript.
        "uv__io_poll",
        "uv__run_timers",
        "uv__run_check",
        "uv__run_idle",
        "uv__run_pending",
        "main",
        "{main}",
        "__libc_start_main",
        "__libc_start_call_main",
        "__libc_start_main_impl",
        "start_thread",
        "thread_start",
        "ret_from_fork",
        "ret_from_fork_asm",
        "syscall",
        "event_base_loop",
        "event_base_dispatch",
        "event_process_active",
        "event_process_active_single_queue",
        "aeMain",
        "aeProcessEvents",
        "uv_run",
        "{closure}",
    ];
    const PREFIX: &[&str] = &[
        "entry_SYSCALL",
        "do_syscall",
        "x64_sys_call",
        "__x64_sys_",
        "asm_",
        "irqentry_",
        "std::rt::",
        "std::sys::",
        "std::thread::",
        "std::panicking::",
        "std::panic::",
        "core::ops::function::",
        "core::panic::",
        "__rust_",
        "tokio::runtime::",
        "Revolt\\EventLoop",
        "Fiber::",
        "_PyEval_",
        "_PyObject_Vectorcall",
        "node::SpinEventLoop",
        "node::Start",
        "node::NodeMainInstance::Run",
        "node::InternalMakeCallback",
        "node::MakeCallback",
        "node::InternalCallbackScope",
        "Builtins_JSEntry",
        "Builtins_InterpreterEntryTrampoline",
        "Builtins_CallFunction",
        "Builtins_Call_",
        "v8::internal::Execution::",
        "v8::internal::(anonymous namespace)::Invoke",
        "JavaCalls::call",
        "JavaMain",
        "thread_native_entry",
        "JavaThread::",
        // HotSpot's thread start and its entry into Java (the call stub, named so by
        // the JVM's perf map), and a Java thread's own start.
        "Thread::call_run",
        "StubRoutines",
        "void java.lang.Thread.run(",
    ];
    const CONTAINS: &[&str] = &["__rust_begin_short_backtrace", "\\{closure}", "\\EventLoop"];
    // A trait method reads `<Type as Trait>::method`: the type says what runs it.
    let n = f.name.strip_prefix('<').unwrap_or(&f.name);
    is_python_interpreter(f)
        || EXACT.contains(&n)
        || THREAD_ROOTS.contains(&n)
        || PREFIX.iter().any(|p| n.starts_with(p))
        || CONTAINS.iter().any(|c| n.contains(c))
}

/// The hot path of `stacks`, most listed samples first, at most [`MAX_HOT`] entries.
/// `cpu_per_request` (seconds) and `mean_total` turn shares into time per request.
pub fn hot_path(
    stacks: &Stacks,
    cpu_per_request: f64,
    mean_total: Option<f64>,
    factor: f64,
) -> Vec<HotFunction> {
    let table = Table::of(stacks);
    if table.total == 0 {
        return Vec::new();
    }
    let tree = Tree::of(&table.paths);
    let cut = Cut::new(&table, &tree);
    let units = cut.units();
    let listing = Listing::of(&units, &tree, &table, &cut.kinds);
    let mut out: Vec<HotFunction> = listing
        .listed
        .iter()
        .map(|(&f, &l)| {
            entry(
                &table,
                f,
                l,
                listing.through(f),
                cpu_per_request,
                mean_total,
                factor,
            )
        })
        .collect();
    out.sort_by(|a, b| {
        b.listed
            .total_cmp(&a.listed)
            .then(b.inclusive.total_cmp(&a.inclusive))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.object.cmp(&b.object))
    });
    out.truncate(MAX_HOT);
    out
}

/// One entry per function: the samples its units list, and where its heaviest unit leads.
struct Listing {
    listed: HashMap<usize, u64>,
    through: HashMap<usize, (u64, Option<usize>)>,
}

impl Listing {
    fn of(units: &[Unit], tree: &Tree, table: &Table<'_>, kinds: &[Kind]) -> Listing {
        let nodes = &tree.nodes;
        // (the function naming a unit, its listed samples, the deepest user-space
        // function of its chain below the name)
        let named: Vec<(usize, u64, Option<usize>)> = units
            .iter()
            .filter(|u| u.listed > 0)
            .filter_map(|u| {
                let at = u.name_at(nodes, kinds)?;
                let f = nodes[u.chain[at]].frame;
                let below = u.chain[at + 1..]
                    .iter()
                    .rev()
                    .map(|&n| nodes[n].frame)
                    .find(|&g| {
                        let k = kinds[g];
                        g != f && !k.kernel && !k.placeholder && !k.generic
                    });
                Some((f, u.listed, below))
            })
            .collect();
        let min_listed = (MIN_LISTED * table.total as f64).ceil() as u64;
        let mut direct: HashMap<usize, u64> = HashMap::new();
        for &(f, l, _) in &named {
            *direct.entry(f).or_default() += l;
        }
        let mut listing = Listing {
            listed: HashMap::new(),
            through: HashMap::new(),
        };
        for (f, l, below) in named {
            // A chain that only leads to a function listed in its own right is that
            // function's, reached from one more caller (`redisAsyncHandleWrite →
            // __libc_write` beside the direct `__libc_write`): a leaf is listed once.
            let (f, below) = match below {
                Some(g) if direct.get(&g).is_some_and(|&d| d >= min_listed) => (g, None),
                _ => (f, below),
            };
            *listing.listed.entry(f).or_default() += l;
            let best = listing.through.entry(f).or_insert((0, None));
            if l > best.0 {
                *best = (l, below);
            }
        }
        listing.listed.retain(|_, l| *l >= min_listed);
        listing
    }

    fn through(&self, f: usize) -> Option<usize> {
        self.through.get(&f).and_then(|t| t.1)
    }
}

/// The entry of function `f`, listing `l` samples.
fn entry(
    table: &Table<'_>,
    f: usize,
    l: u64,
    through: Option<usize>,
    cpu_per_request: f64,
    mean_total: Option<f64>,
    factor: f64,
) -> HotFunction {
    let share = |n: u64| n as f64 / table.total as f64;
    let frame = table.frames[f];
    // Never more than the stacks that hold it: a unit also lists the samples of the
    // generic frames above its name, and a chain credited to the function it leads to,
    // its caller's own samples; those are nobody's entry.
    let l = l.min(table.inclusive[f]);
    // What the entry stands for on the list: what it calls and is listed apart is not
    // its to save (a driver whose callees are listed would otherwise read as nearly all
    // of the CPU).
    let p = share(l);
    let saved = cpu_per_request * p * (1.0 - 1.0 / factor);
    let mut by: Vec<(usize, u64)> = table.callers[f].iter().map(|(&c, &n)| (c, n)).collect();
    by.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| table.frames[a.0].cmp(table.frames[b.0]))
    });
    HotFunction {
        name: frame.name.clone(),
        object: frame.object.clone(),
        component: frame.component.clone(),
        line: frame.line,
        through: through.map(|g| table.frames[g].name.clone()),
        inclusive: share(table.inclusive[f]),
        self_share: share(table.own[f]),
        listed: p,
        samples: table.inclusive[f],
        generic: is_generic(frame) || is_unnamed(frame),
        waits: is_wait(&frame.name),
        cpu: cpu_per_request * p,
        callers: by
            .into_iter()
            .take(MAX_CALLERS)
            .map(|(c, n)| Caller {
                name: table.frames[c].name.clone(),
                line: table.frames[c].line,
                share: n as f64 / table.inclusive[f].max(1) as f64,
            })
            .collect(),
        what_if: HotWhatIf {
            factor,
            saved,
            saved_of_total: mean_total.filter(|t| *t > 0.0).map(|t| saved / t),
            throughput_gain: throughput_gain(p, factor),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Stack;

    /// `k:` marks a kernel frame; a name in brackets is a placeholder.
    fn frame(name: &str) -> Frame {
        let (name, object) = match name.strip_prefix("k:") {
            Some(n) => (n, "[kernel]"),
            None if name.starts_with("libc:") => (&name[5..], "libc.so.6"),
            None if name.starts_with("libm:") => (&name[5..], "libm.so.6"),
            None if name.starts_with("php:") => (&name[4..], ""),
            // An unnamed function lies in an object; the stack's placeholders in none.
            None if name == "[unknown]" => (name, "srv"),
            None if name.starts_with('[') => (name, ""),
            None => (name, "srv"),
        };
        Frame {
            name: name.into(),
            object: object.into(),
            component: object.into(),
            line: None,
            at_line: None,
        }
    }

    fn stacks(list: &[(&str, u64)]) -> Stacks {
        let mut s = Stacks::default();
        for (path, samples) in list {
            let frames = path
                .split(';')
                .map(|n| {
                    s.frames.push(frame(n));
                    (s.frames.len() - 1) as u32
                })
                .collect();
            s.stacks.push(Stack {
                frames,
                samples: *samples,
            });
        }
        s
    }

    fn listed(hot: &[HotFunction]) -> Vec<(&str, u64)> {
        hot.iter()
            .map(|h| (h.name.as_str(), (h.listed * 100.0).round() as u64))
            .collect()
    }

    fn check_partition(hot: &[HotFunction]) {
        let sum: f64 = hot.iter().map(|h| h.listed).sum();
        assert!(sum <= 1.0 + 1e-9, "{sum}");
        for h in hot {
            assert!(!is_placeholder(&frame(&h.name)), "{h:?}");
            assert!(h.listed <= h.inclusive + 1e-9, "{h:?}");
            assert!(h.self_share <= h.inclusive + 1e-9, "{h:?}");
        }
    }

    /// A C server's shape: a loop, a dispatch chain, a handler splitting into a URI
    /// builder, a `write` with the kernel below it and a formatter; truncated stacks
    /// reach the URI builder too.
    fn server() -> Stacks {
        stacks(&[
            (
                "_start;main;serve_loop;epoll_wait;k:entry_SYSCALL_64;k:do_syscall_64;k:ep_poll",
                25,
            ),
            (
                "_start;main;serve_loop;dispatch;handler;respond;build_uri;append",
                28,
            ),
            ("_start;main;serve_loop;dispatch;handler;respond;build_uri", 2),
            (
                "_start;main;serve_loop;dispatch;handler;respond;write;k:entry_SYSCALL_64;k:do_syscall_64;k:ksys_write;k:tcp_sendmsg",
                12,
            ),
            (
                "_start;main;serve_loop;dispatch;handler;respond;write;k:entry_SYSCALL_64;k:do_syscall_64;k:ksys_write;k:sock_write_iter",
                8,
            ),
            ("_start;main;serve_loop;dispatch;handler;respond;format", 10),
            ("_start;main;serve_loop;dispatch;handler", 5),
            ("_start;main;serve_loop;dispatch;handler;respond;tiny", 1),
            ("[truncated];[unknown];build_uri", 9),
        ])
    }

    #[test]
    fn dispatch_layers_and_the_kernel_below_a_write_are_not_listed_on_their_own() {
        let hot = hot_path(&server(), 100e-6, Some(200e-6), 2.0);
        check_partition(&hot);
        // The dispatch chain (dispatch → handler → respond) keeps only its own samples
        // and the tiny callee's; serve_loop and main list nothing.
        assert_eq!(
            listed(&hot),
            [
                ("build_uri", 39),
                ("epoll_wait", 25),
                ("write", 20),
                ("format", 10),
                ("dispatch", 6)
            ]
        );
        let uri = &hot[0];
        // Reached by two paths: one entry, its inclusive share over both.
        assert!((uri.inclusive - 0.39).abs() < 1e-9);
        assert!((uri.self_share - 0.11).abs() < 1e-9);
        assert_eq!(uri.samples, 39);
        assert!((uri.cpu - 39e-6).abs() < 1e-12);
        // The unnamed frame above it is a caller; the stack's placeholder is not.
        assert_eq!(uri.callers.len(), 2);
        assert_eq!(uri.callers[0].name, "respond");
        assert!((uri.callers[0].share - 30.0 / 39.0).abs() < 1e-9);
        assert_eq!(uri.callers[1].name, "[unknown]");
        // Amdahl on 39 %: 39 µs × ½ saved, 1 / (0.61 + 0.195).
        assert!((uri.what_if.saved - 19.5e-6).abs() < 1e-12);
        assert!((uri.what_if.saved_of_total.unwrap() - 0.0975).abs() < 1e-9);
        assert!((uri.what_if.throughput_gain - (1.0 / 0.805 - 1.0)).abs() < 1e-12);
        // It leads to the piece it burns in; the write only to the kernel.
        assert_eq!(uri.through.as_deref(), Some("append"));
        assert_eq!(uri.shown(), "build_uri → append");
        let write = &hot[2];
        assert_eq!(write.through, None);
        assert_eq!(hot[4].through.as_deref(), Some("respond"));
        assert_eq!(write.self_share, 0.0, "its time is the kernel's");
        assert!((write.inclusive - 0.2).abs() < 1e-9);
    }

    /// amphp's shape: everything under `{main}`, the event loop, a Fiber and closure
    /// runners at 97–99 %; a URI library called once per request from the driver, and
    /// many small callbacks.
    #[test]
    fn fiber_and_event_loop_frames_lead_to_the_library_they_run() {
        let top = r"{main};Revolt\EventLoop\Internal\AbstractDriver::run;Fiber::resume;Revolt\EventLoop\Internal\AbstractDriver::Revolt\EventLoop\Internal\{closure};Amp\Http\Server\Driver\Http1Driver::handleClient";
        // The library spends its time in many small functions of its own, and in a
        // function built into PHP, which is its cost however large.
        let mut list: Vec<(String, u64)> = vec![
            (format!(r"{top};League\Uri\Http::createFromComponents"), 4),
            (
                format!(r"{top};League\Uri\Http::createFromComponents;php:preg_match"),
                5,
            ),
        ];
        for i in 0..25 {
            list.push((
                format!(r"{top};League\Uri\Http::createFromComponents;League\Uri\piece{i}"),
                1,
            ));
        }
        list.extend([
            (format!(r"{top};Amp\Http\Http1\Rfc7230::parseHeaders"), 12),
            (format!(r"{top};php:fwrite"), 20),
            (
                r"{main};Revolt\EventLoop\Internal\AbstractDriver::run;stream_select".into(),
                2,
            ),
        ]);
        for i in 0..32 {
            list.push((format!("{top};small{i}"), 1));
        }
        let borrowed: Vec<(&str, u64)> = list.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        let hot = hot_path(&stacks(&borrowed), 1e-3, None, 2.0);
        check_partition(&hot);
        let names: Vec<&str> = hot.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(
            &names[..3],
            [
                r"Amp\Http\Server\Driver\Http1Driver::handleClient",
                r"League\Uri\Http::createFromComponents",
                r"Amp\Http\Http1\Rfc7230::parseHeaders"
            ],
            "{hot:#?}"
        );
        // The driver keeps the 32 small callbacks and its fwrite, nothing of the
        // library's; the library keeps its preg_match.
        assert_eq!(listed(&hot)[0].1, 52);
        assert_eq!(listed(&hot)[1].1, 34);
        assert!(hot
            .iter()
            .all(|h| h.name != "preg_match" && h.name != "fwrite"));
        assert_eq!(
            hot[1].callers[0].name,
            r"Amp\Http\Server\Driver\Http1Driver::handleClient"
        );
        assert!((hot[1].callers[0].share - 1.0).abs() < 1e-9);
        assert!(names
            .iter()
            .all(|n| !n.contains("Fiber") && !n.contains("EventLoop")));
    }

    /// libc's `sprintf` and `snprintf` both lead to `__vfprintf_internal`: the entries are
    /// the calls the code makes, each saying where it leads, not the inner function.
    #[test]
    fn a_library_call_is_named_by_the_call_not_by_its_inner_function() {
        // 208 samples: a callee starts a unit from 5 (2 %). The callers do other work
        // too (they are no pass-through); sprintf has 4 samples, __vfprintf_internal 6.
        let mut list: Vec<(String, u64)> = Vec::new();
        for i in 0..2 {
            list.push((
                format!("main;worker;caller{i};sprintf;__vsprintf_internal;__vfprintf_internal"),
                2,
            ));
            list.push((format!("main;worker;caller{i}"), 2));
        }
        list.push((
            "main;worker;callerx;snprintf;__vsnprintf_internal;__vfprintf_internal".into(),
            2,
        ));
        list.push(("main;worker;callerx".into(), 2));
        list.push(("main;worker".into(), 196));
        let borrowed: Vec<(&str, u64)> = list.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        let hot = hot_path(&stacks(&borrowed), 0.0, None, 2.0);
        check_partition(&hot);
        assert_eq!(
            listed(&hot),
            [("worker", 97), ("sprintf", 2), ("snprintf", 1)]
        );
        assert_eq!(hot[1].shown(), "sprintf → __vfprintf_internal");
    }

    /// Below a call into a shared library, the library's own functions are the call's
    /// cost even when one of them, reached from other calls too, holds more than 2 %.
    #[test]
    fn a_librarys_inner_functions_stay_with_the_call_into_it() {
        let hot = hot_path(
            &stacks(&[
                ("main;worker;etag;libc:___sprintf_chk;libc:__vsprintf_internal;libc:__vfprintf_internal", 4),
                ("main;worker;etag;libc:___sprintf_chk;libc:__vsprintf_internal", 2),
                ("main;worker;etag", 3),
                ("main;worker;log;libc:___snprintf_chk;libc:__vsnprintf_internal;libc:__vfprintf_internal", 2),
                ("main;worker;log", 3),
                ("main;worker", 236),
            ]),
            0.0,
            None,
            2.0,
        );
        check_partition(&hot);
        // 250 samples, 5 make 2 %: __vfprintf_internal has 6 over both calls, yet
        // neither lists it apart, and snprintf's call (2) is split off since it leads there.
        // etag and log, each under a tenth of worker's samples, are worker's cost.
        assert_eq!(
            listed(&hot),
            [
                ("worker", 97),
                ("___sprintf_chk", 2),
                ("___snprintf_chk", 1)
            ]
        );
        assert!(hot.iter().all(|h| h.name != "__vfprintf_internal"));
        assert_eq!(hot[1].callers[0].name, "etag");
    }

    /// A function called from many places, a little from each, is split off everywhere
    /// and listed once with all its paths.
    #[test]
    fn the_same_function_by_several_small_paths_is_one_entry() {
        let mut list: Vec<(String, u64)> = Vec::new();
        for i in 0..6 {
            list.push((format!("main;worker;caller{i};sprintf;vfprintf"), 1));
            list.push((format!("main;worker;caller{i}"), 10));
        }
        list.push(("main;worker".into(), 34));
        let borrowed: Vec<(&str, u64)> = list.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        let hot = hot_path(&stacks(&borrowed), 0.0, None, 2.0);
        check_partition(&hot);
        let sprintf = hot.iter().find(|h| h.name == "sprintf").unwrap();
        assert_eq!(sprintf.samples, 6);
        assert!((sprintf.listed - 0.06).abs() < 1e-9);
        assert_eq!(sprintf.callers.len(), MAX_CALLERS);
        assert!(hot.iter().all(|h| h.name != "vfprintf"), "inside sprintf");
    }

    /// Placeholders never name an entry, a chain of them lists nothing; recursion counts
    /// once per sample; `main` alone on its chain names nothing while a frame below it can.
    #[test]
    fn placeholders_recursion_and_generic_chains() {
        let hot = hot_path(
            &stacks(&[
                ("[truncated];[unknown]", 40),
                ("[other stacks]", 5),
                ("main;walk;walk;walk", 30),
                ("main;walk;walk", 10),
                ("main;walk", 5),
                (
                    "[unmapped];k:entry_SYSCALL_64;k:do_syscall_64;k:__x64_sys_read;k:tcp_recvmsg",
                    10,
                ),
            ]),
            0.0,
            None,
            2.0,
        );
        check_partition(&hot);
        // main → walk passes through: one unit named walk with everything below.
        assert_eq!(listed(&hot), [("walk", 45), ("tcp_recvmsg", 10)]);
        assert_eq!(hot[0].samples, 45, "recursion counts once");
        assert!((hot[0].self_share - 0.45).abs() < 1e-9);
        assert_eq!(hot[0].callers[0].name, "main");
        assert!(hot_path(&Stacks::default(), 1.0, None, 2.0).is_empty());
    }

    /// A helper on two hot chains, reached directly now and then: that odd 0.3 % is no
    /// entry of its own.
    #[test]
    fn an_entry_lists_at_least_half_a_percent() {
        let hot = hot_path(
            &stacks(&[
                ("main;w;parse;spin", 500),
                ("main;w;query;spin", 497),
                ("main;w;spin", 3),
            ]),
            0.0,
            None,
            2.0,
        );
        assert_eq!(listed(&hot), [("parse", 50), ("query", 50)]);
        assert_eq!(hot[0].shown(), "parse → spin");
    }

    /// Webdis's shape: the parser calls the request back, the reply is a function of
    /// many small pieces, and libc's write is reached both from the reply's path and
    /// through hiredis's writer, which only leads there.
    #[test]
    fn a_callback_a_reply_of_small_pieces_and_a_write_from_two_callers() {
        let read = "main;worker_main;event_base_loop;http_client_read";
        let callback =
            format!("{read};http_parser_execute;http_client_on_message_complete;cmd_run");
        let mut list: Vec<(String, u64)> = vec![
            (format!("{read};http_parser_execute"), 2),
            (format!("{read};http_parser_execute;libc:memchr"), 1),
            (callback.clone(), 10),
            (format!("{callback};libc:__libc_write;k:tcp_sendmsg"), 12),
            (
                "main;worker_main;event_base_loop;redisAsyncHandleWrite;libc:__libc_write;k:tcp_sendmsg".into(),
                14,
            ),
            ("main;worker_main;event_base_loop;k:ep_poll".into(), 25),
        ];
        for i in 0..12 {
            list.push((format!("{callback};json_reply;json_piece{i}"), 3));
        }
        let borrowed: Vec<(&str, u64)> = list.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        let mut s = stacks(&borrowed);
        for f in &mut s.frames {
            if f.name == "http_parser_execute" {
                f.component = "http_parser".into();
            } else if f.name == "event_base_loop" {
                f.component = "event_loop".into();
            }
        }
        let hot = hot_path(&s, 100e-6, None, 2.0);
        check_partition(&hot);
        let names: Vec<&str> = hot.iter().map(|h| h.name.as_str()).collect();
        // One write entry for both paths, its callers named; the reply at its whole share.
        assert_eq!(names.iter().filter(|n| **n == "__libc_write").count(), 1);
        let write = hot.iter().find(|h| h.name == "__libc_write").unwrap();
        assert_eq!(listed(std::slice::from_ref(write)), [("__libc_write", 26)]);
        let callers: Vec<&str> = write.callers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(callers, ["redisAsyncHandleWrite", "cmd_run"]);
        let reply = hot
            .iter()
            .find(|h| h.name == "json_reply")
            .unwrap_or_else(|| panic!("{hot:#?}"));
        assert!((reply.listed - 0.36).abs() < 1e-9, "{reply:?}");
        assert!(
            names.iter().all(|n| !n.starts_with("json_piece")),
            "{names:?}"
        );
        // The parser is its own entry, apart from what it calls back.
        let parser = hot
            .iter()
            .find(|h| h.name == "http_parser_execute")
            .unwrap();
        assert!((parser.listed - 0.03).abs() < 1e-9, "{parser:?}");
        // The roots list nothing; the loop only its own polling.
        assert!(names.iter().all(|n| *n != "main" && *n != "worker_main"));
        let poll = hot.iter().find(|h| h.name == "event_base_loop").unwrap();
        assert!((poll.listed - 0.25).abs() < 1e-9, "{poll:?}");
        // What an entry would save is its listed share's, not all it calls.
        assert!((parser.what_if.saved - 100e-6 * 0.03 * 0.5).abs() < 1e-12);
    }

    /// amphp's script runs the loop from `trapSignal`, a function of a package: a root that
    /// only leads to the driver and the URI library names nothing, and the library's two
    /// packages are one piece of work with what it calls.
    #[test]
    fn a_package_function_at_the_root_names_nothing() {
        let top = r"{main};Amp\trapSignal;Revolt\EventLoop\Internal\AbstractDriver::run;Fiber::resume;Amp\Http\Server\Driver\Http1Driver::handleClient";
        let uri = r"League\Uri\Http::createFromComponents";
        let mut list: Vec<(String, u64)> = vec![
            (format!("{top};{uri}"), 6),
            (format!(r"{top};{uri};League\Uri\UriString::parse"), 14),
            (
                format!(r"{top};{uri};League\Uri\UriString::parse;php:preg_match"),
                10,
            ),
            (format!(r"{top};{uri};League\Uri\Uri::formatHost"), 5),
            (format!("{top};php:fwrite"), 12),
            (
                r"{main};Amp\trapSignal;Revolt\EventLoop\Internal\AbstractDriver::run;php:stream_select".into(),
                13,
            ),
        ];
        for i in 0..20 {
            list.push((format!("{top};small{i}"), 1));
        }
        let borrowed: Vec<(&str, u64)> = list.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        let mut s = stacks(&borrowed);
        for f in &mut s.frames {
            let component = if f.name.starts_with(r"League\Uri\UriString") {
                "league/uri-interfaces"
            } else if f.name.starts_with(r"League\Uri") {
                "league/uri"
            } else if f.name.starts_with(r"Amp\trapSignal") {
                "amphp/amp"
            } else if f.name.contains("Http1Driver") || f.name.starts_with("small") {
                "amphp/http-server"
            } else {
                continue;
            };
            f.component = component.into();
        }
        let hot = hot_path(&s, 1e-3, None, 2.0);
        check_partition(&hot);
        assert_eq!(hot[0].name, uri, "{hot:#?}");
        assert!((hot[0].listed - 35.0 / 80.0).abs() < 1e-9, "{hot:#?}");
        assert_eq!(
            hot[0].callers[0].name,
            r"Amp\Http\Server\Driver\Http1Driver::handleClient"
        );
        assert!(hot.iter().all(|h| h.name != r"Amp\trapSignal"), "{hot:#?}");
    }

    /// CPython's stacks without its own frames: the interpreter's loop names only what
    /// it runs itself, never all it calls; a C function it calls is listed apart.
    #[test]
    fn an_interpreters_loop_is_no_entry_of_all_it_calls() {
        let eval = "start_thread;thread_run;python3.11+0x6543a0;_PyEval_EvalFrameDefault";
        let sin = format!("{eval};python3.11+0x5fba90;libm:__sin_fma");
        let other = format!("{eval};python3.11+0x5fbec0");
        let nested = format!("{eval};_PyEval_EvalFrameDefault");
        let hot = hot_path(
            &stacks(&[(eval, 41), (&sin, 17), (&other, 12), (&nested, 30)]),
            1e-3,
            None,
            2.0,
        );
        check_partition(&hot);
        assert!(hot.iter().all(|h| h.listed < 0.9), "{hot:#?}");
        assert!(hot.iter().any(|h| h.name == "__sin_fma"), "{hot:#?}");
    }

    #[test]
    fn generic_leaders() {
        for n in [
            "main",
            "_start",
            "entry_SYSCALL_64_after_hwframe",
            "std::rt::lang_start_internal",
            r"Revolt\EventLoop\Internal\AbstractDriver::tick",
            "Fiber::resume",
            r"Amp\{closure}",
            "<core::panic::unwind_safe::AssertUnwindSafe<F> as core::ops::function::FnOnce<()>>::call_once",
        ] {
            assert!(is_generic(&frame(n)), "{n}");
        }
        for n in [
            "write",
            "json_reply",
            r"League\Uri\Http::createFromComponents",
            "mainloop_step",
        ] {
            assert!(!is_generic(&frame(n)), "{n}");
        }
    }
}

#[cfg(test)]
mod scale {
    use super::*;
    use crate::snapshot::Stack;

    /// This thread's CPU time: a busy machine lengthens the wall time, not this.
    fn thread_cpu() -> std::time::Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec for the call to fill.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0);
        std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// A snapshot's bound, 5,000 stacks, 120 frames deep with recursion, is cut in a
    /// bounded time: 0.4 s of CPU unoptimised here (the live page asks every second),
    /// a few times less than when every frame was hashed into the tree and the chain's
    /// name looked up anew at every node; 2 s catches a cut that grows with the square
    /// of the depth.
    #[test]
    fn five_thousand_deep_stacks_are_cut_quickly() {
        let mut s = Stacks::default();
        for i in 0..400 {
            s.frames.push(Frame {
                name: format!("f{i}"),
                object: "srv".into(),
                component: "srv".into(),
                line: None,
                at_line: None,
            });
        }
        let mut x: u64 = 1;
        for _ in 0..crate::snapshot::stacks::MAX_STACKS {
            let frames = (0..120)
                .map(|d| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    // Shallow frames shared, deeper ones spread, some recursion.
                    if d < 10 {
                        d
                    } else {
                        10 + (x >> 33) as u32 % if d < 60 { 20 } else { 390 }
                    }
                })
                .collect();
            s.stacks.push(Stack {
                frames,
                samples: 1 + (x >> 60),
            });
        }
        let started = thread_cpu();
        let hot = hot_path(&s, 1e-4, None, 2.0);
        let took = thread_cpu() - started;
        let listed: f64 = hot.iter().map(|h| h.listed).sum();
        assert!(listed <= 1.0 + 1e-9);
        eprintln!("cut in {took:?} of CPU");
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    }
}

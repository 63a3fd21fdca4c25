//! Call stacks as the snapshot carries them (`frames`, `functions`, `stacks`:
//! docs/metrics.md), and the one way they are added up: [`StackWindow`], which the
//! upstream's window (`upstream::Upstream`) accumulates the sampler's deltas in and which
//! [`Stacks::merge`] merges snapshots through. It gives the top functions with their self
//! and inclusive samples and the bounded `stacks` a snapshot carries. It lies here, with
//! the contract, because a merge of snapshots must add stacks up exactly as the watcher
//! does, and readers merge without the profiler.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Where a stack's frames come from, which decides how a frame is named and drawn. The
/// snapshot's `frames` (docs/metrics.md): `native`, `php` or `python`. A new runtime is a new
/// variant here, and every `match` on it says what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    /// Machine code: symbols in objects (the binary, its libraries, the kernel).
    Native,
    /// The PHP interpreter's own call stack: `Class::method` as PHP names it.
    Php,
    /// CPython's own call stack (`Class.method` as Python names it, with its file and
    /// first line), with the native function a sample ran in when Python called into C as
    /// its leaf.
    Python,
}

impl FrameKind {
    /// The snapshot's word for it.
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Native => "native",
            FrameKind::Php => "php",
            FrameKind::Python => "python",
        }
    }
}

impl std::fmt::Display for FrameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One function's samples: `self_samples` with it as the leaf, `inclusive_samples` with
/// it anywhere on the stack (a recursive function counts once per sample).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionSnapshot {
    pub name: String,
    pub object: String,
    pub component: String,
    pub self_samples: u64,
    pub inclusive_samples: u64,
    /// A PHP function's first line: it tells apart closures of one file, which PHP names
    /// alike (`Ns\{closure}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// A frame of a sampled stack: a function, the object it lies in, and the component its
/// own rule gives it.
///
/// Native frames: `name` is the symbol (`http_parser_execute`, `[unknown]`), `object` the
/// file name of the mapping (`webdis`, `libc.so.6`, `[kernel]`). PHP frames: `name` as
/// PHP prints it (`Amp\Http\Http1\Rfc7230::parseHeaders`, `{closure}`, `fwrite`),
/// `object` the defining script's path (empty for a function built into PHP), `line` the
/// line the function starts on. Python frames: as PHP's, and `at_line` the line the frame
/// was running (its call, in a caller), so one function has a frame per line it was
/// sampled on; the function is `name`, `object` and `line` ([`Frame::function`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Frame {
    pub name: String,
    pub object: String,
    pub component: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The line running in this frame (Python); absent for native and PHP frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_line: Option<u32>,
}

impl Frame {
    /// The function a frame runs: frames of one function that differ only in the line
    /// they ran are one function for the hot path and the function lists.
    pub fn function(&self) -> (&str, &str, &str, Option<u32>) {
        (&self.name, &self.object, &self.component, self.line)
    }
}

/// The stacks sampled in a window: a frame table and the distinct stacks as indices into
/// it, **root first**, each with its samples. At most [`MAX_STACKS`] stacks are kept: the
/// samples of the rest are one stack of the single frame [`OTHER_STACKS`], so the samples
/// still add up to the window's total.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stacks {
    pub frames: Vec<Frame>,
    pub stacks: Vec<Stack>,
    /// Samples whose stack could not be followed to its root (the copied stack ran out,
    /// or no unwind information covered a frame): their stacks start at the frame
    /// [`TRUNCATED`], and the callers they lost are missing from the inclusive counts.
    #[serde(default)]
    pub truncated_samples: u64,
    /// Samples with a native frame whose address lies in no executable mapping of the
    /// process (named `[unmapped]`): code unmapped since it was sampled, or a return
    /// address the walk read wrong. Absent in older snapshots (0).
    #[serde(default)]
    pub unmapped_samples: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stack {
    /// Indices into [`Stacks::frames`], root first, leaf last.
    pub frames: Vec<u32>,
    pub samples: u64,
}

/// Functions kept in a snapshot's `functions`.
pub const TOP_FUNCTIONS: usize = 50;
/// Distinct stacks kept in a snapshot's `stacks`.
pub const MAX_STACKS: usize = 5000;
/// The frame that stands for the stacks beyond [`MAX_STACKS`].
pub const OTHER_STACKS: &str = "[other stacks]";
/// The root frame of a stack that could not be followed to its root.
pub const TRUNCATED: &str = "[truncated]";

/// Keeps the [`TOP_FUNCTIONS`] functions with the most inclusive samples and, beside
/// them, the [`TOP_FUNCTIONS`] with the most self samples (that run themselves), sorted
/// as [`sort_functions`] does. Inclusive alone would keep the frames every stack passes
/// through: a Rust server's runtime and a system call's kernel frames (96 of them per
/// sample) fill the 50 before a function that runs 10 % of the time, which the report's
/// "running" line must still name.
pub fn keep_top_functions(v: &mut Vec<FunctionSnapshot>) {
    sort_functions(v);
    if v.len() <= TOP_FUNCTIONS {
        return;
    }
    let mut rest = v.split_off(TOP_FUNCTIONS);
    rest.retain(|f| f.self_samples > 0);
    rest.sort_by(|x, y| {
        y.self_samples
            .cmp(&x.self_samples)
            .then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.object.cmp(&y.object))
    });
    rest.truncate(TOP_FUNCTIONS);
    v.append(&mut rest);
    sort_functions(v);
}

/// The first frame of a thread, by name (glibc's, Go's goroutine, system and main stacks):
/// the profiler's walk that reached one is complete, and the hot path never lists one whatever it
/// made of the words beyond it. Go's goroutine stacks end at `runtime.goexit` with no
/// zero return address above it, so the walk reads on and fails (18 % of a Go server's
/// stacks, with a goroutine per connection, were called cut short at `runtime.goexit`, or
/// past it at an address of no function).
pub const THREAD_ROOTS: &[&str] = &[
    "_start",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "runtime.goexit",
    "runtime.goexit.abi0",
    "runtime.mstart",
    "runtime.mstart.abi0",
    "runtime.rt0_go",
    "runtime.rt0_go.abi0",
];

/// Most inclusive samples first, then most self samples, then by name.
pub fn sort_functions(v: &mut [FunctionSnapshot]) {
    v.sort_by(|x, y| {
        y.inclusive_samples
            .cmp(&x.inclusive_samples)
            .then(y.self_samples.cmp(&x.self_samples))
            .then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.object.cmp(&y.object))
    });
}

impl Stacks {
    /// All samples of all stacks.
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|s| s.samples).sum()
    }

    /// The frames of a stack, root first (an index out of the table is skipped).
    pub fn frames_of<'a>(&'a self, stack: &'a Stack) -> impl Iterator<Item = &'a Frame> + 'a {
        stack
            .frames
            .iter()
            .filter_map(|&i| self.frames.get(i as usize))
    }

    /// Adds `other`'s stacks to these, frames matched by value (through a
    /// [`StackWindow`], so past its bound the smallest stacks fold into
    /// [`OTHER_STACKS`]); the result is largest first.
    pub fn merge(&mut self, other: &Stacks) {
        let mut window = StackWindow::default();
        window.add(self);
        window.add(other);
        *self = window.bounded(usize::MAX);
    }
}

/// Past this many distinct stacks the window keeps its largest [`MAX_STACKS`] and folds
/// the samples of the others into one [`OTHER_STACKS`] stack, so a window that is never
/// reset stays bounded; the functions' counts then miss those samples' frames.
const COMPACT_AT: usize = 4 * MAX_STACKS;

/// A window's stacks as they are added up: frames found by value, stacks by their
/// frames.
#[derive(Default)]
pub(crate) struct StackWindow {
    frames: Vec<Frame>,
    index: HashMap<Frame, u32>,
    stacks: HashMap<Box<[u32]>, u64>,
    truncated: u64,
    unmapped: u64,
    scratch: Vec<u32>,
}

impl StackWindow {
    pub fn clear(&mut self) {
        *self = StackWindow::default();
    }

    /// Adds one delta's stacks.
    pub fn add(&mut self, delta: &Stacks) {
        for stack in &delta.stacks {
            self.scratch.clear();
            for frame in delta.frames_of(stack) {
                let i = self.frame(frame);
                self.scratch.push(i);
            }
            self.count(stack.samples);
        }
        self.truncated += delta.truncated_samples;
        self.unmapped += delta.unmapped_samples;
        if self.stacks.len() > COMPACT_AT {
            self.compact();
        }
    }

    fn frame(&mut self, frame: &Frame) -> u32 {
        if let Some(&i) = self.index.get(frame) {
            return i;
        }
        let i = u32::try_from(self.frames.len()).unwrap_or(u32::MAX);
        self.frames.push(frame.clone());
        self.index.insert(frame.clone(), i);
        i
    }

    /// Counts `samples` for the stack in `scratch`.
    fn count(&mut self, samples: u64) {
        match self.stacks.get_mut(self.scratch.as_slice()) {
            Some(n) => *n += samples,
            None => {
                self.stacks.insert(self.scratch.as_slice().into(), samples);
            }
        }
    }

    fn compact(&mut self) {
        let mut all: Vec<(Box<[u32]>, u64)> = self.stacks.drain().collect();
        all.sort_unstable_by_key(|s| std::cmp::Reverse(s.1));
        let rest: u64 = all.iter().skip(MAX_STACKS).map(|(_, n)| n).sum();
        all.truncate(MAX_STACKS);
        self.stacks = all.into_iter().collect();
        if rest > 0 {
            let other = self.other_frame();
            self.scratch.clear();
            self.scratch.push(other);
            self.count(rest);
        }
    }

    fn other_frame(&mut self) -> u32 {
        self.frame(&Frame {
            name: OTHER_STACKS.to_owned(),
            object: String::new(),
            component: String::new(),
            line: None,
            at_line: None,
        })
    }

    /// The functions with the most inclusive and the most self samples
    /// ([`keep_top_functions`]). A function counts
    /// once per sample however often it recurs in the stack.
    pub fn functions(&self) -> Vec<FunctionSnapshot> {
        // Frames of one function on different lines (Python's) count as the function.
        let mut ids: HashMap<(&str, &str, &str, Option<u32>), u32> = HashMap::new();
        let function: Vec<u32> = (0..self.frames.len() as u32)
            .map(|i| *ids.entry(self.frames[i as usize].function()).or_insert(i))
            .collect();
        let mut counts: HashMap<u32, (u64, u64)> = HashMap::new();
        let mut seen: Vec<u32> = Vec::new();
        for (frames, &n) in &self.stacks {
            let Some(&leaf) = frames.last() else { continue };
            let leaf = function.get(leaf as usize).copied().unwrap_or(leaf);
            counts.entry(leaf).or_default().0 += n;
            seen.clear();
            for &f in frames.iter() {
                let f = function.get(f as usize).copied().unwrap_or(f);
                if !seen.contains(&f) {
                    seen.push(f);
                    counts.entry(f).or_default().1 += n;
                }
            }
        }
        let mut v: Vec<FunctionSnapshot> = counts
            .into_iter()
            .filter_map(|(i, (self_samples, inclusive_samples))| {
                let f = self.frames.get(i as usize)?;
                // The placeholders are not functions.
                if f.object.is_empty() && f.component.is_empty() {
                    return None;
                }
                Some(FunctionSnapshot {
                    name: f.name.clone(),
                    object: f.object.clone(),
                    component: f.component.clone(),
                    self_samples,
                    inclusive_samples,
                    line: f.line,
                })
            })
            .collect();
        keep_top_functions(&mut v);
        v
    }

    /// The window's stacks for a snapshot: the [`MAX_STACKS`] largest, the others as one
    /// [`OTHER_STACKS`] stack, and a frame table of the frames they use.
    pub fn snapshot(&self) -> Stacks {
        self.bounded(MAX_STACKS)
    }

    /// The `max` largest stacks, the others as one [`OTHER_STACKS`] stack, and a frame
    /// table of the frames they use.
    fn bounded(&self, max: usize) -> Stacks {
        let mut all: Vec<(&[u32], u64)> = self.stacks.iter().map(|(k, &n)| (&**k, n)).collect();
        all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let rest: u64 = all.iter().skip(max).map(|(_, n)| n).sum();
        all.truncate(max);
        let mut out = Stacks {
            truncated_samples: self.truncated,
            unmapped_samples: self.unmapped,
            ..Stacks::default()
        };
        let mut renumber: HashMap<u32, u32> = HashMap::new();
        let mut frame = |out: &mut Stacks, i: u32, f: &Frame| -> u32 {
            *renumber.entry(i).or_insert_with(|| {
                out.frames.push(f.clone());
                (out.frames.len() - 1) as u32
            })
        };
        for (frames, samples) in all {
            let frames = frames
                .iter()
                .filter_map(|&i| Some(frame(&mut out, i, self.frames.get(i as usize)?)))
                .collect();
            out.stacks.push(Stack { frames, samples });
        }
        if rest > 0 {
            let other = Frame {
                name: OTHER_STACKS.to_owned(),
                object: String::new(),
                component: String::new(),
                line: None,
                at_line: None,
            };
            out.frames.push(other);
            out.stacks.push(Stack {
                frames: vec![(out.frames.len() - 1) as u32],
                samples: rest,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str) -> Frame {
        Frame {
            name: name.into(),
            object: "srv".into(),
            component: if name.starts_with("http_parser") {
                "http_parser".into()
            } else {
                "srv".into()
            },
            line: None,
            at_line: None,
        }
    }

    fn stacks(list: &[(&[&str], u64)]) -> Stacks {
        let mut s = Stacks::default();
        for (names, samples) in list {
            let frames = names
                .iter()
                .map(|n| {
                    let f = frame(n);
                    match s.frames.iter().position(|x| *x == f) {
                        Some(i) => i as u32,
                        None => {
                            s.frames.push(f);
                            (s.frames.len() - 1) as u32
                        }
                    }
                })
                .collect();
            s.stacks.push(Stack {
                frames,
                samples: *samples,
            });
        }
        s
    }

    #[test]
    fn self_and_inclusive_per_function() {
        let mut w = StackWindow::default();
        w.add(&stacks(&[
            (&["main", "http_parser_execute", "memchr"], 30),
            (&["main", "http_parser_execute"], 10),
            (&["main", "backend"], 60),
        ]));
        // A second delta with the same stack adds to it; recursion counts once.
        w.add(&stacks(&[
            (&["main", "backend"], 5),
            (&["main", "walk", "walk", "walk"], 5),
        ]));
        let f = w.functions();
        let get = |n: &str| f.iter().find(|x| x.name == n).unwrap();
        assert_eq!(f[0].name, "main");
        assert_eq!(
            (get("main").self_samples, get("main").inclusive_samples),
            (0, 110)
        );
        let parser = get("http_parser_execute");
        assert_eq!((parser.self_samples, parser.inclusive_samples), (10, 40));
        assert_eq!(
            (get("memchr").self_samples, get("memchr").inclusive_samples),
            (30, 30)
        );
        assert_eq!(
            (get("walk").self_samples, get("walk").inclusive_samples),
            (5, 5)
        );
        let snap = w.snapshot();
        assert_eq!(snap.total(), 110);
        assert_eq!(snap.stacks.len(), 4);
        let first: Vec<&str> = snap
            .frames_of(&snap.stacks[0])
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(first, ["main", "backend"], "largest first, root first");
    }

    #[test]
    fn beyond_the_bound_the_rest_is_one_stack_and_the_total_holds() {
        let mut w = StackWindow::default();
        let names: Vec<String> = (0..MAX_STACKS + 10).map(|i| format!("f{i}")).collect();
        let list: Vec<(Vec<&str>, u64)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (vec!["main", n.as_str()], if i < 10 { 100 } else { 1 }))
            .collect();
        let borrowed: Vec<(&[&str], u64)> = list.iter().map(|(v, n)| (v.as_slice(), *n)).collect();
        w.add(&stacks(&borrowed));
        let snap = w.snapshot();
        assert_eq!(snap.stacks.len(), MAX_STACKS + 1);
        assert_eq!(snap.total(), 10 * 100 + MAX_STACKS as u64);
        let last = snap.stacks.last().unwrap();
        assert_eq!(snap.frames[last.frames[0] as usize].name, OTHER_STACKS);
        assert_eq!(last.samples, 10);
        assert!(w.functions().iter().all(|f| f.name != OTHER_STACKS));
    }

    /// The unmapped and truncated counts add up through windows and merges, and a
    /// snapshot written before `unmapped_samples` existed reads as 0.
    #[test]
    fn unmapped_samples_add_up_and_default_to_zero() {
        let mut a = stacks(&[(&["main", "f"], 5)]);
        a.unmapped_samples = 2;
        a.truncated_samples = 1;
        let mut b = stacks(&[(&["main", "g"], 7)]);
        b.unmapped_samples = 3;
        let mut w = StackWindow::default();
        w.add(&a);
        w.add(&b);
        let snap = w.snapshot();
        assert_eq!((snap.unmapped_samples, snap.truncated_samples), (5, 1));
        a.merge(&b);
        assert_eq!(a.unmapped_samples, 5);
        let old: Stacks =
            serde_json::from_str(r#"{"frames": [], "stacks": [], "truncated_samples": 4}"#)
                .unwrap();
        assert_eq!((old.truncated_samples, old.unmapped_samples), (4, 0));
    }

    /// Sixty frames every stack passes through do not crowd out the function that runs.
    #[test]
    fn the_functions_that_run_are_kept_beside_the_deepest_callers() {
        let chain: Vec<String> = (0..60).map(|i| format!("pass{i:02}")).collect();
        let mut hot: Vec<&str> = chain.iter().map(String::as_str).collect();
        hot.push("parse");
        let mut cold: Vec<&str> = chain.iter().map(String::as_str).collect();
        cold.push("wait");
        let mut w = StackWindow::default();
        w.add(&stacks(&[(&hot, 10), (&cold, 90)]));
        let functions = w.functions();
        let parse = functions.iter().find(|f| f.name == "parse");
        assert_eq!(parse.map(|f| f.self_samples), Some(10), "{functions:?}");
        assert!(functions.iter().any(|f| f.name == "wait"));
        assert_eq!(functions.len(), TOP_FUNCTIONS + 2);
        assert_eq!(functions[0].inclusive_samples, 100);
    }
}

//! A Python upstream's profile by Python function: the [`PySampler`]'s stacks, each with
//! its native leaf named (when the sample ran outside the interpreter), folded through the
//! component rules into the same [`ProfileDelta`] the other samplers make.
//!
//! Each sample's self component is its leaf's: the native function's (`__sin_fma` →
//! `libm.so.6`, `llhttp_execute` → `http_parser`) when it ran outside the interpreter,
//! else the Python function's (a package, the standard library, the server's own file,
//! or a rule's: http.server's `parse_request` → `http_parser`); its inclusive components
//! are those of every frame on it.

use std::collections::HashMap;
use std::sync::Arc;

use super::mixed::{self, Mixed};
use super::sampler::{Sampled, NO_PYTHON, TRUNCATED};
use super::{detect, PyFrame, PySampler};
use crate::snapshot::{Frame, FrameKind};
use crate::upstream::profile::fold::Fold;
use crate::upstream::profile::native::Symbolizer as Symbols;
use crate::upstream::profile::rate::Adaptive;
use crate::upstream::profile::{ComponentRules, ProfileDelta, ProfileError};

/// The component of a sample on CPU while its thread ran no Python frame.
const INTERPRETER_COMPONENT: &str = "python_interpreter";
/// The eval loop's symbol: its native frames stand for Python frames.
const EVAL_LOOP: &str = "_PyEval_EvalFrameDefault";
/// Kernel addresses start here on x86-64.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Samples one Python process by Python function.
pub struct PyProfiler {
    sampler: PySampler,
    symbols: Symbols,
    folder: Folder,
    /// The rate adapting to the budget, as the native profiler's.
    pace: Adaptive,
}

/// A native frame: (symbol, object, in the kernel).
type Native = (Arc<str>, Arc<str>, bool);
/// A leaf function in `symbols`: (name, file or object).
type Leaf = (Arc<str>, Arc<str>);

/// Folds Python stacks through the rules.
struct Folder {
    rules: ComponentRules,
    /// Component of each (function, file), so each regex runs once per function.
    components: HashMap<(Arc<str>, Arc<str>), Arc<str>>,
}

/// A frame of a mixed stack, named.
#[derive(Clone, Debug)]
enum Part {
    Python(PyFrame),
    Native(Native),
}

/// A frame of a folded stack: a Python function, or a native function by (symbol, object).
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Python(PyFrame),
    Native(Arc<str>, Arc<str>),
}

impl PyProfiler {
    /// `Ok(None)` when `pid` runs no CPython; an error when it does but its frames cannot
    /// be read (an unknown version, no permission).
    pub fn start(
        pid: u32,
        frequency_hz: u32,
        rules: ComponentRules,
    ) -> Result<Option<PyProfiler>, ProfileError> {
        let Some(target) = detect(pid).map_err(ProfileError::Python)? else {
            return Ok(None);
        };
        let mut symbols = Symbols::new(pid)?;
        symbols.warm_up();
        let sampler = PySampler::start(target, frequency_hz).map_err(ProfileError::Python)?;
        Ok(Some(PyProfiler {
            sampler,
            symbols,
            folder: Folder {
                rules,
                components: HashMap::new(),
            },
            pace: Adaptive::new(frequency_hz),
        }))
    }

    /// Samples per second the process may give: the period doubles while it gives more,
    /// and comes back to the configured one while it gives under a third
    /// ([`crate::upstream::profile::rate`]); 0 keeps the configured rate.
    pub fn set_budget(&mut self, samples_per_second: u32) {
        self.pace.set_budget(samples_per_second);
        self.sampler.set_shift(0);
    }

    /// Samples per second of each thread's CPU now: the configured rate over the
    /// period's multiple.
    pub fn rate_hz(&self) -> f64 {
        self.pace.rate_hz()
    }

    /// The CPython version the frames are read with.
    pub fn version(&self) -> &str {
        self.sampler.target().version()
    }

    pub fn sampler(&self) -> &PySampler {
        &self.sampler
    }

    /// The stacks sampled since the last call, folded.
    pub fn collect(&mut self) -> Result<ProfileDelta, ProfileError> {
        let mut taken = self.sampler.collect();
        // The shift the clocks sample at, then the next one: the sampler thread applies
        // it at its next wake-up.
        self.pace.set_shift(self.sampler.shift());
        if let Some(shift) = self.pace.collected(taken.taken()) {
            self.sampler.set_shift(shift);
        }
        let truncated = taken.truncated();
        let lost = taken.lost();
        let unsampled = taken.unsampled();
        let stacks = taken.take();
        self.symbols.refresh_maps()?;
        let user = stacks
            .iter()
            .flat_map(|(s, _)| s.native.iter().copied().chain([s.ip]))
            .filter(|&ip| ip != 0 && ip < KERNEL_START);
        self.symbols.resolve_user(user)?;
        let kernel = stacks
            .iter()
            .map(|(s, _)| s.ip)
            .filter(|&ip| ip >= KERNEL_START);
        self.symbols.resolve_kernel(kernel)?;
        let mut named = Vec::with_capacity(stacks.len());
        let mut mixed = Vec::new();
        for (sampled, n) in stacks {
            named.push((self.mixed(&sampled, &mut mixed), n));
        }
        let mut delta = self.folder.fold(&named, truncated, lost);
        (delta.unsampled_threads, delta.unsampled_cpu_ns) = unsampled;
        delta.taken = taken.taken();
        delta.period_multiple = self.pace.weight();
        Ok(delta)
    }

    /// One sample's stack of Python and native frames, root first ([`mixed`]).
    fn mixed(&self, sampled: &Sampled, scratch: &mut Vec<Mixed>) -> Vec<Part> {
        let target = self.sampler.target();
        let kind = |addr: u64| {
            if !target.in_interpreter(addr) {
                mixed::Native::Shown
            } else if self
                .symbols
                .user(addr)
                .is_some_and(|id| self.symbols.name(id).symbol == EVAL_LOOP)
            {
                mixed::Native::Eval
            } else {
                mixed::Native::Interpreter
            }
        };
        let mut native = sampled.native.as_slice();
        // Without a native walk, the sampled instruction alone: the leaf when it ran
        // outside the interpreter.
        let leaf = [sampled.ip];
        if native.is_empty() && sampled.ip != 0 && sampled.ip < KERNEL_START {
            native = &leaf;
        }
        mixed::merge(&sampled.entries, native, sampled.complete, kind, scratch);
        let mut parts = Vec::with_capacity(scratch.len() + 1);
        if sampled.ip >= KERNEL_START {
            parts.extend(self.native(sampled.ip).map(Part::Native));
        }
        for m in scratch.iter() {
            match *m {
                Mixed::Python(i) => parts.extend(sampled.frames.get(i).cloned().map(Part::Python)),
                Mixed::Native(addr) => parts.extend(self.native(addr).map(Part::Native)),
            }
        }
        parts.reverse();
        parts
    }

    /// The (symbol, object, kernel) of a native frame, `None` when it cannot be named.
    fn native(&self, ip: u64) -> Option<Native> {
        let id = if ip >= KERNEL_START {
            self.symbols.kernel(ip)?
        } else {
            self.symbols.user(ip)?
        };
        let name = self.symbols.name(id);
        Some((
            name.symbol.as_str().into(),
            name.object.as_str().into(),
            name.kernel,
        ))
    }
}

impl Folder {
    fn component(&mut self, frame: &PyFrame) -> Arc<str> {
        let key = (frame.function.clone(), frame.file.clone());
        if let Some(c) = self.components.get(&key) {
            return c.clone();
        }
        if self.components.len() > 1 << 16 {
            self.components.clear();
        }
        let c: Arc<str> = match (&*frame.function, frame.file.is_empty()) {
            (NO_PYTHON, true) => INTERPRETER_COMPONENT.into(),
            (TRUNCATED, true) => "".into(),
            _ => self
                .rules
                .python_component(&frame.function, &frame.file)
                .into(),
        };
        self.components.insert(key, c.clone());
        c
    }

    fn fold(&mut self, taken: &[(Vec<Part>, u64)], truncated: u64, lost: u64) -> ProfileDelta {
        let mut fold: Fold<Key, Leaf, Arc<str>> = Fold::new();
        fold.truncated(truncated);
        let mut seen: Vec<Arc<str>> = Vec::new();
        for (parts, n) in taken {
            let n = *n;
            seen.clear();
            let mut ids = Vec::with_capacity(parts.len());
            let mut own: Option<(Arc<str>, Leaf)> = None;
            for part in parts {
                let (key, frame, component) = self.frame(part);
                ids.push(fold.frame(key, || frame.clone()));
                own = Some((component.clone(), leaf_of(part)));
                if !component.is_empty() && !seen.contains(&component) {
                    seen.push(component);
                }
            }
            let Some((mut component, leaf)) = own else {
                continue;
            };
            if component.is_empty() {
                component = TRUNCATED.into();
            }
            fold.leaf(leaf, component, n);
            fold.stack(ids, &seen, n);
        }
        fold.finish(
            |(function, file)| (function.to_string(), file.to_string()),
            Some(FrameKind::Python),
            lost,
        )
    }

    /// A part's fold key, its frame and its component.
    fn frame(&mut self, part: &Part) -> (Key, Frame, Arc<str>) {
        match part {
            Part::Python(frame) => {
                let component = self.component(frame);
                let shown = Frame {
                    name: frame.function.to_string(),
                    object: frame.file.to_string(),
                    component: component.to_string(),
                    line: (frame.line > 0).then_some(frame.line),
                    at_line: (frame.at_line > 0).then_some(frame.at_line),
                };
                (Key::Python(frame.clone()), shown, component)
            }
            Part::Native((symbol, object, kernel)) => {
                let component: Arc<str> = self.rules.component(symbol, object, *kernel).into();
                let shown = Frame {
                    name: symbol.to_string(),
                    object: object.to_string(),
                    component: component.to_string(),
                    line: None,
                    at_line: None,
                };
                (
                    Key::Native(symbol.clone(), object.clone()),
                    shown,
                    component,
                )
            }
        }
    }
}

/// The (function, file) a part counts its self samples under.
fn leaf_of(part: &Part) -> Leaf {
    match part {
        Part::Python(frame) => (frame.function.clone(), frame.file.clone()),
        Part::Native((symbol, object, _)) => (symbol.clone(), object.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str, line: u32) -> PyFrame {
        PyFrame {
            function: function.into(),
            file: file.into(),
            line,
            at_line: 0,
        }
    }

    #[test]
    fn python_frames_with_a_native_leaf() {
        let rules = ComponentRules::new(&[]).unwrap();
        let main = frame("<module>", "/srv/app.py", 1);
        let serve = frame(
            "BaseServer.serve_forever",
            "/usr/lib/python3.11/socketserver.py",
            215,
        );
        let parse = frame(
            "BaseHTTPRequestHandler.parse_request",
            "/usr/lib/python3.11/http/server.py",
            267,
        );
        let report = frame("compute_report", "/srv/app.py", 40);
        let sin = Part::Native(("__sin_fma".into(), "libm.so.6".into(), false));
        let qsort = Part::Native(("qsort_r".into(), "libc.so.6".into(), false));
        let compare = frame("compare", "/srv/app.py", 50);
        let py = |f: &PyFrame| Part::Python(f.clone());
        let mut folder = Folder {
            rules,
            components: HashMap::new(),
        };
        let delta = folder.fold(
            &[
                (vec![py(&main), py(&serve), py(&parse)], 20),
                (vec![py(&main), py(&report), sin], 30),
                (vec![py(&main), py(&report)], 35),
                (vec![py(&main), py(&report), qsort, py(&compare)], 5),
                (vec![py(&frame(NO_PYTHON, "", 0))], 10),
            ],
            0,
            0,
        );
        let get = |v: &[(String, u64)], c: &str| v.iter().find(|(k, _)| k == c).map(|(_, n)| *n);
        assert_eq!(get(&delta.by_component, "http_parser"), Some(20));
        assert_eq!(get(&delta.by_component, "libm.so.6"), Some(30));
        assert_eq!(get(&delta.by_component, "app.py"), Some(40));
        assert_eq!(get(&delta.by_component, INTERPRETER_COMPONENT), Some(10));
        assert_eq!(get(&delta.inclusive, "app.py"), Some(90));
        assert_eq!(
            get(&delta.inclusive, "libc.so.6"),
            Some(5),
            "the C function between"
        );
        assert_eq!(get(&delta.inclusive, "python_stdlib"), Some(20));
        assert_eq!(delta.total(), 100);
        assert_eq!(delta.frames, Some(FrameKind::Python));
        let sin_stack = delta
            .stacks
            .stacks
            .iter()
            .find(|s| s.samples == 30)
            .expect("the stack through __sin_fma");
        let names: Vec<&str> = sin_stack
            .frames
            .iter()
            .map(|&i| delta.stacks.frames[i as usize].name.as_str())
            .collect();
        assert_eq!(names, ["<module>", "compute_report", "__sin_fma"]);
    }
}

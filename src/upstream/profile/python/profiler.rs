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

use super::sampler::{NO_PYTHON, TRUNCATED};
use super::{detect, PyFrame, PySampler};
use crate::snapshot::{Frame, FrameKind};
use crate::upstream::profile::fold::Fold;
use crate::upstream::profile::native::Symbolizer as Symbols;
use crate::upstream::profile::{ComponentRules, ProfileDelta, ProfileError};

/// The component of a sample on CPU while its thread ran no Python frame.
const INTERPRETER_COMPONENT: &str = "python_interpreter";
/// Kernel addresses start here on x86-64.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Samples one Python process by Python function.
pub struct PyProfiler {
    sampler: PySampler,
    symbols: Symbols,
    folder: Folder,
}

/// A sample's native leaf: (symbol, object, in the kernel).
type Native = (Arc<str>, Arc<str>, bool);
/// A leaf function in `symbols`: (name, file or object).
type Leaf = (Arc<str>, Arc<str>);

/// Folds Python stacks through the rules.
struct Folder {
    rules: ComponentRules,
    /// Component of each (function, file), so each regex runs once per function.
    components: HashMap<(Arc<str>, Arc<str>), Arc<str>>,
}

/// A frame of a folded stack: a Python function, or a native leaf by (symbol, object).
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
        }))
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
        let truncated = taken.truncated();
        let lost = taken.lost();
        let unsampled = taken.unsampled();
        let stacks = taken.take();
        let target = self.sampler.target();
        let native = |ip: u64| ip != 0 && !target.in_interpreter(ip);
        self.symbols.refresh_maps()?;
        let ips = || {
            stacks
                .iter()
                .map(|((_, ip), _)| *ip)
                .filter(|&ip| native(ip))
        };
        self.symbols
            .resolve_user(ips().filter(|&ip| ip < KERNEL_START))?;
        self.symbols
            .resolve_kernel(ips().filter(|&ip| ip >= KERNEL_START))?;
        let mut named = Vec::with_capacity(stacks.len());
        for ((frames, ip), n) in stacks {
            let leaf = if native(ip) { self.native(ip) } else { None };
            named.push((frames, leaf, n));
        }
        let mut delta = self.folder.fold(&named, truncated, lost);
        (delta.unsampled_threads, delta.unsampled_cpu_ns) = unsampled;
        Ok(delta)
    }

    /// The (symbol, object, kernel) of a native leaf, `None` when it cannot be named.
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

    fn fold(
        &mut self,
        taken: &[(Vec<PyFrame>, Option<Native>, u64)],
        truncated: u64,
        lost: u64,
    ) -> ProfileDelta {
        let mut fold: Fold<Key, Leaf, Arc<str>> = Fold::new();
        fold.truncated(truncated);
        let mut seen: Vec<Arc<str>> = Vec::new();
        for (frames, leaf, n) in taken {
            let n = *n;
            seen.clear();
            let mut ids = Vec::with_capacity(frames.len() + 1);
            let mut own: Option<(Arc<str>, Leaf)> = None;
            for frame in frames {
                let component = self.component(frame);
                ids.push(fold.frame(Key::Python(frame.clone()), || Frame {
                    name: frame.function.to_string(),
                    object: frame.file.to_string(),
                    component: component.to_string(),
                    line: (frame.line > 0).then_some(frame.line),
                }));
                own = Some((
                    component.clone(),
                    (frame.function.clone(), frame.file.clone()),
                ));
                if !component.is_empty() && !seen.contains(&component) {
                    seen.push(component);
                }
            }
            if let Some((symbol, object, kernel)) = leaf {
                let component: Arc<str> = self.rules.component(symbol, object, *kernel).into();
                ids.push(
                    fold.frame(Key::Native(symbol.clone(), object.clone()), || Frame {
                        name: symbol.to_string(),
                        object: object.to_string(),
                        component: component.to_string(),
                        line: None,
                    }),
                );
                own = Some((component.clone(), (symbol.clone(), object.clone())));
                if !seen.contains(&component) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str, line: u32) -> PyFrame {
        PyFrame {
            function: function.into(),
            file: file.into(),
            line,
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
        let sin: Option<Native> = Some(("__sin_fma".into(), "libm.so.6".into(), false));
        let mut folder = Folder {
            rules,
            components: HashMap::new(),
        };
        let delta = folder.fold(
            &[
                (vec![main.clone(), serve.clone(), parse], None, 20),
                (vec![main.clone(), report.clone()], sin, 30),
                (vec![main, report], None, 40),
                (vec![frame(NO_PYTHON, "", 0)], None, 10),
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

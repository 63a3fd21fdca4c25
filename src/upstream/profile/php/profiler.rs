//! A PHP upstream's profile by PHP function: the [`PhpSampler`]'s stacks,
//! folded through the component rules into the same [`ProfileDelta`] a native profile
//! makes, so that the snapshot, the report and the exporters read both alike.
//!
//! Each sample is one on-CPU stack of the interpreter, root first. Its self component is
//! the leaf function's (`preg_match` → `regex`, `fwrite` → `stream_io`); its inclusive
//! components are those of every frame on it, so a head parser that calls `preg_match`
//! counts the regex under `http_parser` too.

use std::collections::HashMap;
use std::sync::Arc;

use super::{detect, PhpFrame, PhpPace, PhpSampler};
use crate::snapshot::stacks::TRUNCATED;
use crate::snapshot::{Frame, FrameKind};
use crate::upstream::profile::fold::Fold;
use crate::upstream::profile::rate::Adaptive;
use crate::upstream::profile::{ComponentRules, ProfileDelta, ProfileError};

/// The sampler's frame for a sample on a CPU without PHP code running: the engine
/// starting, compiling, an FPM worker between requests. It counts as the engine's own
/// work.
const NO_PHP_CODE: &str = "[no PHP code]";
const ENGINE_COMPONENT: &str = "php_engine";

/// The component of one of the sampler's marker frames (built into no script), or `None`
/// for a function. `[truncated]` stands for frames that were not read and belongs to no
/// component: it counts in no inclusive share, and a sample that is nothing but it (past
/// the sampler's bound on distinct stacks) counts under its own name.
fn marker_component(frame: &PhpFrame) -> Option<&'static str> {
    if !frame.file.is_empty() {
        return None;
    }
    match &*frame.function {
        NO_PHP_CODE => Some(ENGINE_COMPONENT),
        TRUNCATED => Some(""),
        _ => None,
    }
}

/// Samples one PHP process by PHP function.
pub struct PhpProfiler {
    sampler: PhpSampler,
    folder: Folder,
    /// The rate adapting to the budget, as the native profiler's.
    pace: Adaptive,
}

/// Folds PHP stacks through the rules.
struct Folder {
    rules: ComponentRules,
    /// Component of each (function, file), so each regex runs once per function.
    components: HashMap<(Arc<str>, Arc<str>), Arc<str>>,
}

impl PhpProfiler {
    /// `Ok(None)` when `pid` runs no PHP interpreter; an error when it does but its
    /// frames cannot be read (a thread-safe build, an unknown version, no permission).
    pub fn start(
        pid: u32,
        frequency_hz: u32,
        rules: ComponentRules,
    ) -> Result<Option<PhpProfiler>, ProfileError> {
        PhpProfiler::start_paced(pid, frequency_hz, rules, PhpPace::CpuTime)
    }

    /// As [`PhpProfiler::start`], its reads paced as asked.
    pub fn start_paced(
        pid: u32,
        frequency_hz: u32,
        rules: ComponentRules,
        pace: PhpPace,
    ) -> Result<Option<PhpProfiler>, ProfileError> {
        let Some(target) = detect(pid).map_err(ProfileError::Php)? else {
            return Ok(None);
        };
        let sampler =
            PhpSampler::start_paced(target, frequency_hz, pace).map_err(ProfileError::Php)?;
        Ok(Some(PhpProfiler {
            sampler,
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

    /// Samples per second of the PHP thread's CPU now: the configured rate over the
    /// period's multiple.
    pub fn rate_hz(&self) -> f64 {
        self.pace.rate_hz()
    }

    /// The PHP version the frames are read with.
    pub fn version(&self) -> &str {
        self.sampler.version()
    }

    pub fn sampler(&self) -> &PhpSampler {
        &self.sampler
    }

    /// The stacks sampled since the last call, folded.
    pub fn collect(&mut self) -> ProfileDelta {
        let mut taken = self.sampler.collect();
        // The shift the thread applied (it may not have yet, or could not), then the
        // next one: the thread applies it at its next wake-up.
        self.pace.set_shift(self.sampler.shift());
        if let Some(shift) = self.pace.collected(taken.taken()) {
            self.sampler.set_shift(shift);
        }
        let truncated = taken.truncated();
        let stacks = taken.take();
        let mut delta = self.folder.fold(&stacks, truncated);
        delta.taken = taken.taken();
        delta.period_multiple = self.pace.weight();
        delta
    }
}

impl Folder {
    fn component(&mut self, frame: &PhpFrame) -> Arc<str> {
        let key = (frame.function.clone(), frame.file.clone());
        if let Some(c) = self.components.get(&key) {
            return c.clone();
        }
        // Functions are bounded by the application's code; a bound keeps code generated
        // at run time (eval, closures named per line) from growing the cache forever.
        if self.components.len() > 1 << 16 {
            self.components.clear();
        }
        let c: Arc<str> = match marker_component(frame) {
            Some(marker) => marker.into(),
            None => self
                .rules
                .php_component(&frame.function, &frame.file)
                .into(),
        };
        self.components.insert(key, c.clone());
        c
    }

    fn fold(&mut self, taken: &[(Vec<PhpFrame>, u64)], truncated: u64) -> ProfileDelta {
        // Leaves by (function, file): closures of one file are one row of `symbols`.
        let mut fold: Fold<PhpFrame, (Arc<str>, Arc<str>), Arc<str>> = Fold::new();
        fold.truncated(truncated);
        let mut seen: Vec<Arc<str>> = Vec::new();
        for (frames, n) in taken {
            let n = *n;
            let Some(leaf) = frames.last() else { continue };
            let mut own = self.component(leaf);
            if own.is_empty() {
                own = TRUNCATED.into();
            }
            fold.leaf((leaf.function.clone(), leaf.file.clone()), own, n);
            seen.clear();
            let mut ids = Vec::with_capacity(frames.len());
            for frame in frames {
                let component = self.component(frame);
                ids.push(fold.frame(frame.clone(), || Frame {
                    name: frame.function.to_string(),
                    object: frame.file.to_string(),
                    component: component.to_string(),
                    line: (frame.line > 0).then_some(frame.line),
                    at_line: None,
                }));
                // `[truncated]` belongs to no component: it counts in no inclusive share.
                if !component.is_empty() && !seen.contains(&component) {
                    seen.push(component);
                }
            }
            fold.stack(ids, &seen, n);
        }
        fold.finish(
            |(function, file)| (function.to_string(), file.to_string()),
            Some(FrameKind::Php),
            0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str) -> PhpFrame {
        PhpFrame {
            function: function.into(),
            file: file.into(),
            line: u32::from(!file.is_empty()),
            at_line: 0,
        }
    }

    #[test]
    fn self_inclusive_and_the_markers() {
        let mut folder = Folder {
            rules: ComponentRules::new(&[]).unwrap(),
            components: HashMap::new(),
        };
        let main = frame("{main}", "/srv/index.php");
        let parse = frame(
            r"Amp\Http\Http1\Rfc7230::parseHeaders",
            "/srv/vendor/amphp/http/src/Rfc7230.php",
        );
        let delta = folder.fold(
            &[
                (
                    vec![main.clone(), parse.clone(), frame("preg_match", "")],
                    30,
                ),
                (vec![main.clone(), frame("fwrite", "")], 60),
                (vec![frame(TRUNCATED, ""), parse, frame("strlen", "")], 5),
                (vec![frame(NO_PHP_CODE, "")], 3),
                (vec![frame(TRUNCATED, "")], 2),
            ],
            7,
        );
        let get = |v: &[(String, u64)], c: &str| v.iter().find(|(k, _)| k == c).map(|(_, n)| *n);
        assert_eq!(get(&delta.by_component, "regex"), Some(30));
        assert_eq!(get(&delta.by_component, "stream_io"), Some(60));
        assert_eq!(get(&delta.by_component, "php_builtin"), Some(5));
        assert_eq!(get(&delta.by_component, ENGINE_COMPONENT), Some(3));
        assert_eq!(get(&delta.by_component, TRUNCATED), Some(2));
        assert_eq!(delta.total(), 100, "every sample counts once as self");
        assert_eq!(get(&delta.inclusive, "http_parser"), Some(35));
        assert_eq!(get(&delta.inclusive, "index.php"), Some(90));
        assert_eq!(
            get(&delta.inclusive, ""),
            None,
            "the marker is no component"
        );
        assert_eq!(delta.stacks.total(), 100);
        assert_eq!(delta.stacks.truncated_samples, 7);
        assert_eq!(delta.frames, Some(FrameKind::Php));
    }
}

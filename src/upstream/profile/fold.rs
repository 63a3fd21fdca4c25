//! One collect's samples folded into a [`ProfileDelta`]: the one fold both samplers feed.
//!
//! A sampler knows how to name its frames and which component each belongs to (the native
//! one through symbols and the kernel's generic leaves, the PHP one through the engine's
//! markers); what is counted, and how, is the same for both and is done here:
//! - **self**: a sample counts once under the component its sampler charges it to, and
//!   under its leaf function with that component (`symbols`);
//! - **inclusive**: once under every component its sampler lists for it;
//! - **stacks**: its frames, each interned once per collect and named on first use, and the
//!   stack itself, counted once per distinct sequence of frames.
//!
//! `K` is the sampler's key of a frame (an interned symbol, a PHP function and its line),
//! `L` that of a leaf function in `symbols` (the same, or coarser: PHP's closures of one
//! file are one row there), `C` a component's name (borrowed, or shared with the
//! sampler's cache).

use std::collections::HashMap;
use std::hash::Hash;

use super::{sort_symbols, sorted, ProfileDelta, SymbolSamples};
use crate::snapshot::{Frame, FrameKind, Stack, Stacks};

pub(super) struct Fold<K, L, C> {
    /// Self component → samples.
    by_component: HashMap<C, u64>,
    /// (leaf, self component) → samples.
    symbols: HashMap<(L, C), u64>,
    /// Component → samples whose stack holds it.
    inclusive: HashMap<C, u64>,
    /// Index in `stacks.frames` of each frame met in this collect.
    frame_of: HashMap<K, u32>,
    /// Index in `stacks.stacks` of each sequence of frames met.
    stack_of: HashMap<Vec<u32>, usize>,
    stacks: Stacks,
}

impl<K: Hash + Eq, L: Hash + Eq, C: AsRef<str> + Hash + Eq + Clone> Fold<K, L, C> {
    pub(super) fn new() -> Self {
        Self {
            by_component: HashMap::new(),
            symbols: HashMap::new(),
            inclusive: HashMap::new(),
            frame_of: HashMap::new(),
            stack_of: HashMap::new(),
            stacks: Stacks::default(),
        }
    }

    /// `n` samples whose leaf is `leaf`, charged to `component` (self).
    pub(super) fn leaf(&mut self, leaf: L, component: C, n: u64) {
        *self.by_component.entry(component.clone()).or_insert(0) += n;
        *self.symbols.entry((leaf, component)).or_insert(0) += n;
    }

    /// The index of frame `key` in the delta's frames; `frame` names it the first time.
    pub(super) fn frame(&mut self, key: K, frame: impl FnOnce() -> Frame) -> u32 {
        let frames = &mut self.stacks.frames;
        *self.frame_of.entry(key).or_insert_with(|| {
            frames.push(frame());
            u32::try_from(frames.len() - 1).unwrap_or(u32::MAX)
        })
    }

    /// `n` samples of the stack `frames` (indices from [`Fold::frame`], root first), which
    /// count under each of `components` (inclusive; each once).
    pub(super) fn stack(&mut self, frames: Vec<u32>, components: &[C], n: u64) {
        for c in components {
            *self.inclusive.entry(c.clone()).or_insert(0) += n;
        }
        match self.stack_of.get(&frames) {
            Some(&i) => self.stacks.stacks[i].samples += n,
            None => {
                self.stack_of
                    .insert(frames.clone(), self.stacks.stacks.len());
                self.stacks.stacks.push(Stack { frames, samples: n });
            }
        }
    }

    /// Samples whose stack was cut short (a walk that did not reach the thread's root).
    pub(super) fn truncated(&mut self, n: u64) {
        self.stacks.truncated_samples += n;
    }

    /// Samples whose stack holds an address in no mapping.
    pub(super) fn unmapped(&mut self, n: u64) {
        self.stacks.unmapped_samples += n;
    }

    /// The delta: `name` gives a leaf's symbol and object; `frames` says what the stacks'
    /// frames are (`None` when no stacks were taken).
    pub(super) fn finish(
        self,
        name: impl Fn(&L) -> (String, String),
        frames: Option<FrameKind>,
        lost: u64,
    ) -> ProfileDelta {
        let mut symbols: Vec<SymbolSamples> = self
            .symbols
            .into_iter()
            .map(|((leaf, component), samples)| {
                let (symbol, object) = name(&leaf);
                SymbolSamples {
                    symbol,
                    object,
                    component: component.as_ref().to_owned(),
                    samples,
                }
            })
            .collect();
        sort_symbols(&mut symbols);
        ProfileDelta {
            by_component: sorted(self.by_component),
            symbols,
            lost,
            inclusive: sorted(self.inclusive),
            stacks: self.stacks,
            frames,
            unsampled_threads: 0,
            unsampled_cpu_ns: 0,
            sampler_cpu_ns: 0,
            taken: 0,
            period_multiple: 0,
            unwinding_pending: false,
        }
    }
}

//! The stacks as the cut reads them: each frame once (frames equal by value share one id:
//! a hand-made or merged table may hold one twice), each function's counts over all
//! stacks, and the call tree merged from the roots.

use std::collections::HashMap;

use super::is_placeholder;
use crate::snapshot::stacks::{Frame, Stacks};

/// The stacks by function: what the cut and the entries ask of every function.
pub(super) struct Table<'a> {
    /// The distinct frames; a function's id is its index here.
    pub frames: Vec<&'a Frame>,
    /// Each stack with samples, root first, as function ids.
    pub paths: Vec<(Vec<usize>, u64)>,
    /// Per function over all stacks: samples with it on the stack (once per stack, as
    /// `perf report --children` counts a recursive function), running it, and through
    /// each caller.
    pub inclusive: Vec<u64>,
    pub own: Vec<u64>,
    pub callers: Vec<HashMap<usize, u64>>,
    pub total: u64,
}

impl<'a> Table<'a> {
    pub fn of(stacks: &'a Stacks) -> Table<'a> {
        // A function's frames on different lines (Python's) are one function here.
        let mut canon: HashMap<(&str, &str, &str, Option<u32>), usize> = HashMap::new();
        let mut frames: Vec<&Frame> = Vec::new();
        let ids: Vec<usize> = stacks
            .frames
            .iter()
            .map(|f| {
                *canon.entry(f.function()).or_insert_with(|| {
                    frames.push(f);
                    frames.len() - 1
                })
            })
            .collect();
        let paths: Vec<(Vec<usize>, u64)> = stacks
            .stacks
            .iter()
            .filter(|s| s.samples > 0)
            .map(|s| {
                let path = s
                    .frames
                    .iter()
                    .filter_map(|&i| ids.get(i as usize).copied())
                    .collect();
                (path, s.samples)
            })
            .collect();
        let mut table = Table {
            inclusive: vec![0; frames.len()],
            own: vec![0; frames.len()],
            callers: vec![HashMap::new(); frames.len()],
            total: paths.iter().map(|(_, n)| n).sum(),
            frames,
            paths,
        };
        table.count();
        table
    }

    fn count(&mut self) {
        // The last stack each function was counted in: once per stack, in linear time
        // (PHP recursion runs stacks a hundred frames deep).
        let mut counted_in = vec![usize::MAX; self.frames.len()];
        for (at, (path, n)) in self.paths.iter().enumerate() {
            if let Some(&leaf) = path.last() {
                self.own[leaf] += n;
            }
            for (depth, &f) in path.iter().enumerate() {
                if counted_in[f] == at {
                    continue;
                }
                counted_in[f] = at;
                self.inclusive[f] += n;
                // The frame right above, even unnamed (`[unknown]`): skipping to the next
                // named one would name a caller that does not call it. The stack's own
                // placeholders (`[truncated]`, no object) are no caller.
                if let Some(&c) = depth.checked_sub(1).and_then(|d| path.get(d)) {
                    let caller = self.frames[c];
                    if !(is_placeholder(caller) && caller.object.is_empty()) {
                        *self.callers[f].entry(c).or_default() += n;
                    }
                }
            }
        }
    }

    /// Whether function `f` is called from two functions or more: a leaf reached from
    /// several places is listed once, with its callers, rather than inside each.
    pub fn has_several_callers(&self, f: usize) -> bool {
        self.callers[f].len() >= 2
    }
}

/// A node of the call tree: one function reached by one path.
pub(super) struct Node {
    pub frame: usize,
    pub children: Vec<usize>,
    pub inclusive: u64,
    pub own: u64,
}

impl Node {
    /// The child carrying the most samples (the first made, of equals).
    pub fn heaviest(&self, nodes: &[Node]) -> Option<usize> {
        self.children
            .iter()
            .copied()
            .max_by_key(|&c| (nodes[c].inclusive, std::cmp::Reverse(c)))
    }
}

pub(super) struct Tree {
    pub nodes: Vec<Node>,
    pub roots: Vec<usize>,
}

impl Tree {
    pub fn of(paths: &[(Vec<usize>, u64)]) -> Tree {
        let mut tree = Tree {
            nodes: Vec::new(),
            roots: Vec::new(),
        };
        for (path, n) in paths {
            let mut parent: Option<usize> = None;
            for &f in path {
                let id = tree.child(parent, f);
                tree.nodes[id].inclusive += n;
                parent = Some(id);
            }
            if let Some(leaf) = parent {
                tree.nodes[leaf].own += n;
            }
        }
        tree
    }

    /// The node of function `f` below `parent` (a root without one), made if new.
    fn child(&mut self, parent: Option<usize>, f: usize) -> usize {
        // Among the few callees a node has, a scan beats hashing every frame.
        let siblings = parent.map_or(&self.roots, |p| &self.nodes[p].children);
        if let Some(id) = siblings.iter().copied().find(|&c| self.nodes[c].frame == f) {
            return id;
        }
        self.nodes.push(Node {
            frame: f,
            children: Vec::new(),
            inclusive: 0,
            own: 0,
        });
        let id = self.nodes.len() - 1;
        match parent {
            Some(p) => self.nodes[p].children.push(id),
            None => self.roots.push(id),
        }
        id
    }
}

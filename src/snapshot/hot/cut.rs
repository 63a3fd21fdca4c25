//! The call tree cut into *units*, disjoint sets of nodes, each to be named by one
//! function (docs/report.md, "Call stacks"; the rules are in [`super`]'s header).

use super::tree::{Node, Table, Tree};
use super::{is_generic, is_kernel, is_php_builtin, is_placeholder, is_unnamed};
use super::{MIN_PART, MIN_SPLIT, PASS_THROUGH};
use crate::snapshot::components::component_group;
use crate::snapshot::work::is_helper;

/// What a frame is, worked out once per frame (the cut asks for every node).
#[derive(Clone, Copy)]
pub(super) struct Kind {
    pub placeholder: bool,
    /// Only leads to the work (thread start, an event loop, an interpreter's loop), or
    /// an unnamed function: names a unit only when nothing below it on its chain can.
    pub generic: bool,
    pub kernel: bool,
    pub builtin: bool,
    /// In a shared library.
    pub library: bool,
    /// Of a Composer package (`vendor/package`: PHP frames).
    pub package: bool,
    /// Of a helper component (the C library, the allocator, the kernel: `work`).
    pub helper: bool,
    /// Of the runtime JIT-compiled code runs on (V8, the JVM).
    pub runtime: bool,
}

impl Kind {
    fn of(f: &crate::snapshot::Frame) -> Kind {
        Kind {
            placeholder: is_placeholder(f),
            generic: is_generic(f) || is_unnamed(f),
            kernel: is_kernel(f),
            builtin: is_php_builtin(f),
            library: f.object.contains(".so"),
            package: f.component.contains('/'),
            helper: is_helper(&f.component),
            runtime: matches!(f.component.as_str(), "v8" | "jvm"),
        }
    }
}

/// A unit being cut: its chain (top first), its own samples, and whether a user-space
/// function is on its chain (the kernel below it is then its cost).
#[derive(Default)]
pub(super) struct Unit {
    pub chain: Vec<usize>,
    pub listed: u64,
    user: bool,
    /// The first place on the chain neither generic nor a placeholder.
    named_at: Option<usize>,
}

impl Unit {
    /// The place on the chain of the node that names the unit: the first that is neither
    /// generic nor a placeholder, else the last if it is no placeholder, else none.
    pub fn name_at(&self, nodes: &[Node], kinds: &[Kind]) -> Option<usize> {
        self.named_at.or_else(|| {
            let last = self.chain.len().checked_sub(1)?;
            (!kinds[nodes[self.chain[last]].frame].placeholder).then_some(last)
        })
    }
}

/// Where a callee goes.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// On its caller's chain: the caller only leads there.
    Chain,
    /// In its caller's unit, off the chain: its caller's cost.
    Stay,
    /// A unit of its own.
    New,
}

pub(super) struct Cut<'a> {
    table: &'a Table<'a>,
    tree: &'a Tree,
    pub kinds: Vec<Kind>,
    /// Each frame's component as users group them (`league/uri*`).
    groups: Vec<String>,
    min_split: u64,
}

impl<'a> Cut<'a> {
    pub fn new(table: &'a Table<'a>, tree: &'a Tree) -> Cut<'a> {
        Cut {
            table,
            tree,
            kinds: table.frames.iter().map(|f| Kind::of(f)).collect(),
            groups: table
                .frames
                .iter()
                .map(|f| component_group(&f.component).unwrap_or_else(|| f.component.clone()))
                .collect(),
            min_split: ((MIN_SPLIT * table.total as f64).ceil() as u64).max(1),
        }
    }

    /// The units, depth first without recursion (stacks run hundreds deep).
    pub fn units(&self) -> Vec<Unit> {
        let nodes = &self.tree.nodes;
        let mut units: Vec<Unit> = Vec::new();
        // (node, unit, whether the node is on its unit's chain)
        let mut work: Vec<(usize, usize, bool)> = Vec::new();
        let mut places: Vec<(usize, Place)> = Vec::new();
        for &r in &self.tree.roots {
            units.push(Unit::default());
            work.push((r, units.len() - 1, true));
        }
        while let Some((id, u, on_chain)) = work.pop() {
            let node = &nodes[id];
            let unit = &mut units[u];
            if on_chain {
                let k = self.kinds[node.frame];
                unit.chain.push(id);
                unit.user |= !k.kernel && !k.placeholder;
                if unit.named_at.is_none() && !k.generic && !k.placeholder {
                    unit.named_at = Some(unit.chain.len() - 1);
                }
            }
            unit.listed += node.own;
            let passes = node.heaviest(nodes).filter(|&h| {
                on_chain && nodes[h].inclusive as f64 >= PASS_THROUGH * node.inclusive as f64
            });
            places.clear();
            places.extend(
                node.children
                    .iter()
                    .map(|&c| (c, self.place(&units[u], node, c, Some(c) == passes))),
            );
            for &(c, place) in &places {
                match place {
                    Place::Chain => work.push((c, u, true)),
                    Place::Stay => work.push((c, u, false)),
                    Place::New => {
                        units.push(Unit::default());
                        work.push((c, units.len() - 1, true));
                    }
                }
            }
        }
        units
    }

    /// Where callee `c` of `node`, in `unit`, goes (docs/report.md, "Call stacks").
    fn place(&self, unit: &Unit, node: &Node, c: usize, passes: bool) -> Place {
        let nodes = &self.tree.nodes;
        let f = nodes[c].frame;
        let k = self.kinds[f];
        let name = unit
            .name_at(nodes, &self.kinds)
            .map(|at| nodes[unit.chain[at]].frame);
        // Below a user-space frame the kernel is its cost, below PHP code the functions
        // built into PHP, below JavaScript or Java their runtime (`Math.sin` is V8's).
        let callers_cost = (k.kernel || k.builtin || k.runtime) && unit.user;
        // A named unit's call into another component that is no helper (a library's
        // entry, the server's callback a parser makes, the event loop a worker runs)
        // begins another piece of work.
        let another = unit.named_at.is_some()
            && !k.helper
            && !callers_cost
            && name.is_some_and(|n| self.groups[n] != self.groups[f]);
        if passes {
            return if another && self.leads_to_hot(c) {
                Place::New
            } else {
                Place::Chain
            };
        }
        // Below a call into a library, that library's functions are the call's cost: a
        // shared library's (`___sprintf_chk` → `__vfprintf_internal`, which `snprintf`
        // also reaches), a Composer package's group (`League\Uri\Http::createFromComponents`
        // → `UriString::parse` of `league/uri-interfaces`).
        let inside_library = name.is_some_and(|n| {
            let (kn, frames) = (self.kinds[n], &self.table.frames);
            kn.library && frames[n].object == frames[f].object
                || kn.package && self.groups[n] == self.groups[f]
        });
        if callers_cost || inside_library {
            return Place::Stay;
        }
        let own_unit = unit.named_at.is_none()
            || another
            || nodes[c].inclusive as f64 >= MIN_PART * node.inclusive as f64
            || self.table.has_several_callers(f);
        if own_unit && self.leads_to_hot(c) {
            Place::New
        } else {
            Place::Stay
        }
    }

    /// Whether a callee starts a unit: its function, or one its pass-through chain leads to
    /// (`sprintf` → `__vsprintf_internal` → `__vfprintf_internal`), carries [`MIN_SPLIT`]
    /// of the samples over all its paths. The unit then starts at the callee, so it is
    /// named by the call the code makes, not by the library's inner function.
    fn leads_to_hot(&self, mut n: usize) -> bool {
        let nodes = &self.tree.nodes;
        loop {
            let node = &nodes[n];
            if self.table.inclusive[node.frame] >= self.min_split {
                return true;
            }
            match node.heaviest(nodes) {
                Some(h) if nodes[h].inclusive as f64 >= PASS_THROUGH * node.inclusive as f64 => {
                    n = h
                }
                _ => return false,
            }
        }
    }
}

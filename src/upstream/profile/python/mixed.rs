//! One stack of Python and native frames: the thread's native stack, walked from the
//! sample's registers and copied stack, with each native call of the eval loop
//! (`_PyEval_EvalFrameDefault`) replaced by the Python frames it was running, and the
//! native frames between them kept, so a C function between two Python functions (a C
//! extension or libc calling back into Python) is shown where it ran, and
//! `compute_report → __sin_fma` reads as one path.
//!
//! In 3.11 one call of the eval loop runs several Python frames: a Python function called
//! from Python runs in the same native call, and only a call that went through C (a
//! builtin, a C extension, a class's `__init__`) starts a new one. The frame an eval call
//! began with is flagged (`_PyInterpreterFrame.is_entry`), so the Python stack, leaf
//! first, cuts into groups, each ending at an entry frame: group *k* is what the *k*-th
//! eval frame of the native stack (leaf first) ran.
//!
//! The native stack is the period's end and the Python stack is read a moment later, so
//! the counts can differ (a call made or returned in between). A walk that reached the
//! thread's first frame holds every eval frame: the groups are matched from the root, and
//! what differs is at the leaf. A walk cut short holds the leaf's: they are matched from
//! the leaf, and the groups left over are the root.
//!
//! The interpreter's own native frames (its call machinery, and the builtins compiled
//! into it: `sorted`, `math.sin`'s wrapper; unnamed in a stripped binary) are left out:
//! the Python frames stand for them, as the Python leaf stands for the eval loop's own
//! work.

/// What a native frame is to the mixed stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Native {
    /// A call of the eval loop: stands for a group of Python frames.
    Eval,
    /// The interpreter's own code: left out.
    Interpreter,
    /// Code of another object (a library, a C extension, the kernel): shown.
    Shown,
}

/// A frame of the mixed stack: the index of a Python frame (in the leaf-first Python
/// stack), or a native address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mixed {
    Python(usize),
    Native(u64),
}

/// Merges a leaf-first Python stack (`entries[i]`: frame `i` is an eval loop's first)
/// with the leaf-first native addresses `native` (`complete`: down to the thread's first
/// frame), each classified by `kind`, into `out`, leaf first.
pub fn merge(
    entries: &[bool],
    native: &[u64],
    complete: bool,
    kind: impl Fn(u64) -> Native,
    out: &mut Vec<Mixed>,
) {
    out.clear();
    let groups = groups(entries);
    let evals = native.iter().filter(|&&a| kind(a) == Native::Eval).count();
    // The group of the leaf-most eval frame: matched from the root when the walk is
    // complete, from the leaf when it was cut.
    let shift = if complete {
        groups.len() as isize - evals as isize
    } else {
        0
    };
    let emit = |g: isize, out: &mut Vec<Mixed>| {
        if let Some(range) = usize::try_from(g).ok().and_then(|g| groups.get(g)) {
            out.extend(range.clone().map(Mixed::Python));
        }
    };
    // Groups the native walk has no eval frame for, at the leaf.
    for g in 0..shift {
        emit(g, out);
    }
    let mut eval = 0isize;
    for &addr in native {
        match kind(addr) {
            Native::Eval => {
                emit(eval + shift, out);
                eval += 1;
            }
            Native::Interpreter => {}
            Native::Shown => out.push(Mixed::Native(addr)),
        }
    }
    // Groups beyond the walk's end, at the root.
    for g in (eval + shift).max(0)..groups.len() as isize {
        emit(g, out);
    }
}

/// The leaf-first Python stack cut into the frames of each eval call.
fn groups(entries: &[bool]) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for (i, &entry) in entries.iter().enumerate() {
        if entry {
            groups.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < entries.len() {
        groups.push(start..entries.len());
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses: 1 the eval loop, 2 interpreter code, 10+ other code.
    fn kind(addr: u64) -> Native {
        match addr {
            1 => Native::Eval,
            2 => Native::Interpreter,
            _ => Native::Shown,
        }
    }

    fn merged(entries: &[bool], native: &[u64], complete: bool) -> Vec<Mixed> {
        let mut out = Vec::new();
        merge(entries, native, complete, kind, &mut out);
        out
    }

    use Mixed::{Native as N, Python as P};

    /// `<module> → sort_with_c → qsort (libc) → compare`, with a native leaf under
    /// `compare`: the C function between the two Python frames is where it ran.
    #[test]
    fn a_c_function_between_two_python_frames() {
        // Python, leaf first: compare (entry of the inner eval), sort_with_c, <module>
        // (entry of the outer eval).
        let entries = [true, false, true];
        // Native, leaf first: libm's leaf, interpreter, eval, ffi closure, qsort,
        // interpreter, eval, main.
        let native = [10, 2, 1, 11, 12, 2, 1, 13];
        assert_eq!(
            merged(&entries, &native, true),
            [N(10), P(0), N(11), N(12), P(1), P(2), N(13)]
        );
        assert_eq!(
            merged(&entries, &native, false),
            [N(10), P(0), N(11), N(12), P(1), P(2), N(13)]
        );
    }

    #[test]
    fn a_walk_cut_short_keeps_the_root_groups_at_the_root() {
        let entries = [true, false, true];
        assert_eq!(
            merged(&entries, &[10, 1, 11], false),
            [N(10), P(0), N(11), P(1), P(2)]
        );
        // No native walk at all: the Python stack, as before mixed stacks.
        assert_eq!(merged(&entries, &[], false), [P(0), P(1), P(2)]);
    }

    #[test]
    fn counts_that_differ_are_matched_from_the_root_of_a_complete_walk() {
        // The Python stack went one eval call deeper after the period ended.
        let entries = [true, true, false, true];
        assert_eq!(
            merged(&entries, &[10, 1, 11, 1, 13], true),
            [P(0), N(10), P(1), N(11), P(2), P(3), N(13)]
        );
        // It returned from one: the leaf-most eval frame has no group.
        let entries = [false, true];
        assert_eq!(
            merged(&entries, &[10, 1, 11, 1, 13], true),
            [N(10), N(11), P(0), P(1), N(13)]
        );
    }
}

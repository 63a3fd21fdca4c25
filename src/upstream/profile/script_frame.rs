//! One frame of an interpreter's stack read from outside the process (PHP's, Python's):
//! the function as the language names it, its file, its first line and (Python) the line
//! it was running. The PHP and
//! Python walkers fill the same type, so that folding, components and exports read both
//! alike.

use std::sync::Arc;

/// One frame of a PHP or Python stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScriptFrame {
    /// The function as the language names it: PHP's `Class::method`, `function`,
    /// `{closure}`, `{main}`; Python's qualified name (`Class.method`, `<module>`,
    /// `outer.<locals>.inner`). `[truncated]` at the root of a stack cut at the walker's
    /// depth, and `[no PHP code]` / `[no Python code]` alone for a sample on a CPU while
    /// no frame of the language runs (startup, a thread of a C library).
    pub function: Arc<str>,
    /// The file the function is defined in; "" for PHP's internal functions.
    pub file: Arc<str>,
    /// The function's first line; 0 for internal functions, top-level code and markers.
    pub line: u32,
    /// The line the frame was running (its call, in a caller): Python's, from the code
    /// object's location table; 0 where not read (PHP, markers).
    pub at_line: u32,
}

//! A component's own work: the samples it is answerable for, whatever calls it and
//! whatever it calls back.
//!
//! ```text
//!   root ─ event_base_loop ─ http_client_read ─ http_parser_execute ─┬─ memchr              (1)
//!                                                                    └─ on_message_complete
//!                                                                        └─ cmd_run
//!                                                                            └─ __libc_write (2)
//! ```
//!
//! A sample is the work of the deepest component on its stack, passing over the
//! *helpers* every program calls into: the C library, the allocator, the regex engine,
//! the kernel, PHP's built-in functions. Sample (1) is the parser's (its `memchr` is what
//! parsing costs); sample (2) is the server's own code's (`on_message_complete` is a
//! callback the parser makes, and a callback is its callee's cost, not the caller's). "With all it calls" (inclusive) would charge the parser for both, and
//! for a parser that calls the application back (Webdis's `on_message_complete`, Node's
//! llhttp callbacks) that is the whole request.
//!
//! Each sample is the work of one component, so the work shares add up to 1 (over the
//! samples whose stack names any component); a group's work is its parts' sum.

use std::collections::BTreeMap;

use super::stacks::{Frame, Stacks};
use super::summary::PARSER;

/// Components of helpers a caller pays for (docs/report.md, "A component's own work"):
/// the built-in rules' names (`upstream::profile::rules`) for the kernel, the allocator,
/// regex, PHP's built-in functions and engine, and the runtimes JIT-compiled code calls
/// into (V8, the JVM).
const HELPER_COMPONENTS: &[&str] = &[
    "kernel",
    "kernel_network",
    "alloc",
    "regex",
    "php_builtin",
    "php_engine",
    // Python's standard library and its interpreter outside any Python frame: what the
    // server's Python code calls, as PHP's built-in functions are.
    "python_stdlib",
    "python_interpreter",
    // The runtimes of JIT-compiled code: what JavaScript or Java calls in them.
    "v8",
    "jvm",
];

/// Whether `component` is a helper: one of [`HELPER_COMPONENTS`], or a system library
/// that no rule named (the C and maths libraries, the loader, GCC's and C++'s runtime).
pub fn is_helper(component: &str) -> bool {
    if HELPER_COMPONENTS.contains(&component) {
        return true;
    }
    const LIBRARIES: &[&str] = &[
        "libc.so",
        "libm.so",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "libgcc_s.so",
        "libstdc++.so",
        "ld-linux",
        "ld-musl",
        "libmvec.so",
    ];
    LIBRARIES.iter().any(|l| component.starts_with(l))
}

/// The component whose work a stack is, read from the root: each frame of a component
/// that is no helper takes the work over from the frame above it, and a helper's frame
/// leaves it with its caller (a stack of helpers only, a C library thread or the kernel
/// on its own, is its deepest helper's). `None` for a stack of placeholders only
/// (`[other stacks]`: frames without a component).
///
/// One exception: below the HTTP parser, a function of the same binary that no rule
/// names is the parser's own helper (a `scan_token` of its own), unless it is named as a
/// parser's callback is (`on_url`, `http_client_on_message_complete`,
/// `Parser::on_headers_complete`: the callback names of http_parser and llhttp as a
/// server spells them).
pub fn owner<'a>(root_first: impl Iterator<Item = &'a Frame>) -> Option<&'a str> {
    let mut owner: Option<&Frame> = None;
    for f in root_first.filter(|f| !f.component.is_empty()) {
        let Some(o) = owner else {
            owner = Some(f);
            continue;
        };
        let takes_over = if o.component == f.component {
            false
        } else if is_helper(&f.component) {
            is_helper(&o.component)
        } else {
            !parsers_own_helper(o, f)
        };
        if takes_over {
            owner = Some(f);
        }
    }
    owner.map(|f| f.component.as_str())
}

/// Whether `f`, called by the parser's frame `parser`, is a helper of the parser's own
/// (see [`owner`]): a function no rule names (its component is its file's name, or its
/// Composer package) of the parser's own file or package.
fn parsers_own_helper(parser: &Frame, f: &Frame) -> bool {
    let file = |object: &str| object.rsplit('/').next().unwrap_or(object).to_owned();
    let unnamed = f.component == file(&f.object);
    let same_file = f.object == parser.object && unnamed;
    // A PHP parser's package (`…/vendor/amphp/http/…`) and a function of it no rule names.
    let same_package =
        f.component.contains('/') && parser.object.contains(&format!("/vendor/{}/", f.component));
    parser.component == PARSER && (same_file || same_package) && !is_callback(&f.name)
}

/// A function named as a parser's callback is: `on_` and an event at the start of a name
/// or after a separator (`on_message_complete`, `http_client_on_url`,
/// `Parser::on_body`, a template holding `&Parser::on_headers_complete`), or a name
/// saying `callback`.
pub fn is_callback(name: &str) -> bool {
    let bytes = name.as_bytes();
    name.contains("callback")
        || name.match_indices("on_").any(|(i, _)| {
            let after = bytes.get(i + 3).is_some_and(u8::is_ascii_lowercase);
            let before = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
            after && before
        })
}

/// The work of each component over a window's stacks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Work {
    /// Component → samples that are its work.
    pub by_component: BTreeMap<String, u64>,
    /// Samples whose stack named a component: what the shares are of. The stacks beyond
    /// the snapshot's cap (`[other stacks]`) name none; the shares are then over the
    /// stacks kept.
    pub counted: u64,
}

impl Work {
    pub fn of(stacks: &Stacks) -> Work {
        let mut work = Work::default();
        for stack in &stacks.stacks {
            let frames = stack
                .frames
                .iter()
                .filter_map(|&i| stacks.frames.get(i as usize));
            if let Some(c) = owner(frames) {
                *work.by_component.entry(c.to_owned()).or_insert(0) += stack.samples;
                work.counted += stack.samples;
            }
        }
        work
    }

    /// The share of the counted samples that are `component`'s work; `None` when no
    /// sample was counted.
    pub fn share(&self, component: &str) -> Option<f64> {
        (self.counted > 0).then(|| {
            self.by_component.get(component).copied().unwrap_or(0) as f64 / self.counted as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Stack;

    /// The parser's functions lie in the server's binary, `srv`.
    fn frame(name: &str, component: &str) -> Frame {
        Frame {
            name: name.into(),
            object: if component == PARSER {
                "srv"
            } else {
                component
            }
            .into(),
            component: component.into(),
            line: None,
            at_line: None,
        }
    }

    /// Root-first stacks of `name@component` frames.
    fn stacks(list: &[(&str, u64)]) -> Stacks {
        let mut s = Stacks::default();
        for (path, samples) in list {
            let frames = path
                .split(';')
                .map(|f| {
                    let (name, component) = f.split_once('@').unwrap_or((f, ""));
                    s.frames.push(frame(name, component));
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

    #[test]
    fn a_callback_is_its_callees_work_and_a_helper_its_callers() {
        let s = stacks(&[
            // The parser's own scan, a helper of its own in the same binary, and the libc
            // it calls.
            ("main@srv;loop@event_loop;execute@http_parser", 7),
            ("main@srv;loop@event_loop;execute@http_parser;scan_token@srv", 3),
            ("main@srv;loop@event_loop;execute@http_parser;memchr@libc.so.6", 5),
            (
                "main@srv;loop@event_loop;execute@http_parser;malloc@alloc;brk@kernel",
                5,
            ),
            // Its callback: the server's own work, the write in it too.
            (
                "main@srv;loop@event_loop;execute@http_parser;http_client_on_message_complete@srv;cmd_run@srv",
                50,
            ),
            (
                "main@srv;loop@event_loop;execute@http_parser;http_client_on_message_complete@srv;write@libc.so.6;tcp_sendmsg@kernel_network",
                20,
            ),
            // The loop waiting: its own.
            ("main@srv;loop@event_loop;epoll_wait@event_loop", 9),
            // Beyond the cap: nobody's.
            ("[other stacks]@", 1),
        ]);
        let w = Work::of(&s);
        assert_eq!(w.counted, 99);
        assert_eq!(w.by_component.get("http_parser"), Some(&20));
        assert_eq!(w.by_component.get("srv"), Some(&70));
        assert_eq!(w.by_component.get("event_loop"), Some(&9));
        assert_eq!(w.by_component.values().sum::<u64>(), w.counted);
        assert!((w.share("http_parser").unwrap() - 20.0 / 99.0).abs() < 1e-12);
        assert_eq!(w.share("nothing"), Some(0.0));
        assert_eq!(Work::default().share("http_parser"), None);
    }

    #[test]
    fn callbacks_are_told_by_their_names() {
        for name in [
            "on_url",
            "http_client_on_message_complete",
            "node::(anonymous namespace)::Parser::on_headers_complete",
            "Parser::Proxy<int (Parser::*)(), &Parser::on_body>::Raw",
            "run_callback",
        ] {
            assert!(is_callback(name), "{name}");
        }
        for name in ["scan_token", "json_on", "cron_job", "parse_one_line", "on_"] {
            assert!(!is_callback(name), "{name}");
        }
    }

    /// PHP frames: the parser's burn in a function of its own script (php-burn.php's
    /// `Cpu::spin`) or of its own package is its own; the script's handler it returns to
    /// is not below it.
    #[test]
    fn a_php_parsers_helpers_in_its_script_or_package_are_its_own() {
        let php = |name: &str, object: &str, component: &str| Frame {
            name: name.into(),
            object: object.into(),
            component: component.into(),
            line: Some(1),
            at_line: None,
        };
        let parse = php(r"Burn\Parser::parseHead", "/t/php-burn.php", PARSER);
        let spin = php(r"Burn\Cpu::spin", "/t/php-burn.php", "php-burn.php");
        let sqrt = php("sqrt", "", "php_builtin");
        assert_eq!(owner([&parse, &spin, &sqrt].into_iter()), Some(PARSER));
        let amp = php(
            r"Amp\Http\Http1\Rfc7230::parseHeaders",
            "/s/vendor/amphp/http/src/Http1/Rfc7230.php",
            PARSER,
        );
        let helper = php(
            r"Amp\Http\HttpMessage::normalize",
            "/s/vendor/amphp/http/src/HttpMessage.php",
            "amphp/http",
        );
        assert_eq!(owner([&amp, &helper].into_iter()), Some(PARSER));
        let app = php(r"App\onRequest", "/s/src/App.php", "App.php");
        assert_eq!(owner([&amp, &app].into_iter()), Some("App.php"));
    }

    #[test]
    fn a_stack_of_helpers_only_is_its_leafs() {
        let s = stacks(&[("clone@libc.so.6;start@libc.so.6;schedule@kernel", 3)]);
        assert_eq!(Work::of(&s).by_component.get("kernel"), Some(&3));
    }

    #[test]
    fn helpers_are_the_system_and_the_built_in_leaves() {
        for c in [
            "libc.so.6",
            "libm.so.6",
            "ld-linux-x86-64.so.2",
            "libstdc++.so.6",
            "kernel",
            "alloc",
            "regex",
            "php_builtin",
        ] {
            assert!(is_helper(c), "{c}");
        }
        for c in [
            "webdis",
            "http_parser",
            "event_loop",
            "libhiredis.so.1.1.0",
            "league/uri",
            "stream_io",
            "libcrypto.so.3",
        ] {
            assert!(!is_helper(c), "{c}");
        }
    }
}

//! Where the fields the walk reads sit in the interpreter's structs, per PHP minor version
//! (x86-64, NTS, 64-bit pointers), and the parser of the version string that picks a row.
//!
//! These are the only facts the sampler needs from php-src, kept as plain numbers rather
//! than generated bindings: a walk touches seven fields, and a table that says where each
//! comes from is easier to check against the headers of a new release than a bindgen step
//! that needs those headers at build time. The numbers only change when a struct in front
//! of a field changes; in 8.1–8.4 `zend_execute_data`, `zend_string` and the common head of
//! `zend_function` stayed put and only `zend_op_array`'s tail moved.

/// Byte offsets of the fields the walk reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    /// `zend_executor_globals.current_execute_data` (Zend/zend_globals.h): the frame the VM
    /// runs now, the leaf of the stack (inside a fiber, the fiber's leaf).
    pub eg_current_execute_data: u64,
    /// `zend_execute_data.func` (Zend/zend_compile.h).
    pub ex_func: u64,
    /// `zend_execute_data.prev_execute_data` (Zend/zend_compile.h): the caller's frame.
    pub ex_prev: u64,
    /// `zend_function.type` (the first byte of every member of the union).
    pub fn_type: u64,
    /// `zend_function.common.fn_flags` (Zend/zend_compile.h).
    pub fn_flags: u64,
    /// `zend_function.common.function_name` (a `zend_string *`, NULL for a script's
    /// top-level code).
    pub fn_name: u64,
    /// `zend_function.common.scope` (a `zend_class_entry *`, NULL outside a class).
    pub fn_scope: u64,
    /// `zend_op_array.filename` (user functions only).
    pub op_filename: u64,
    /// `zend_op_array.line_start` (user functions only).
    pub op_line_start: u64,
    /// `zend_class_entry.name` (Zend/zend.h).
    pub ce_name: u64,
    /// `zend_string.len` (Zend/zend_types.h).
    pub str_len: u64,
    /// `zend_string.val`, the first byte of the characters.
    pub str_val: u64,
}

impl Offsets {
    /// How many bytes of a `zend_function` one read must cover to see every field the walk
    /// uses (the user-function fields are the furthest).
    pub fn function_span(&self) -> u64 {
        self.op_line_start + 4
    }

    /// How many bytes of a `zend_execute_data`, from `func`, cover `func` and the caller.
    pub fn frame_span(&self) -> u64 {
        self.ex_prev + 8 - self.ex_func
    }
}

/// The fields common to 8.1–8.4: only the op_array tail differs between them.
const fn common(op_filename: u64) -> Offsets {
    Offsets {
        // Behind 2 zvals, the 32-slot symtable cache and its two pointers, the symbol table
        // and included_files (HashTables of 56 bytes), bailout, two ints, three table
        // pointers and the VM stack's four words: unchanged from 8.0 to 8.4.
        eg_current_execute_data: 488,
        // opline, call, return_value come first.
        ex_func: 24,
        // After `This`, a 16-byte zval at 32.
        ex_prev: 48,
        fn_type: 0,
        // type, arg_flags[3], then the 32-bit flags.
        fn_flags: 4,
        fn_name: 8,
        fn_scope: 16,
        op_filename,
        // line_start follows the filename pointer directly in every version.
        op_line_start: op_filename + 8,
        // `char type` padded to 8.
        ce_name: 8,
        // zend_refcounted_h (8) then the hash (8).
        str_len: 16,
        str_val: 24,
    }
}

/// 8.1 (Zend API 20210902): the common head ends with `attributes` (56 bytes); `T` and
/// `run_time_cache` sit among the op_array's own fields (cache_size, last_var, T, last
/// pack into 16 bytes), then opcodes, static_variables_ptr, static_variables, vars,
/// refcount, last_live_range/last_try_catch, live_range, try_catch_array, filename.
const PHP81: Offsets = common(144);
/// 8.2 (Zend API 20220829): `T` and `run_time_cache` moved into the common head, where
/// `T` takes a padded 8 bytes: filename 8 bytes later (checked with offsetof against the
/// 8.2 headers).
const PHP82: Offsets = common(152);
/// 8.3 (Zend API 20230831): `T` moved after `run_time_cache` and packs with `cache_size`,
/// giving back those 8 bytes.
const PHP83: Offsets = common(144);
/// 8.4 (Zend API 20240924): the common head gained `doc_comment` and `prop_info` (property
/// hooks), 24 bytes with padding.
const PHP84: Offsets = common(168);

/// A PHP version read from the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    /// The struct layout of this version, None when the table has no row for it.
    pub fn offsets(&self) -> Option<&'static Offsets> {
        match (self.major, self.minor) {
            (8, 1) => Some(&PHP81),
            (8, 2) => Some(&PHP82),
            (8, 3) => Some(&PHP83),
            (8, 4) => Some(&PHP84),
            _ => None,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// `major.minor.patch` at the start of `text`, as PHP_VERSION spells it ("8.2.36",
/// "8.4.0RC1", "8.3.12-dev": the suffix is ignored). None without three numbers.
pub fn parse_version(text: &[u8]) -> Option<Version> {
    let mut parts = [0u32; 3];
    let mut at = 0;
    for (index, part) in parts.iter_mut().enumerate() {
        if index > 0 {
            if text.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
        let digits = text[at.min(text.len())..]
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        if digits == 0 || digits > 4 {
            return None;
        }
        let mut value = 0u32;
        for &byte in &text[at..at + digits] {
            value = value * 10 + u32::from(byte - b'0');
        }
        *part = value;
        at += digits;
    }
    Some(Version {
        major: parts[0],
        minor: parts[1],
        patch: parts[2],
    })
}

/// The PHP version a binary was built as, from its read-only data.
///
/// Two literals carry it, and both are compiled into every SAPI (CLI, FPM, embed, the
/// Apache module): SAPI.h's `"X-Powered-By: PHP/" PHP_VERSION` (sent unless expose_php is
/// off, but present either way) and zend.c's `"Zend Engine v" ZEND_VERSION`, whose 4.N
/// maps to PHP 8.N. Searching the file's bytes for the first and falling back to the
/// second needs no symbol (PHP_VERSION is a macro, not a variable) and no code run in the
/// target, and it reads the binary the process actually runs (through /proc/PID/exe even
/// when the file was replaced by an upgrade since).
pub fn version_in_binary(data: &[u8]) -> Option<Version> {
    const POWERED: &[u8] = b"X-Powered-By: PHP/";
    const ENGINE: &[u8] = b"Zend Engine v";
    if let Some(at) = memchr::memmem::find(data, POWERED) {
        if let Some(version) = parse_version(&data[at + POWERED.len()..]) {
            return Some(version);
        }
    }
    let mut rest = data;
    while let Some(at) = memchr::memmem::find(rest, ENGINE) {
        let after = &rest[at + ENGINE.len()..];
        if let Some(engine) = parse_version(after) {
            if engine.major == 4 {
                return Some(Version {
                    major: 8,
                    minor: engine.minor,
                    patch: engine.patch,
                });
            }
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_suffixes() {
        let v = |major, minor, patch| Version {
            major,
            minor,
            patch,
        };
        assert_eq!(parse_version(b"8.2.36"), Some(v(8, 2, 36)));
        assert_eq!(parse_version(b"8.4.0RC1\0"), Some(v(8, 4, 0)));
        assert_eq!(parse_version(b"8.3.12-dev"), Some(v(8, 3, 12)));
        assert_eq!(parse_version(b"8.3"), None);
        assert_eq!(parse_version(b"8..1"), None);
        assert_eq!(parse_version(b""), None);
        assert_eq!(parse_version(b"x8.1.0"), None);
        assert_eq!(parse_version(b"99999.1.1"), None);
    }

    #[test]
    fn version_found_in_binary_bytes() {
        let blob = b"\0\0junk\0X-Powered-By: PHP/8.1.27\0Zend Engine v4.2.0\0";
        assert_eq!(
            version_in_binary(blob).map(|v| v.to_string()),
            Some("8.1.27".into())
        );
        // Without the header literal the engine version decides: 4.3 is PHP 8.3.
        let blob = b"\0Zend Engine v3.4.0\0Zend Engine v4.3.6, Copyright\0";
        assert_eq!(
            version_in_binary(blob).map(|v| v.to_string()),
            Some("8.3.6".into())
        );
        assert_eq!(version_in_binary(b"no version here"), None);
    }

    #[test]
    fn table_covers_8_1_to_8_4_only() {
        let row = |minor| {
            Version {
                major: 8,
                minor,
                patch: 0,
            }
            .offsets()
            .copied()
        };
        assert!(row(0).is_none());
        assert!(row(5).is_none());
        // The fields every version shares.
        for minor in 1..=4 {
            let o = row(minor).unwrap();
            assert_eq!(o.eg_current_execute_data, 488);
            assert_eq!((o.ex_func, o.ex_prev), (24, 48));
            assert_eq!((o.fn_name, o.fn_scope, o.ce_name), (8, 16, 8));
            assert_eq!((o.str_len, o.str_val), (16, 24));
            assert_eq!(o.op_line_start, o.op_filename + 8);
            assert_eq!(o.frame_span(), 32);
        }
        let filename: Vec<u64> = (1..=4).map(|m| row(m).unwrap().op_filename).collect();
        assert_eq!(filename, [144, 152, 144, 168]);
    }
}

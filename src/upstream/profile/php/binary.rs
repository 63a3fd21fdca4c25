//! Finding the interpreter in a process: which mapped file holds the Zend engine (the
//! executable for CLI and FPM, libphp*.so for embed and the Apache module), where it is
//! loaded, the address of `executor_globals`, and the PHP version it was built as.

use std::fs;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

use super::offsets::{self, Version};
use super::PhpError;

pub use crate::upstream::profile::maps::Mapping;

/// The file-backed mappings of /proc/PID/maps, in address order. Anonymous and special
/// (`[heap]`, `[vdso]`) mappings are left out; a path with spaces is kept whole.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    crate::upstream::profile::maps::parse(text)
        .into_iter()
        .filter(|m| m.path.starts_with('/'))
        .collect()
}

/// Whether a mapped library is the embeddable engine: libphp.so, libphp8.so,
/// libphp8.2.so, libphp-8.2.so (the names distributions and `--enable-embed` give it).
pub fn is_libphp(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libphp") && (name.ends_with(".so") || name.contains(".so."))
}

/// What was found in the engine's binary.
pub struct Engine {
    pub path: String,
    pub version: Version,
    pub offsets: &'static offsets::Offsets,
    pub executor_globals: u64,
}

/// What one ELF file's dynamic symbols say, before relocation. Only definitions count: a
/// program that embeds libphp imports `zend_parse_parameters` without being the engine.
#[derive(Debug, Default, PartialEq, Eq)]
struct Symbols {
    /// Defines `zend_parse_parameters`, which every PHP build exports for extensions.
    engine: bool,
    /// Defines `executor_globals_offset` or `tsrm_get_ls_cache`: a thread-safe build, whose
    /// globals are per thread, behind TSRM.
    zts: bool,
    /// The link-time address of a defined `executor_globals`.
    executor_globals: Option<u64>,
    /// The lowest PT_LOAD address, to relate link-time addresses to a mapping.
    first_load: u64,
}

fn symbols(file: &object::File<'_>) -> Symbols {
    let mut found = Symbols::default();
    for symbol in file.dynamic_symbols() {
        if symbol.is_undefined() {
            continue;
        }
        match symbol.name() {
            Ok("zend_parse_parameters") => found.engine = true,
            Ok("executor_globals") => found.executor_globals = Some(symbol.address()),
            Ok("executor_globals_offset" | "tsrm_get_ls_cache") => found.zts = true,
            _ => {}
        }
    }
    found.first_load = file
        .segments()
        .map(|segment| segment.address())
        .min()
        .unwrap_or(0);
    found
}

/// Finds the engine in `pid`: its executable first, then a mapped libphp. Ok(None) when
/// neither is PHP.
///
/// The globals and the engine can be in two files: a program that embeds libphp and
/// touches `EG(...)` itself gets a copy relocation, and then the executable's .bss holds
/// the one `executor_globals` both use. So the first file (the executable comes first)
/// that defines `executor_globals` gives the address, and the file that defines the
/// engine's functions gives the version.
pub fn find_engine(pid: u32) -> Result<Option<Engine>, PhpError> {
    let maps_path = format!("/proc/{pid}/maps");
    let maps = fs::read_to_string(&maps_path).map_err(|source| PhpError::Process {
        pid,
        what: "maps",
        source,
    })?;
    let maps = parse_maps(&maps);
    let exe = fs::read_link(format!("/proc/{pid}/exe"))
        .map(|path| path.to_string_lossy().into_owned())
        .map_err(|source| PhpError::Process {
            pid,
            what: "exe",
            source,
        })?;
    // The executable through the magic link (the file the process runs, even deleted or
    // in another mount namespace), libraries through /proc/PID/root.
    let exe_path = exe.strip_suffix(" (deleted)").unwrap_or(&exe).to_owned();
    // Every server is asked whether it is PHP, and reading a large binary's symbols to
    // say no (node's 99 MB, V8's hundred thousand exported symbols) delayed its sampling
    // by seconds: an executable is a PHP engine's candidate only when its name says PHP
    // (php, php-fpm8.2, php-cgi, frankenphp); an engine in a library is libphp's.
    let named_php = Path::new(&exe_path)
        .file_name()
        .is_some_and(|name| name.to_string_lossy().to_ascii_lowercase().contains("php"));
    let mut candidates = Vec::new();
    if named_php {
        candidates.push((exe_path, PathBuf::from(format!("/proc/{pid}/exe"))));
    }
    for mapping in &maps {
        if is_libphp(&mapping.path) && !candidates.iter().any(|(path, _)| *path == mapping.path) {
            let inside = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
            candidates.push((mapping.path.clone(), inside));
        }
    }
    let mut globals: Option<u64> = None;
    for (mapped, open) in candidates {
        let data = fs::read(&open).map_err(|source| PhpError::Process {
            pid,
            what: "binary",
            source,
        })?;
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        let found = symbols(&file);
        if found.zts {
            return Err(PhpError::Zts { path: mapped });
        }
        if let (None, Some(link_time)) = (globals, found.executor_globals) {
            let fixed = file.kind() == object::ObjectKind::Executable;
            let bias = load_bias(&maps, &mapped, fixed, found.first_load).ok_or_else(|| {
                PhpError::NotMapped {
                    pid,
                    path: mapped.clone(),
                }
            })?;
            globals = Some(link_time.wrapping_add(bias));
        }
        if !found.engine {
            continue;
        }
        let executor_globals = globals.ok_or_else(|| PhpError::NoSymbol {
            path: mapped.clone(),
        })?;
        let version = offsets::version_in_binary(&data).ok_or_else(|| {
            PhpError::UnknownVersion(format!("no PHP version string in {mapped}"))
        })?;
        let offsets = version
            .offsets()
            .ok_or_else(|| PhpError::UnknownVersion(format!("PHP {version} ({mapped})")))?;
        return Ok(Some(Engine {
            path: mapped,
            version,
            offsets,
            executor_globals,
        }));
    }
    Ok(None)
}

/// What to add to a link-time address of `path` to get its run-time address: 0 for a
/// fixed-address executable, else where the mapping of file offset 0 starts, less the
/// page-rounded lowest PT_LOAD address (0 for PIE executables and libraries).
fn load_bias(maps: &[Mapping], path: &str, fixed: bool, first_load: u64) -> Option<u64> {
    if fixed {
        return Some(0);
    }
    let base = maps
        .iter()
        .find(|mapping| {
            mapping.offset == 0
                && mapping
                    .path
                    .strip_suffix(" (deleted)")
                    .unwrap_or(&mapping.path)
                    == path
        })?
        .start;
    Some(base.wrapping_sub(first_load & !0xfff))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
5581e2a00000-5581e2b3c000 r--p 00000000 08:01 1234                       /usr/bin/php8.2
5581e2b3c000-5581e2e2f000 r-xp 0013c000 08:01 1234                       /usr/bin/php8.2
5581e3f6e000-5581e4010000 rw-p 00000000 00:00 0                          [heap]
7f1c2c000000-7f1c2c200000 rw-p 00000000 00:00 0 
7f1c2d400000-7f1c2d428000 r--p 00000000 08:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2e000000-7f1c2e100000 r--p 00000000 08:01 77                         /opt/my php/lib/libphp8.2.so
";

    #[test]
    fn maps_keep_file_mappings_only() {
        let maps = parse_maps(MAPS);
        let paths: Vec<&str> = maps.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/bin/php8.2",
                "/usr/bin/php8.2",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/opt/my php/lib/libphp8.2.so"
            ]
        );
        assert_eq!(maps[1].start, 0x5581e2b3c000);
        assert_eq!(maps[1].offset, 0x13c000);
        assert_eq!(parse_maps("garbage\n\nzz-yy r--p 0 0 0 /x\n"), []);
    }

    #[test]
    fn load_bias_comes_from_the_offset_zero_mapping() {
        let maps = parse_maps(MAPS);
        assert_eq!(
            load_bias(&maps, "/usr/bin/php8.2", false, 0),
            Some(0x5581e2a00000)
        );
        assert_eq!(load_bias(&maps, "/usr/bin/php8.2", true, 0x400000), Some(0));
        assert_eq!(load_bias(&maps, "/usr/bin/php8.3", false, 0), None);
        assert_eq!(
            load_bias(&maps, "/opt/my php/lib/libphp8.2.so", false, 0),
            Some(0x7f1c2e000000)
        );
    }

    #[test]
    fn libphp_names() {
        assert!(is_libphp("/usr/lib/libphp.so"));
        assert!(is_libphp("/usr/lib/apache2/modules/libphp8.2.so"));
        assert!(is_libphp("/usr/lib/libphp-8.3.so.1"));
        assert!(!is_libphp("/usr/lib/libphpx.a"));
        assert!(!is_libphp("/usr/bin/php8.2"));
    }
}

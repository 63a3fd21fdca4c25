//! Finding the interpreter in a process: which mapped file holds the Zend engine (the
//! executable for CLI and FPM, libphp*.so for embed and the Apache module), where it is
//! loaded, the address of `executor_globals`, and the PHP version it was built as.

use std::fs;
use std::path::PathBuf;

use object::{Object, ObjectSegment, ObjectSymbol};

use super::offsets::{self, Version};
use super::PhpError;

/// One file-backed mapping of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: String,
}

/// The file-backed mappings of /proc/PID/maps, in address order. Anonymous and special
/// (`[heap]`, `[vdso]`) mappings are left out; a path with spaces is kept whole.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        // start-end perms offset dev inode path
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(_perms), Some(offset), Some(_dev), Some(_inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = fields.next().unwrap_or("").trim_start();
        if !path.starts_with('/') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        out.push(Mapping {
            start,
            end,
            offset,
            path: path.to_owned(),
        });
    }
    out
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

/// What one ELF file says about the engine, before relocation.
#[derive(Debug, PartialEq, Eq)]
enum Symbols {
    /// Not the engine: no `zend_parse_parameters` exported (every PHP build exports it for
    /// extensions).
    NotEngine,
    /// A thread-safe build: the globals are per thread, reached through TSRM.
    Zts,
    /// The engine, but `executor_globals` is not exported (a build with hidden symbols).
    Hidden,
    /// `executor_globals` at this link-time address; the lowest PT_LOAD address, to relate
    /// it to a mapping.
    Nts {
        executor_globals: u64,
        first_load: u64,
    },
}

fn symbols(file: &object::File<'_>) -> Symbols {
    let mut engine = false;
    let mut zts = false;
    let mut globals = None;
    for symbol in file.dynamic_symbols() {
        match symbol.name() {
            Ok("zend_parse_parameters") => engine = true,
            Ok("executor_globals") if symbol.is_definition() => globals = Some(symbol.address()),
            Ok("executor_globals_offset" | "tsrm_get_ls_cache") => zts = true,
            _ => {}
        }
    }
    if zts {
        return Symbols::Zts;
    }
    if !engine && globals.is_none() {
        return Symbols::NotEngine;
    }
    match globals {
        Some(executor_globals) => {
            let first_load = file
                .segments()
                .map(|segment| segment.address())
                .min()
                .unwrap_or(0);
            Symbols::Nts {
                executor_globals,
                first_load,
            }
        }
        None => Symbols::Hidden,
    }
}

/// Finds the engine in `pid`: its executable first, then a mapped libphp. Ok(None) when
/// neither is PHP.
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
    let mut candidates = vec![(exe_path, PathBuf::from(format!("/proc/{pid}/exe")))];
    let mut seen = Vec::new();
    for mapping in &maps {
        if is_libphp(&mapping.path) && !seen.contains(&mapping.path) {
            seen.push(mapping.path.clone());
            let inside = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
            candidates.push((mapping.path.clone(), inside));
        }
    }
    for (mapped, open) in candidates {
        let data = match fs::read(&open) {
            Ok(data) => data,
            Err(source) => {
                return Err(PhpError::Process {
                    pid,
                    what: "binary",
                    source,
                })
            }
        };
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        let (executor_globals, first_load) = match symbols(&file) {
            Symbols::NotEngine => continue,
            Symbols::Zts => return Err(PhpError::Zts { path: mapped }),
            Symbols::Hidden => return Err(PhpError::NoSymbol { path: mapped }),
            Symbols::Nts {
                executor_globals,
                first_load,
            } => (executor_globals, first_load),
        };
        let version = offsets::version_in_binary(&data).ok_or_else(|| {
            PhpError::UnknownVersion(format!("no PHP version string in {mapped}"))
        })?;
        let offsets = version
            .offsets()
            .ok_or_else(|| PhpError::UnknownVersion(format!("PHP {version} ({mapped})")))?;
        let bias = load_bias(
            &maps,
            &mapped,
            file.kind() == object::ObjectKind::Executable,
            first_load,
        )
        .ok_or_else(|| PhpError::NotMapped {
            pid,
            path: mapped.clone(),
        })?;
        return Ok(Some(Engine {
            path: mapped,
            version,
            offsets,
            executor_globals: executor_globals.wrapping_add(bias),
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

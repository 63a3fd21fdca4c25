//! Finding CPython in a process: which mapped file holds the interpreter (the executable
//! for `python3`, gunicorn and uvicorn; libpython3.*.so for uwsgi and other embedders),
//! where it is loaded, the address of `_PyRuntime`, and the version it was built as.

use std::fs;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

use super::offsets::Version;
use super::walk::Memory;
use super::{PyError, PyTarget};
use crate::upstream::profile::maps::{self, Mapping};

/// Whether a mapped library is CPython's shared library: libpython3.11.so.1.0,
/// libpython3.12d.so.
pub fn is_libpython(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libpython3") && (name.ends_with(".so") || name.contains(".so."))
}

/// What one ELF file's dynamic symbols say, before relocation.
#[derive(Debug, Default, PartialEq, Eq)]
struct Symbols {
    runtime: Option<u64>,
    version: Option<u64>,
    /// The lowest PT_LOAD address, to relate link-time addresses to a mapping.
    first_load: u64,
}

fn symbols(file: &object::File<'_>) -> Symbols {
    let mut found = Symbols::default();
    for symbol in file.dynamic_symbols().chain(file.symbols()) {
        if symbol.is_undefined() {
            continue;
        }
        match symbol.name() {
            Ok("_PyRuntime") => found.runtime = found.runtime.or(Some(symbol.address())),
            Ok("Py_Version") => found.version = found.version.or(Some(symbol.address())),
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

/// The candidates, as (path as mapped, path to open): the executable when its name says
/// Python, then every mapped libpython.
fn candidates(pid: u32, maps: &[Mapping]) -> Result<Vec<(String, PathBuf)>, PyError> {
    let exe = fs::read_link(format!("/proc/{pid}/exe"))
        .map(|path| path.to_string_lossy().into_owned())
        .map_err(|source| PyError::Process {
            pid,
            what: "exe",
            source,
        })?;
    let exe_path = exe.strip_suffix(" (deleted)").unwrap_or(&exe).to_owned();
    // Every server is asked whether it is Python; reading a large binary's symbols to say
    // no would delay its sampling, so only an executable named python* is a candidate (a
    // server embedding Python maps libpython).
    let named_python = Path::new(&exe_path)
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("python"));
    let mut out = Vec::new();
    if named_python {
        out.push((exe_path, PathBuf::from(format!("/proc/{pid}/exe"))));
    }
    for mapping in maps {
        if is_libpython(&mapping.path) && !out.iter().any(|(path, _)| *path == mapping.path) {
            let inside = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
            out.push((mapping.path.clone(), inside));
        }
    }
    Ok(out)
}

/// Finds the interpreter in `pid`: its executable first, then a mapped libpython.
/// Ok(None) when neither is CPython.
pub fn find_interpreter(pid: u32) -> Result<Option<PyTarget>, PyError> {
    let text =
        fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|source| PyError::Process {
            pid,
            what: "maps",
            source,
        })?;
    let maps: Vec<Mapping> = maps::parse(&text)
        .into_iter()
        .filter(|m| m.path.starts_with('/'))
        .collect();
    for (mapped, open) in candidates(pid, &maps)? {
        let data = fs::read(&open).map_err(|source| PyError::Process {
            pid,
            what: "binary",
            source,
        })?;
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        let found = symbols(&file);
        let Some(runtime) = found.runtime else {
            if is_libpython(&mapped) {
                return Err(PyError::NoSymbol { path: mapped });
            }
            // A `python` wrapper script's interpreter or a launcher: not CPython itself.
            continue;
        };
        let fixed = file.kind() == object::ObjectKind::Executable;
        let bias = load_bias(&maps, &mapped, fixed, found.first_load).ok_or_else(|| {
            PyError::NotMapped {
                pid,
                path: mapped.clone(),
            }
        })?;
        let version = read_version(pid, &mapped, found.version.map(|v| v.wrapping_add(bias)))?;
        let offsets = version
            .offsets()
            .ok_or_else(|| PyError::UnknownVersion(format!("CPython {version} ({mapped})")))?;
        let interpreter_code = maps
            .iter()
            .filter(|m| m.executable && strip_deleted(&m.path) == mapped)
            .map(|m| (m.start, m.end))
            .collect();
        return Ok(Some(PyTarget {
            pid,
            version: version.to_string(),
            binary: mapped,
            runtime: runtime.wrapping_add(bias),
            offsets,
            interpreter_code,
        }));
    }
    Ok(None)
}

/// The version from the run-time `Py_Version`; a build without it is older than 3.11,
/// which the table does not cover.
fn read_version(pid: u32, path: &str, at: Option<u64>) -> Result<Version, PyError> {
    let Some(at) = at else {
        return Err(PyError::UnknownVersion(format!(
            "{path} (no Py_Version: CPython before 3.11)"
        )));
    };
    let hex = Memory::new(pid)
        .read_u64(at)
        .map_err(|source| PyError::Read {
            pid,
            addr: at,
            what: "Py_Version",
            source,
        })?;
    Ok(Version::from_hex(hex & 0xffff_ffff))
}

fn strip_deleted(path: &str) -> &str {
    path.strip_suffix(" (deleted)").unwrap_or(path)
}

/// What to add to a link-time address of `path`: 0 for a fixed-address executable, else
/// where the mapping of file offset 0 starts, less the page-rounded lowest PT_LOAD address.
fn load_bias(maps: &[Mapping], path: &str, fixed: bool, first_load: u64) -> Option<u64> {
    if fixed {
        return Some(0);
    }
    let base = maps
        .iter()
        .find(|m| m.offset == 0 && strip_deleted(&m.path) == path)?
        .start;
    Some(base.wrapping_sub(first_load & !0xfff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpython_names() {
        assert!(is_libpython(
            "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"
        ));
        assert!(is_libpython("/opt/py/lib/libpython3.12d.so"));
        assert!(!is_libpython("/usr/lib/libpython3.11.a"));
        assert!(!is_libpython("/usr/bin/python3.11"));
    }

    #[test]
    fn this_process_is_not_python() {
        let found = find_interpreter(std::process::id()).unwrap();
        assert!(found.is_none());
    }
}

//! Code a runtime compiles while it runs (V8's JavaScript, HotSpot's Java): where its
//! names come from, and what a frame of it is called when they are missing.
//!
//! JIT code lies in anonymous executable mappings, with neither symbols nor unwind
//! tables. Its frames are walked by frame pointer ([`super::unwind`]: both runtimes keep
//! one in compiled frames, HotSpot with `-XX:+PreserveFramePointer`), and named from the
//! runtime's perf map, `/tmp/perf-PID.map` as the process sees /tmp (`START SIZE name`
//! per compiled function; blazesym reads it, and reads it again when it changed). node
//! writes it with `--perf-basic-prof`, a line per function as it compiles; a JVM writes a
//! copy of its code cache's table at `jcmd PID Compiler.perfmap`, what is compiled after
//! that is not in it until it is run again. So the map grows while the process runs: an
//! address named `[anon-exec]` before its line was written is named again once the map
//! has grown ([`PerfMap::grew`]).
//!
//! Without a map a frame of JIT code would read `[anon-exec]`, which says nothing of what
//! to do. In a process recognised as node or a JVM it reads instead as what to start the
//! runtime with ([`Runtime::unnamed_frame`]); docs/deploy.md says what that costs.

use std::fs;
use std::path::PathBuf;

use crate::upstream::profile::maps::Mapping;

/// A runtime that compiles code while it runs and can write a perf map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Node,
    Jvm,
}

impl Runtime {
    /// The runtime of a process from its executable mappings: HotSpot's libjvm.so, or
    /// node's binary (or a libnode it links).
    pub fn of(mappings: &[&Mapping]) -> Option<Runtime> {
        let file_name = |m: &&Mapping| {
            let path = m.path.strip_suffix(" (deleted)").unwrap_or(&m.path);
            path.rsplit('/').next().unwrap_or(path).to_owned()
        };
        let names: Vec<String> = mappings.iter().map(file_name).collect();
        if names.iter().any(|n| n == "libjvm.so") {
            Some(Runtime::Jvm)
        } else if names
            .iter()
            .any(|n| n == "node" || n == "nodejs" || n.starts_with("libnode.so"))
        {
            Some(Runtime::Node)
        } else {
            None
        }
    }

    /// The name of a frame of JIT code no perf map names: what to start the runtime with
    /// so that it does. The leading `[` keeps it apart from a function's name.
    pub fn unnamed_frame(self) -> &'static str {
        match self {
            Runtime::Node => "[JIT code: no perf map; start node with --perf-basic-prof]",
            Runtime::Jvm => {
                "[JIT code: no perf map; start java with -XX:+PreserveFramePointer, then run \
                 jcmd PID Compiler.perfmap]"
            }
        }
    }
}

/// The perf map of one process, and its size when last looked at.
#[derive(Debug)]
pub struct PerfMap {
    path: PathBuf,
    len: Option<u64>,
}

impl PerfMap {
    /// The map of `pid` as the process sees /tmp (its own root; in a container the file is
    /// named after the process's pid in its own namespace, the last of `NStgid`).
    pub fn of(pid: u32) -> PerfMap {
        let ns_pid = fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("NStgid:"))
                    .and_then(|ids| ids.split_whitespace().last()?.parse::<u32>().ok())
            })
            .unwrap_or(pid);
        PerfMap {
            path: PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map")),
            len: None,
        }
    }

    /// Whether the map exists (as of the last [`PerfMap::grew`]).
    pub fn exists(&self) -> bool {
        self.len.is_some()
    }

    /// Looks at the map's size again: true when it appeared or changed since the last look.
    pub fn grew(&mut self) -> bool {
        let len = fs::metadata(&self.path).ok().map(|m| m.len());
        let changed = len != self.len;
        self.len = len;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(path: &str) -> Mapping {
        Mapping {
            start: 0,
            end: 1,
            offset: 0,
            executable: true,
            path: path.into(),
        }
    }

    #[test]
    fn runtimes_by_their_files() {
        let of = |paths: &[&str]| {
            let maps: Vec<Mapping> = paths.iter().map(|p| mapping(p)).collect();
            Runtime::of(&maps.iter().collect::<Vec<_>>())
        };
        assert_eq!(
            of(&["/usr/bin/node", "/usr/lib/libc.so.6"]),
            Some(Runtime::Node)
        );
        assert_eq!(
            of(&["/usr/lib/x86_64-linux-gnu/libnode.so.108"]),
            Some(Runtime::Node)
        );
        assert_eq!(
            of(&[
                "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
                "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
            ]),
            Some(Runtime::Jvm)
        );
        assert_eq!(of(&["/usr/bin/webdis", ""]), None);
    }

    #[test]
    fn a_map_that_grows_is_seen_to() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = PerfMap {
            path: dir.path().join("perf-1.map"),
            len: None,
        };
        assert!(!map.grew(), "no map, none before");
        assert!(!map.exists());
        fs::write(&map.path, "7f0000001000 40 JS:*f a.js:1:1\n").unwrap();
        assert!(map.grew());
        assert!(map.exists());
        assert!(!map.grew(), "unchanged");
        fs::write(
            &map.path,
            "7f0000001000 40 JS:*f a.js:1:1\n7f0000002000 40 g\n",
        )
        .unwrap();
        assert!(map.grew());
    }

    #[test]
    fn the_own_process_map_path() {
        let pid = std::process::id();
        let map = PerfMap::of(pid);
        assert_eq!(
            map.path,
            PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{pid}.map"))
        );
    }
}

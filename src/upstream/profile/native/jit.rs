//! Code a runtime compiles while it runs (V8's JavaScript, HotSpot's Java): where its
//! names come from, and what a frame of it is called when they are missing.
//!
//! JIT code lies in anonymous executable mappings, with neither symbols nor unwind
//! tables. Its frames are walked by frame pointer ([`super::unwind`]: both runtimes keep
//! one in compiled frames, HotSpot with `-XX:+PreserveFramePointer`), and named from the
//! runtime's perf map, `/tmp/perf-PID.map` as the process sees /tmp (`START SIZE name`
//! per compiled function), read here: blazesym's reader takes the numbers without `0x`
//! only, and a JVM writes them with it (its whole batch failed then). node writes the map
//! with `--perf-basic-prof`, a line per function as it compiles; a JVM writes a copy of
//! its code cache's table at `jcmd PID Compiler.perfmap`, and what is compiled after that
//! is not in it until it is run again. So the map changes while the process runs: it is
//! read again when its size changed ([`PerfMap::refresh`]), and the addresses named
//! before are named again.
//!
//! Without a map a frame of JIT code would read `[anon-exec]`, which says nothing of what
//! to do. In a process recognised as node or a JVM it reads instead as what to start the
//! runtime with, and code the map does not name as what to do about it
//! ([`Runtime::unnamed_frame`]); docs/deploy.md says what that costs.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// so that it does (`mapped`: the map exists but leaves the address out). The leading
    /// `[` keeps it apart from a function's name.
    pub fn unnamed_frame(self, mapped: bool) -> &'static str {
        match (self, mapped) {
            (Runtime::Node, false) => "[JIT code: no perf map; start node with --perf-basic-prof]",
            (Runtime::Node, true) => "[JIT code the perf map leaves out]",
            (Runtime::Jvm, false) => {
                "[JIT code: no perf map; start java with -XX:+PreserveFramePointer, then run \
                 jcmd PID Compiler.perfmap]"
            }
            (Runtime::Jvm, true) => {
                "[JIT code compiled since the perf map was written: run jcmd PID \
                 Compiler.perfmap again]"
            }
        }
    }
}

/// The perf map of one process as last read, and its size then.
#[derive(Debug)]
pub struct PerfMap {
    path: PathBuf,
    /// When the process started: a map last written before is another process's, one
    /// that had the same pid (node's and a JVM's maps stay in /tmp after they exit).
    started: Option<SystemTime>,
    len: Option<u64>,
    /// The runtime only appends to it (node), and the bytes read so far, up to the end of
    /// the last whole line.
    append_only: bool,
    read_from: u64,
    /// Each function's start, its end and its name; a later line for the same start (code
    /// freed and compiled again in its place) replaces the earlier.
    functions: BTreeMap<u64, (u64, String)>,
}

impl PerfMap {
    /// The map of `pid` as the process sees /tmp (its own root; in a container the file is
    /// named after the process's pid in its own namespace, the last of `NStgid`). Read at
    /// the first [`PerfMap::refresh`].
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
        let mut map = PerfMap::at(PathBuf::from(format!(
            "/proc/{pid}/root/tmp/perf-{ns_pid}.map"
        )));
        map.started = process_start(pid);
        map
    }

    fn at(path: PathBuf) -> PerfMap {
        PerfMap {
            path,
            started: None,
            len: None,
            append_only: false,
            read_from: 0,
            functions: BTreeMap::new(),
        }
    }

    /// Whether the map existed at the last [`PerfMap::refresh`].
    pub fn exists(&self) -> bool {
        self.len.is_some()
    }

    /// Reads the map again when its size changed since the last read (node appends a line
    /// per compiled function; `jcmd` writes the whole table anew): true when it did. A map
    /// that cannot be read counts as none. An append-only map ([`PerfMap::append_only`])
    /// that grew is read from where the last read's last whole line ended, so a node
    /// running for days does not have its megabytes read again at every collect.
    pub fn refresh(&mut self) -> bool {
        let len = fs::metadata(&self.path)
            .ok()
            .filter(|m| {
                // A second of slack: the start time is read in clock ticks.
                let (Some(started), Ok(written)) = (self.started, m.modified()) else {
                    return true;
                };
                written + Duration::from_secs(1) >= started
            })
            .map(|m| m.len());
        if len == self.len {
            return false;
        }
        let grew = matches!((self.len, len), (Some(old), Some(new)) if new > old);
        self.len = len;
        if !(self.append_only && grew) {
            self.functions.clear();
            self.read_from = 0;
        }
        if self.read_new_lines().is_err() {
            self.len = None;
            self.functions.clear();
            self.read_from = 0;
        }
        true
    }

    /// Reads the whole lines from `read_from` on, and moves it past them.
    fn read_new_lines(&mut self) -> std::io::Result<()> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let mut file = fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.read_from))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        // A line being written is read once whole, at a later refresh.
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for line in String::from_utf8_lossy(&bytes[..whole]).lines() {
            if let Some((start, size, name)) = parse_line(line) {
                self.functions
                    .insert(start, (start.saturating_add(size), name.to_owned()));
            }
        }
        self.read_from += whole as u64;
        Ok(())
    }

    /// Marks the map as one the runtime only appends to (node's), read from where the last
    /// read ended when it grows.
    pub fn append_only(&mut self) {
        self.append_only = true;
    }

    /// The name of the function `addr` lies in.
    pub fn name(&self, addr: u64) -> Option<&str> {
        let (_, (end, name)) = self.functions.range(..=addr).next_back()?;
        (addr < *end).then_some(name.as_str())
    }
}

/// When process `pid` started, from its start in clock ticks after boot
/// (/proc/PID/stat) and the boot time (/proc/stat's `btime`).
fn process_start(pid: u32) -> Option<SystemTime> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: state is the 3rd field of the
    // line, starttime the 22nd.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&t| t > 0)?;
    let after_boot = Duration::from_millis(ticks.saturating_mul(1000) / per_second);
    Some(UNIX_EPOCH + Duration::from_secs(boot) + after_boot)
}

/// `START SIZE name`, the numbers in hex: node writes them bare, a JVM with `0x`. A line
/// that is not one is skipped.
fn parse_line(line: &str) -> Option<(u64, u64, &str)> {
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok();
    let mut parts = line.splitn(3, ' ');
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next()?.trim();
    (size > 0 && !name.is_empty()).then_some((start, size, name))
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

    /// node's lines (bare hex) and a JVM's (`0x`), read again as the map grows.
    #[test]
    fn a_map_is_read_again_when_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = PerfMap::at(dir.path().join("perf-1.map"));
        assert!(!map.refresh(), "no map, none before");
        assert!(!map.exists());
        fs::write(&map.path, "7f0000001000 40 JS:*f /srv/a.js:1:1\n").unwrap();
        assert!(map.refresh());
        assert!(map.exists());
        assert_eq!(map.name(0x7f0000001000), Some("JS:*f /srv/a.js:1:1"));
        assert_eq!(map.name(0x7f000000103f), Some("JS:*f /srv/a.js:1:1"));
        assert_eq!(map.name(0x7f0000001040), None, "the end is exclusive");
        assert_eq!(map.name(0x7f0000002010), None, "not yet written");
        assert!(!map.refresh(), "unchanged");
        fs::write(
            &map.path,
            "7f0000001000 40 JS:*f /srv/a.js:1:1\n\
             0x00007f0000002000 0x0000000000000178 double Server.computeReport(int)\n\
             garbage\n\
             7f0000001000 20 JS:*g /srv/a.js:9:1\n",
        )
        .unwrap();
        assert!(map.refresh());
        assert_eq!(
            map.name(0x7f0000002010),
            Some("double Server.computeReport(int)")
        );
        assert_eq!(
            map.name(0x7f0000001010),
            Some("JS:*g /srv/a.js:9:1"),
            "a later line for the same start replaces the earlier"
        );
        assert_eq!(map.name(0x7f0000001030), None);
    }

    /// node's map, appended to, a line at a time: a line being written is read once whole.
    #[test]
    fn an_append_only_map_is_read_from_where_it_was_left() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-1.map");
        let mut file = fs::File::create(&path).unwrap();
        let mut map = PerfMap::at(path);
        map.append_only();
        file.write_all(b"7f0000001000 40 JS:*f /srv/a.js:1:1\n7f00000020")
            .unwrap();
        assert!(map.refresh());
        assert_eq!(map.name(0x7f0000001010), Some("JS:*f /srv/a.js:1:1"));
        assert_eq!(map.name(0x7f0000002010), None, "half a line");
        file.write_all(b"00 40 JS:*g /srv/a.js:5:1\n").unwrap();
        assert!(map.refresh());
        assert_eq!(map.name(0x7f0000002010), Some("JS:*g /srv/a.js:5:1"));
        assert_eq!(map.name(0x7f0000001010), Some("JS:*f /srv/a.js:1:1"));
    }

    /// A map written before the process started is another process's (a pid reused).
    #[test]
    fn a_map_older_than_the_process_is_not_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-1.map");
        fs::write(&path, "7f0000001000 40 JS:*old /srv/a.js:1:1\n").unwrap();
        let mut map = PerfMap::at(path.clone());
        map.started = Some(SystemTime::now() + Duration::from_secs(60));
        map.refresh();
        assert!(!map.exists());
        assert_eq!(map.name(0x7f0000001000), None);
        let mut map = PerfMap::at(path);
        map.started = process_start(std::process::id());
        let started = map.started.expect("this process's start");
        assert!(started <= SystemTime::now(), "{started:?}");
        assert!(map.refresh());
        assert_eq!(map.name(0x7f0000001000), Some("JS:*old /srv/a.js:1:1"));
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

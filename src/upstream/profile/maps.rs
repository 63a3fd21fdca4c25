//! /proc/PID/maps, read once here for the three readers that need it: naming a sampled
//! address's object (`symbols`), the modules of the user-stack unwinder (`unwind`) and
//! finding the PHP engine (`php`); and how a mapping relates to its file (the mapped
//! file's bytes, the load bias), for the unwinder and for naming frames no symbol covers
//! (`unnamed`).

use std::fs;
use std::path::PathBuf;

use object::{Object as _, ObjectSegment as _};

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset of the mapping in its file.
    pub offset: u64,
    /// `x` in the permissions: code.
    pub executable: bool,
    /// The file's path (kept whole when it has spaces, ` (deleted)` included), a special
    /// name (`[vdso]`, `[heap]`, `/memfd:…`), or empty for an anonymous mapping.
    pub path: String,
}

impl Mapping {
    /// Backed by a file of the file system.
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/') && !self.path.starts_with("/memfd:")
    }
}

/// Every well-formed line, in the file's (address) order; a malformed one is skipped.
pub fn parse(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        // start-end perms offset dev inode path; the inode is padded with spaces before
        // the path, which may itself hold spaces.
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(offset), Some(_dev), Some(_inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = fields.next().unwrap_or("").trim_start();
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
            executable: perms.as_bytes().get(2) == Some(&b'x'),
            path: path.to_owned(),
        });
    }
    out
}

/// Reads a mapped file the way the process sees it: /proc/PID/map_files reaches it
/// across mount namespaces and after it was replaced on disk; /proc/PID/root is the
/// fallback without CAP_SYS_ADMIN.
pub fn read_file(pid: u32, mapping: &Mapping) -> Option<Vec<u8>> {
    let through_map_files = PathBuf::from(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        mapping.start, mapping.end
    ));
    fs::read(through_map_files).ok().or_else(|| {
        let path = mapping
            .path
            .strip_suffix(" (deleted)")
            .unwrap_or(&mapping.path);
        let relative = path.strip_prefix('/')?;
        fs::read(PathBuf::from(format!("/proc/{pid}/root")).join(relative)).ok()
    })
}

/// A loadable segment of an ELF file: where its bytes lie in the file, the address the
/// file's symbols and unwind tables give them, and whether it is code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub size: u64,
    pub vaddr: u64,
    pub executable: bool,
}

/// The loadable segments of a file (the program headers of type PT_LOAD).
pub fn segments(file: &object::File<'_>) -> Vec<Segment> {
    file.segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            let executable = match s.flags() {
                object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
                _ => true,
            };
            Segment {
                offset,
                size,
                vaddr: s.address(),
                executable,
            }
        })
        .collect()
}

/// The load bias of `mapping` (its address minus the address the file's symbols and
/// unwind tables use), from the segment the kernel mapped it from; `None` when the mapping
/// holds no segment's bytes.
///
/// A segment is mapped from its file offset rounded down to a page, at its address rounded
/// down the same way (the two are congruent modulo the page size), so
/// `start − offset = bias + (p_vaddr − p_offset)` for any mapping of it. Which segment that
/// is cannot be read off the offset alone: GNU ld starts each segment on a page of the
/// file, but lld and mold pack the segments in the file and start the code in the middle of
/// a page (`.text` at offset 0x27ed20, address 0x27fd20), so the page-rounded offset of the
/// code mapping (0x27e000) lies inside the read-only segment before it too, whose
/// `p_vaddr − p_offset` differs by a page. The segment is the one whose file bytes the
/// mapping holds with the same permission to execute (the kernel maps each segment with
/// its own flags); among several, the one it holds most of. A non-PIE executable
/// (`ET_EXEC`) comes out with bias 0, as its segments are mapped at their own addresses.
pub fn load_bias(segments: &[Segment], mapping: &Mapping) -> Option<u64> {
    let len = mapping.end.saturating_sub(mapping.start);
    let segment = segments
        .iter()
        .filter(|s| s.executable == mapping.executable)
        .filter_map(|s| {
            let overlap = (s.offset + s.size)
                .min(mapping.offset + len)
                .saturating_sub(s.offset.max(mapping.offset));
            (overlap > 0).then_some((overlap, s))
        })
        .max_by_key(|&(overlap, _)| overlap)?
        .1;
    Some(
        mapping
            .start
            .wrapping_sub(mapping.offset)
            .wrapping_sub(segment.vaddr.wrapping_sub(segment.offset)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_every_kind() {
        let text = "\
55d0c7a00000-55d0c7a02000 r--p 00000000 08:01 12                         /usr/bin/webdis
55d0c7a02000-55d0c7a10000 r-xp 00002000 08:01 12                         /usr/bin/webdis
7fd6c2000000-7fd6c2100000 r-xp 00000000 00:00 0 
7fd6c2300000-7fd6c2310000 r-xp 00000000 00:01 9                          /memfd:pcre2 (deleted)
7fd6c2400000-7fd6c2410000 r-xp 00001000 08:01 14                         /opt/lib x.so
7ffd6c5fe000-7ffd6c600000 r-xp 00000000 00:00 0                          [vdso]
garbage
zz-yy r--p 0 0 0 /x
";
        let m = parse(text);
        assert_eq!(m.len(), 6, "{m:?}");
        assert!(!m[0].executable && m[1].executable);
        assert_eq!(
            (m[1].start, m[1].end, m[1].offset),
            (0x55d0c7a02000, 0x55d0c7a10000, 0x2000)
        );
        assert_eq!(m[1].path, "/usr/bin/webdis");
        assert_eq!(m[2].path, "");
        assert!(!m[3].is_file(), "memfd code is made at run time");
        assert_eq!(m[4].path, "/opt/lib x.so");
        assert!(m[4].is_file());
        assert_eq!(m[5].path, "[vdso]");
    }

    /// lld's layout (the segments packed in the file, the code starting mid-page) and GNU
    /// ld's non-PIE one (segments on pages of their own, bias 0).
    #[test]
    fn bias_from_the_segment_the_mapping_holds() {
        let seg = |offset, size, vaddr, executable| Segment {
            offset,
            size,
            vaddr,
            executable,
        };
        let map = |start, end, offset, executable| Mapping {
            start,
            end,
            offset,
            executable,
            path: "/x".into(),
        };
        // readelf -lW of an lld PIE: R at 0/0, R E at 0x27ed20/0x27fd20.
        let lld = [
            seg(0, 0x27ed20, 0, false),
            seg(0x27ed20, 0x400000, 0x27fd20, true),
        ];
        let base = 0x5555_5540_0000;
        let code = map(base + 0x27f000, base + 0x680000, 0x27e000, true);
        assert_eq!(load_bias(&lld, &code), Some(base));
        let rodata = map(base, base + 0x27f000, 0, false);
        assert_eq!(load_bias(&lld, &rodata), Some(base));
        // GNU ld, -no-pie: R at 0x400000, R E at offset 0x1000 / 0x401000.
        let exec = [
            seg(0, 0x600, 0x400000, false),
            seg(0x1000, 0x2000, 0x401000, true),
        ];
        let code = map(0x401000, 0x403000, 0x1000, true);
        assert_eq!(load_bias(&exec, &code), Some(0));
        let nothing = map(0x900000, 0x901000, 0x9000, true);
        assert_eq!(load_bias(&exec, &nothing), None);
    }
}

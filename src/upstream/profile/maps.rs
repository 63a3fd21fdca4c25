//! /proc/PID/maps, read once here for the three readers that need it: naming a sampled
//! address's object (`symbols`), the modules of the user-stack unwinder (`unwind`) and
//! finding the PHP engine (`php`).

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
}

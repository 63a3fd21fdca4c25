//! Writing what a report command produces (a snapshot, a flame graph, a profile) whole or
//! not at all.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Writes `bytes` to `path` through a temporary file beside it, renamed into place, so
/// that a reader never sees half a file and an interrupted write leaves the old one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.partial", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_atomically_with_no_temporary_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.folded");
        write_atomically(&path, b"old").unwrap();
        write_atomically(&path, b"a 1\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"a 1\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["x.folded"]);
        assert!(write_atomically(&dir.path().join("no/such/dir/x"), b"").is_err());
    }
}

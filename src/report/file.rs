//! Writing what a report command produces (a snapshot, a flame graph, a profile, a
//! picture): a regular file whole or not at all, and nothing but a regular file replaced.
//!
//! A file is written through a temporary beside it and renamed into place, so a reader
//! never sees half of it and an interrupted write leaves the old one. A rename replaces
//! whatever has the name, though: `-o /dev/null` as root would leave a regular file where
//! the system's device was, a FIFO's reader would get nothing, a symlink to
//! `/proc/self/fd/1` would become a file. So only a missing name or a regular file (also
//! behind a symlink, renamed at the symlink's target) is written that way; a FIFO or a
//! character device (a terminal, `/dev/stdout`) is written in place, as a shell's `>`
//! would; `-` is standard output; anything else (a directory, a block device, a socket) is
//! refused with the reason.

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The name that means standard output.
pub const STDOUT: &str = "-";

/// Writes `bytes` to `path`: see the module comment for what each kind of name gets.
pub fn write_output(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if path.as_os_str() == STDOUT {
        let mut out = std::io::stdout().lock();
        return out
            .write_all(bytes)
            .and_then(|()| out.flush())
            .context("writing to standard output");
    }
    match Target::of(path)? {
        Target::Replace(real) => write_atomically(&real, bytes),
        Target::InPlace => fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .with_context(|| format!("writing {}", path.display())),
    }
}

/// How a name is written.
enum Target {
    /// Missing or a regular file: a temporary renamed onto this path (a symlink's target).
    Replace(PathBuf),
    /// A FIFO or a character device: opened and written.
    InPlace,
}

impl Target {
    fn of(path: &Path) -> anyhow::Result<Target> {
        let link = match fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Target::Replace(path.to_owned()))
            }
            Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
        };
        let (kind, real) = if link.file_type().is_symlink() {
            // Followed by stat, which also crosses /proc's links to pipes and sockets
            // (`/dev/stdout`), whose text is no path; a dangling link is refused, since a
            // rename onto it would replace the link.
            let kind = fs::metadata(path)
                .with_context(|| format!("{}: a symbolic link to nothing", path.display()))?
                .file_type();
            let real = if kind.is_file() {
                fs::canonicalize(path).with_context(|| format!("{}", path.display()))?
            } else {
                path.to_owned()
            };
            (kind, real)
        } else {
            (link.file_type(), path.to_owned())
        };
        if kind.is_file() {
            Ok(Target::Replace(real))
        } else if kind.is_fifo() || kind.is_char_device() {
            Ok(Target::InPlace)
        } else {
            let what = if kind.is_dir() {
                "a directory"
            } else if kind.is_block_device() {
                "a block device"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            anyhow::bail!(
                "{}: {what}; name a file to write (or `-` for standard output)",
                path.display()
            )
        }
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, renamed into place.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.partial", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f =
            fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
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
        write_output(&path, b"old").unwrap();
        write_output(&path, b"a 1\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"a 1\n");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["x.folded"]);
        assert!(write_output(&dir.path().join("no/such/dir/x"), b"").is_err());
    }

    #[test]
    fn a_symlink_to_a_file_stays_a_symlink_and_its_target_gets_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real.json");
        fs::write(&target, b"old").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_output(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"new");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
        assert!(write_output(&dangling, b"x").is_err());
    }

    #[test]
    fn a_fifo_is_written_in_place_and_its_reader_gets_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(fifo).unwrap())
        };
        write_output(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        let kind = fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "still a FIFO");
    }

    #[test]
    fn a_link_to_a_pipe_is_written_in_place_and_a_directory_is_refused() {
        // `/dev/stdout` in a pipeline: a link through /proc/self/fd to a pipe, whose text
        // is no path. A node of the system's (/dev/null) is never used: a regression would
        // replace it.
        let mut fds = [0; 2];
        // SAFETY: pipe fills two descriptors this test owns.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: each descriptor is owned here alone from now on.
        let (read_end, write_end) = unsafe {
            use std::os::fd::FromRawFd;
            (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1]))
        };
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("stdout");
        std::os::unix::fs::symlink(format!("/proc/self/fd/{}", fds[1]), &link).unwrap();
        write_output(&link, b"piped").unwrap();
        drop(write_end);
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &read_end, &mut got).unwrap();
        assert_eq!(got, b"piped");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let error = write_output(dir.path(), b"x").unwrap_err().to_string();
        assert!(error.contains("a directory"), "{error}");
    }
}

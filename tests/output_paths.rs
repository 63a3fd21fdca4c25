//! Where a report command writes: a regular file is replaced whole (a temporary renamed
//! into place), anything else is not replaced. A FIFO's reader gets the bytes, a device
//! stays a device, `-` is standard output, a directory is refused with the reason. Before,
//! every output flag renamed its temporary over whatever had the name: a FIFO became a
//! regular file (its reader got nothing), and `-o /dev/null` as root replaced the device.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn snapshot_with_stacks() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots/stacks.json")
}

fn report(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .arg("report")
        .arg("--from")
        .arg(snapshot_with_stacks())
        .args(args)
        .output()
        .unwrap()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Reads the FIFO while `report` writes into it, until the process has exited and the
/// pipe is empty, or 20 s: opened without blocking, so a FIFO renamed away (the fault
/// this guards against) fails the test rather than hanging it.
fn read_fifo_while(fifo: &Path, mut child: std::process::Child) -> (Vec<u8>, Output) {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut reader = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let exited = child.try_wait().unwrap().is_some();
        match reader.read(&mut chunk) {
            Ok(0) if exited => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("reading the FIFO: {e}"),
        }
        assert!(std::time::Instant::now() < deadline, "report never ended");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    (got, child.wait_with_output().unwrap())
}

#[test]
fn every_output_flag_writes_into_a_fifo_without_replacing_it() {
    for flag in ["--folded", "--flamegraph", "--pprof", "--svg"] {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("out");
        mkfifo(&fifo);
        let child = Command::new(env!("CARGO_BIN_EXE_phasescope"))
            .arg("report")
            .arg("--from")
            .arg(snapshot_with_stacks())
            .args([flag, fifo.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (got, out) = read_fifo_while(&fifo, child);
        assert!(
            out.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!got.is_empty(), "{flag}: the FIFO's reader got nothing");
        assert!(
            fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(),
            "{flag}: the FIFO was replaced"
        );
    }
}

#[test]
fn a_device_stays_a_device_and_a_dash_is_standard_output() {
    let out = report(&["--folded", "/dev/null"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    let out = report(&["--tap", "webdis", "--folded", "-", "--format", "json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout
                .lines()
                .any(|l| l.contains(';') && l.ends_with(|c: char| c.is_ascii_digit())),
        "folded stacks on standard output: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_directory_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = report(&["--folded", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("a directory"), "{stderr}");
    assert!(dir.path().is_dir());
}

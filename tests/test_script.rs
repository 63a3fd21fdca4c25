//! scripts/test on a person's machine: after installing packages it stops the daemons of
//! what it just installed, through the service manager, and leaves every other listener
//! alone — a developer's own Redis on 6379 keeps running.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use support::{accepts, free_port, loopback, require_tool, wait_for, Managed, STARTUP_DEADLINE};

/// A stand-in for `service` / `systemctl` that only writes down how it was called.
fn stub(dir: &Path, name: &str, calls: &Path) {
    let path = dir.join(name);
    let script = format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n", calls.display());
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn stopping_new_daemons_goes_through_the_service_manager_and_spares_other_listeners() {
    // The listener scripts/test did not start: a Redis on the default port when it is
    // free (where the old sweep by port would have killed it), else on a free port.
    let port = if std::net::TcpListener::bind(loopback(6379)).is_ok() {
        6379
    } else {
        free_port()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut own = Managed::spawn(
        "redis-server",
        Command::new(require_tool("redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path()),
        &dir.path().join("redis.log"),
    );
    let own_addr = loopback(port);
    assert!(
        wait_for(STARTUP_DEADLINE, || accepts(own_addr)),
        "redis-server did not start on {own_addr}: {}",
        own.log_tail()
    );
    require_tool("dpkg-query");
    let bin = tempfile::tempdir().unwrap();
    let calls = bin.path().join("calls");
    stub(bin.path(), "service", &calls);
    stub(bin.path(), "systemctl", &calls);
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // redis-server ships a daemon; curl does not; `no-such-package` is not installed.
    let output = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/stop-new-daemons"
    ))
    .args(["redis-server", "curl", "no-such-package"])
    .env("PATH", path)
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stop-new-daemons failed: {stderr}");

    assert!(
        own.exited().is_none() && accepts(own_addr),
        "the Redis on {own_addr} that the script did not start was stopped; stderr: {stderr}"
    );
    let calls = fs::read_to_string(&calls).unwrap_or_default();
    let stops: Vec<&str> = calls.lines().collect();
    assert!(
        stops == ["service redis-server stop"] || stops == ["systemctl stop redis-server"],
        "expected exactly one stop of redis-server through the service manager, got {stops:?}"
    );
}

#[test]
fn scripts_test_never_stops_a_process_by_port() {
    let root = env!("CARGO_MANIFEST_DIR");
    for script in ["scripts/test", "scripts/stop-new-daemons"] {
        let text = fs::read_to_string(Path::new(root).join(script)).unwrap();
        let code: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .collect();
        for line in code {
            for forbidden in ["kill ", "fuser", "ss -", "lsof"] {
                assert!(
                    !line.contains(forbidden),
                    "{script} finds or kills processes by port: {line}"
                );
            }
        }
    }
    let test = fs::read_to_string(Path::new(root).join("scripts/test")).unwrap();
    assert!(
        test.contains("scripts/stop-new-daemons"),
        "scripts/test no longer stops the daemons of the packages it installs"
    );
}

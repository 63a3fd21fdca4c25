//! What `phasescope run` makes of its flags without a config file, and how a start that
//! cannot happen ends (docs/config.md): in front of any server, `--listen` and `--upstream`
//! make a tap named `default` with route rule `none`, not the built-in Webdis tap; a
//! start-up error (an admin address already taken) exits 2 and names the address.

mod support;
mod traffic;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use phasescope::snapshot::Snapshot;
use support::{accepts, free_port, http_get, loopback, wait_for, Managed};
use traffic::Upstream;

const PATIENCE: Duration = Duration::from_secs(30);

/// `phasescope run ARGS` in an empty directory (no ./config.toml) without any
/// `PHASESCOPE_*` variable of the caller's.
fn run_without_a_file(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_phasescope"));
    command.current_dir(dir).arg("run").args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PHASESCOPE_") {
            command.env_remove(key);
        }
    }
    command
}

#[test]
fn listen_and_upstream_without_a_file_make_a_default_tap_with_one_route() {
    let upstream = Upstream::start(Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let (listen, admin) = (loopback(free_port()), loopback(free_port()));
    let mut command = run_without_a_file(
        dir.path(),
        &[
            "--listen",
            &listen.to_string(),
            "--upstream",
            &upstream.addr().to_string(),
            "--admin",
            &admin.to_string(),
        ],
    );
    let mut proxy = Managed::spawn("phasescope", &mut command, &dir.path().join("out.log"));
    assert!(
        wait_for(PATIENCE, || accepts(listen) || proxy.exited().is_some()),
        "{}",
        proxy.log_tail()
    );
    // A Webdis-shaped path: under the Webdis rule its route would be `GET`.
    let answer = http_get(listen, "/GET/k");
    assert_eq!(answer.status, 200, "{}", proxy.log_tail());
    let mut snapshot = None;
    let recorded = wait_for(PATIENCE, || {
        let body = http_get(admin, "/api/snapshot").body_text();
        snapshot = Snapshot::from_json(&body).ok();
        snapshot
            .as_ref()
            .is_some_and(|s| s.taps.values().any(|t| t.totals.requests > 0))
    });
    assert!(recorded, "{}", proxy.log_tail());
    let snapshot = snapshot.unwrap();
    let taps: Vec<&String> = snapshot.taps.keys().collect();
    assert_eq!(taps, ["default"], "{}", proxy.log_tail());
    let routes: Vec<&String> = snapshot.taps["default"].phases["total"].keys().collect();
    assert_eq!(routes, ["all"], "route rule none: one route");
    let metrics = http_get(admin, "/metrics").body_text();
    assert!(metrics.contains("tap=\"default\""), "{metrics}");
    assert!(!metrics.contains("tap=\"webdis\""), "{metrics}");
}

#[test]
fn an_admin_address_in_use_is_a_start_up_error_exit_2() {
    let taken = TcpListener::bind(loopback(0)).unwrap();
    let admin = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let listen = loopback(free_port()).to_string();
    let out = run_without_a_file(
        dir.path(),
        &[
            "--listen",
            &listen,
            "--upstream",
            "127.0.0.1:9",
            "--admin",
            &admin.to_string(),
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&admin.to_string()), "{stderr}");
    drop(taken);
}

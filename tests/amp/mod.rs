//! The Amphp-like PHP upstream (tests/fixtures/amp-server.php) under the real `php` binary.

// Each test file compiles this module on its own and uses a different part of it.
#![allow(dead_code)]

use std::fs;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::support::{loopback, require_tool, Managed, STARTUP_DEADLINE};

/// The fixture, started on a free port of its own choosing (it prints the port), so that
/// no other process can take the port between a check and the bind.
pub struct AmpServer {
    process: Managed,
    port: u16,
    _dir: TempDir,
}

impl AmpServer {
    /// Starts `php amp-server.php 0` with `env` (e.g. `AMP_FIXTURE_IDLE_TIMEOUT`), and
    /// waits until it says where it listens.
    pub fn start(env: &[(&str, &str)]) -> AmpServer {
        let php = require_tool("php");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/amp-server.php");
        let dir = tempfile::Builder::new().prefix("amp-").tempdir().unwrap();
        let log = dir.path().join("amp.log");
        let mut command = Command::new(php);
        command.arg(script).arg("0").current_dir(dir.path());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut process = Managed::spawn("amp-server.php", &mut command, &log);
        let deadline = Instant::now() + STARTUP_DEADLINE;
        let port = loop {
            let text = fs::read_to_string(&log).unwrap_or_default();
            if let Some(rest) = text.split("listening on 127.0.0.1:").nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                break digits.parse::<u16>().unwrap();
            }
            if let Some(status) = process.exited() {
                panic!(
                    "amp-server.php exited with {status}\n{}",
                    process.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "amp-server.php did not start within {STARTUP_DEADLINE:?}\n{}",
                process.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        AmpServer {
            process,
            port,
            _dir: dir,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

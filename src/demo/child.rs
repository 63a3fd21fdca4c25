//! The demo's side of its upstream process (`phasescope demo-upstream`, [`super::serve`]):
//! starting it, learning its address, and reaping it.
//!
//! The process never outlives the demo: dropping [`UpstreamChild`] (a normal return, an
//! error, a panic unwinding) closes its lifeline and waits for it to exit, killing it if
//! it does not within [`EXIT_WAIT`]; and should the demo die without unwinding, the
//! kernel closes the lifeline and the process exits by itself. It runs in a process group
//! of its own, so that the terminal's Ctrl-C reaches the demo alone, which then stops it
//! in order.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::serve::{UpstreamOptions, LISTENING};

/// How long the process may take to bind and say where.
const START_WAIT: Duration = Duration::from_secs(20);
/// How long it may take to exit once its lifeline is closed, before it is killed.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// The running upstream process.
pub struct UpstreamChild {
    child: Child,
    /// The write end of the lifeline; dropping it tells the process to exit.
    lifeline: Option<ChildStdin>,
    addr: SocketAddr,
}

impl UpstreamChild {
    /// Starts `phasescope demo-upstream` (this very binary) and waits for its address.
    pub fn spawn(options: &UpstreamOptions) -> anyhow::Result<UpstreamChild> {
        let exe = std::env::current_exe()
            .context("finding phasescope's own executable to run the demo upstream")?;
        let mut child = Command::new(&exe)
            .arg("demo-upstream")
            .arg("--latency")
            .arg(options.latency.spec())
            .arg("--seed")
            .arg(options.seed.to_string())
            .arg("--parser-cpu")
            .arg(humantime::format_duration(options.parser_cpu).to_string())
            .arg("--backend-cpu")
            .arg(humantime::format_duration(options.backend_cpu).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {} demo-upstream", exe.display()))?;
        let lifeline = child.stdin.take();
        let stdout = child.stdout.take();
        // From here on, dropping `started` reaps the process whatever goes wrong.
        let mut started = UpstreamChild {
            child,
            lifeline,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let stdout = stdout.context("the demo upstream has no standard output")?;
        started.addr = read_address(stdout, &mut started.child)?;
        Ok(started)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes the lifeline and waits for the process; kills it after [`EXIT_WAIT`].
    fn reap(&mut self) {
        drop(self.lifeline.take());
        let deadline = Instant::now() + EXIT_WAIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) | Err(_) => break,
            }
        }
        if let Err(e) = self.child.kill() {
            tracing::debug!(error = %e, "killing the demo upstream");
        }
        if let Err(e) = self.child.wait() {
            tracing::warn!(error = %e, pid = self.child.id(), "cannot reap the demo upstream");
        }
    }
}

impl Drop for UpstreamChild {
    fn drop(&mut self) {
        self.reap();
    }
}

/// The `listening ADDR` line, read on a thread of its own so that a process that says
/// nothing cannot hang the demo; an early exit is reported with its status.
fn read_address(
    stdout: std::process::ChildStdout,
    child: &mut Child,
) -> anyhow::Result<SocketAddr> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("demo-upstream-out".into())
        .spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = tx.send(read);
        })
        .context("starting the thread that reads the demo upstream's address")?;
    let line = match rx.recv_timeout(START_WAIT) {
        Ok(read) => read.context("reading the demo upstream's address")?,
        Err(_) => bail!(
            "the demo upstream said nothing within {}",
            humantime::format_duration(START_WAIT)
        ),
    };
    let Some(addr) = line.trim().strip_prefix(LISTENING) else {
        // Nothing (it ended its output) or not the line expected: its status, if it
        // exited already, says why; its standard error is the demo's.
        std::thread::sleep(Duration::from_millis(100));
        let status = match child.try_wait() {
            Ok(Some(status)) => status.to_string(),
            _ => "still running".to_owned(),
        };
        bail!("the demo upstream did not start ({status}); it said {line:?}");
    };
    addr.parse()
        .with_context(|| format!("the demo upstream's address {addr:?}"))
}

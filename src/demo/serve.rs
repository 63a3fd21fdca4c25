//! `phasescope demo-upstream`: the demo's upstream, in a process of its own.
//!
//! The demo re-executes its own binary with this hidden subcommand, so that its tap can
//! watch the upstream the way it watches a real server (its CPU, its run-queue wait, its
//! sampled call stacks) and nothing else needs installing. The protocol with the demo is
//! two pipes:
//! - standard output: one line, `listening ADDR`, once the port is bound;
//! - standard input: the lifeline. The demo never writes to it; when it ends (the demo
//!   exits, crashes or is killed, and the kernel closes its end), this process exits, so
//!   it never outlives the demo.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

use super::burn::Burn;
use super::latency::Latency;
use super::upstream::DemoUpstream;
use super::UpstreamArgs;

/// The first line the demo reads from the process, before the address.
pub const LISTENING: &str = "listening ";
/// The process's name in /proc (its `comm`), which the report's inside section shows.
pub const PROCESS_NAME: &str = "demo-upstream";

/// Worker threads of the upstream's runtime: a small server's.
const WORKERS: usize = 2;
/// The blocking pool's threads (the backend calls) stay this long when idle, so that
/// the profiler follows the same threads for the whole demo.
const KEEP_ALIVE: Duration = Duration::from_secs(3600);

/// What the upstream process simulates.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamOptions {
    pub latency: Latency,
    pub seed: u64,
    pub parser_cpu: Duration,
    pub backend_cpu: Duration,
}

/// `phasescope demo-upstream`.
pub fn command(args: &UpstreamArgs) -> anyhow::Result<()> {
    let options = args.options();
    name_process();
    std::thread::Builder::new()
        .name("lifeline".into())
        .spawn(hold_the_lifeline)
        .context("starting the lifeline thread")?;
    let burn = Burn::calibrate(options.parser_cpu, options.backend_cpu);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_keep_alive(KEEP_ALIVE)
        .thread_name(PROCESS_NAME)
        .enable_all()
        .build()
        .context("cannot start the demo upstream's runtime")?;
    runtime.block_on(async move {
        let upstream = DemoUpstream::bind(options.latency, burn, options.seed).await?;
        let addr = upstream
            .local_addr()
            .context("reading the upstream's address")?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{LISTENING}{addr}")
            .and_then(|()| out.flush())
            .context("telling the demo the upstream's address")?;
        drop(out);
        // Nothing stops it but the lifeline: the sender lives as long as the process.
        let (_never, stop) = watch::channel(false);
        upstream.serve(stop).await;
        Ok(())
    })
}

/// Reads standard input until it ends, then ends the process.
fn hold_the_lifeline() {
    let mut sink = [0u8; 64];
    let mut input = std::io::stdin().lock();
    loop {
        match input.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    std::process::exit(0);
}

/// Names the process `demo-upstream` (its main thread's name is what /proc/PID/comm and
/// the report show), rather than the binary's name it shares with the demo.
fn name_process() {
    let Ok(name) = std::ffi::CString::new(PROCESS_NAME) else {
        return;
    };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (at most 16 bytes are used)
    // through the pointer, which lives until the call returns.
    let rc = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "cannot name the demo upstream's process"
        );
    }
}

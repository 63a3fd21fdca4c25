//! `phasescope demo`: the first thing to run. Everything on loopback, with nothing to
//! install: an upstream with a simulated parser and backend in a process of its own (this
//! binary again, `phasescope demo-upstream`), the proxy in front of it watching that
//! process, a few seconds of load, the per-phase report with what is inside the upstream,
//! the findings and a flame graph, and the live page until Ctrl-C.
//!
//! The proxy is the real one ([`crate::app::start`], the same taps, recorder, watcher and
//! admin server as `phasescope run`), so what the demo shows is what a deployment shows.

mod args;
mod burn;
mod child;
pub mod latency;
mod load;
mod outcome;
mod progress;
mod proxy;
mod serve;
mod signals;
mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::upstream::SAMPLER_START;

pub use args::{DemoArgs, UpstreamArgs};
pub use latency::Latency;
pub use load::{LoadCounters, LoadPlan};
pub use serve::UpstreamOptions;

use child::UpstreamChild;
use proxy::Proxy;
use signals::Signals;

/// The tap's name, the `tap` label of every metric the demo records.
pub const TAP: &str = "demo";
/// The trickle of requests that keeps the live page moving after the report.
const BACKGROUND_PACE: Duration = Duration::from_millis(50);
/// The simulated parser's CPU per request, and the application's per backend call: the
/// parser is a visible part of the server's CPU, and a small part of a request's time.
const PARSER_CPU: Duration = Duration::from_micros(20);
/// How long the report waits for the samples of the load's last moments.
const LAST_COLLECT: Duration = Duration::from_secs(5);
const BACKEND_CPU: Duration = Duration::from_micros(60);

#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub duration: Duration,
    /// Keep serving the live page after the report until Ctrl-C.
    pub wait: bool,
    pub latency: Latency,
    pub connections: usize,
    /// `None`: 127.0.0.1:9464, or a free port if that is taken.
    pub admin: Option<SocketAddr>,
    pub seed: u64,
    /// Where the flame graph goes.
    pub flamegraph: PathBuf,
}

/// `phasescope demo`.
pub fn command(args: &DemoArgs) -> anyhow::Result<()> {
    run(&args.options())
}

/// `phasescope demo-upstream`: the demo's upstream process.
pub fn upstream_command(args: &UpstreamArgs) -> anyhow::Result<()> {
    serve::command(args)
}

/// Runs the demo on its own runtime. The upstream process is reaped when `child` drops,
/// whichever way this returns.
pub fn run(options: &DemoOptions) -> anyhow::Result<()> {
    let runtime = crate::app::embedded_runtime("phasescope-demo")?;
    let mut signals = runtime.block_on(async { Signals::install() })?;
    let child = UpstreamChild::spawn(&UpstreamOptions {
        latency: options.latency,
        seed: options.seed,
        parser_cpu: PARSER_CPU,
        backend_cpu: BACKEND_CPU,
    })?;
    runtime.block_on(demo(options, &child, &mut signals))
}

async fn demo(
    options: &DemoOptions,
    child: &UpstreamChild,
    signals: &mut Signals,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let proxy = Proxy::start(child.addr(), child.pid(), options.admin, &stop_rx).await?;
    introduce(options, child, &proxy);
    if let Some(upstream) = &proxy.upstream {
        sampler_started(upstream).await;
    }

    let counters = Arc::new(LoadCounters::default());
    let plan = LoadPlan {
        connections: options.connections,
        duration: options.duration,
        pace: None,
        seed: options.seed,
    };
    let progress = tokio::spawn(progress::show(Arc::clone(&counters), options.duration));
    let started = tokio::time::Instant::now();
    let load = load::drive(proxy.addr, plan, Arc::clone(&counters), stop_rx.clone());
    let interrupted = tokio::select! {
        () = load => false,
        () = signals.recv() => true,
    };
    let elapsed = started.elapsed();
    if interrupted {
        progress.abort();
        println!("\ninterrupted: stopping");
        let _ = stop_tx.send(true);
        proxy.stopped().await;
        return Ok(());
    }
    // The progress line ends with the load (its last redraw, then a new line).
    let _ = progress.await;
    // The proxy records an exchange just after its last byte reached the client: a
    // moment for that; and the samples of the load's end are in once a collect that
    // began after it is.
    let collects = proxy.upstream.as_ref().map(|u| u.collects());
    tokio::time::sleep(Duration::from_millis(100)).await;
    if let (Some(upstream), Some(before)) = (&proxy.upstream, collects) {
        last_samples_collected(upstream, before).await;
    }

    let requests = counters.requests.load(std::sync::atomic::Ordering::Relaxed);
    let errors = counters.errors.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "load: {requests} requests in {:.1} s ({:.0}/s), {errors} client errors\n",
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64().max(1e-3)
    );
    let snapshot = proxy.registry.snapshot();
    outcome::print(&snapshot, proxy.upstream.as_deref(), &options.flamegraph)?;
    println!();
    println!("live page   http://{}/", proxy.admin);
    println!(
        "metrics     http://{0}/metrics   snapshot  http://{0}/api/snapshot",
        proxy.admin
    );
    println!("try         curl -i http://{}/api/users/42", proxy.addr);

    if options.wait {
        println!("\nserving a trickle of requests for the live page; press Ctrl-C to stop");
        let background = LoadPlan {
            connections: 1,
            duration: Duration::from_secs(365 * 24 * 3600),
            pace: Some(BACKGROUND_PACE),
            seed: options.seed.wrapping_add(1),
        };
        let trickle = tokio::spawn(load::drive(
            proxy.addr,
            background,
            Arc::new(LoadCounters::default()),
            stop_rx.clone(),
        ));
        signals.recv().await;
        let _ = stop_tx.send(true);
        let _ = trickle.await;
    }
    let _ = stop_tx.send(true);
    proxy.stopped().await;
    Ok(())
}

/// Waits, at most [`SAMPLER_START`], until the sampler runs on the upstream or said why
/// it cannot; says so when it is slow, and when it never came.
async fn sampler_started(upstream: &crate::upstream::Upstream) {
    // Whole stacks: a sample taken while the process's unwind tables are still being
    // read is a leaf, cut short (4 to 6 % of the demo's stacks were, on a loaded machine).
    let started = tokio::time::Instant::now();
    let mut told = false;
    while !upstream.sampler_settled() {
        let waited = started.elapsed();
        if waited >= SAMPLER_START {
            println!(
                "  sampler   not started after {} s: the report may have no samples",
                SAMPLER_START.as_secs()
            );
            return;
        }
        if !told && waited >= Duration::from_secs(1) {
            println!("  sampler   starting (reading the upstream's symbols and unwind tables) …");
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits, at most [`LAST_COLLECT`], for a collect of samples that began after `before`
/// collects had been counted: the one in progress then may have begun before the load
/// ended, the one after it did not.
async fn last_samples_collected(upstream: &crate::upstream::Upstream, before: u64) {
    if !upstream.sampling() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LAST_COLLECT;
    while upstream.collects() < before + 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn introduce(options: &DemoOptions, child: &UpstreamChild, proxy: &Proxy) {
    println!("phasescope demo");
    println!(
        "  upstream  http://{}  (process {}, pid {}: per request a simulated parser's {} of CPU and a backend's {} a call,\n            {} call{} for /api/users, {} for /api/orders, {} for /api/report, none for the static file; backend latency {})",
        child.addr(),
        serve::PROCESS_NAME,
        child.pid(),
        crate::units::duration(PARSER_CPU.as_secs_f64()),
        crate::units::duration(BACKEND_CPU.as_secs_f64()),
        upstream::USERS_CALLS,
        if upstream::USERS_CALLS == 1 { "" } else { "s" },
        upstream::ORDERS_CALLS,
        upstream::REPORT_CALLS,
        options.latency
    );
    println!(
        "  proxy     http://{}  (tap \"{TAP}\", routes by the first two path segments; watches pid {} with call stacks)",
        proxy.addr,
        child.pid()
    );
    println!("  admin     http://{}{}", proxy.admin, proxy.admin_note);
    println!(
        "  load      {} connections for {} s: GET /api/users/N, POST /api/orders, GET /api/report (chunked),\n            GET /static/app.js (24 KiB), now and then GET /api/legacy/N; one client pipelines two requests at a time\n",
        options.connections,
        options.duration.as_secs()
    );
}

//! `phasescope demo`: the first thing to run. Everything in one process, on loopback,
//! with nothing to install: an embedded upstream with a simulated backend, the proxy in
//! front of it with its admin server, a few seconds of load, the per-phase report, and the
//! live page until Ctrl-C.
//!
//! The proxy is the real one ([`crate::app::start`], the same taps, recorder and admin
//! server as `phasescope run`), so what the demo shows is what a deployment shows.

mod args;
pub mod latency;
mod load;
mod progress;
mod upstream;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

use crate::admin::AdminServer;
use crate::config::{Config, Protocol, RouteRule, TapConfig};
use crate::metrics::Registry;
use crate::report;

pub use args::DemoArgs;
pub use latency::Latency;
pub use load::{LoadCounters, LoadPlan};
pub use upstream::DemoUpstream;

/// The tap's name, the `tap` label of every metric the demo records.
pub const TAP: &str = "demo";
/// Where the admin server goes when the user asks for nothing else.
const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9464);
/// How long exchanges in flight may finish after the load stops.
const GRACE: Duration = Duration::from_secs(2);
/// The trickle of requests that keeps the live page moving after the report.
const BACKGROUND_PACE: Duration = Duration::from_millis(50);

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
}

/// `phasescope demo`.
pub fn command(args: &DemoArgs) -> anyhow::Result<()> {
    run(&args.options())
}

/// Runs the demo on its own runtime.
pub fn run(options: &DemoOptions) -> anyhow::Result<()> {
    let runtime = crate::app::embedded_runtime("phasescope-demo")?;
    runtime.block_on(demo(options))
}

async fn demo(options: &DemoOptions) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);

    let upstream = DemoUpstream::bind(options.latency, options.seed).await?;
    let upstream_addr = upstream.local_addr()?;
    let upstream_task = tokio::spawn(upstream.serve(stop_rx.clone()));

    let config = demo_config(upstream_addr)?;
    let registry = Registry::new(&config.metrics)?;
    let (admin, admin_note) = bind_admin(options.admin, &registry)?;
    let admin_addr = admin.local_addr();
    let taps = crate::app::start(&config, &registry).await?;
    let proxy_addr = taps
        .first()
        .context("the demo config has no tap")?
        .local_addr()
        .context("reading the proxy's address")?;
    let mut tap_tasks = Vec::new();
    for tap in taps {
        tap_tasks.push(tokio::spawn(tap.run(stop_rx.clone(), GRACE)));
    }
    let mut admin_stop = stop_rx.clone();
    let admin_task = tokio::spawn(admin.serve(async move {
        let _ = admin_stop.wait_for(|s| *s).await;
    }));

    println!("phasescope demo");
    println!(
        "  upstream  http://{upstream_addr}  (embedded; simulated backend latency: {})",
        options.latency
    );
    println!(
        "  proxy     http://{proxy_addr}  (tap \"{TAP}\", routes by the first two path segments)"
    );
    println!("  admin     http://{admin_addr}{admin_note}");
    println!(
        "  load      {} connections for {} s: GET /api/users/N, POST /api/orders, GET /api/report (chunked),\n            GET /static/app.js (24 KiB); one client pipelines two requests at a time\n",
        options.connections,
        options.duration.as_secs()
    );

    let counters = Arc::new(LoadCounters::default());
    let plan = LoadPlan {
        connections: options.connections,
        duration: options.duration,
        pace: None,
        seed: options.seed,
    };
    let progress = tokio::spawn(progress::show(Arc::clone(&counters), options.duration));
    let started = tokio::time::Instant::now();
    load::drive(proxy_addr, plan, Arc::clone(&counters), stop_rx.clone()).await;
    let elapsed = started.elapsed();
    let _ = progress.await;
    // The proxy records an exchange just after its last byte reached the client; give the
    // last few a moment before the snapshot.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let requests = counters.requests.load(std::sync::atomic::Ordering::Relaxed);
    let errors = counters.errors.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "load: {requests} requests in {:.1} s ({:.0}/s), {errors} client errors\n",
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64().max(1e-3)
    );
    let snapshot = registry.snapshot();
    let dataset =
        report::Dataset::from_snapshots(std::slice::from_ref(&snapshot), vec!["demo".into()])?;
    let by_route = report::Report::build(&dataset, true)?;
    let colour = std::io::IsTerminal::is_terminal(&std::io::stdout());
    print!(
        "{}",
        report::table::render(&by_route, report::Format::Table, colour)?
    );
    if let Some(t) = snapshot.taps.get(TAP).map(|tap| &tap.totals) {
        let get =
            |m: &std::collections::BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
        println!(
            "\nexchanges {}, errors {}, connections {} client / {} upstream, bytes {} in / {} out",
            t.requests,
            t.errors.values().sum::<u64>(),
            get(&t.connections, "client"),
            get(&t.connections, "upstream"),
            get(&t.bytes, "request"),
            get(&t.bytes, "response"),
        );
    }
    println!();
    println!("live page   http://{admin_addr}/");
    println!(
        "metrics     http://{admin_addr}/metrics   snapshot  http://{admin_addr}/api/snapshot"
    );
    println!("try         curl -i http://{proxy_addr}/api/users/42");

    if options.wait {
        println!("\nserving a trickle of requests for the live page; press Ctrl-C to stop");
        let background = LoadPlan {
            connections: 1,
            duration: Duration::from_secs(365 * 24 * 3600),
            pace: Some(BACKGROUND_PACE),
            seed: options.seed.wrapping_add(1),
        };
        let trickle = tokio::spawn(load::drive(
            proxy_addr,
            background,
            Arc::new(LoadCounters::default()),
            stop_rx.clone(),
        ));
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        let _ = stop_tx.send(true);
        let _ = trickle.await;
    }

    let _ = stop_tx.send(true);
    for task in tap_tasks {
        let _ = task.await;
    }
    let _ = admin_task.await;
    let _ = upstream_task.await;
    Ok(())
}

/// One HTTP tap on a free loopback port in front of the embedded upstream, labelled by
/// `/first/second` path prefix so that each kind of request is its own route.
fn demo_config(upstream: SocketAddr) -> anyhow::Result<Config> {
    let mut config = Config::builtin().context("the built-in config")?;
    let mut tap = TapConfig::new(
        TAP,
        Protocol::Http,
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        &upstream.to_string(),
    );
    tap.routes = RouteRule::Prefix;
    tap.route_segments = 2;
    config.taps = vec![tap];
    config.correlate.clear();
    config.log.access_log = None;
    config.log.slow_log = None;
    config.shutdown_grace = GRACE;
    Ok(config)
}

/// The requested admin address, or the default one, or (when the default is taken, by an
/// earlier demo or a running phasescope) any free loopback port. The note says which.
fn bind_admin(
    requested: Option<SocketAddr>,
    registry: &Arc<Registry>,
) -> anyhow::Result<(AdminServer, &'static str)> {
    if let Some(addr) = requested {
        return Ok((crate::admin::bind(addr, Arc::clone(registry))?, ""));
    }
    match crate::admin::bind(DEFAULT_ADMIN, Arc::clone(registry)) {
        Ok(admin) => Ok((admin, "")),
        Err(_) => Ok((
            crate::admin::bind(
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                Arc::clone(registry),
            )?,
            "  (127.0.0.1:9464 was taken)",
        )),
    }
}

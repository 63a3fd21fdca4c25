//! The demo's proxy: one HTTP tap in front of the upstream process, watching that
//! process (its CPU, its run-queue wait, its sampled call stacks), and the admin server
//! with the live page and the `phasescope_finding` gauge; all started and stopped
//! together.
//!
//! The proxy is the real one ([`crate::app::start`], the same taps, recorder, watcher and
//! admin server as `phasescope run`), so what the demo shows is what a deployment shows.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::TAP;
use crate::admin::AdminServer;
use crate::config::{ComponentRuleConfig, Config, Protocol, RouteRule, TapConfig};
use crate::metrics::Registry;
use crate::upstream::{Upstream, Watcher};

/// Where the admin server goes when the user asks for nothing else.
const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9464);
/// How long exchanges in flight may finish after the load stops.
const GRACE: Duration = Duration::from_secs(2);
/// How often the upstream process is read and its samples collected, and so how long
/// its CPU-per-route slices are: the demo's five seconds of load make about 60 slices,
/// enough for its five routes and the background at 8 slices a figure (at 250 ms they
/// were 20, and rare routes took whatever CPU their few slices had).
pub const PROCESS_INTERVAL: Duration = Duration::from_millis(80);
/// The user component rule that names the simulated application's work.
const BACKEND_COMPONENT: &str = "backend";
const BACKEND_SYMBOL: &str = "^demo_backend_";

/// The running proxy.
pub struct Proxy {
    pub registry: Arc<Registry>,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// ` (127.0.0.1:9464 was taken)` when the default admin address was.
    pub admin_note: &'static str,
    /// The watched upstream's figures (`None` if the watcher could not start).
    pub upstream: Option<Arc<Upstream>>,
    watcher: Option<Watcher>,
    tasks: Vec<JoinHandle<()>>,
    admin_task: JoinHandle<anyhow::Result<()>>,
}

impl Proxy {
    /// Binds the tap and the admin server and starts watching process `pid`.
    pub async fn start(
        upstream: SocketAddr,
        pid: u32,
        admin: Option<SocketAddr>,
        stop: &watch::Receiver<bool>,
    ) -> anyhow::Result<Proxy> {
        let config = demo_config(upstream, pid)?;
        // Not `watch_own`: this process also drives the demo's load, so its CPU is not
        // the proxy's alone.
        let registry = Registry::new(&config.metrics)?;
        let (admin_server, admin_note) = bind_admin(admin, &registry)?;
        let admin = admin_server.local_addr();
        let taps = crate::app::start(&config, &registry).await?;
        let addr = taps
            .first()
            .context("the demo config has no tap")?
            .local_addr()
            .context("reading the proxy's address")?;
        let (watcher, upstream) = match crate::app::watch_upstream(&config.taps[0], &registry) {
            Ok(Some((w, u))) => (Some(w), Some(u)),
            Ok(None) => (None, None),
            Err(e) => {
                tracing::warn!("{e:#}; the demo goes on without looking inside its upstream");
                (None, None)
            }
        };
        let tasks = taps
            .into_iter()
            .map(|tap| tokio::spawn(tap.run(stop.clone(), GRACE)))
            .collect();
        let mut admin_stop = stop.clone();
        let admin_task = tokio::spawn(admin_server.serve(async move {
            let _ = admin_stop.wait_for(|s| *s).await;
        }));
        Ok(Proxy {
            registry,
            addr,
            admin,
            admin_note,
            upstream,
            watcher,
            tasks,
            admin_task,
        })
    }

    /// Waits for the tap and the admin server to drain (`stop` must have turned true),
    /// then ends the watcher.
    pub async fn stopped(mut self) {
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        let _ = (&mut self.admin_task).await;
        if let Some(w) = self.watcher.take() {
            w.stop();
        }
    }
}

/// One HTTP tap on a free loopback port in front of the upstream process, labelled by
/// `/first/second` path prefix so that each kind of request is its own route, watching
/// process `pid` with call stacks.
fn demo_config(upstream: SocketAddr, pid: u32) -> anyhow::Result<Config> {
    let mut config = Config::builtin().context("the built-in config")?;
    let mut tap = TapConfig::new(
        TAP,
        Protocol::Http,
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        &upstream.to_string(),
    );
    tap.routes = RouteRule::Prefix;
    tap.route_segments = 2;
    tap.process.pid = Some(pid);
    tap.process.profile = crate::config::Profile::On;
    // Every sample of a five-second window: under the default budget the period grew
    // and shrank at the demo's collects every 80 ms, each change reopening the events of
    // its 14 threads (a thread's clock restarts at zero), and the samples covered 38 % of
    // its CPU. The budget is for long windows of a production server.
    tap.process.sample_budget = 0;
    tap.process.interval = PROCESS_INTERVAL;
    tap.process.components = vec![ComponentRuleConfig {
        name: BACKEND_COMPONENT.to_owned(),
        symbol: Some(BACKEND_SYMBOL.to_owned()),
        object: None,
    }];
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

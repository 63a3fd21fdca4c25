//! Running a validated [`Config`]: every tap, the admin server, graceful shutdown.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;

use crate::accesslog::{ExchangeLog, LogFile};
use crate::config::{Config, TapConfig};
use crate::correlate::Correlator;
use crate::metrics::Registry;
use crate::recorder::{Fanout, Recorder};
use crate::relay::{Tap, TapContext, Workers};
use crate::routes::RouteTable;

/// Worker threads serving connections [default: one per CPU].
const ENV_WORKERS: &str = "PHASESCOPE_WORKERS";
/// `per-core` [default] or `work-stealing`: how connections are spread over the workers.
const ENV_RUNTIME: &str = "PHASESCOPE_RUNTIME";

/// How connection tasks are run (`docs/BENCHMARKS.md` compares the two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One single-threaded runtime per worker thread; each connection stays on the worker
    /// it was given when accepted. Listeners, the admin server and signals run on the
    /// main thread.
    PerCore,
    /// One tokio multi-thread runtime whose workers steal tasks from each other.
    WorkStealing,
}

/// Runs until SIGINT/SIGTERM/SIGHUP, then drains in-flight exchanges for `config.shutdown_grace`.
pub fn run(config: Config) -> anyhow::Result<()> {
    crate::clock::init();
    let workers = match std::env::var(ENV_WORKERS) {
        Ok(n) => n
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("{ENV_WORKERS}={n:?}: expected a number of threads"))?,
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let layout = match std::env::var(ENV_RUNTIME).as_deref() {
        Ok("work-stealing") => Layout::WorkStealing,
        Ok("per-core") | Err(_) => Layout::PerCore,
        Ok(other) => anyhow::bail!("{ENV_RUNTIME}={other:?}: expected per-core or work-stealing"),
    };
    tracing::info!(workers, layout = ?layout, "starting the runtime");
    match layout {
        Layout::WorkStealing => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .thread_name("phasescope-worker")
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(serve(config))
        }
        Layout::PerCore => {
            let (pool, threads) = Workers::start(workers)?;
            let control = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            let outcome = control.block_on(serve_on(config, Some(pool)));
            threads.stop();
            outcome
        }
    }
}

/// Binds every tap, then serves until a signal arrives; connections run on the current
/// runtime.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    serve_on(config, None).await
}

/// Binds every tap, then serves until a signal arrives; connections run on `workers` if
/// given, else on the current runtime.
pub async fn serve_on(config: Config, workers: Option<Arc<Workers>>) -> anyhow::Result<()> {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        clock = crate::clock::source(),
        "phasescope starting (clock source: {})",
        if crate::clock::source() == "tsc" {
            "TSC"
        } else {
            "OS monotonic clock"
        }
    );
    for warning in crate::config::ceiling::warnings(&config) {
        tracing::warn!("{warning}");
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let registry = Registry::new(&config.metrics)?;
    registry.set_front_to_back(config.taps_front_to_back());
    registry.set_backends(
        config
            .correlate
            .iter()
            .map(|c| (c.http.clone(), c.resp.clone()))
            .collect(),
    );
    registry.set_exemplar_threshold(config.log.slow_threshold);
    // Time the proxy does not run is its own, not the upstream's wait (`stalls`).
    if let Err(e) = crate::stalls::start() {
        tracing::warn!(
            error = format!("{e:#}"),
            "the proxy's own stalls will be counted as the upstream's wait"
        );
    }
    // The proxy's own cost, as the upstream's: without /proc it is left out, and the
    // proxy runs all the same.
    if let Err(e) = registry.watch_own() {
        tracing::warn!(
            error = format!("{e:#}"),
            "the proxy's own CPU will not be reported"
        );
    }
    let admin = crate::admin::bind(config.admin.listen, Arc::clone(&registry))?
        .with_token(config.admin.token.as_deref())
        .with_limits(crate::admin::AdminLimits {
            allowed_hosts: config.admin.allowed_hosts.clone(),
            max_connections: config.admin.max_connections,
            max_scrapes: config.admin.max_scrapes,
            max_snapshots: config.admin.max_snapshots,
        });
    warn_if_public(config.admin.listen);
    tracing::info!(admin = %admin.local_addr(), "admin server listening");
    let running = start(&config, &registry).await?;
    let watchers = watch_upstreams(&config.taps, &registry);
    let mut admin_stop = stop_rx.clone();
    let admin_task = tokio::spawn(admin.serve(async move {
        let _ = admin_stop.wait_for(|stop| *stop).await;
    }));
    let mut tasks = Vec::new();
    for tap in running {
        tracing::info!(tap = tap.name(), listen = %tap.local_addr()?, "listening");
        let tap = match &workers {
            Some(w) => tap.on_workers(Arc::clone(w)),
            None => tap,
        };
        let rx = stop_rx.clone();
        let grace = config.shutdown_grace;
        tasks.push(tokio::spawn(tap.run(rx, grace)));
    }
    wait_for_signal().await;
    tracing::info!(grace = ?config.shutdown_grace, "shutting down");
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    match admin_task.await {
        Ok(Err(e)) => tracing::warn!(error = %e, "admin server ended with an error"),
        Err(e) => tracing::warn!(error = %e, "admin server task failed"),
        Ok(Ok(())) => {}
    }
    for w in watchers {
        w.stop();
    }
    tracing::info!("stopped");
    Ok(())
}

/// One watcher per tap whose upstream process is to be accounted (nothing under
/// `--no-metrics`, where nothing is recorded). A watcher that cannot start is a log line,
/// never a reason not to serve.
pub fn watch_upstreams(taps: &[TapConfig], registry: &Registry) -> Vec<crate::upstream::Watcher> {
    watched_upstreams(taps, registry)
        .into_iter()
        .map(|(w, _)| w)
        .collect()
}

/// [`watch_upstreams`] with the figures each watcher fills (the bench waits on them for
/// its samplers to start).
pub fn watched_upstreams(
    taps: &[TapConfig],
    registry: &Registry,
) -> Vec<(crate::upstream::Watcher, Arc<crate::upstream::Upstream>)> {
    if !registry.enabled() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for tap in taps {
        match watch_upstream(tap, registry) {
            Ok(Some(watched)) => out.push(watched),
            Ok(None) => {}
            Err(e) => tracing::warn!(tap = %tap.name, "{e:#}; no upstream accounting"),
        }
    }
    out
}

/// The watcher of one tap's upstream process, with the figures it fills; `None` when
/// `[tap.process]` asks for none.
pub fn watch_upstream(
    tap: &TapConfig,
    registry: &Registry,
) -> anyhow::Result<Option<(crate::upstream::Watcher, Arc<crate::upstream::Upstream>)>> {
    let Some(target) = crate::upstream::find::Target::of(tap) else {
        return Ok(None);
    };
    let profile = crate::upstream::ProfileSettings::of(tap);
    let upstream = registry.upstream(tap);
    let watcher = crate::upstream::Watcher::spawn(target, Arc::clone(&upstream), profile)?;
    Ok(Some((watcher, upstream)))
}

/// The admin server exposes every route and latency of the upstream: anywhere but
/// loopback it should be deliberate.
fn warn_if_public(addr: std::net::SocketAddr) {
    if beyond_loopback(addr) {
        tracing::warn!(admin = %addr, "the admin server listens beyond loopback: anyone who can reach it can read the metrics and reset the snapshots");
    }
}

fn beyond_loopback(addr: std::net::SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// Binds every tap of `config` with its recorders: the metrics registry first, then the
/// access and slow logs.
pub async fn start(config: &Config, registry: &Registry) -> anyhow::Result<Vec<Tap>> {
    let mut files: HashMap<PathBuf, Arc<LogFile>> = HashMap::new();
    let mut open = |path: &PathBuf| -> anyhow::Result<Arc<LogFile>> {
        if let Some(f) = files.get(path) {
            return Ok(f.clone());
        }
        let f = LogFile::open(path)?;
        files.insert(path.clone(), f.clone());
        Ok(f)
    };
    // Each [[correlate]] joins an HTTP tap and a RESP tap through one correlator.
    let mut correlators: HashMap<&str, Arc<Correlator>> = HashMap::new();
    for c in &config.correlate {
        let shared = Arc::new(Correlator::new());
        correlators.insert(&c.http, Arc::clone(&shared));
        correlators.insert(&c.resp, shared);
    }
    let mut taps = Vec::new();
    for tap in &config.taps {
        let routes = Arc::new(RouteTable::new(tap)?);
        let mut sinks: Vec<Arc<dyn Recorder>> = vec![registry.recorder(tap, Arc::clone(&routes))?];
        if let Some(path) = &config.log.access_log {
            sinks.push(Arc::new(ExchangeLog::access(&tap.name, open(path)?)));
        }
        if let Some(path) = &config.log.slow_log {
            sinks.push(Arc::new(ExchangeLog::slow(
                &tap.name,
                open(path)?,
                config.log.slow_threshold,
            )));
        }
        // One sink needs no fan-out (and no second indirect call per event).
        let recorder: Arc<dyn Recorder> = match sinks.len() {
            1 => sinks.remove(0),
            _ => Arc::new(Fanout::new(sinks)),
        };
        let ctx = TapContext::new(tap.clone(), recorder, routes)
            .with_correlator(correlators.get(tap.name.as_str()).cloned());
        taps.push(Tap::bind(ctx).await?);
    }
    Ok(taps)
}

/// Binds one tap with the given recorder.
pub async fn bind_tap(tap: &TapConfig, recorder: Arc<dyn Recorder>) -> anyhow::Result<Tap> {
    let routes = Arc::new(RouteTable::new(tap)?);
    Tap::bind(TapContext::new(tap.clone(), recorder, routes)).await
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT all drain and stop. SIGHUP is not a reload: the
/// metrics, snapshots and comparisons of a run describe one configuration, and a reload
/// that changed routes or buckets halfway would mix two in the same histograms. What SIGHUP
/// must not do is what its default action did, kill the process with requests in flight
/// (a closed terminal, or `kill -HUP` out of habit). To apply a new config, restart
/// (docs/deploy.md). SIGQUIT is nginx's graceful stop, so it drains too (its default
/// action dumped core with requests in flight).
///
/// SIGUSR1, SIGUSR2 and SIGALRM are caught and ignored with a log line: their default
/// action kills the process, and a logrotate `postrotate kill -USR1` copied from nginx
/// would have taken the proxy down. phasescope has nothing to reopen on them: its own log
/// is standard error, and an access log file is rotated with `copytruncate`
/// (docs/deploy.md).
pub(crate) async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let stops = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
            signal(SignalKind::quit()),
        );
        let ignored = (
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
            signal(SignalKind::alarm()),
        );
        let (Ok(mut term), Ok(mut hup), Ok(mut quit)) = stops else {
            let _ = ctrl_c.await;
            return;
        };
        let (mut usr1, mut usr2, mut alrm) = match ignored {
            (Ok(a), Ok(b), Ok(c)) => (Some(a), Some(b), Some(c)),
            _ => {
                tracing::warn!("cannot catch SIGUSR1, SIGUSR2 and SIGALRM: each would stop the process without a drain");
                (None, None, None)
            }
        };
        tokio::pin!(ctrl_c);
        loop {
            let ignored = tokio::select! {
                _ = &mut ctrl_c => return,
                _ = term.recv() => return,
                _ = quit.recv() => {
                    tracing::info!("SIGQUIT: draining and stopping as for SIGTERM");
                    return;
                }
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: draining and stopping as for SIGTERM (phasescope does not reload its config; restart it to apply a new one)");
                    return;
                }
                Some(()) = recv(&mut usr1) => "SIGUSR1",
                Some(()) = recv(&mut usr2) => "SIGUSR2",
                Some(()) = recv(&mut alrm) => "SIGALRM",
            };
            tracing::info!(signal = ignored, "{ignored} ignored: phasescope has no log to reopen (its own log is standard error; rotate an access log file with copytruncate)");
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The next delivery of a caught signal; never, when it could not be caught.
#[cfg(unix)]
async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// The runtime of a subcommand that embeds a proxy (`demo`, `bench`): the clock set up,
/// phasescope's own log only when `RUST_LOG` asks for it (it would interleave with the
/// subcommand's output), and a multi-thread runtime whose threads carry `thread_name`.
pub fn embedded_runtime(thread_name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    crate::clock::init();
    if std::env::var_os("RUST_LOG").is_some() {
        crate::logging::init(crate::config::LogFormat::Text);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(thread_name)
        .build()
        .context("cannot start the async runtime")
}

#[cfg(test)]
mod tests {
    use super::beyond_loopback;

    #[test]
    fn only_loopback_admin_addresses_pass_without_a_warning() {
        for quiet in ["127.0.0.1:9464", "127.8.0.1:1", "[::1]:9464"] {
            assert!(!beyond_loopback(quiet.parse().unwrap()), "{quiet}");
        }
        for loud in ["0.0.0.0:9464", "[::]:9464", "10.1.2.3:9464"] {
            assert!(beyond_loopback(loud.parse().unwrap()), "{loud}");
        }
    }
}

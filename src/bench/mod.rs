//! `phasescope bench`: the whole A/B experiment in one command. An embedded proxy with two
//! taps, `a` and `b`, in front of the two servers; a load generator (built in, or
//! `--load CMD`); warm-up, then one side at a time in short slices A B B A B A A B …, each
//! four slices a window (`interleave`, the default), both sides at once in paired windows
//! (`duet`), or whole runs interleaved A B B A …, each on a clean snapshot (`runs`); then
//! `compare` of tap `a`'s windows or runs against tap `b`'s (docs/compare.md).
//!
//! The proxy is the real one ([`crate::app::start`], as `run` and `demo` use), so the
//! phases of a bench are those a deployment records.

mod args;
mod client;
mod external;
pub mod load;
mod measured;
pub mod order;
mod paired;
mod pin;
mod progress;
mod record;
mod report;
mod validity;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

use crate::config::{Config, Protocol, RouteRule, TapConfig};
use crate::metrics::{Registry, Snapshot};
use crate::report::{compare, CompareOptions};
use measured::Measured;

pub use args::{BenchArgs, Design};
pub use record::{RunRecord, UntilMde};
pub use report::BenchReport;

/// How long exchanges in flight may finish when the bench stops.
const GRACE: Duration = Duration::from_secs(2);
/// The proxy records an exchange just after its last byte reached the client: a moment
/// for the last ones before the snapshot.
const SETTLE: Duration = Duration::from_millis(50);
/// At most this long for the last exchanges to be recorded.
const SETTLE_DEADLINE: Duration = Duration::from_secs(2);

/// `phasescope bench`.
pub fn command(args: &BenchArgs) -> anyhow::Result<()> {
    let report = run(args)?;
    let text = report::render(&report, args.format)?;
    print!("{text}");
    match report.refused {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// Runs the experiment on its own runtime, its flags checked first.
pub fn run(args: &BenchArgs) -> anyhow::Result<BenchReport> {
    args.check()?;
    // Declared before the runtime, so dropped after it: the affinities are set back once
    // the bench's threads have ended.
    let mut pinned = pin::Pinned::default();
    if let Some(cpus) = &args.cpus {
        // Before the runtime and the generator start their threads: they inherit it.
        pinned.this_thread(&cpus.load)?;
    }
    let runtime = crate::app::embedded_runtime("phasescope-bench")?;
    runtime.block_on(async {
        if args.cpus.is_none() {
            return bench(args, &mut pinned).await;
        }
        // Pinned servers must not stay pinned because the user stopped the bench: the
        // signal ends the bench here, and `pinned` sets them back on the way out.
        tokio::select! {
            report = bench(args, &mut pinned) => report,
            () = crate::app::wait_for_signal() => {
                anyhow::bail!("interrupted; the servers' CPU affinities are set back")
            }
        }
    })
}

/// `--cpus`: each server's threads on its own CPUs. The server must be a process of this
/// host that listens on its address, found as `[tap.process] find = "auto"` finds it.
fn pin_servers(args: &BenchArgs, pinned: &mut pin::Pinned) -> anyhow::Result<()> {
    let Some(cpus) = &args.cpus else {
        return Ok(());
    };
    for (flag, addr, set) in [("--a", &args.a, &cpus.a), ("--b", &args.b, &cpus.b)] {
        let which = format!("{flag} {addr}");
        let pid = crate::upstream::find::Target::Listener(addr.clone())
            .locate()
            .with_context(|| format!("--cpus: finding the process of {which} to pin"))?;
        pinned.process(pid, set, &which)?;
    }
    Ok(())
}

fn paths(args: &BenchArgs) -> Vec<String> {
    if args.path.is_empty() {
        vec!["/".to_owned()]
    } else {
        args.path.clone()
    }
}

async fn bench(args: &BenchArgs, pinned: &mut pin::Pinned) -> anyhow::Result<BenchReport> {
    let mut config = bench_config(&args.a, &args.b)?;
    for (front, resp) in [("a", &args.a_resp), ("b", &args.b_resp)] {
        if let Some(resp) = resp {
            behind(&mut config, front, resp);
        }
    }
    for (name, addr) in [("--a", &args.a), ("--b", &args.b)] {
        reachable(addr)
            .await
            .with_context(|| format!("{name} {addr}: the server does not accept connections"))?;
    }
    pin_servers(args, pinned)?;
    for (name, resp) in [("--a-resp", &args.a_resp), ("--b-resp", &args.b_resp)] {
        if let Some(resp) = resp {
            reachable(&resp.redis).await.with_context(|| {
                format!(
                    "{name}: Redis at {} does not accept connections",
                    resp.redis
                )
            })?;
        }
    }
    for tap in config.taps.iter_mut().take(2) {
        tap.process.profile = args.profile_upstream;
        // A duet's windows and an interleave's slices are short: read the servers'
        // threads once a window or slice, so that each one's CPU is its own (a read
        // covers the time since the last).
        if let Some((tick, _)) = args.tick() {
            tap.process.interval = tick.max(Duration::from_millis(100));
        }
    }
    let registry = Registry::new(&config.metrics)?;
    let taps = crate::app::start(&config, &registry).await?;
    // The two servers' processes (found by the port they listen on), so that each
    // snapshot carries their CPU and the comparison's note sets CPU per request side by
    // side; one not found is a log line and the bench measures as before.
    let _watchers = crate::app::watch_upstreams(&config.taps[..2], &registry);
    let mut listen = Vec::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for tap in taps {
        listen.push(tap.local_addr().context("reading a tap's address")?);
        tasks.push(tokio::spawn(tap.run(stop_rx.clone(), GRACE)));
    }
    // The two HTTP taps come first; RESP taps behind them follow.
    let [a_addr, b_addr, ..] = listen[..] else {
        anyhow::bail!("the bench config must have two taps");
    };
    if let Some(dir) = &args.keep {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let paths = paths(args);
    let result = experiment(&Bench {
        args,
        registry: &registry,
        paths: &paths,
        a_addr,
        b_addr,
    })
    .await;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    result
}

/// What every design needs: the arguments, the proxy's registry, the paths, each side's
/// tap address.
struct Bench<'a> {
    args: &'a BenchArgs,
    registry: &'a Registry,
    paths: &'a [String],
    a_addr: SocketAddr,
    b_addr: SocketAddr,
}

impl Bench<'_> {
    fn addr(&self, side: order::Side) -> SocketAddr {
        match side {
            order::Side::A => self.a_addr,
            order::Side::B => self.b_addr,
        }
    }

    /// `connections` connections to `side` for `duration`.
    fn load_plan(&self, side: order::Side, duration: Duration, connections: usize) -> load::Plan {
        let host = match side {
            order::Side::A => &self.args.a,
            order::Side::B => &self.args.b,
        };
        load::Plan {
            connections,
            duration,
            rate: self.args.rate,
            requests: Arc::new(self.paths.iter().map(|p| load::request(host, p)).collect()),
            turn: None,
        }
    }

    async fn warm_up(&self) -> anyhow::Result<()> {
        if !self.args.warmup.is_zero() {
            for side in [order::Side::A, order::Side::B] {
                let plan = self.load_plan(side, self.args.warmup, self.args.connections);
                drive(self.args, self.addr(side), &plan, self.paths).await?;
            }
        }
        Ok(())
    }

    fn keep(&self, name: &str, snap: &Snapshot) -> anyhow::Result<()> {
        if let Some(dir) = &self.args.keep {
            let path = dir.join(name);
            let text = serde_json::to_string_pretty(snap)? + "\n";
            crate::report::file::write_output(&path, text.as_bytes())?;
        }
        Ok(())
    }

    /// The runs design: whole runs, one side at a time, interleaved A B B A ….
    async fn interleaved_runs(&self) -> anyhow::Result<(Vec<RunRecord>, Measured)> {
        let args = self.args;
        let sequence = order::interleaved(args.runs);
        let total = sequence.len();
        let mut runs = Vec::new();
        let mut measured = Measured::default();
        for (i, side) in sequence.into_iter().enumerate() {
            self.registry.reset();
            let counters = Arc::new(load::Counters::default());
            let bar = tokio::spawn(progress::bar(
                Arc::clone(&counters),
                i + 1,
                total,
                side,
                args.duration,
            ));
            let generated = match &args.load {
                None => {
                    let plan = self.load_plan(side, args.duration, args.connections);
                    Some(generate(args, self.addr(side), plan, &counters).await?)
                }
                Some(template) => {
                    let url = format!("http://{}{}", self.addr(side), self.paths[0]);
                    let cmd = external::fill(template, &url, args.duration, args.connections);
                    external::run(&cmd, args.duration).await?;
                    None
                }
            };
            bar.abort();
            let snap = settled(self.registry, &[(side, generated.as_ref())]).await;
            let record = RunRecord::new(i + 1, side, &snap, generated);
            progress::done(
                i + 1,
                total,
                side,
                record.requests,
                record.seconds,
                record.failed(),
            );
            let name = format!("run-{:02}-{}.json", i + 1, side.tap());
            self.keep(&name, &snap)?;
            runs.push(record);
            measured.push(side, snap, name);
        }
        Ok((runs, measured))
    }

    /// How the bench compares A and B: tap `a` against tap `b`, paired for a duet.
    fn compare_options(&self) -> CompareOptions {
        let args = self.args;
        CompareOptions {
            alpha: args.alpha,
            threshold: args.threshold / 100.0,
            detect: args.detect / 100.0,
            taps: vec!["a".to_owned()],
            vs_tap: Some("b".to_owned()),
            paired: args.design.paired(),
            ..CompareOptions::default()
        }
    }

    /// The options of `--until-mde`'s checks of the windows so far: the bench's own,
    /// without the functions' rows, which no primary row needs.
    fn until_options(&self) -> CompareOptions {
        CompareOptions {
            functions: false,
            ..self.compare_options()
        }
    }

    /// The verdict on what was measured, unless a side failed too often.
    fn verdict(
        &self,
        runs: Vec<RunRecord>,
        m: Measured,
        until_mde: Option<UntilMde>,
    ) -> anyhow::Result<BenchReport> {
        let args = self.args;
        let opts = self.compare_options();
        let validity = validity::sides(&runs);
        let refused = validity::refusal(&validity);
        let comparison = match refused {
            Some(_) => None,
            None => {
                let mut c = compare(&m.a, &m.b, m.a_names, m.b_names, &opts)?;
                c.notes.extend(validity::note(&validity));
                if args.design.paired() {
                    rates_as_measured(&mut c, &runs);
                }
                crate::report::diff_stacks::Exports {
                    diff_flamegraph: args.diff_flamegraph.as_deref(),
                    folded: args.folded.as_deref(),
                    pprof: args.pprof.as_deref(),
                }
                .write(&m.a, &m.b, &[("a".to_owned(), "b".to_owned())])?;
                Some(c)
            }
        };
        let rerun = args.keep.as_ref().map(|dir| match args.design {
            Design::Runs => format!(
                "phasescope compare {d}/run-*-a.json --vs {d}/run-*-b.json --tap a --vs-tap b",
                d = dir.display()
            ),
            Design::Duet | Design::Interleave => format!(
                "phasescope compare {d}/window-*.json --vs {d}/window-*.json --tap a --vs-tap b \
                 --paired",
                d = dir.display()
            ),
        });
        Ok(BenchReport {
            a: args.a.clone(),
            b: args.b.clone(),
            paths: self.paths.to_vec(),
            design: args.design,
            window: args.paired_window().map(|w| w.as_secs_f64()),
            connections: args.connections,
            duration: match (&until_mde, args.design) {
                (Some(until), _) => until.seconds,
                (None, Design::Runs) => args.duration.as_secs_f64(),
                (None, Design::Duet | Design::Interleave) => args.paired_length().as_secs_f64(),
            },
            until_mde,
            rate: args.rate,
            cpus: args.cpus.clone(),
            load: args.load.clone().unwrap_or_else(|| {
                if args.rate.is_some() {
                    "open loop".to_owned()
                } else {
                    "closed loop".to_owned()
                }
            }),
            runs,
            rerun,
            validity,
            refused,
            comparison,
        })
    }
}

async fn experiment(bench: &Bench<'_>) -> anyhow::Result<BenchReport> {
    bench.warm_up().await?;
    let (runs, measured, until) = match bench.args.design {
        Design::Runs => {
            let (runs, measured) = bench.interleaved_runs().await?;
            (runs, measured, None)
        }
        Design::Duet | Design::Interleave => bench.paired().await?,
    };
    bench.verdict(runs, measured, until)
}

/// The snapshot once the proxy has recorded every exchange the generator saw answered
/// (it records an exchange just after its last byte went out, and a starved worker may
/// be late), within a deadline; with an external load, after a short pause.
async fn settled(registry: &Registry, sides: &[(order::Side, Option<&load::Outcome>)]) -> Snapshot {
    let deadline = tokio::time::Instant::now() + SETTLE_DEADLINE;
    tokio::time::sleep(SETTLE).await;
    loop {
        let snap = registry.snapshot();
        let complete = sides.iter().all(|(side, generated)| {
            generated.is_none_or(|g| record::recorded(&snap, side.tap()) >= g.requests)
        });
        if complete || tokio::time::Instant::now() >= deadline {
            return snap;
        }
        tokio::time::sleep(SETTLE).await;
    }
}

/// A warm-up: the built-in generator or the external command, unrecorded.
async fn drive(
    args: &BenchArgs,
    target: SocketAddr,
    plan: &load::Plan,
    paths: &[String],
) -> anyhow::Result<()> {
    match &args.load {
        None => {
            generate(
                args,
                target,
                plan.clone(),
                &Arc::new(load::Counters::default()),
            )
            .await?;
        }
        Some(template) => {
            let url = format!("http://{target}{}", paths[0]);
            external::run(
                &external::fill(template, &url, plan.duration, args.connections),
                plan.duration,
            )
            .await?;
        }
    }
    Ok(())
}

/// The built-in generator on its own threads, awaited without blocking the proxy.
async fn generate(
    args: &BenchArgs,
    target: SocketAddr,
    plan: load::Plan,
    counters: &Arc<load::Counters>,
) -> anyhow::Result<load::Outcome> {
    let counters = Arc::clone(counters);
    let threads = args.threads;
    tokio::task::spawn_blocking(move || load::drive_on_threads(target, &plan, &counters, threads))
        .await
        .context("the load generator")?
}

async fn reachable(addr: &str) -> anyhow::Result<()> {
    tokio::time::timeout(
        client::CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .context("connect timed out")?
    .context("connect failed")?;
    Ok(())
}

/// Two HTTP taps on free loopback ports, `a` in front of `a`, `b` in front of `b`; routes
/// by the first path segment (Webdis's command: `/GET/k` is route GET).
fn bench_config(a: &str, b: &str) -> anyhow::Result<Config> {
    let mut config = Config::builtin().context("the built-in config")?;
    let tap = |name: &str, upstream: &str| {
        let mut t = TapConfig::new(
            name,
            Protocol::Http,
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            upstream,
        );
        t.routes = RouteRule::Webdis;
        t
    };
    config.taps = vec![tap("a", a), tap("b", b)];
    config.correlate.clear();
    config.log.access_log = None;
    config.log.slow_log = None;
    config.shutdown_grace = GRACE;
    Ok(config)
}

/// A RESP tap `FRONT_resp` on `resp.listen` in front of `resp.redis`, correlated with the
/// HTTP tap `front` (a Webdis): the wait on Webdis then splits into `backend_in`,
/// `backend` (with `backend_queue`) and `backend_out`, phases of `front` that the compare
/// of tap `a` against tap `b` takes in like every other. The RESP tap's own series are
/// not compared (the compare is scoped to `a` and `b`).
fn behind(config: &mut Config, front: &str, resp: &args::RespTap) {
    let name = format!("{front}_resp");
    config.taps.push(TapConfig::new(
        &name,
        Protocol::Resp,
        resp.listen,
        &resp.redis,
    ));
    config.correlate.push(crate::config::CorrelateConfig {
        kind: "webdis".to_owned(),
        http: front.to_owned(),
        resp: name,
    });
}

/// A paired design's rate rows give each side's exchanges over the time it was loaded
/// (an interleave's side, its own slices: half of each window), as the `requests/s` line
/// and the progress lines do; the change is the ratio of the windows' totals either way.
/// Until this, the row held the geometric mean of the windows' rates over whole windows,
/// and the table said `3818/s` where the line above it said `7682/s` for the same side.
fn rates_as_measured(c: &mut crate::report::Comparison, runs: &[RunRecord]) {
    let seconds = |side: order::Side| {
        runs.iter()
            .find(|r| r.side == side)
            .map(|r| r.seconds)
            .filter(|s| *s > 0.0)
    };
    let (Some(sa), Some(sb)) = (seconds(order::Side::A), seconds(order::Side::B)) else {
        return;
    };
    for r in c
        .rows
        .iter_mut()
        .filter(|r| r.statistic == crate::report::Statistic::Rate)
    {
        r.a = Some(r.count_a as f64 / sa);
        r.b = Some(r.count_b as f64 / sb);
    }
}

//! `phasescope bench`: the whole A/B experiment in one command. An embedded proxy with two
//! taps, `a` and `b`, in front of the two servers; a load generator (built in, or
//! `--load CMD`); warm-up, then one side at a time in short slices A B B A B A A B …, each
//! four slices a window (`interleave`, the default), both sides at once in paired windows
//! (`duet`), or whole runs interleaved A B B A …, each on a clean snapshot (`runs`); then
//! `compare` of tap `a`'s windows or runs against tap `b`'s (docs/compare.md).
//!
//! The proxy is the real one ([`crate::app::start`], as `run` and `demo` use), so the
//! phases of a bench are those a deployment records.
//!
//! The experiment reads as its steps ([`Bench::experiment`]): the flags checked
//! (`args`), the proxy started in front of the servers (`proxy`), a warm-up, the
//! measurement of one design (`runs`, or `paired`: plan, drive, assemble), and the
//! verdict (`verdict`), printed by `report`. What the steps hand each other, the runs'
//! records and each side's snapshots, is in `record` and `measured`, below them all.

mod args;
mod client;
mod external;
pub mod load;
mod measured;
pub mod order;
mod paired;
mod pin;
mod progress;
mod proxy;
mod record;
mod report;
mod runs;
mod sampled;
pub mod sampler_cost;
mod validity;
mod verdict;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

use crate::metrics::Registry;
use crate::snapshot::Snapshot;

pub use args::{BenchArgs, Design};
pub use record::{RunRecord, UntilMde};
pub use report::BenchReport;

/// `phasescope bench`.
pub fn command(args: &BenchArgs) -> anyhow::Result<()> {
    if args.profile_cost {
        return sampler_cost::command(args);
    }
    let report = run(args)?;
    let text = report::render(&report, args.format)?;
    print!("{text}");
    match report.refused {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// Runs the experiment on its own runtime, its flags checked before anything starts.
pub fn run(args: &BenchArgs) -> anyhow::Result<BenchReport> {
    // Declared before the runtime, so dropped after it: the affinities are set back once
    // the bench's threads have ended.
    let mut pinned = pin::Pinned::default();
    if let Some(cpus) = &args.cpus {
        // Before the runtime and the generator start their threads: they inherit it.
        pinned.this_thread(&cpus.load)?;
    }
    // After this thread's pinning, as before the checks moved to args.rs: a CPU of
    // `--cpus` the machine does not have is the error, whatever else the flags say
    // (tests/bench_duet.rs asks it of a bench whose windows are also too few).
    args.check()?;
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

fn paths(args: &BenchArgs) -> Vec<String> {
    if args.path.is_empty() {
        vec!["/".to_owned()]
    } else {
        args.path.clone()
    }
}

async fn bench(args: &BenchArgs, pinned: &mut pin::Pinned) -> anyhow::Result<BenchReport> {
    let mut config = proxy::config(&args.a, &args.b)?;
    for (front, resp) in [("a", &args.a_resp), ("b", &args.b_resp)] {
        if let Some(resp) = resp {
            proxy::behind(&mut config, front, resp);
        }
    }
    for (name, addr) in [("--a", &args.a), ("--b", &args.b)] {
        proxy::reachable(addr)
            .await
            .with_context(|| format!("{name} {addr}: the server does not accept connections"))?;
    }
    proxy::pin_servers(args, pinned)?;
    for (name, resp) in [("--a-resp", &args.a_resp), ("--b-resp", &args.b_resp)] {
        if let Some(resp) = resp {
            proxy::reachable(&resp.redis).await.with_context(|| {
                format!(
                    "{name}: Redis at {} does not accept connections",
                    resp.redis
                )
            })?;
        }
    }
    for tap in config.taps.iter_mut().take(2) {
        tap.process.profile = crate::config::Profile::from(args.profile_upstream);
        // The full rate, not the deployment's budget: a bench's runs are short, both sides
        // pay the same rate, and its function rows and flame graphs want every sample
        // (under the default budget a parser's frame was missing from the difference).
        tap.process.sample_budget = 0;
        // A duet's windows and an interleave's slices are short: read the servers'
        // threads once a window or slice, so that each one's CPU is its own (a read
        // covers the time since the last).
        if let Some((tick, _)) = args.tick() {
            tap.process.interval = tick.max(Duration::from_millis(100));
        }
    }
    let registry = Registry::new(&config.metrics)?;
    let taps = crate::app::start(&config, &registry).await?;
    let watched = sampled::watch(&config.taps[..2], &registry);
    if args.profile_upstream {
        watched.sampling().await;
    }
    let mut listen = Vec::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for tap in taps {
        listen.push(tap.local_addr().context("reading a tap's address")?);
        tasks.push(tokio::spawn(tap.run(stop_rx.clone(), proxy::GRACE)));
    }
    // The two HTTP taps come first; RESP taps behind them follow.
    let [a_addr, b_addr, ..] = listen[..] else {
        anyhow::bail!("the bench config must have two taps");
    };
    if let Some(dir) = &args.keep {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let paths = paths(args);
    let result = Bench {
        args,
        registry: &registry,
        paths: &paths,
        a_addr,
        b_addr,
    }
    .experiment()
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
    /// The experiment: a warm-up, one design's measurement, and the verdict on it.
    async fn experiment(&self) -> anyhow::Result<BenchReport> {
        self.warm_up().await?;
        let (runs, measured, until) = match self.args.design {
            Design::Runs => {
                let (runs, measured) = self.interleaved_runs().await?;
                (runs, measured, None)
            }
            Design::Duet | Design::Interleave => self.paired().await?,
        };
        self.verdict(runs, measured, until)
    }

    /// The address of `side`'s tap, where its load goes.
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

    /// Each side loaded for `--warmup` before anything is measured (the measurements
    /// begin on a reset or a cut, so what it leaves is never compared).
    async fn warm_up(&self) -> anyhow::Result<()> {
        if !self.args.warmup.is_zero() {
            for side in [order::Side::A, order::Side::B] {
                let plan = self.load_plan(side, self.args.warmup, self.args.connections);
                warm_up_side(self.args, self.addr(side), &plan, self.paths).await?;
            }
        }
        Ok(())
    }

    /// With `--keep DIR`, `snap` written to DIR as `name`, for compare to rerun on.
    fn keep(&self, name: &str, snap: &Snapshot) -> anyhow::Result<()> {
        if let Some(dir) = &self.args.keep {
            let path = dir.join(name);
            let text = serde_json::to_string_pretty(snap)? + "\n";
            crate::report::file::write_output(&path, text.as_bytes())?;
        }
        Ok(())
    }
}

/// A warm-up: the built-in generator or the external command, unrecorded.
async fn warm_up_side(
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

//! `phasescope bench --profile-cost`: what sampling costs one server, measured on one
//! running chain. The proxy (an HTTP tap in front of `--a`, and with `--a-resp` a RESP
//! tap between it and its Redis) watches the server with `profile = "on-demand"`, and
//! the windows alternate unsampled (A) and sampled (B) in the runs design's order,
//! A B B A A B B A …: before a B window the bench asks for sampling as
//! `POST /api/profile` does and waits until the samplers run; before an A window it waits
//! until no perf event is open. Each pair of neighbouring windows is one ratio,
//! sampled ÷ unsampled requests/s.
//!
//! Why one chain and pairs: sampling's cost is a few percent, and separate runs of the
//! chain on this shared machine spread over ±15 % (docs/BENCHMARKS.md). In a pair, what
//! the machine did for longer than two windows falls on both sides and cancels; the
//! interval is the paired windows' block bootstrap that `compare --paired` uses
//! ([`crate::stats::paired`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;

use super::{generate, load, order, proxy, BenchArgs};
use crate::config::Profile;
use crate::metrics::Registry;
use crate::snapshot::Snapshot;

/// The tap in front of the server.
const TAP: &str = "a";
/// How often the watcher reads the server and follows the asks: the samplers start and
/// stop within this of being asked.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);
/// A sampled window's ask: far beyond the window, which ends it itself (an ask that ran
/// out while the load was late would leave the window's end unsampled).
const ASK: Duration = Duration::from_secs(600);
/// The longest the samplers may take to start or to stop (opening an event per thread
/// and CPU, loading the symbol tables the first time, on a loaded machine).
const SWITCH_DEADLINE: Duration = Duration::from_secs(20);
/// The load's steps while a start settles.
const SETTLE_STEP: Duration = Duration::from_millis(500);

/// One window: whether it was sampled, its throughput, and what its snapshot held.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CostWindow {
    pub sampled: bool,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_s: f64,
    /// Samples taken in the window (each once, whatever its weight).
    pub samples: u64,
    /// The sampling rate at the window's end, samples per second of a thread's CPU.
    pub rate_hz: Option<f64>,
}

/// The measurement: the windows in order, each pair's ratio, and their summary.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CostReport {
    pub server: String,
    pub chain: bool,
    pub sample_budget: u32,
    pub frequency_hz: u32,
    /// `[tap.process] events` of the sampled windows.
    pub events: crate::config::SampleEvents,
    pub windows: Vec<CostWindow>,
    /// Each pair's sampled ÷ unsampled requests/s.
    pub ratios: Vec<f64>,
    pub median_ratio: Option<f64>,
    /// Σ sampled requests/s ÷ Σ unsampled requests/s over the pairs.
    pub ratio: Option<f64>,
    /// Its 95 % interval (block bootstrap of the pairs, t with pairs − 1 degrees of
    /// freedom); `None` with fewer than three pairs.
    pub interval: Option<[f64; 2]>,
}

/// `phasescope bench --profile-cost`.
pub fn command(args: &BenchArgs) -> anyhow::Result<()> {
    args.check()?;
    let runtime = crate::app::embedded_runtime("phasescope-bench")?;
    let report = runtime.block_on(chain(args))?;
    let text = match args.format {
        crate::report::Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        _ => render(&report),
    };
    print!("{text}");
    Ok(())
}

/// Starts the proxy in front of the server, sampled on demand, and measures through it.
async fn chain(args: &BenchArgs) -> anyhow::Result<CostReport> {
    let mut config = proxy::config(&args.a, &args.a)?;
    config.taps.truncate(1);
    if let Some(resp) = &args.a_resp {
        proxy::behind(&mut config, TAP, resp);
    }
    proxy::reachable(&args.a)
        .await
        .with_context(|| format!("--a {}: the server does not accept connections", args.a))?;
    let tap = &mut config.taps[0];
    tap.process.profile = Profile::OnDemand;
    tap.process.interval = WATCH_INTERVAL;
    if let Some(budget) = args.sample_budget {
        tap.process.sample_budget = budget;
    }
    if let Some(events) = args.sample_events {
        tap.process.events = events.into();
    }
    let (sample_budget, frequency_hz) = (tap.process.sample_budget, tap.process.frequency);
    let events = tap.process.events;
    let registry = Registry::new(&config.metrics)?;
    let taps = crate::app::start(&config, &registry).await?;
    let _watchers = crate::app::watch_upstreams(&config.taps[..1], &registry);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut listen = Vec::new();
    for tap in taps {
        listen.push(tap.local_addr().context("reading a tap's address")?);
        tasks.push(tokio::spawn(tap.run(stop_rx.clone(), proxy::GRACE)));
    }
    let front = *listen.first().context("the bench's proxy has no tap")?;
    let cost = Cost {
        args,
        registry: &registry,
        front,
        requests: Arc::new(
            super::paths(args)
                .iter()
                .map(|p| load::request(&args.a, p))
                .collect(),
        ),
    };
    let windows = cost.measure().await;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    Ok(summarize(
        CostReport {
            server: args.a.clone(),
            chain: args.a_resp.is_some(),
            sample_budget,
            frequency_hz,
            events,
            windows: windows?,
            ratios: Vec::new(),
            median_ratio: None,
            ratio: None,
            interval: None,
        },
        &mut crate::rng::Rng::new(0x5eed),
    ))
}

/// What the windows need: the flags, the proxy's registry, its front and the requests.
struct Cost<'a> {
    args: &'a BenchArgs,
    registry: &'a Registry,
    front: std::net::SocketAddr,
    requests: Arc<Vec<Vec<u8>>>,
}

impl Cost<'_> {
    /// A warm-up unsampled and one sampled (the samplers' first start loads the symbol
    /// tables and sizes the stack copy: not a window's cost), then `--runs` windows a
    /// side, A B B A ….
    async fn measure(&self) -> anyhow::Result<Vec<CostWindow>> {
        if !self.args.warmup.is_zero() {
            for sampled in [false, true] {
                self.switch(sampled).await?;
                self.load(self.args.warmup).await?;
            }
        }
        let mut windows = Vec::new();
        for (i, side) in order::interleaved(self.args.runs).into_iter().enumerate() {
            let w = self.window(side == order::Side::B).await?;
            super::progress::note(&format!(
                "window {}/{}: {}, {:.0} requests/s, {} samples",
                i + 1,
                2 * self.args.runs,
                if w.sampled { "sampled" } else { "unsampled" },
                w.requests_per_s,
                w.samples
            ));
            windows.push(w);
        }
        self.switch(false).await?;
        Ok(windows)
    }

    /// One window: sampling switched as asked, the proxy's figures reset, `--duration`
    /// of load, and what the snapshot holds of the samples.
    async fn window(&self, sampled: bool) -> anyhow::Result<CostWindow> {
        let was = self.registry.sampling_now().iter().any(|t| t == TAP);
        self.switch(sampled).await?;
        if sampled && !was {
            self.settle().await?;
        }
        self.registry.reset();
        let outcome = self.load(self.args.duration).await?;
        let running = self.registry.sampling_now().iter().any(|t| t == TAP);
        anyhow::ensure!(
            running == sampled,
            "the samplers {} during a window meant to be {}",
            if sampled { "stopped" } else { "started" },
            if sampled { "sampled" } else { "unsampled" }
        );
        let snap = self.registry.snapshot();
        let profile = profile_of(&snap);
        anyhow::ensure!(
            outcome.requests > 0 && outcome.seconds > 0.0,
            "a window completed no request ({} errors)",
            outcome.errors
        );
        Ok(CostWindow {
            sampled,
            requests: outcome.requests,
            seconds: outcome.seconds,
            requests_per_s: outcome.requests as f64 / outcome.seconds,
            samples: profile.map_or(0, |p| {
                p.samples_taken.unwrap_or_else(|| p.samples.values().sum())
            }),
            rate_hz: profile.and_then(|p| p.rate_hz),
        })
    }

    /// Sampling on (asked again if it runs already) or off, and waits until the watcher
    /// has done it: the samplers run, or no event is open.
    async fn switch(&self, on: bool) -> anyhow::Result<()> {
        if on {
            let asked = self.registry.profile_for(ASK);
            anyhow::ensure!(
                asked.iter().any(|t| t == TAP),
                "the watcher of {} does not sample on demand",
                self.args.a
            );
        } else {
            self.registry.stop_profiling();
        }
        let deadline = Instant::now() + SWITCH_DEADLINE;
        while self.registry.sampling_now().iter().any(|t| t == TAP) != on {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the samplers of {} did not {} within {:?}{}",
                self.args.a,
                if on { "start" } else { "stop" },
                SWITCH_DEADLINE,
                if on {
                    " (is the process found, and may perf events be opened on it?)"
                } else {
                    ""
                }
            );
            tokio::time::sleep(WATCH_INTERVAL / 4).await;
        }
        Ok(())
    }

    /// After the samplers start, load until their first samples are in, and one step more
    /// (the rate adapts at each collect). A start reads the server's symbol and unwind
    /// tables on the proxy's threads, most of a second on a loaded machine: measured in
    /// the window, a 2 s window sampled from a cold start ran at 0.2 of its pair. It is
    /// what each on-demand start costs, once, not what sampling costs while it runs.
    async fn settle(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + SWITCH_DEADLINE;
        self.registry.reset();
        loop {
            self.load(SETTLE_STEP).await?;
            let snap = self.registry.snapshot();
            if profile_of(&snap).is_some_and(|p| taken(p) > 0) {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the samplers of {} took no sample within {SWITCH_DEADLINE:?} of load",
                self.args.a
            );
        }
        self.load(SETTLE_STEP).await?;
        Ok(())
    }

    /// `duration` of the built-in generator's load on the proxy's front.
    async fn load(&self, duration: Duration) -> anyhow::Result<load::Outcome> {
        let plan = load::Plan {
            connections: self.args.connections,
            duration,
            rate: self.args.rate,
            requests: Arc::clone(&self.requests),
            turn: None,
        };
        let counters = Arc::new(load::Counters::default());
        generate(self.args, self.front, plan, &counters).await
    }
}

/// Samples taken, each once whatever its weight.
fn taken(p: &crate::snapshot::ProfileSnapshot) -> u64 {
    p.samples_taken.unwrap_or_else(|| p.samples.values().sum())
}

/// The server's profile in a snapshot, if it was sampled at all since the proxy started.
fn profile_of(snap: &Snapshot) -> Option<&crate::snapshot::ProfileSnapshot> {
    snap.taps
        .get(TAP)
        .and_then(|t| t.upstream.as_ref())
        .and_then(|u| u.profile.as_ref())
}

/// The pairs (windows 1–2, 3–4, …: one of each side, A first and B first in turn), each
/// one's ratio, their median, and the ratio of totals with its interval.
pub fn summarize(mut report: CostReport, rng: &mut crate::rng::Rng) -> CostReport {
    use crate::stats::paired::{of_cells, Cell};
    let cell = |w: &CostWindow| Cell {
        count: w.requests_per_s,
        sum: 0.0,
        log: w.requests_per_s.ln(),
    };
    let pairs: Vec<(Cell, Cell)> = report
        .windows
        .chunks_exact(2)
        .filter_map(|p| match (&p[0], &p[1]) {
            (a, b) if !a.sampled && b.sampled => Some((cell(a), cell(b))),
            (b, a) if !a.sampled && b.sampled => Some((cell(a), cell(b))),
            _ => None,
        })
        .collect();
    report.ratios = pairs.iter().map(|(a, b)| b.count / a.count).collect();
    report.median_ratio = median(&report.ratios);
    if let Some(m) = of_cells(crate::stats::Statistic::Rate, &pairs, RESAMPLES, rng) {
        let (low, high) = m.change.interval(0.95);
        report.ratio = Some(m.change.estimate.exp());
        report.interval = Some([1.0 + low, 1.0 + high]);
    } else if !pairs.is_empty() {
        let (a, b) = pairs
            .iter()
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x.count, b + y.count));
        report.ratio = Some(b / a);
    }
    report
}

/// Bootstrap replicates, as `compare`'s default.
const RESAMPLES: usize = 1000;

fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The report in words: the windows' throughput each side, the samples, the ratio.
pub fn render(r: &CostReport) -> String {
    let side = |sampled: bool| -> Vec<&CostWindow> {
        r.windows.iter().filter(|w| w.sampled == sampled).collect()
    };
    let (a, b) = (side(false), side(true));
    let rps = |ws: &[&CostWindow]| median(&ws.iter().map(|w| w.requests_per_s).collect::<Vec<_>>());
    let fmt = |x: Option<f64>, digits: usize| {
        x.map_or_else(|| "unknown".to_owned(), |x| format!("{x:.digits$}"))
    };
    let rate = median(&b.iter().filter_map(|w| w.rate_hz).collect::<Vec<_>>());
    let budget = if r.sample_budget == 0 {
        "no budget".to_owned()
    } else {
        format!("a budget of {} samples/s", r.sample_budget)
    };
    let mut out =
        format!(
        "sampling's cost on {}{}: {} pairs of windows, unsampled (A) and sampled (B), A B B A …\n",
        r.server,
        if r.chain { " (with its Redis behind a RESP tap)" } else { "" },
        r.ratios.len()
    );
    out += &format!(
        "  unsampled: {} requests/s (median of {} windows), 0 samples in {} of them\n",
        fmt(rps(&a), 0),
        a.len(),
        a.iter().filter(|w| w.samples == 0).count()
    );
    out += &format!(
        "  sampled:   {} requests/s (median of {} windows), samples a window {} to {}, at {} Hz ({} Hz configured, {budget}, events {})\n",
        fmt(rps(&b), 0),
        b.len(),
        b.iter().map(|w| w.samples).min().unwrap_or(0),
        b.iter().map(|w| w.samples).max().unwrap_or(0),
        fmt(rate, 1),
        r.frequency_hz,
        match r.events {
            crate::config::SampleEvents::PerThread => "per thread",
            crate::config::SampleEvents::PerCpu => "per CPU",
        }
    );
    let range = |f: fn(f64, f64) -> f64, init: f64| r.ratios.iter().copied().fold(init, f);
    out += &format!(
        "  sampled ÷ unsampled: median pair {} (pairs {} to {}); ratio of totals {}, 95 % interval {}\n",
        fmt(r.median_ratio, 3),
        fmt(Some(range(f64::min, f64::INFINITY)).filter(|x| x.is_finite()), 3),
        fmt(Some(range(f64::max, f64::NEG_INFINITY)).filter(|x| x.is_finite()), 3),
        fmt(r.ratio, 3),
        r.interval.map_or_else(
            || "unknown (fewer than 3 pairs)".to_owned(),
            |[lo, hi]| format!("{lo:.3} to {hi:.3}")
        )
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(sampled: bool, rps: f64) -> CostWindow {
        CostWindow {
            sampled,
            requests: rps as u64,
            seconds: 1.0,
            requests_per_s: rps,
            samples: u64::from(sampled),
            rate_hz: None,
        }
    }

    /// A B B A A B: each pair is one ratio whichever side came first, and a machine that
    /// slows by half over the run (common to both sides of a pair) leaves the 0.97 ratio
    /// and its narrow interval alone.
    #[test]
    fn pairs_take_both_orders_and_a_common_drift_cancels() {
        let level = [1000.0, 990.0, 800.0, 790.0, 600.0, 590.0, 520.0, 515.0];
        let windows: Vec<CostWindow> = order::interleaved(4)
            .into_iter()
            .zip(level)
            .map(|(side, base)| {
                let sampled = side == order::Side::B;
                window(sampled, if sampled { base * 0.97 } else { base })
            })
            .collect();
        let r = summarize(
            CostReport {
                server: "s".into(),
                chain: false,
                sample_budget: 0,
                frequency_hz: 997,
                events: crate::config::SampleEvents::PerThread,
                windows,
                ratios: Vec::new(),
                median_ratio: None,
                ratio: None,
                interval: None,
            },
            &mut crate::rng::Rng::new(1),
        );
        assert_eq!(r.ratios.len(), 4);
        let m = r.median_ratio.unwrap_or_default();
        assert!((0.95..0.99).contains(&m), "{m}");
        let [lo, hi] = r.interval.unwrap_or_default();
        assert!(lo < 0.97 && 0.96 < hi && hi < 1.0, "{lo} {hi}");
        assert!(render(&r).contains("95 % interval"), "{}", render(&r));
    }
}

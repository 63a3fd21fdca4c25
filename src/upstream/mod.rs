//! Inside the upstream: the process behind a tap, what its threads spend on a CPU and
//! waiting for one, read from /proc off the data path.
//!
//! Per tap with a process to watch ([`find::Target`]), one thread ([`watch`]) finds the
//! process, reads it every `interval` into an [`account::Accountant`] and follows it
//! across restarts. The admin server reads the same [`Upstream`] for `/metrics` and the
//! snapshot. docs/phases.md says what the figures mean per request; docs/metrics.md names
//! them.

pub mod account;
mod demand;
pub mod find;
mod member;
pub mod own;
pub mod profile;
mod samplers;
pub mod slices;
mod traffic;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use own::{Own, OwnTraffic};
pub use samplers::{ProfileSettings, MAX_SAMPLED_PROCESSES};
pub use watch::Watcher;

/// How long a load that wants samples waits for the sampler to start on the upstream: it
/// reads the process's symbols and unwind tables first, about 0.1 s alone and 2.4 s
/// measured with four busy loops beside it; load before it would be load without samples.
pub const SAMPLER_START: Duration = Duration::from_secs(15);

use crate::snapshot::stacks::StackWindow;
use crate::snapshot::upstream::ProcessCpu;
use crate::snapshot::upstream::TOP_SYMBOLS;
use crate::snapshot::{FrameKind, ProfileSnapshot, SymbolSnapshot, UpstreamSnapshot};
use crate::sync::lock;
use account::{Accountant, ProcessInfo, Read, Totals};
use demand::Demand;
use slices::{RouteCounts, SliceWindow};
use traffic::TrafficMeter;

/// One tap's upstream accounting, shared by its watcher and the admin server.
pub struct Upstream {
    tap: String,
    interval: Duration,
    state: Mutex<State>,
}

struct State {
    accountant: Accountant,
    /// The totals at the last snapshot reset: the snapshot shows what happened since.
    baseline: Totals,
    /// Each process's CPU at the last snapshot reset, by pid and start time.
    share_baseline: BTreeMap<(u32, u64), u64>,
    /// Each process's CPU when its samples were last added, by pid and start time: what
    /// a process without a sampler ran since is counted as unsampled.
    share_collected: BTreeMap<(u32, u64), u64>,
    /// Sampling, when `profile` is on and a profiler runs (or ran) on the process.
    samples: Option<Samples>,
    /// Why sampling asked for is not running, as the watcher logged it.
    sampling_off: Option<String>,
    /// With `profile = "on-demand"`: what was asked, and the part of the window sampled.
    demand: Demand,
    /// Whether the tap samples on demand only.
    on_demand: bool,
    /// Collects of samples so far: one who needs the samples of a stretch of time waits
    /// for a collect that began after it ([`Upstream::collects`]).
    collects: u64,
    /// At the last collect some process's unwind tables were still being read, so its
    /// samples were a leaf each ([`Upstream::stacks_ready`]).
    unwinding_pending: bool,
    /// The window cut into slices of CPU and exchanges per route, when the tap's routes
    /// are counted.
    slices: SliceWindow,
    /// Which reads held traffic, and what the process did over them.
    traffic: TrafficMeter,
    /// The traffic's totals and exchanges at the last snapshot reset.
    traffic_baseline: Totals,
    traffic_exchanges_baseline: u64,
}

/// Samples folded into components: since start (the exposition) and since the last reset
/// (the snapshot).
#[derive(Default)]
struct Samples {
    total: BTreeMap<String, u64>,
    window: BTreeMap<String, u64>,
    window_symbols: HashMap<(String, String, String), u64>,
    window_lost: u64,
    /// Threads left without a perf event at the latest collect.
    unsampled_threads: u64,
    /// CPU time of the threads without an event, in the window.
    window_unsampled_cpu_ns: u64,
    /// The proxy's own CPU time spent sampling, in the window.
    window_sampler_cpu_ns: u64,
    /// Samples taken in the window, each once (the counts weigh them by their period).
    window_taken: u64,
    /// The period's multiple of the configured one at the latest collect (0: never
    /// adapts).
    period_multiple: u64,
    /// With call stacks: component → samples with a frame of it, since start (the
    /// exposition) and in the window.
    inclusive_total: BTreeMap<String, u64>,
    window_inclusive: BTreeMap<String, u64>,
    window_stacks: StackWindow,
    /// What the frames are (`native`, `php`); `None` without call stacks.
    frames: Option<FrameKind>,
    /// Samples per second of CPU (native) or of wall time on a CPU (PHP).
    frequency_hz: u32,
    stripped: bool,
}

impl Upstream {
    pub fn new(tap: &str, interval: Duration) -> Arc<Self> {
        Arc::new(Self {
            tap: tap.to_owned(),
            interval,
            state: Mutex::new(State {
                accountant: Accountant::new(),
                baseline: Totals::default(),
                share_baseline: BTreeMap::new(),
                share_collected: BTreeMap::new(),
                samples: None,
                sampling_off: None,
                demand: Demand::default(),
                on_demand: false,
                collects: 0,
                unwinding_pending: false,
                slices: SliceWindow::default(),
                traffic: TrafficMeter::default(),
                traffic_baseline: Totals::default(),
                traffic_exchanges_baseline: 0,
            }),
        })
    }

    pub fn tap(&self) -> &str {
        &self.tap
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Reads the watched process now (a scrape or a snapshot wants current counters).
    /// Gone is left for the watcher to notice and act on.
    pub fn refresh(&self) {
        let mut s = lock(&self.state);
        let _ = Self::read_now(&mut s);
    }

    /// [`Self::refresh`], and whether the read held traffic (an exchange ended since the
    /// previous read).
    pub(crate) fn refresh_held(&self) -> bool {
        let mut s = lock(&self.state);
        Self::read_now(&mut s).1
    }

    /// The watcher's read: the process now, and the slice in progress closed there.
    pub(crate) fn read(&self) -> Read {
        let mut s = lock(&self.state);
        let (read, _) = Self::read_now(&mut s);
        Self::close_slice(&mut s, &read);
        read
    }

    /// Every read of the process goes through here: what it added counts as traffic's
    /// too when an exchange ended since the previous read.
    fn read_now(s: &mut State) -> (Read, bool) {
        let before = s.accountant.totals();
        let read = s.accountant.read();
        let delta = s.accountant.totals().since(&before);
        let held = s.traffic.after_read(&delta, matches!(read, Read::Alive));
        (read, held)
    }

    fn close_slice(s: &mut State, read: &Read) {
        match read {
            Read::Alive => {
                let (totals, readable) = (s.accountant.totals(), s.accountant.threads_readable());
                s.slices.close(totals, readable);
            }
            Read::Skipped => {}
            Read::Gone | Read::Exec | Read::Detached => s.slices.lose_track(),
        }
    }

    /// The tap's exchanges per route, which the slices count (the metrics registry
    /// hands them over when it has both the tap and its upstream).
    pub fn count_routes(&self, routes: Arc<dyn RouteCounts>) {
        let mut s = lock(&self.state);
        s.traffic.add_source(Arc::clone(&routes));
        s.slices.set_routes(routes);
    }

    /// A tap whose exchanges make a read of this process one that held traffic, without
    /// slices (the proxy's own process: every tap's).
    pub fn count_traffic(&self, routes: Arc<dyn RouteCounts>) {
        lock(&self.state).traffic.add_source(routes);
    }

    /// Whether slices are cut: the watcher then reads at least every [`slices::SLICE`].
    pub(crate) fn slicing(&self) -> bool {
        lock(&self.state).slices.counting()
    }

    /// Starts watching the group `pids` (a restart when another was watched before).
    pub(crate) fn attach(&self, pids: &[u32]) -> anyhow::Result<(ProcessInfo, bool)> {
        let mut s = lock(&self.state);
        s.slices.lose_track();
        s.traffic.restart();
        let info = s.accountant.attach(pids)?;
        Ok((info, s.accountant.threads_readable()))
    }

    /// Adds a process to the group watched (a worker forked since, another process on
    /// the port): the group as it is then.
    pub(crate) fn join(&self, pid: u32) -> anyhow::Result<ProcessInfo> {
        lock(&self.state).accountant.join(pid)
    }

    /// The pids of the group watched, lowest first.
    pub(crate) fn members(&self) -> Vec<u32> {
        lock(&self.state).accountant.members()
    }

    /// Whether a process left the group since the last call.
    pub(crate) fn take_left(&self) -> bool {
        lock(&self.state).accountant.take_left()
    }

    pub(crate) fn detach(&self) {
        let mut s = lock(&self.state);
        s.accountant.detach();
        s.slices.lose_track();
    }

    /// Counters since phasescope started watching, and the process now (if any).
    pub fn totals(&self) -> (Totals, Option<ProcessInfo>) {
        let s = lock(&self.state);
        (s.accountant.totals(), s.accountant.process().cloned())
    }

    /// What the reads that held traffic added since start, and the exchanges that ended
    /// in them: the exposition's `*_traffic_*` counters, so that a Prometheus report
    /// divides over the work as a snapshot's does. `None` while no tap's exchanges are
    /// counted (nothing says which reads held traffic).
    pub fn traffic_totals(&self) -> Option<(Totals, u64)> {
        let s = lock(&self.state);
        s.traffic
            .counting()
            .then(|| (s.traffic.totals(), s.traffic.exchanges()))
    }

    /// Starts a new snapshot window (`POST /api/reset`); the Prometheus counters go on.
    pub fn reset(&self) {
        let mut s = lock(&self.state);
        let _ = Self::read_now(&mut s);
        Self::restart_window(&mut s);
    }

    /// The snapshot since the last reset and a reset at the same read: what the process
    /// did falls in exactly one of two consecutive windows (a snapshot then a reset read
    /// twice, and what ran between the reads fell in neither).
    pub fn cut(&self) -> UpstreamSnapshot {
        let mut s = lock(&self.state);
        let (read, _) = Self::read_now(&mut s);
        Self::close_slice(&mut s, &read);
        let snap = self.window_snapshot(&s);
        Self::restart_window(&mut s);
        snap
    }

    fn restart_window(s: &mut State) {
        s.baseline = s.accountant.totals();
        s.traffic_baseline = s.traffic.totals();
        s.traffic_exchanges_baseline = s.traffic.exchanges();
        s.accountant.forget_departed();
        s.share_baseline = cpu_by_process(&s.accountant);
        s.slices.restart();
        s.demand.restart_window();
        if let Some(samples) = &mut s.samples {
            samples.window.clear();
            samples.window_symbols.clear();
            samples.window_lost = 0;
            samples.window_unsampled_cpu_ns = 0;
            samples.window_sampler_cpu_ns = 0;
            samples.window_taken = 0;
            samples.window_inclusive.clear();
            samples.window_stacks.clear();
        }
    }

    /// Why the sampling that `profile = true` asks for is off now (no permission, a bad
    /// rule, …), as the watcher logged it; `None` while it runs or was not asked for.
    pub fn sampling_off(&self) -> Option<String> {
        lock(&self.state).sampling_off.clone()
    }

    /// The profiler could not start on the process: why, for [`Self::sampling_off`].
    pub(crate) fn sampling_failed(&self, why: String) {
        lock(&self.state).sampling_off = Some(why);
    }

    /// A profiler started on the process: sampling figures exist from now on.
    pub(crate) fn profiling(&self, stripped: bool, frequency_hz: u32) {
        let mut s = lock(&self.state);
        s.sampling_off = None;
        let samples = s.samples.get_or_insert_with(Samples::default);
        samples.stripped = stripped;
        samples.frequency_hz = frequency_hz;
    }

    /// Asks for the process to be sampled for `seconds` from now (`profile =
    /// "on-demand"`; `POST /api/profile`); false when this tap does not sample on demand.
    pub fn profile_for(&self, seconds: Duration) -> bool {
        let mut s = lock(&self.state);
        if !s.on_demand {
            return false;
        }
        s.demand.ask(seconds);
        true
    }

    /// Whether this tap samples on demand, and whether it is asked to now.
    pub(crate) fn demand(&self) -> (bool, bool) {
        let s = lock(&self.state);
        (s.on_demand, s.demand.wanted())
    }

    /// Ends what was asked of this tap's on-demand sampling: the samplers stop at the
    /// watcher's next turn (`bench --profile-cost`, whose sampled windows end when their
    /// load does, not when an asked time runs out).
    pub fn stop_profiling(&self) {
        lock(&self.state).demand.cancel();
    }

    /// Whether this tap's on-demand samplers run now: perf events are open on the
    /// process (`bench --profile-cost` waits for it before a sampled window, and for its
    /// end before an unsampled one).
    pub fn sampling_now(&self) -> bool {
        lock(&self.state).demand.running()
    }

    /// This tap samples on demand only (the watcher says so at its start).
    pub(crate) fn set_on_demand(&self) {
        lock(&self.state).on_demand = true;
    }

    /// The samplers started on demand: what the processes run from now is sampled (their
    /// CPU counts from the latest read).
    pub(crate) fn sampling_started(&self) {
        let mut s = lock(&self.state);
        s.share_collected = cpu_by_process(&s.accountant);
        s.demand.started();
    }

    /// The samplers stopped (an on-demand stretch ended): what follows is not sampled.
    pub(crate) fn sampling_stopped(&self) {
        lock(&self.state).demand.stopped();
    }

    /// Whether a profiler samples the process now (it started, and no failure since).
    pub fn sampling(&self) -> bool {
        let s = lock(&self.state);
        s.samples.is_some() && s.sampling_off.is_none()
    }

    /// Whether the samples carry whole call stacks: sampling runs and, at the last
    /// collect, every process's unwind tables were read. Until then a sample is a leaf,
    /// cut short.
    pub fn stacks_ready(&self) -> bool {
        let s = lock(&self.state);
        s.samples.is_some() && s.sampling_off.is_none() && !s.unwinding_pending
    }

    /// Whether a wait for the sampler is over: it samples whole stacks, or it said why it
    /// cannot. The demo and the bench wait for it, at most [`SAMPLER_START`], before
    /// their load.
    pub fn sampler_settled(&self) -> bool {
        self.stacks_ready() || self.sampling_off().is_some()
    }

    /// How many collects of samples have been added: a collect counted after a moment
    /// began after it, so its samples include that moment's (the watcher collects once a
    /// turn, and a turn waits for a CPU like anything else on a loaded machine).
    pub fn collects(&self) -> u64 {
        lock(&self.state).collects
    }

    /// Adds one collect's samples, one delta per process sampled (`sampled`): the CPU
    /// of the group's other processes since the last collect counts as unsampled.
    pub(crate) fn add_samples(&self, deltas: &[profile::ProfileDelta], sampled: &[u32]) {
        let mut s = lock(&self.state);
        s.collects += 1;
        s.unwinding_pending = deltas.iter().any(|d| d.unwinding_pending);
        let now = cpu_by_process(&s.accountant);
        let unsampled: u64 = now
            .iter()
            .filter(|((pid, _), _)| !sampled.contains(pid))
            .map(|(key, &ns)| ns.saturating_sub(s.share_collected.get(key).copied().unwrap_or(0)))
            .sum();
        let sampled_cpu: u64 = now
            .iter()
            .filter(|((pid, _), _)| sampled.contains(pid))
            .map(|(key, &ns)| ns.saturating_sub(s.share_collected.get(key).copied().unwrap_or(ns)))
            .sum();
        s.demand.collected(sampled_cpu);
        s.share_collected = now;
        let samples = s.samples.get_or_insert_with(Samples::default);
        samples.window_unsampled_cpu_ns += unsampled;
        samples.unsampled_threads = 0;
        for delta in deltas {
            samples.add(delta);
        }
    }
}

impl Samples {
    /// Adds one process's samples of a collect.
    fn add(&mut self, delta: &profile::ProfileDelta) {
        let samples = self;
        for (component, n) in &delta.by_component {
            *samples.total.entry(component.clone()).or_default() += n;
            *samples.window.entry(component.clone()).or_default() += n;
        }
        for sym in &delta.symbols {
            *samples
                .window_symbols
                .entry((
                    sym.symbol.clone(),
                    sym.object.clone(),
                    sym.component.clone(),
                ))
                .or_default() += sym.samples;
        }
        samples.window_lost += delta.lost;
        samples.unsampled_threads += delta.unsampled_threads;
        samples.window_unsampled_cpu_ns += delta.unsampled_cpu_ns;
        samples.window_sampler_cpu_ns += delta.sampler_cpu_ns;
        samples.window_taken += delta.taken;
        if delta.period_multiple > 0 {
            samples.period_multiple = delta.period_multiple;
        }
        if let Some(frames) = delta.frames {
            samples.frames = Some(frames);
            for (component, n) in &delta.inclusive {
                *samples
                    .window_inclusive
                    .entry(component.clone())
                    .or_default() += n;
                *samples
                    .inclusive_total
                    .entry(component.clone())
                    .or_default() += n;
            }
            samples.window_stacks.add(&delta.stacks);
        }
    }
}

impl Upstream {
    /// Samples per component since start; `None` when nothing is sampled.
    pub fn samples_total(&self) -> Option<BTreeMap<String, u64>> {
        lock(&self.state).samples.as_ref().map(|s| s.total.clone())
    }

    /// With call stacks: samples per component whose stack holds a frame of it, since
    /// start; `None` without call stacks.
    pub fn inclusive_total(&self) -> Option<BTreeMap<String, u64>> {
        let s = lock(&self.state);
        let samples = s.samples.as_ref()?;
        samples.frames.map(|_| samples.inclusive_total.clone())
    }

    /// The snapshot's `upstream` object: counters since the last reset.
    pub fn snapshot(&self) -> UpstreamSnapshot {
        let mut s = lock(&self.state);
        let _ = Self::read_now(&mut s);
        self.window_snapshot(&s)
    }

    /// The window since the last reset, as the last read left the counters.
    fn window_snapshot(&self, s: &State) -> UpstreamSnapshot {
        let window = s.accountant.totals().since(&s.baseline);
        let mut snap = process_snapshot(window, s.accountant.process(), self.interval);
        if !s.accountant.threads_readable() {
            snap.cpu_seconds = None;
        }
        snap.slices = s.slices.snapshot();
        snap.traffic = s.traffic.counting().then(|| crate::snapshot::Traffic {
            exchanges: Some(
                s.traffic
                    .exchanges()
                    .saturating_sub(s.traffic_exchanges_baseline),
            ),
            ..traffic_snapshot(&s.traffic.totals().since(&s.traffic_baseline))
        });
        snap.processes = processes_in_window(&s.accountant, &s.share_baseline);
        snap.profile = s.samples.as_ref().map(Samples::snapshot);
        if let (Some(profile), true) = (&mut snap.profile, s.on_demand) {
            let (seconds, cpu) = s.demand.window();
            profile.on_demand = Some(true);
            profile.sampled_seconds = Some(seconds);
            profile.sampled_cpu_seconds = Some(cpu);
        }
        snap
    }
}

impl Samples {
    /// The window's samples as the snapshot's profile.
    fn snapshot(&self) -> ProfileSnapshot {
        let mut top: Vec<SymbolSnapshot> = self
            .window_symbols
            .iter()
            .map(|((symbol, object, component), &samples)| SymbolSnapshot {
                symbol: symbol.clone(),
                object: object.clone(),
                component: component.clone(),
                samples,
            })
            .collect();
        top.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.symbol.cmp(&b.symbol))
        });
        top.truncate(TOP_SYMBOLS);
        let stacks = self.frames.is_some();
        ProfileSnapshot {
            samples: self.window.clone(),
            top_symbols: Some(top),
            stripped: Some(self.stripped),
            lost_samples: Some(self.window_lost),
            unsampled_threads: Some(self.unsampled_threads),
            unsampled_cpu_seconds: Some(self.window_unsampled_cpu_ns as f64 / 1e9),
            frames: self.frames,
            inclusive: stacks.then(|| self.window_inclusive.clone()),
            functions: stacks.then(|| self.window_stacks.functions()),
            stacks: stacks.then(|| self.window_stacks.snapshot()),
            frequency_hz: Some(self.frequency_hz).filter(|&f| f > 0),
            sampler_cpu_seconds: Some(self.window_sampler_cpu_ns as f64 / 1e9),
            // Every sampler says what it took and at what multiple; a delta without
            // (`period_multiple` 0) counted each sample once: its total is it.
            samples_taken: Some(if self.period_multiple > 0 {
                self.window_taken
            } else {
                self.window.values().sum()
            }),
            rate_hz: Some(self.frequency_hz)
                .filter(|&f| f > 0)
                .map(|f| f64::from(f) / self.period_multiple.max(1) as f64),
            // Filled by the window when the tap samples on demand.
            on_demand: None,
            sampled_seconds: None,
            sampled_cpu_seconds: None,
        }
    }
}

/// Each process's CPU (user + system) while watched, by pid and start time.
fn cpu_by_process(accountant: &Accountant) -> BTreeMap<(u32, u64), u64> {
    accountant
        .shares()
        .iter()
        .map(|(&key, share)| (key, share.cpu_ns))
        .collect()
}

/// A server of several processes: each one's CPU in the window (since `baseline`),
/// lowest pid first; `None` when the window saw one process only.
fn processes_in_window(
    accountant: &Accountant,
    baseline: &BTreeMap<(u32, u64), u64>,
) -> Option<Vec<ProcessCpu>> {
    let shares = accountant.shares();
    if shares.len() < 2 {
        return None;
    }
    Some(
        shares
            .iter()
            .map(|(key, share)| ProcessCpu {
                pid: share.pid,
                comm: share.comm.clone(),
                cpu_seconds: share
                    .cpu_ns
                    .saturating_sub(baseline.get(key).copied().unwrap_or(0))
                    as f64
                    / 1e9,
            })
            .collect(),
    )
}

/// The reads of a window that held traffic, as the snapshot's `traffic`.
fn traffic_snapshot(t: &Totals) -> crate::snapshot::Traffic {
    let s = |ns: u64| ns as f64 / 1e9;
    crate::snapshot::Traffic {
        seconds: s(t.watched_ns),
        cpu_user_seconds: s(t.user_ns),
        cpu_system_seconds: s(t.system_ns),
        runqueue_seconds: s(t.runqueue_ns),
        machine_busy_seconds: None,
        exchanges: None,
    }
}

/// The snapshot's `upstream` object for the process's figures over a window, before any
/// profile or slices are added.
fn process_snapshot(
    window: Totals,
    process: Option<&ProcessInfo>,
    interval: Duration,
) -> UpstreamSnapshot {
    let s = |ns: u64| ns as f64 / 1e9;
    UpstreamSnapshot {
        pid: process.map(|p| p.pid),
        comm: process.map(|p| p.comm.clone()),
        exe: process.and_then(|p| p.exe.as_ref().map(|e| e.display().to_string())),
        threads: process.map_or(0, |p| p.threads),
        cpus_allowed: process.and_then(|p| p.cpus_allowed.clone()),
        interval_seconds: interval.as_secs_f64(),
        watched_seconds: s(window.watched_ns),
        cpu_user_seconds: s(window.user_ns),
        cpu_system_seconds: s(window.system_ns),
        // The process's own CPU clock where it could be read: it keeps what threads that
        // exited between two reads ran, which their schedstat loses with them (a
        // thread-per-connection server: 0.15 ms a request from schedstat against 2.26 ms
        // of user and system time).
        cpu_seconds: Some(s(if window.process_cpu_ns > 0 {
            window.process_cpu_ns
        } else {
            window.cpu_ns
        })),
        runqueue_seconds: s(window.runqueue_ns),
        busiest_thread_seconds: s(window.busiest_ns),
        active_seconds: Some(s(window.active_ns)),
        active_busiest_thread_seconds: Some(s(window.active_busiest_ns)),
        traffic: None,
        context_switches_voluntary: window.voluntary,
        context_switches_involuntary: window.involuntary,
        restarts: window.restarts,
        processes: None,
        profile: None,
        slices: None,
    }
}

//! The `phasescope_upstream_*` families of the exposition (docs/metrics.md).
//!
//! The exporter reads the [`Upstream`] figures at scrape time; `upstream` knows nothing of
//! the exposition.

use std::sync::Arc;

use prometheus::proto::{Metric, MetricFamily, MetricType};
use prometheus::TextEncoder;

use super::exposition::{family, sample};
use crate::upstream::Upstream;

pub const CPU: &str = "phasescope_upstream_cpu_seconds_total";
pub const RUNQUEUE: &str = "phasescope_upstream_runqueue_seconds_total";
pub const TRAFFIC: &str = "phasescope_upstream_traffic_seconds_total";
pub const TRAFFIC_CPU: &str = "phasescope_upstream_traffic_cpu_seconds_total";
pub const TRAFFIC_RUNQUEUE: &str = "phasescope_upstream_traffic_runqueue_seconds_total";
pub const TRAFFIC_EXCHANGES: &str = "phasescope_upstream_traffic_exchanges_total";
pub const CONTEXT_SWITCHES: &str = "phasescope_upstream_context_switches_total";
pub const THREADS: &str = "phasescope_upstream_threads";
pub const INFO: &str = "phasescope_upstream_info";
pub const SAMPLES: &str = "phasescope_upstream_samples_total";
pub const INCLUSIVE_SAMPLES: &str = "phasescope_upstream_inclusive_samples_total";

/// The families of every watched tap in the text exposition; empty when there is none.
pub fn encode(upstreams: &[Arc<Upstream>]) -> String {
    text(&families(upstreams))
}

/// `families` in the text exposition; empty for none.
pub fn text(families: &[MetricFamily]) -> String {
    let mut out = String::new();
    if families.is_empty() {
        return out;
    }
    if let Err(e) = TextEncoder::new().encode_utf8(families, &mut out) {
        tracing::error!(error = %e, "encoding metrics failed");
    }
    out
}

/// The families of every watched tap, for either exposition. Counters exist from the
/// start, at 0, so that `rate()` works before the process is found.
pub fn families(upstreams: &[Arc<Upstream>]) -> Vec<MetricFamily> {
    if upstreams.is_empty() {
        return Vec::new();
    }
    let mut series = Series::default();
    for u in upstreams {
        series.add(u);
    }
    series.into_families()
}

/// The samples of each family, added up over the taps.
#[derive(Default)]
struct Series {
    cpu: Vec<Metric>,
    runq: Vec<Metric>,
    switches: Vec<Metric>,
    threads: Vec<Metric>,
    info: Vec<Metric>,
    samples: Vec<Metric>,
    inclusive: Vec<Metric>,
    traffic: Vec<Metric>,
    traffic_cpu: Vec<Metric>,
    traffic_runq: Vec<Metric>,
    traffic_exchanges: Vec<Metric>,
}

impl Series {
    /// One tap's samples, its figures refreshed first.
    fn add(&mut self, u: &Upstream) {
        u.refresh();
        let (t, process) = u.totals();
        let tap = u.tap();
        let s = |ns: u64| ns as f64 / 1e9;
        let c = MetricType::COUNTER;
        self.cpu
            .push(sample(c, &[("tap", tap), ("mode", "user")], s(t.user_ns)));
        self.cpu.push(sample(
            c,
            &[("tap", tap), ("mode", "system")],
            s(t.system_ns),
        ));
        self.runq.push(sample(c, &[("tap", tap)], s(t.runqueue_ns)));
        self.switches.push(sample(
            c,
            &[("tap", tap), ("kind", "voluntary")],
            t.voluntary as f64,
        ));
        self.switches.push(sample(
            c,
            &[("tap", tap), ("kind", "involuntary")],
            t.involuntary as f64,
        ));
        self.add_traffic(u);
        let g = MetricType::GAUGE;
        self.threads.push(sample(
            g,
            &[("tap", tap)],
            process.as_ref().map_or(0.0, |p| p.threads as f64),
        ));
        for (component, n) in u.samples_total().into_iter().flatten() {
            self.samples.push(sample(
                MetricType::COUNTER,
                &[("tap", tap), ("component", &component)],
                n as f64,
            ));
        }
        for (component, n) in u.inclusive_total().into_iter().flatten() {
            self.inclusive.push(sample(
                MetricType::COUNTER,
                &[("tap", tap), ("component", &component)],
                n as f64,
            ));
        }
        if let Some(p) = &process {
            let pid = p.pid.to_string();
            self.info.push(sample(
                g,
                &[("tap", tap), ("pid", &pid), ("comm", &p.comm)],
                1.0,
            ));
        }
    }

    /// One tap's traffic counters: over the reads of its process in which one of its
    /// exchanges ended, at 0 until its exchanges are counted.
    fn add_traffic(&mut self, u: &Upstream) {
        let (t, exchanges) = u.traffic_totals().unwrap_or_default();
        let tap = u.tap();
        let s = |ns: u64| ns as f64 / 1e9;
        let c = MetricType::COUNTER;
        self.traffic
            .push(sample(c, &[("tap", tap)], s(t.watched_ns)));
        self.traffic_cpu
            .push(sample(c, &[("tap", tap), ("mode", "user")], s(t.user_ns)));
        self.traffic_cpu.push(sample(
            c,
            &[("tap", tap), ("mode", "system")],
            s(t.system_ns),
        ));
        self.traffic_runq
            .push(sample(c, &[("tap", tap)], s(t.runqueue_ns)));
        self.traffic_exchanges
            .push(sample(c, &[("tap", tap)], exchanges as f64));
    }

    /// The families, each with its help, in the exposition's order.
    fn into_families(self) -> Vec<MetricFamily> {
        let (c, g) = (MetricType::COUNTER, MetricType::GAUGE);
        let table = [
            (CPU, "CPU time of the upstream process while watched, by mode (user, system).", c, self.cpu),
            (RUNQUEUE, "Time the upstream's threads were runnable but waiting for a CPU, while watched.", c, self.runq),
            (CONTEXT_SWITCHES, "Context switches of the upstream's threads while watched, by kind (voluntary: it waited for something; involuntary: preempted).", c, self.switches),
            (THREADS, "Threads of the upstream process now (0 while none is watched).", g, self.threads),
            (INFO, "Always 1; the labels name the upstream process watched now.", g, self.info),
            (SAMPLES, "CPU samples of the upstream's threads (perf events, user and kernel), by component; present only when profiling.", c, self.samples),
            (INCLUSIVE_SAMPLES, "CPU samples of the upstream's threads whose call stack holds a frame of the component (it and all it calls); present only when sampling call stacks.", c, self.inclusive),
            (TRAFFIC, "Wall time of the upstream's reads in which an exchange of the tap ended (the seconds that held traffic).", c, self.traffic),
            (TRAFFIC_CPU, "CPU time of the upstream process over the reads that held traffic, by mode (user, system): what per-request figures divide.", c, self.traffic_cpu),
            (TRAFFIC_RUNQUEUE, "Time the upstream's threads waited for a CPU over the reads that held traffic.", c, self.traffic_runq),
            (TRAFFIC_EXCHANGES, "The tap's exchanges that ended in reads of a watched upstream process: what its traffic CPU is divided by.", c, self.traffic_exchanges),
        ];
        table
            .into_iter()
            .flat_map(|(name, help, kind, metrics)| family(name, help, kind, metrics))
            .collect()
    }
}

//! The `phasescope_upstream_*` families of the exposition (docs/metrics.md).
//!
//! The exporter reads the [`Upstream`] figures at scrape time; `upstream` knows nothing of
//! the exposition.

use std::sync::Arc;

use prometheus::proto::{MetricFamily, MetricType};
use prometheus::TextEncoder;

use super::exposition::{family, sample};
use crate::upstream::Upstream;

pub const CPU: &str = "phasescope_upstream_cpu_seconds_total";
pub const RUNQUEUE: &str = "phasescope_upstream_runqueue_seconds_total";
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
    let mut inclusive = Vec::new();
    let (mut cpu, mut runq, mut switches, mut threads, mut info, mut samples) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for u in upstreams {
        u.refresh();
        let (t, process) = u.totals();
        let tap = u.tap();
        let s = |ns: u64| ns as f64 / 1e9;
        let c = MetricType::COUNTER;
        cpu.push(sample(c, &[("tap", tap), ("mode", "user")], s(t.user_ns)));
        cpu.push(sample(
            c,
            &[("tap", tap), ("mode", "system")],
            s(t.system_ns),
        ));
        runq.push(sample(c, &[("tap", tap)], s(t.runqueue_ns)));
        switches.push(sample(
            c,
            &[("tap", tap), ("kind", "voluntary")],
            t.voluntary as f64,
        ));
        switches.push(sample(
            c,
            &[("tap", tap), ("kind", "involuntary")],
            t.involuntary as f64,
        ));
        let g = MetricType::GAUGE;
        threads.push(sample(
            g,
            &[("tap", tap)],
            process.as_ref().map_or(0.0, |p| p.threads as f64),
        ));
        for (component, n) in u.samples_total().into_iter().flatten() {
            samples.push(sample(
                MetricType::COUNTER,
                &[("tap", tap), ("component", &component)],
                n as f64,
            ));
        }
        for (component, n) in u.inclusive_total().into_iter().flatten() {
            inclusive.push(sample(
                MetricType::COUNTER,
                &[("tap", tap), ("component", &component)],
                n as f64,
            ));
        }
        if let Some(p) = &process {
            let pid = p.pid.to_string();
            info.push(sample(
                g,
                &[("tap", tap), ("pid", &pid), ("comm", &p.comm)],
                1.0,
            ));
        }
    }
    let mut families = Vec::new();
    let mut push = |name: &str, help: &str, kind, metrics: Vec<_>| {
        families.extend(family(name, help, kind, metrics));
    };
    push(
        CPU,
        "CPU time of the upstream process while watched, by mode (user, system).",
        MetricType::COUNTER,
        cpu,
    );
    push(
        RUNQUEUE,
        "Time the upstream's threads were runnable but waiting for a CPU, while watched.",
        MetricType::COUNTER,
        runq,
    );
    push(CONTEXT_SWITCHES, "Context switches of the upstream's threads while watched, by kind (voluntary: it waited for something; involuntary: preempted).", MetricType::COUNTER, switches);
    push(
        THREADS,
        "Threads of the upstream process now (0 while none is watched).",
        MetricType::GAUGE,
        threads,
    );
    push(
        INFO,
        "Always 1; the labels name the upstream process watched now.",
        MetricType::GAUGE,
        info,
    );
    push(
        SAMPLES,
        "CPU samples of the upstream's threads (perf events, user and kernel), by component; present only when profiling.",
        MetricType::COUNTER,
        samples,
    );
    push(
        INCLUSIVE_SAMPLES,
        "CPU samples of the upstream's threads whose call stack holds a frame of the component (it and all it calls); present only when sampling call stacks.",
        MetricType::COUNTER,
        inclusive,
    );
    families
}

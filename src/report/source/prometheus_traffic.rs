//! The seconds that held traffic, from Prometheus: the proxy's and each upstream's
//! `*_traffic_*` counters (docs/metrics.md), into the dataset where a snapshot's `traffic`
//! objects go. The report then divides CPU per request and cores over the work, not over
//! the idle seconds of the range, as it does from snapshots. A proxy of a build without
//! these counters leaves `traffic` empty, and the report divides over the range.

use super::dataset::Dataset;
use super::prometheus::{counted, Sample};
use crate::snapshot::Traffic;

/// The queries over `range` (a PromQL range such as `900s`), in the order of [`add`]'s
/// answers: the proxy's seconds, CPU by mode, run-queue wait and the machine's busy time;
/// each tap's upstream's seconds, CPU by mode, run-queue wait and exchanges.
pub fn queries(range: &str) -> [String; 8] {
    let sum = |by: &str, series: &str| format!("sum{by} ({})", counted(series, range));
    [
        sum("", "phasescope_proxy_traffic_seconds_total"),
        sum(" by (mode)", "phasescope_proxy_traffic_cpu_seconds_total"),
        sum("", "phasescope_proxy_traffic_runqueue_seconds_total"),
        sum("", "phasescope_machine_traffic_cpu_busy_seconds_total"),
        sum(" by (tap)", "phasescope_upstream_traffic_seconds_total"),
        sum(
            " by (tap, mode)",
            "phasescope_upstream_traffic_cpu_seconds_total",
        ),
        sum(
            " by (tap)",
            "phasescope_upstream_traffic_runqueue_seconds_total",
        ),
        sum(" by (tap)", "phasescope_upstream_traffic_exchanges_total"),
    ]
}

/// Adds the answers of [`queries`] to the proxy and the upstreams `ds` already has from
/// their CPU counters; one with no second of traffic keeps none.
pub fn add(ds: &mut Dataset, answers: &[Vec<Sample>; 8]) {
    let [seconds, cpu, runqueue, busy, up_seconds, up_cpu, up_runqueue, up_exchanges] = answers;
    let of = |v: &[Sample], tap: Option<&str>, mode: Option<&str>| {
        v.iter()
            .filter(|s| tap.is_none() || s.labels.get("tap").map(String::as_str) == tap)
            .filter(|s| mode.is_none() || s.labels.get("mode").map(String::as_str) == mode)
            .map(|s| s.value)
            .sum::<f64>()
    };
    if let Some(proxy) = &mut ds.proxy {
        let wall = of(seconds, None, None);
        if wall > 0.0 {
            proxy.traffic = Some(Traffic {
                seconds: wall,
                cpu_user_seconds: of(cpu, None, Some("user")),
                cpu_system_seconds: of(cpu, None, Some("system")),
                runqueue_seconds: of(runqueue, None, None),
                machine_busy_seconds: Some(of(busy, None, None)),
                exchanges: None,
            });
        }
    }
    for (tap, data) in ds.taps.iter_mut() {
        let Some(upstream) = &mut data.upstream else {
            continue;
        };
        let tap = Some(tap.as_str());
        let wall = of(up_seconds, tap, None);
        if wall > 0.0 {
            upstream.traffic = Some(Traffic {
                seconds: wall,
                cpu_user_seconds: of(up_cpu, tap, Some("user")),
                cpu_system_seconds: of(up_cpu, tap, Some("system")),
                runqueue_seconds: of(up_runqueue, tap, None),
                machine_busy_seconds: None,
                exchanges: Some(of(up_exchanges, tap, None).round() as u64),
            });
        }
    }
}

//! Native histograms against a real Prometheus (Debian's 2.42): one with
//! `--enable-feature=native-histograms`, which asks `/metrics` for protobuf and gets every
//! phase histogram with exponential buckets, and one without, which asks for OpenMetrics
//! and gets the classic buckets in it (a text 0.0.4 scraper gets them in text). Both scrape one proxy in front of an upstream that answers
//! after a known delay.
//!
//! Ground truth: the HDR copy behind `/api/snapshot` (each percentile at most 1/128 above
//! the exact one). The median Prometheus computes from the native buckets must agree with
//! it within the schema's error bound (`phasescope::metrics::native::MAX_RELATIVE_ERROR`),
//! and a phase that took 0 ns must read exactly 0.

mod metrics_support;
mod support;
mod traffic;

use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use phasescope::metrics::native::MAX_RELATIVE_ERROR;
use phasescope::snapshot::Snapshot;
use serde_json::Value;
use support::{http_exchange, parse_response, require_tool, Prometheus, Proxy};
use traffic::{Load, Upstream};

/// The upstream's answer delay: upstream_wait is then about a millisecond.
const UPSTREAM_DELAY: Duration = Duration::from_millis(1);
/// How long the load runs; Prometheus scrapes every second.
const LOAD_TIME: Duration = Duration::from_secs(6);
/// Ground-truth bound for "Prometheus has scraped it": seconds normally, generous here.
const PATIENCE: Duration = Duration::from_secs(60);
/// What Prometheus 2.42 sends without native histograms.
const CLASSIC_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Waits until `prometheus` scraped the proxy successfully.
fn wait_up(prometheus: &Prometheus, what: &str) {
    let up = support::wait_for(PATIENCE, || {
        prometheus.scalar(r#"up{job="phasescope"}"#, now_unix()) == Some(1.0)
    });
    assert!(
        up,
        "the {what} Prometheus never scraped the proxy\n{}",
        prometheus.log_tail()
    );
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `GET /metrics` with an `Accept` header, raw.
fn scrape(proxy: &Proxy, accept: &str) -> support::Response {
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    parse_response(&http_exchange(proxy.admin_addr(), request.as_bytes()))
}

fn snapshot(proxy: &Proxy) -> Snapshot {
    let r = proxy.admin_get("/api/snapshot");
    assert_eq!(r.status, 200);
    Snapshot::from_json(&r.body_text()).unwrap()
}

/// The per-route results of a query, as (route, value).
fn by_route(results: &[Value]) -> Vec<(String, f64)> {
    results
        .iter()
        .map(|s| {
            (
                s["metric"]["route"].as_str().unwrap_or("").to_owned(),
                s["value"][1].as_str().unwrap().parse::<f64>().unwrap(),
            )
        })
        .collect()
}

#[test]
fn native_histograms_match_the_hdr_median_and_classic_scrapers_keep_their_buckets() {
    let binary = require_tool("prometheus");
    require_tool("promtool");
    let upstream = Upstream::start(UPSTREAM_DELAY);
    let mut proxy = Proxy::in_front_of(upstream.addr(), &[]);

    // Every route's series exists before Prometheus counts: rate() needs a first sample
    // taken before the load. The snapshot then starts over, so that it covers what the
    // rate covers.
    let warm_up = Load::start(proxy.addr(), traffic::PATHS.len());
    let warmed = support::wait_for(PATIENCE, || warm_up.answered() >= 20);
    let warmed_up = warm_up.stop().expect("warm-up load");
    assert!(warmed, "the warm-up got {warmed_up} answers");

    let native = Prometheus::start(
        &binary,
        proxy.admin_addr(),
        &["--enable-feature=native-histograms"],
    );
    let classic = Prometheus::start(&binary, proxy.admin_addr(), &[]);
    wait_up(&native, "native");
    wait_up(&classic, "classic");
    // One more scrape each after the warm-up's last exchange: the baseline of the rates.
    thread::sleep(Duration::from_millis(2_500));
    let reset = http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(parse_response(&reset).status, 200);

    let load = Load::start(proxy.addr(), 2);
    thread::sleep(LOAD_TIME);
    let sent = match load.stop() {
        Ok(n) => n,
        Err(e) => panic!(
            "the load failed: {e}\nproxy exited: {:?}\n{}",
            proxy.process().exited(),
            proxy.log_tail()
        ),
    };
    assert!(sent > 0, "no request was answered in {LOAD_TIME:?}");
    let recorded = support::wait_for(PATIENCE, || {
        snapshot(&proxy).taps["webdis"].phases["total"]
            .values()
            .map(|s| s.count)
            .sum::<u64>()
            == sent
    });
    assert!(recorded, "the snapshot never counted the {sent} requests");
    let snap = snapshot(&proxy);

    // The native series is there, with every request of the warm-up and the load.
    let total = warmed_up + sent;
    let native_count = r#"sum(histogram_count(phasescope_phase_duration_seconds{phase="total"}))"#;
    let mut at = 0.0;
    let seen = support::wait_for(PATIENCE, || {
        at = now_unix();
        native.scalar(native_count, at) == Some(total as f64)
    });
    assert!(
        seen,
        "the native Prometheus never counted {total} requests (has {:?})\n{}",
        native.scalar(native_count, now_unix()),
        native.log_tail()
    );

    // The median of upstream_wait, per route, from the native buckets: the issue's query.
    let medians = by_route(&native.result(
        r#"histogram_quantile(0.5, rate(phasescope_phase_duration_seconds{phase="upstream_wait"}[30s]))"#,
        at,
    ));
    let hdr = &snap.taps["webdis"].phases["upstream_wait"];
    assert_eq!(
        medians.len(),
        hdr.len(),
        "a native median per route: {medians:?} vs {:?}",
        hdr.keys()
    );
    // The HDR p50 is at most 1/128 above the exact median, the native one within
    // MAX_RELATIVE_ERROR of it.
    let bound = MAX_RELATIVE_ERROR + 1.0 / 128.0;
    for (route, native_p50) in &medians {
        let hdr_p50 = hdr[route].p50;
        eprintln!(
            "upstream_wait p50 {route}: native {native_p50:.7} s, HDR {hdr_p50:.7} s ({:+.2} %)",
            (native_p50 / hdr_p50 - 1.0) * 100.0
        );
        assert!(
            hdr_p50 >= UPSTREAM_DELAY.as_secs_f64(),
            "HDR p50 {hdr_p50} s below the upstream's delay"
        );
        assert!(
            (native_p50 - hdr_p50).abs() <= bound * hdr_p50,
            "route {route}: native p50 {native_p50} s vs HDR p50 {hdr_p50} s, more than {:.2} % apart",
            bound * 100.0
        );
    }

    // A phase that took 0 ns reads 0: every phase whose HDR median is 0 (upstream_recv is,
    // by construction, for an answer that arrives in one read).
    let zero_phases: Vec<&String> = snap.taps["webdis"]
        .phases
        .iter()
        .filter(|(_, routes)| routes.values().all(|s| s.p50 == 0.0))
        .map(|(phase, _)| phase)
        .collect();
    assert!(
        zero_phases.iter().any(|p| *p == "upstream_recv"),
        "upstream_recv has a non-zero median: {:?}",
        snap.taps["webdis"].phases.get("upstream_recv")
    );
    for phase in zero_phases {
        let q = format!(
            r#"histogram_quantile(0.5, rate(phasescope_phase_duration_seconds{{phase="{phase}"}}[30s]))"#
        );
        for (route, p50) in by_route(&native.result(&q, at)) {
            assert_eq!(
                p50, 0.0,
                "{phase} {route}: the native median of a 0 ns phase"
            );
        }
    }

    // The classic Prometheus still gets (and stores) classic buckets, as OpenMetrics.
    let classic_total = r#"sum(phasescope_phase_duration_seconds_count{phase="total"})"#;
    let seen = support::wait_for(PATIENCE, || {
        classic.scalar(classic_total, now_unix()) == Some(total as f64)
    });
    assert!(
        seen,
        "the classic Prometheus never counted {total} requests"
    );
    let buckets = classic.result(
        r#"phasescope_phase_duration_seconds_bucket{phase="upstream_wait"}"#,
        now_unix(),
    );
    assert!(
        buckets.len() > hdr.len() * 10,
        "classic buckets of upstream_wait: {} series",
        buckets.len()
    );
    let om = scrape(&proxy, CLASSIC_ACCEPT);
    assert_eq!(om.status, 200);
    assert_eq!(
        om.header("content-type"),
        Some(phasescope::metrics::openmetrics::CONTENT_TYPE)
    );
    assert!(om
        .body_text()
        .contains("phasescope_phase_duration_seconds_bucket{"));
    assert!(om.body_text().ends_with("# EOF\n"));
    // A text 0.0.4 scraper gets the same buckets in text.
    let text = scrape(&proxy, "text/plain;version=0.0.4");
    assert_eq!(text.status, 200);
    assert!(
        text.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{:?}",
        text.header("content-type")
    );
    assert!(text
        .body_text()
        .contains("phasescope_phase_duration_seconds_bucket{"));
    metrics_support::promtool_check(&text.body_text());
    // The native Prometheus's Accept gets protobuf.
    let pb = scrape(
        &proxy,
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,text/plain;version=0.0.4;q=0.5",
    );
    assert_eq!(
        pb.header("content-type"),
        Some(phasescope::metrics::exposition::PROTOBUF_CONTENT_TYPE)
    );
    assert!(!pb.body.is_empty());
}

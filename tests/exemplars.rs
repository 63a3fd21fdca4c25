//! Exemplars from a slow bucket to the exact request, through a real Prometheus (2.42,
//! `--enable-feature=exemplar-storage`) scraping a RESP tap in front of a real Redis.
//!
//! Fast commands (`PING`) and slow ones (`BLPOP` on an empty list with a timeout, which
//! Redis answers when the timeout runs out) go through the tap, whose slow log takes
//! what lasts at least the slow threshold. Prometheus asks for OpenMetrics, gets the
//! exemplars of the slow buckets of `total`, and serves them at `/api/v1/query_exemplars`:
//! every exemplar there must name an exchange of the slow log, with the slow log's total
//! as its value, in the bucket that holds it; the last slow command must be among them.
//! A text 0.0.4 scraper still gets no exemplar.

mod metrics_support;
mod support;

use std::collections::HashMap;
use std::path::Path;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::{
    http_exchange, parse_response, require_tool, resp_command, Prometheus, Proxy, RedisServer,
};

/// What lasts at least this long is slow: in the slow log, and an exemplar.
const SLOW: &str = "20ms";
const SLOW_SECONDS: f64 = 0.020;
/// BLPOP's timeout: the slow commands take at least this long.
const BLPOP_TIMEOUT: &str = "0.06";
/// What Prometheus 2.42 sends without native histograms: OpenMetrics first.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
/// Ground-truth bound for "Prometheus has scraped it": seconds normally, generous here.
const PATIENCE: Duration = Duration::from_secs(60);

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `GET /metrics` with an `Accept` header (none for `None`).
fn scrape(proxy: &Proxy, accept: Option<&str>) -> support::Response {
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n{accept}Connection: close\r\n\r\n");
    parse_response(&http_exchange(proxy.admin_addr(), request.as_bytes()))
}

/// The slow log's lines by exchange id: (command, total in seconds).
fn slow_lines(path: &Path) -> HashMap<String, (String, f64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (
                v["exchange_id"].as_str().unwrap_or("").to_owned(),
                (
                    v["method"].as_str().unwrap_or("").to_owned(),
                    v["phases_us"]["total"].as_f64().unwrap_or(-1.0) / 1e6,
                ),
            )
        })
        .collect()
}

#[test]
fn slow_buckets_carry_exemplars_that_name_slow_log_lines_through_prometheus() {
    let binary = require_tool("prometheus");
    require_tool("promtool");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let slow_log = dir.path().join("slow.log");
    let slow_log_arg = slow_log.to_str().unwrap();
    let mut proxy = Proxy::in_front_of(
        redis.addr(),
        &[
            "--protocol",
            "resp",
            "--slow-log",
            slow_log_arg,
            "--slow-threshold",
            SLOW,
        ],
    );
    // Both series exist before Prometheus starts.
    assert_eq!(resp_command(proxy.addr(), &["PING"]), b"+PONG\r\n");
    let prometheus = Prometheus::start(
        &binary,
        proxy.admin_addr(),
        &["--enable-feature=exemplar-storage"],
    );
    let start = now_unix();
    let up = support::wait_for(PATIENCE, || {
        prometheus.scalar(r#"up{job="phasescope"}"#, now_unix()) == Some(1.0)
    });
    assert!(
        up,
        "Prometheus never scraped the proxy\n{}",
        prometheus.log_tail()
    );

    // Slow commands a scrape or more apart, fast ones around them.
    for _ in 0..3 {
        for _ in 0..20 {
            assert_eq!(resp_command(proxy.addr(), &["PING"]), b"+PONG\r\n");
        }
        let reply = resp_command(
            proxy.addr(),
            &["BLPOP", "phasescope:exemplars:none", BLPOP_TIMEOUT],
        );
        assert!(
            reply.starts_with(b"*-1") || reply.starts_with(b"_"),
            "{reply:?}"
        );
        thread::sleep(Duration::from_millis(1_200));
    }

    // The slow log has the three BLPOPs; the last one is the exemplar Prometheus must get.
    let logged = support::wait_for(PATIENCE, || {
        slow_lines(&slow_log)
            .values()
            .filter(|(c, _)| c == "BLPOP")
            .count()
            >= 3
    });
    let slow = slow_lines(&slow_log);
    assert!(logged, "the slow log has {slow:?}\n{}", proxy.log_tail());
    let last_blpop = std::fs::read_to_string(&slow_log)
        .unwrap()
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["method"] == "BLPOP")
        .map(|v| v["exchange_id"].as_str().unwrap().to_owned())
        .unwrap();

    let query = r#"phasescope_phase_duration_seconds_bucket{phase="total"}"#;
    let mut series = Vec::new();
    let found = support::wait_for(PATIENCE, || {
        series = prometheus.exemplars(query, start - 60.0, now_unix() + 60.0);
        series
            .iter()
            .flat_map(|s| s["exemplars"].as_array().cloned().unwrap_or_default())
            .any(|e| e["labels"]["exchange_id"] == last_blpop.as_str())
    });
    assert!(
        found,
        "Prometheus never stored the exemplar of {last_blpop}: {series:?}\n{}",
        prometheus.log_tail()
    );
    let mut seen = 0;
    for s in &series {
        let labels = &s["seriesLabels"];
        let le: f64 = match labels["le"].as_str().unwrap() {
            "+Inf" => f64::INFINITY,
            le => le.parse().unwrap(),
        };
        for e in s["exemplars"].as_array().unwrap() {
            let id = e["labels"]["exchange_id"].as_str().unwrap();
            let value: f64 = e["value"].as_str().unwrap().parse().unwrap();
            let Some((command, total)) = slow.get(id) else {
                panic!("exemplar {id} ({value} s, {labels}) is in no slow log line: {slow:?}");
            };
            assert_eq!(labels["route"].as_str(), Some(command.as_str()), "{id}");
            assert!(
                (value - total).abs() <= 1e-6,
                "exemplar {id}: {value} s, its slow log line {total} s"
            );
            assert!(
                value >= SLOW_SECONDS,
                "exemplar {id} of {value} s is not slow"
            );
            assert!(
                value <= le,
                "exemplar {id} of {value} s in the bucket le={le}"
            );
            seen += 1;
        }
    }
    eprintln!("{seen} exemplars, each a line of the slow log");

    // The exposition Prometheus got, and the one a text scraper gets.
    let om = scrape(&proxy, Some(PROMETHEUS_ACCEPT));
    assert_eq!(
        om.header("content-type"),
        Some(phasescope::metrics::openmetrics::CONTENT_TYPE)
    );
    let om = om.body_text();
    assert!(om.ends_with("# EOF\n"), "{om}");
    let with_exemplar: Vec<&str> = om.lines().filter(|l| l.contains(" # {")).collect();
    assert!(!with_exemplar.is_empty(), "{om}");
    for line in &with_exemplar {
        assert!(
            line.starts_with("phasescope_phase_duration_seconds_bucket{")
                && line.contains(r#"phase="total""#),
            "an exemplar outside the buckets of total: {line}"
        );
    }
    assert!(om.contains("# TYPE phasescope_requests counter\n"), "{om}");
    let text = scrape(&proxy, Some("text/plain;version=0.0.4"));
    assert!(text
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")));
    let text = text.body_text();
    assert!(!text.contains(" # {") && !text.contains("# EOF"), "{text}");
    metrics_support::promtool_check(&text);
    let plain = scrape(&proxy, None);
    assert!(plain
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")));
    assert!(!plain.body_text().contains(" # {"));
    proxy.stop();
}

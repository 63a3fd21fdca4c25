//! The server's own error answers (docs/report.md, "The server's errors"): Webdis in front
//! of a Redis that stops under load answers `503 Service Unavailable` itself. Those are the
//! server's failures, not the proxy's: counted per route and status, named in the
//! headline, their phases kept apart from the successes' (so the successes' mean is that
//! of the successes, which the access log's lines give independently), a critical
//! `server_errors` finding that `report --fail-on critical` honours, and the
//! `phasescope_server_errors_total` counter.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use support::{wait_for, Proxy, RedisServer, Webdis};

/// Clients sending `GET /PING` (a connection each: Webdis may close after a 503) until
/// told to stop; the statuses they received.
fn load(proxy: &Proxy, stop: &Arc<AtomicBool>) -> Vec<thread::JoinHandle<Vec<u16>>> {
    (0..2)
        .map(|_| {
            let addr = proxy.addr();
            let stop = Arc::clone(stop);
            thread::spawn(move || {
                let mut statuses = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    statuses.push(support::http_get(addr, "/PING").status);
                }
                statuses
            })
        })
        .collect()
}

/// `phasescope report --from the proxy ARGS`: exit code, stdout, stderr.
fn report(proxy: &Proxy, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .arg("report")
        .args(["--from", &format!("http://{}", proxy.admin_addr())])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The access log's lines with `status`: their count and mean `total` in seconds.
fn logged(proxy: &Proxy, status: u64) -> (u64, f64) {
    let text = std::fs::read_to_string(proxy.access_log()).unwrap_or_default();
    let totals: Vec<f64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["status"].as_u64() == Some(status))
        .filter_map(|v| v["phases_us"]["total"].as_f64())
        .collect();
    let n = totals.len() as u64;
    (n, totals.iter().sum::<f64>() / 1e6 / n.max(1) as f64)
}

#[test]
fn a_redis_stopped_under_load_makes_webdis_503s_the_servers_failures() {
    let mut redis = RedisServer::start();
    let webdis = Webdis::start(redis.port());
    // The root config.toml's tap `webdis`, routed by Webdis command.
    let proxy = Proxy::in_front_of(webdis.addr(), &[]);
    // A real Prometheus scraping the proxy from before the load: the same answers
    // through it at the end.
    let prometheus = support::Prometheus::start(
        &support::require_tool("prometheus"),
        proxy.admin_addr(),
        &[],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(&proxy, &stop);
    // A second of successes, Redis gone, a second of Webdis's own 503s.
    thread::sleep(Duration::from_secs(1));
    redis.process().kill();
    thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let statuses: Vec<u16> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let sent_ok = statuses.iter().filter(|&&s| s == 200).count() as u64;
    let sent_503 = statuses.iter().filter(|&&s| s == 503).count() as u64;
    assert!(
        sent_ok >= 50 && sent_503 >= 50,
        "the load needs both: {sent_ok} 200s, {sent_503} 503s of {}",
        statuses.len()
    );
    assert_eq!(
        sent_ok + sent_503,
        statuses.len() as u64,
        "only 200s and 503s"
    );

    // The snapshot: the 503s apart, by status, their count what the clients received.
    let snap: Value = serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap();
    let tap = &snap["taps"]["webdis"];
    assert_eq!(
        tap["phases"]["total"]["PING"]["count"].as_u64(),
        Some(sent_ok),
        "{tap}"
    );
    assert_eq!(
        tap["server_errors"]["503"]["total"]["PING"]["count"].as_u64(),
        Some(sent_503),
        "{tap}"
    );
    assert!(
        tap["failed"].is_null(),
        "none is the proxy's failure: {tap}"
    );

    // The successes' mean is the successes' alone: the access log (written per exchange,
    // with its status) gives the same mean over its 200 lines, and the 503s' over theirs.
    assert!(
        wait_for(Duration::from_secs(10), || logged(&proxy, 200).0 == sent_ok
            && logged(&proxy, 503).0 == sent_503),
        "the access log never held every exchange"
    );
    let mean = |v: &Value| v["sum"].as_f64().unwrap() / v["count"].as_f64().unwrap();
    for (status, series) in [
        (200, &tap["phases"]["total"]["PING"]),
        (503, &tap["server_errors"]["503"]["total"]["PING"]),
    ] {
        let (_, log_mean) = logged(&proxy, status);
        // The log writes whole and fractional µs; a series sums nanoseconds.
        assert!(
            (mean(series) - log_mean).abs() < 1e-6,
            "{status}: snapshot mean {} against the access log's {log_mean}",
            mean(series)
        );
    }

    // The report: the failure line first, the successes' figures after it, the errors'
    // own line and table, and the critical finding.
    let all = sent_ok + sent_503;
    let (code, text, err) = report(&proxy, &[]);
    assert_eq!(code, 0, "{err}");
    println!("{text}");
    let headline = text
        .lines()
        .find(|l| l.contains("the server answered"))
        .unwrap_or_else(|| panic!("no failure line:\n{text}"));
    assert!(
        headline.contains(&format!("the server answered 503 to {sent_503} of {all} ("))
            && headline.contains("; successes: mean total ")
            && headline.contains(&format!(" over {sent_ok} requests")),
        "{headline}"
    );
    assert!(
        text.contains(&format!(
            "the server's {sent_503} error answers: mean total"
        )),
        "{text}"
    );
    assert!(
        text.contains("the server's error answers (HTTP 5xx it sent"),
        "{text}"
    );
    assert!(
        text.contains("critical server_errors: the server answered 503 to"),
        "{text}"
    );
    let (code, json, err) = report(&proxy, &["--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&json).unwrap();
    let finding = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "server_errors")
        .unwrap_or_else(|| panic!("no server_errors finding: {json}"));
    assert_eq!(finding["severity"], "critical", "{finding}");
    assert_eq!(
        json["taps"][0]["all"]["failures"]["server"]["503"].as_u64(),
        Some(sent_503)
    );

    // --fail-on critical: exit 1, naming the finding; a threshold above the share: 0.
    let (code, _, err) = report(&proxy, &["--fail-on", "critical"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("critical server_errors (tap webdis)"), "{err}");
    let (code, _, err) = report(
        &proxy,
        &[
            "--fail-on",
            "critical",
            "--server-errors-critical",
            "100",
            "--server-errors-warn",
            "100",
        ],
    );
    assert_eq!(code, 0, "the thresholds are the user's: {err}");

    // Every finding the report gives is in the `phasescope_finding` gauge, with its
    // severity: the whole window lies within the gauge's last minute, so the two read
    // the same exchanges (the gauge refreshes at most every 10 s: wait for its next look).
    let reported: BTreeSet<(String, String, String)> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let field = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (field("tap"), field("id"), field("severity"))
        })
        .collect();
    let mut gauged = BTreeSet::new();
    let same = wait_for(Duration::from_secs(25), || {
        gauged = gauge_findings(&proxy);
        gauged == reported
    });
    assert!(
        same,
        "the report's findings {reported:?} against the gauge's {gauged:?}"
    );

    // Prometheus: the counter per route and status.
    let metrics = proxy.admin_get("/metrics").body_text();
    let line = format!(
        "phasescope_server_errors_total{{tap=\"webdis\",route=\"PING\",status=\"503\"}} {sent_503}"
    );
    assert!(
        metrics.lines().any(|l| l == line),
        "no {line} in\n{metrics}"
    );
    through_prometheus(&prometheus, sent_503, all);
}

/// `report --prometheus URL --range 1m --fail-on critical`: it exits 1 naming the
/// critical `server_errors`; its text.
fn fails_on_critical(url: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["report", "--prometheus", url, "--range", "1m"])
        .args(["--fail-on", "critical"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("critical server_errors"), "{text}");
    text
}

/// The value of `expr` in `prometheus` now, 0 when it has none.
fn scraped(prometheus: &support::Prometheus, expr: &str) -> f64 {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    prometheus.scalar(expr, at).unwrap_or(0.0)
}

/// `report --prometheus` over the Webdis outage: the same failure line (counts within
/// increase()'s extrapolation of the clients'), the critical finding from the gauge, and
/// `--fail-on critical` exiting 1.
fn through_prometheus(prometheus: &support::Prometheus, sent_503: u64, all: u64) {
    let scraped = |expr: &str| scraped(prometheus, expr);
    assert!(
        wait_for(Duration::from_secs(30), || scraped(
            "count_over_time(phasescope_server_errors_total[1m])"
        ) >= 2.0
            && scraped(
                "max(phasescope_finding{id=\"server_errors\",severity=\"critical\"})"
            ) >= 1.0),
        "Prometheus never held the 503s and the finding twice\n{}",
        prometheus.log_tail()
    );
    let text = fails_on_critical(&prometheus.url());
    let headline = text
        .lines()
        .find(|l| l.contains("the server answered 503 to "))
        .unwrap_or_else(|| panic!("no failure line through Prometheus:\n{text}"));
    let number = |after: &str| -> f64 {
        let rest = &headline[headline.find(after).unwrap() + after.len()..];
        rest.split(' ').next().unwrap().parse().unwrap()
    };
    let (errors, of) = (number("answered 503 to "), number(" of "));
    // increase() extrapolates to the range's edges by up to a scrape: within a quarter.
    let near = |got: f64, truth: u64| (got - truth as f64).abs() <= 0.25 * truth as f64;
    assert!(
        near(errors, sent_503) && near(of, all),
        "through Prometheus 503 to {errors} of {of}; the clients saw {sent_503} of {all}"
    );
}

/// The `phasescope_finding` series at 1 on `/metrics`: (tap, id, severity) each.
fn gauge_findings(proxy: &Proxy) -> BTreeSet<(String, String, String)> {
    let metrics = proxy.admin_get("/metrics").body_text();
    metrics
        .lines()
        .filter(|l| l.starts_with("phasescope_finding{") && l.ends_with("} 1"))
        .map(|l| {
            let label = |k: &str| {
                let start = l.find(&format!("{k}=\"")).map_or(0, |i| i + k.len() + 2);
                l[start..].split('"').next().unwrap_or_default().to_owned()
            };
            (label("tap"), label("id"), label("severity"))
        })
        .collect()
}

/// `200 ok`, or the server's own `503` for a path that asks for one.
fn ok_or_503(head: &str) -> Vec<u8> {
    if head.starts_with("GET /fail") {
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy".to_vec()
    } else {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    }
}

/// `report --prometheus` gives the same failure line: the server's error answers from
/// `phasescope_server_errors_total`, the successes' rows from the histograms that leave
/// the errors out.
#[test]
fn report_through_prometheus_names_the_servers_errors() {
    let binary = support::require_tool("prometheus");
    let upstream = support::slow_upstream(Duration::ZERO, ok_or_503);
    let proxy = Proxy::in_front_of(upstream, &[]);
    // With the rules that ship beside the dashboard: their alerts are seen firing below.
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards/alerts.yml");
    let prometheus =
        support::Prometheus::start_with_rules(&binary, proxy.admin_addr(), &[], Some(&rules));
    let mut conn = support::HttpConn::connect(proxy.addr());
    let mut send = |path: &str| {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        support::parse_response(&conn.exchange(request.as_bytes())).status
    };
    let scraped = |expr: &str| scraped(&prometheus, expr);
    assert!(
        wait_for(Duration::from_secs(15), || scraped(
            "count_over_time(phasescope_build_info[1m])"
        ) >= 1.0),
        "Prometheus never scraped the proxy\n{}",
        prometheus.log_tail()
    );
    // The load comes in well under a scrape interval, so the routes' series and the 503
    // counter are born with it: their first sample already holds nearly all of it, which
    // increase() alone does not count (the report counts a series born in the range from
    // zero: `prometheus::counted`).
    const FAILS: u64 = 200;
    for _ in 0..FAILS {
        assert_eq!((send("/ok"), send("/ok"), send("/fail")), (200, 200, 503));
    }
    let want = FAILS as f64;
    assert!(
        wait_for(Duration::from_secs(15), || scraped(
            "count_over_time(phasescope_server_errors_total[1m])"
        ) >= 2.0
            && scraped("sum(phasescope_server_errors_total)") >= want),
        "the load never reached Prometheus twice\n{}",
        prometheus.log_tail()
    );
    let url = prometheus.url();
    let (code, json, err) = {
        let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
            .args([
                "report",
                "--prometheus",
                &url,
                "--range",
                "1m",
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&json).unwrap();
    let all = &json["taps"][0]["all"];
    // increase() extrapolates to the range's edges: counts are estimates, within a few
    // scrapes' worth of the truth.
    let counted = all["failures"]["server"]["503"].as_f64().unwrap_or(0.0);
    assert!(
        (0.8 * want..=1.25 * want).contains(&counted),
        "{counted} of {FAILS} 503s: {all}"
    );
    let headline = all["headline"].as_str().unwrap();
    println!("{headline}");
    assert!(
        headline.starts_with(&format!("the server answered 503 to {counted} of "))
            && headline.contains("; successes: mean total"),
        "{headline}"
    );
    let total = all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == "total")
        .unwrap_or_else(|| panic!("no successes' total: {all}"));
    let successes = total["count"].as_f64().unwrap();
    assert!(
        (0.8 * 2.0 * want..=1.25 * 2.0 * want).contains(&successes),
        "the histograms hold the successes only: {successes} against {} sent",
        2 * FAILS
    );
    // phasescope itself and its findings from their series too: the gauge's critical
    // server_errors (a third of the answers were 503s) makes --fail-on critical exit 1.
    let cost = &json["taps"][0]["proxy"];
    assert!(
        cost["cpu_user"].as_f64().is_some(),
        "no phasescope itself: {json}"
    );
    // Over the seconds that held traffic, as the proxy's own report reads it: its traffic
    // counters, not the idle range around the load.
    let traffic = cost["traffic_seconds"].as_f64().unwrap_or(f64::NAN);
    assert!(
        traffic > 0.0 && traffic < 30.0,
        "{traffic} s with traffic in a 1 min range: {cost}"
    );
    let direct: Value = serde_json::from_str(&report(&proxy, &["--format", "json"]).1).unwrap();
    let per_request =
        |c: &Value| c["cpu_user"].as_f64().unwrap() + c["cpu_system"].as_f64().unwrap();
    let (through, own) = (per_request(cost), per_request(&direct["taps"][0]["proxy"]));
    println!(
        "phasescope itself: {through:e} s a request through Prometheus, {own:e} from the proxy"
    );
    assert!(
        (through - own).abs() <= 0.25 * own,
        "phasescope itself per request: {through:e} s through Prometheus against {own:e} s \
         from the proxy's own report"
    );
    assert!(
        wait_for(Duration::from_secs(30), || scraped(
            "max(phasescope_finding{id=\"server_errors\",severity=\"critical\"})"
        ) >= 1.0),
        "the gauge never held server_errors\n{}",
        prometheus.log_tail()
    );
    let text = fails_on_critical(&url);
    assert!(
        text.contains("phasescope itself (from Prometheus, "),
        "{text}"
    );
    // The shipped alerts, in a real Prometheus: the critical finding fires at once (no
    // `for`), the server's errors (a third of the answers) wait out their minute. Their
    // rules take rate()s, which see only what grows between scrapes: a second round of
    // the load, now that every series exists.
    for _ in 0..FAILS {
        assert_eq!((send("/ok"), send("/ok"), send("/fail")), (200, 200, 503));
    }
    let alert = |name: &str, state: &str| {
        scraped(&format!(
            "max(ALERTS{{alertname=\"{name}\",alertstate=\"{state}\"}})"
        ))
    };
    assert!(
        wait_for(Duration::from_secs(15), || alert(
            "PhasescopeCriticalFinding",
            "firing"
        ) >= 1.0),
        "PhasescopeCriticalFinding never fired\n{}",
        prometheus.log_tail()
    );
    assert!(
        wait_for(Duration::from_secs(15), || alert(
            "PhasescopeServerErrorsCritical",
            "pending"
        ) + alert(
            "PhasescopeServerErrorsCritical",
            "firing"
        ) >= 1.0),
        "PhasescopeServerErrorsCritical never held\n{}",
        prometheus.log_tail()
    );
}

/// A RESP error reply is the server's error answer too, per command: `INCR` on a key that
/// holds no integer answers `-ERR value is not an integer`, and is counted under the
/// status `error`, its phases apart from the successes'.
#[test]
fn redis_error_replies_are_the_servers_error_answers_per_command() {
    let redis = RedisServer::start();
    redis.command(&["SET", "word", "hello"]);
    let proxy = Proxy::in_front_of(redis.addr(), &["--protocol", "resp"]);
    const EACH: u64 = 30;
    for _ in 0..EACH {
        let ok = support::resp_command(proxy.addr(), &["GET", "word"]);
        assert!(
            ok.starts_with(b"$5\r\nhello"),
            "{}",
            String::from_utf8_lossy(&ok)
        );
        let err = support::resp_command(proxy.addr(), &["INCR", "word"]);
        assert!(
            err.starts_with(b"-ERR"),
            "{}",
            String::from_utf8_lossy(&err)
        );
    }
    let tap_of = |snap: &Value| {
        snap["taps"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone()
    };
    assert!(
        wait_for(Duration::from_secs(10), || {
            let snap: Value =
                serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap();
            tap_of(&snap)["server_errors"]["error"]["total"]["INCR"]["count"].as_u64() == Some(EACH)
        }),
        "the error replies were not counted apart"
    );
    let snap: Value = serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap();
    let tap = tap_of(&snap);
    assert_eq!(
        tap["phases"]["total"]["GET"]["count"].as_u64(),
        Some(EACH),
        "{tap}"
    );
    assert!(
        tap["phases"]["total"]["INCR"].is_null(),
        "no INCR succeeded: {tap}"
    );
    let (code, text, err) = report(&proxy, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(&format!(
            "the server answered an error reply to {EACH} of {} (50 %); successes: mean total",
            2 * EACH
        )),
        "{text}"
    );
    assert!(text.contains("critical server_errors"), "{text}");
    let metrics = proxy.admin_get("/metrics").body_text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("phasescope_server_errors_total{")
                && l.contains("route=\"INCR\",status=\"error\"} 30")),
        "{metrics}"
    );
}

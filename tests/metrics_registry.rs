//! The registry end to end without the relay: synthetic exchanges in, exposition and
//! snapshot out.

mod metrics_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use metrics_support::{exchange, phases, promtool_check, tap, Exposition, Rng};
use phasescope::config::{MetricsConfig, Protocol, RouteRule};
use phasescope::metrics::exposition::{
    BUILD_INFO, BYTES, CLIENT_CLOSES, CONNECTIONS, CONNECTIONS_TOTAL, CONNECT_FAILURES,
    CORRELATIONS, ERRORS, PHASE_DURATION, PUSHED, REQUESTS, SERVER_ERRORS,
};
use phasescope::metrics::{Registry, SIGNIFICANT_FIGURES};
use phasescope::phase::Phase;
use phasescope::recorder::{ConnectFailure, Direction, ErrorKind, Event, Recorder, Side};
use phasescope::routes::RouteTable;
use phasescope::snapshot::Snapshot;

const DURATION_COUNT: &str = "phasescope_phase_duration_seconds_count";
const DURATION_SUM: &str = "phasescope_phase_duration_seconds_sum";
const DURATION_BUCKET: &str = "phasescope_phase_duration_seconds_bucket";

fn registry() -> Arc<Registry> {
    Registry::new(&MetricsConfig::default()).unwrap()
}

/// HDR values are reported as the top of their sub-bucket: at most 1/2^(digits·log2 10)
/// above the exact value (1/128 at two significant figures), plus 1 ns of integer rounding.
fn hdr_slack(exact_ns: f64) -> f64 {
    assert_eq!(SIGNIFICANT_FIGURES, 2);
    exact_ns / 128.0 + 1.0
}

#[test]
fn concurrent_recording_loses_nothing() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 20_000;
    let reg = registry();
    let cfg = tap("webdis", Protocol::Http, RouteRule::Webdis);
    let routes = Arc::new(RouteTable::new(&cfg).unwrap());
    let get = routes.resolve(b"GET", b"/GET/key");
    let set = routes.resolve(b"PUT", b"/SET/key");
    let m = reg.tap(&cfg, Arc::clone(&routes)).unwrap();

    // Exchange i of thread t: parse = 300 + i%7 ns, wait = 1 ms + i ns, routes alternate.
    let barrier = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (m, barrier) = (&m, &barrier);
            s.spawn(move || {
                barrier.wait();
                m.event(Event::ConnectionOpened(Side::Client));
                for i in 0..PER_THREAD {
                    let route = if i % 2 == 0 { get } else { set };
                    let status = if i % 5 == 0 { 0 } else { 200 };
                    let p = phases(&[
                        (Phase::Parse, 300 + i % 7),
                        (Phase::UpstreamWait, 1_000_000 + i),
                        (Phase::Total, 2_000_000 + t),
                    ]);
                    m.exchange(&exchange(route, "GET", status, p));
                    m.event(Event::Bytes(Direction::Request, 10));
                }
                m.event(Event::Error(ErrorKind::UpstreamReset));
                if t % 2 == 0 {
                    m.event(Event::ConnectionClosed(Side::Client));
                }
            });
        }
    });

    // What each route should hold.
    let mut parse_sum = [0u64; 2];
    let mut wait_sum = [0u64; 2];
    let mut none = [0u64; 2];
    for i in 0..PER_THREAD {
        let r = (i % 2) as usize;
        parse_sum[r] += (300 + i % 7) * THREADS;
        wait_sum[r] += (1_000_000 + i) * THREADS;
        if i % 5 == 0 {
            none[r] += THREADS;
        }
    }
    let per_route = PER_THREAD / 2 * THREADS;

    let e = Exposition::parse(&reg.encode_prometheus());
    let snap = reg.snapshot();
    let tap_snap = &snap.taps["webdis"];
    for (r, route) in ["GET", "SET"].into_iter().enumerate() {
        for (phase, sum) in [("parse", parse_sum[r]), ("upstream_wait", wait_sum[r])] {
            let with = [("tap", "webdis"), ("phase", phase), ("route", route)];
            assert_eq!(e.value(DURATION_COUNT, &with), per_route as f64, "{with:?}");
            let got = e.value(DURATION_SUM, &with);
            let want = sum as f64 / 1e9;
            assert!(
                (got - want).abs() <= want * 1e-12,
                "{with:?}: sum {got} want {want}"
            );

            let s = &tap_snap.phases[phase][route];
            assert_eq!(s.count, per_route, "snapshot {phase} {route}");
            assert!((s.sum - want).abs() <= want * 1e-12);
            assert_eq!(s.histogram.iter().map(|p| p[1]).sum::<u64>(), per_route);
        }
        let requests = |class| {
            e.value(
                REQUESTS,
                &[
                    ("tap", "webdis"),
                    ("route", route),
                    ("method", "GET"),
                    ("status_class", class),
                ],
            )
        };
        assert_eq!(requests("2xx"), (per_route - none[r]) as f64);
        assert_eq!(requests("none"), none[r] as f64);
    }
    let total = &tap_snap.phases["total"];
    assert_eq!(total["GET"].min, 2e-3);
    assert_eq!(total["SET"].max, (2_000_000 + THREADS - 1) as f64 / 1e9);
    assert_eq!(tap_snap.totals.requests, PER_THREAD * THREADS);

    let with = |k, v| [("tap", "webdis"), (k, v)];
    assert_eq!(
        e.value(ERRORS, &with("kind", "upstream_reset")),
        THREADS as f64
    );
    assert_eq!(e.value(ERRORS, &with("kind", "bad_request")), 0.0);
    assert_eq!(
        e.value(BYTES, &with("direction", "request")),
        (10 * PER_THREAD * THREADS) as f64
    );
    assert_eq!(e.value(BYTES, &with("direction", "response")), 0.0);
    assert_eq!(
        e.value(CONNECTIONS_TOTAL, &with("side", "client")),
        THREADS as f64
    );
    assert_eq!(
        e.value(CONNECTIONS, &with("side", "client")),
        (THREADS / 2) as f64
    );
    assert_eq!(tap_snap.totals.errors["upstream_reset"], THREADS);
    assert_eq!(tap_snap.totals.connections_open["client"], THREADS / 2);
}

#[test]
fn random_paths_cannot_grow_labels_past_max_routes() {
    let reg = registry();
    let cfg = tap("webdis", Protocol::Http, RouteRule::Webdis);
    let max_routes = cfg.max_routes;
    let routes = Arc::new(RouteTable::new(&cfg).unwrap());
    let m = reg.tap(&cfg, Arc::clone(&routes)).unwrap();
    let mut rng = Rng::new(7);
    let mut feed = |n: usize| {
        for _ in 0..n {
            let len = 1 + rng.below(24) as usize;
            let path: String = std::iter::once('/')
                .chain((0..len).map(|_| char::from(b'!' + rng.below(94) as u8)))
                .collect();
            let id = routes.resolve(b"GET", path.as_bytes());
            let p = phases(&[(Phase::Total, 1_000 + rng.below(1_000_000))]);
            m.exchange(&exchange(id, "GET", 200, p));
        }
    };

    feed(10_000);
    let first = reg.encode_prometheus();
    let e = Exposition::parse(&first);
    let labels = e.label_values(DURATION_COUNT, "route");
    assert!(
        labels.len() <= max_routes + 1,
        "{} route labels",
        labels.len()
    );
    assert!(labels.contains("other"), "overflow goes to other");
    assert!(routes.len() <= max_routes + 1);
    assert_eq!(e.label_values(REQUESTS, "route"), labels);

    // Once full, more new paths add no series at all.
    feed(10_000);
    let second = reg.encode_prometheus();
    assert_eq!(first.lines().count(), second.lines().count());
    assert_eq!(
        Exposition::parse(&second).label_values(DURATION_COUNT, "route"),
        labels
    );
    // Bounded size: per route one histogram (buckets, +Inf, sum, count) and one request
    // counter, plus fixed families; no line near 300 bytes.
    let buckets = reg.buckets().bounds_ns().len();
    let max_lines = (max_routes + 1) * (buckets + 4) + 100;
    assert!(second.lines().count() <= max_lines);
    assert!(second.len() <= max_lines * 300, "{} bytes", second.len());
    assert_eq!(
        reg.snapshot().taps["webdis"].phases["total"].len(),
        labels.len()
    );
}

#[test]
fn hdr_percentiles_lie_in_their_prometheus_buckets() {
    let reg = registry();
    let cfg = tap("t", Protocol::Http, RouteRule::None);
    let routes = Arc::new(RouteTable::new(&cfg).unwrap());
    let m = reg.tap(&cfg, Arc::clone(&routes)).unwrap();
    // Log-uniform between 200 ns and 20 s: every decade gets its share.
    let mut rng = Rng::new(42);
    let mut values: Vec<u64> = (0..5_000)
        .map(|_| {
            let exp = 2.3 + 8.0 * (rng.below(1_000_000) as f64 / 1e6);
            10f64.powf(exp) as u64
        })
        .collect();
    for &v in &values {
        m.exchange(&exchange(
            routes.resolve(b"GET", b"/"),
            "GET",
            200,
            phases(&[(Phase::UpstreamWait, v)]),
        ));
    }
    values.sort_unstable();
    let n = values.len() as u64;

    let e = Exposition::parse(&reg.encode_prometheus());
    let with = [("tap", "t"), ("phase", "upstream_wait"), ("route", "all")];
    let mut buckets: Vec<(f64, f64)> = e
        .find(DURATION_BUCKET, &with)
        .iter()
        .map(|s| {
            (
                s.labels["le"].parse::<f64>().unwrap_or(f64::INFINITY),
                s.value,
            )
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(buckets.last().unwrap().1, n as f64);

    let s = &reg.snapshot().taps["t"].phases["upstream_wait"]["all"];
    assert_eq!(s.count, n);
    assert_eq!(s.min, values[0] as f64 / 1e9);
    assert_eq!(s.max, values[values.len() - 1] as f64 / 1e9);
    for (q, got) in [(0.5, s.p50), (0.9, s.p90), (0.99, s.p99), (0.999, s.p999)] {
        let rank = ((q * n as f64).ceil() as u64).max(1);
        let exact = values[rank as usize - 1] as f64;
        let got_ns = got * 1e9;
        assert!(
            got_ns >= exact - 0.5 && got_ns <= exact + hdr_slack(exact) + 0.5,
            "p{q}: hdr {got_ns} ns, exact {exact} ns"
        );
        // The Prometheus bucket holding that rank holds the exact value and the HDR one.
        let i = buckets.iter().position(|b| b.1 >= rank as f64).unwrap();
        let lo = if i == 0 { 0.0 } else { buckets[i - 1].0 * 1e9 };
        let hi = buckets[i].0 * 1e9;
        assert!(
            lo < exact && exact <= hi,
            "p{q}: exact {exact} not in ({lo}, {hi}]"
        );
        assert!(
            lo < got_ns && got_ns <= hi + hdr_slack(hi) + 0.5,
            "p{q}: hdr {got_ns} not in ({lo}, {hi}]"
        );
    }
}

#[test]
fn exposition_passes_promtool_and_follows_the_contract() {
    let reg = registry();
    let http = tap("webdis", Protocol::Http, RouteRule::Webdis);
    let resp = tap("redis", Protocol::Resp, RouteRule::None);
    let http_routes = Arc::new(RouteTable::new(&http).unwrap());
    let resp_routes = Arc::new(RouteTable::new(&resp).unwrap());
    let h = reg.tap(&http, Arc::clone(&http_routes)).unwrap();
    let r = reg.tap(&resp, Arc::clone(&resp_routes)).unwrap();

    // Before anything happens, every error kind already exists at 0.
    let empty = Exposition::parse(&reg.encode_prometheus());
    for t in ["webdis", "redis"] {
        for k in ErrorKind::ALL {
            assert_eq!(empty.value(ERRORS, &[("tap", t), ("kind", k.name())]), 0.0);
        }
    }
    assert!(empty.find(PHASE_DURATION, &[]).is_empty());

    let all_phases: Vec<_> = Phase::ALL
        .iter()
        .map(|&p| (p, 1_000 + p.index() as u64))
        .collect();
    for (method, target, status) in [
        ("GET", "/GET/a\"b", 200),
        ("PUT", "/SET/k", 404),
        ("PROPFIND", "/x", 503),
        ("GET", "/PING", 0),
    ] {
        h.exchange(&exchange(
            http_routes.resolve(method.as_bytes(), target.as_bytes()),
            method,
            status,
            phases(&all_phases),
        ));
    }
    r.exchange(&exchange(
        resp_routes.resolve(b"get", b""),
        "get",
        0,
        phases(&[(Phase::Total, 5)]),
    ));
    h.event(Event::Error(ErrorKind::BadRequest));
    h.event(Event::ClientClosed);
    h.event(Event::ConnectFailed(ConnectFailure::Refused));
    h.event(Event::ConnectionOpened(Side::Upstream));
    r.event(Event::Bytes(Direction::Response, 99));

    let text = reg.encode_prometheus();
    promtool_check(&text);
    let e = Exposition::parse(&text);
    let expect_types = [
        (PHASE_DURATION, "histogram"),
        (REQUESTS, "counter"),
        (SERVER_ERRORS, "counter"),
        (ERRORS, "counter"),
        (CONNECT_FAILURES, "counter"),
        (CONNECTIONS, "gauge"),
        (CONNECTIONS_TOTAL, "counter"),
        (BYTES, "counter"),
        (PUSHED, "counter"),
        (CLIENT_CLOSES, "counter"),
        (CORRELATIONS, "counter"),
        (BUILD_INFO, "gauge"),
    ];
    for (name, kind) in expect_types {
        assert_eq!(e.types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    assert_eq!(e.types.len(), expect_types.len());

    let label_set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    for s in &e.samples {
        let want = match s.name.as_str() {
            DURATION_BUCKET => label_set(&["tap", "phase", "route", "le"]),
            DURATION_COUNT | DURATION_SUM => label_set(&["tap", "phase", "route"]),
            REQUESTS => label_set(&["tap", "route", "method", "status_class"]),
            SERVER_ERRORS => label_set(&["tap", "route", "status"]),
            ERRORS => label_set(&["tap", "kind"]),
            CONNECTIONS | CONNECTIONS_TOTAL => label_set(&["tap", "side"]),
            BYTES => label_set(&["tap", "direction"]),
            BUILD_INFO => label_set(&["version", "clock"]),
            PUSHED | CLIENT_CLOSES => label_set(&["tap"]),
            CONNECT_FAILURES => label_set(&["tap", "reason"]),
            CORRELATIONS => label_set(&["tap", "result"]),
            other => panic!("unexpected sample {other}"),
        };
        assert_eq!(
            s.labels.keys().cloned().collect::<BTreeSet<_>>(),
            want,
            "{s:?}"
        );
    }

    let phases_seen = e.label_values(DURATION_COUNT, "phase");
    let all_names: BTreeSet<String> = Phase::ALL.iter().map(|p| p.name().to_owned()).collect();
    assert_eq!(phases_seen, all_names);
    assert_eq!(
        e.label_values(REQUESTS, "method"),
        label_set(&["GET", "PUT", "other", "resp"])
    );
    assert_eq!(
        e.label_values(REQUESTS, "status_class"),
        label_set(&["2xx", "4xx", "5xx", "none"])
    );
    assert_eq!(
        e.value(REQUESTS, &[("tap", "redis"), ("route", "GET")]),
        1.0,
        "RESP routes are command names"
    );
    assert_eq!(
        e.value(ERRORS, &[("tap", "webdis"), ("kind", "bad_request")]),
        1.0
    );
    assert_eq!(
        e.value(BYTES, &[("tap", "redis"), ("direction", "response")]),
        99.0
    );
    assert_eq!(e.value(CLIENT_CLOSES, &[("tap", "webdis")]), 1.0);
    // The server's 503 is its error answer: counted by route and status, and its phases
    // kept out of the histograms, which hold the other three HTTP exchanges.
    assert_eq!(
        e.value(SERVER_ERRORS, &[("tap", "webdis"), ("status", "503")]),
        1.0
    );
    let routes_timed: Vec<&str> = e
        .find(DURATION_COUNT, &[("tap", "webdis"), ("phase", "total")])
        .iter()
        .map(|s| s.labels["route"].as_str())
        .collect();
    assert_eq!(routes_timed, ["GET", "PING", "SET"], "not the 503's route");
    assert_eq!(
        e.value(
            CONNECT_FAILURES,
            &[("tap", "webdis"), ("reason", "refused")]
        ),
        1.0
    );
    assert_eq!(
        e.value(CONNECT_FAILURES, &[("tap", "redis"), ("reason", "timeout")]),
        0.0,
        "every reason exists from the start"
    );

    let info = e.find(BUILD_INFO, &[]);
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].value, 1.0);
    assert_eq!(info[0].labels["version"], env!("CARGO_PKG_VERSION"));
    assert!(matches!(info[0].labels["clock"].as_str(), "tsc" | "os"));
}

#[test]
fn reset_empties_snapshots_but_not_prometheus_counters() {
    let reg = registry();
    let cfg = tap("t", Protocol::Http, RouteRule::Webdis);
    let routes = Arc::new(RouteTable::new(&cfg).unwrap());
    let m = reg.tap(&cfg, Arc::clone(&routes)).unwrap();
    let record = |n: u64| {
        for i in 0..n {
            m.exchange(&exchange(
                routes.resolve(b"GET", b"/INCR/x"),
                "GET",
                200,
                phases(&[(Phase::Total, 1_000 + i)]),
            ));
        }
    };
    record(100);
    let before = reg.snapshot();
    assert_eq!(before.taps["t"].phases["total"]["INCR"].count, 100);

    let since = reg.reset();
    let after = reg.snapshot();
    assert!(
        after.taps["t"].phases.is_empty(),
        "{:?}",
        after.taps["t"].phases
    );
    assert!(after.since_unix >= before.since_unix);
    assert_eq!(
        after.since,
        humantime::format_rfc3339_millis(since).to_string()
    );
    let with = [("tap", "t"), ("phase", "total"), ("route", "INCR")];
    let e = Exposition::parse(&reg.encode_prometheus());
    assert_eq!(
        e.value(DURATION_COUNT, &with),
        100.0,
        "Prometheus stays monotonic"
    );
    assert_eq!(after.taps["t"].totals.requests, 100);

    record(3);
    m.flush();
    let later = reg.snapshot();
    let s = &later.taps["t"].phases["total"]["INCR"];
    assert_eq!(s.count, 3, "only what came after the reset");
    assert_eq!(s.min, 1e-6);
    assert_eq!(
        s.max, 1.002e-6,
        "the max since the reset, not the 1.099 µs before"
    );
    assert!(
        (s.sum - 3.003e-6).abs() < 1e-15,
        "sum since the reset: {}",
        s.sum
    );
    assert_eq!(s.histogram.iter().map(|p| p[1]).sum::<u64>(), 3);
    let e = Exposition::parse(&reg.encode_prometheus());
    assert_eq!(e.value(DURATION_COUNT, &with), 103.0);
}

#[test]
fn failed_exchanges_are_kept_apart_from_the_answered_ones_and_reset_with_them() {
    let reg = registry();
    let cfg = tap("t", Protocol::Http, RouteRule::Webdis);
    let routes = Arc::new(RouteTable::new(&cfg).unwrap());
    let m = reg.tap(&cfg, Arc::clone(&routes)).unwrap();
    let route = routes.resolve(b"GET", b"/GET/k");
    let record = |status: u16, ns: u64, failure: Option<ErrorKind>| {
        let mut e = exchange(route, "GET", status, phases(&[(Phase::Total, ns)]));
        e.failure = failure;
        m.exchange(&e);
    };
    record(200, 5_000_000, None);
    record(200, 7_000_000, None);
    for _ in 0..3 {
        record(502, 80_000, Some(ErrorKind::UpstreamConnect));
    }
    record(504, 9_000, Some(ErrorKind::UpstreamTimeout));
    let snap = reg.snapshot();
    let t = &snap.taps["t"];
    assert_eq!(t.phases["total"]["GET"].count, 2, "answered only");
    assert_eq!(t.phases["total"]["GET"].min, 5e-3);
    assert_eq!(t.failed["upstream_connect"]["total"]["GET"].count, 3);
    assert_eq!(t.failed["upstream_connect"]["total"]["GET"].max, 8e-5);
    assert_eq!(t.failed["upstream_timeout"]["total"]["GET"].count, 1);
    assert_eq!(t.totals.requests, 6, "every exchange is a request");
    let e = Exposition::parse(&reg.encode_prometheus());
    let with = [("tap", "t"), ("phase", "total"), ("route", "GET")];
    assert_eq!(
        e.value(DURATION_COUNT, &with),
        2.0,
        "the histograms hold the answered exchanges"
    );
    assert_eq!(
        e.value(REQUESTS, &[("tap", "t"), ("status_class", "5xx")]),
        4.0
    );
    // The snapshot JSON round-trips, and one without the field (an older build's) loads.
    let json = serde_json::to_string(&snap).unwrap();
    assert_eq!(Snapshot::from_json(&json).unwrap(), snap);
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    let tap_json = old["taps"]["t"].as_object_mut().unwrap();
    for field in [
        "failed",
        "client_closes",
        "connect_failures",
        "upstream_address",
    ] {
        tap_json.remove(field);
    }
    let old = Snapshot::from_json(&old.to_string()).unwrap();
    assert!(old.taps["t"].failed.is_empty());
    assert_eq!(old.taps["t"].client_closes, 0);

    reg.reset();
    record(502, 70_000, Some(ErrorKind::UpstreamConnect));
    let after = reg.snapshot();
    assert_eq!(
        after.taps["t"].failed["upstream_connect"]["total"]["GET"].count, 1,
        "only what failed after the reset"
    );
    assert!(!after.taps["t"].failed.contains_key("upstream_timeout"));
}

#[test]
fn no_metrics_exposes_only_build_info() {
    let reg = Registry::new(&MetricsConfig {
        enabled: false,
        buckets: Vec::new(),
    })
    .unwrap();
    assert!(!reg.enabled());
    let cfg = tap("t", Protocol::Http, RouteRule::None);
    let rec = reg
        .recorder(&cfg, Arc::new(RouteTable::new(&cfg).unwrap()))
        .unwrap();
    rec.exchange(&exchange(
        Default::default(),
        "GET",
        200,
        phases(&[(Phase::Total, 5)]),
    ));
    rec.event(Event::Error(ErrorKind::BadRequest));
    let text = reg.encode_prometheus();
    promtool_check(&text);
    let e = Exposition::parse(&text);
    assert_eq!(
        e.types.keys().cloned().collect::<Vec<_>>(),
        vec![BUILD_INFO.to_owned()]
    );
    assert_eq!(e.samples.len(), 1);
    let snap = reg.snapshot();
    assert!(!snap.metrics_enabled);
    assert!(snap.taps.is_empty());
}

#[test]
fn configured_buckets_are_the_exposed_bounds() {
    let reg = Registry::new(&MetricsConfig {
        enabled: true,
        buckets: vec![0.001, 0.01, 0.1],
    })
    .unwrap();
    let cfg = tap("t", Protocol::Http, RouteRule::None);
    let m = reg
        .tap(&cfg, Arc::new(RouteTable::new(&cfg).unwrap()))
        .unwrap();
    for ns in [0, 500_000, 1_000_000, 1_000_001, 50_000_000, 2_000_000_000] {
        m.exchange(&exchange(
            Default::default(),
            "GET",
            200,
            phases(&[(Phase::Write, ns)]),
        ));
    }
    let e = Exposition::parse(&reg.encode_prometheus());
    let with = |le| [("tap", "t"), ("phase", "write"), ("le", le)];
    // A zero bucket comes first, so that a phase that took no time reads 0.
    assert_eq!(e.value(DURATION_BUCKET, &with("0")), 1.0);
    // Upper bounds are inclusive: exactly 1 ms is in le=0.001.
    assert_eq!(e.value(DURATION_BUCKET, &with("0.001")), 3.0);
    assert_eq!(e.value(DURATION_BUCKET, &with("0.01")), 4.0);
    assert_eq!(e.value(DURATION_BUCKET, &with("0.1")), 5.0);
    assert_eq!(e.value(DURATION_BUCKET, &with("+Inf")), 6.0);
    assert_eq!(e.find(DURATION_BUCKET, &[]).len(), 5);

    let err = Registry::new(&MetricsConfig {
        enabled: true,
        buckets: vec![0.1, 0.01],
    })
    .unwrap_err();
    assert!(format!("{err:#}").contains("metrics.buckets"), "{err:#}");
}

#[test]
fn duplicate_tap_names_are_refused() {
    let reg = registry();
    let cfg = tap("same", Protocol::Http, RouteRule::None);
    reg.tap(&cfg, Arc::new(RouteTable::new(&cfg).unwrap()))
        .unwrap();
    let err = reg
        .tap(&cfg, Arc::new(RouteTable::new(&cfg).unwrap()))
        .unwrap_err();
    assert!(err.to_string().contains("same"), "{err}");
}

#[test]
fn snapshots_round_trip_and_merge() {
    let reg = registry();
    let cfg = tap("t", Protocol::Http, RouteRule::None);
    let m = reg
        .tap(&cfg, Arc::new(RouteTable::new(&cfg).unwrap()))
        .unwrap();
    for ns in [300u64, 300, 301, 5_000, 30_000_000_000] {
        m.exchange(&exchange(
            Default::default(),
            "GET",
            200,
            phases(&[(Phase::Parse, ns)]),
        ));
    }
    let snap = reg.snapshot();
    let json = serde_json::to_string_pretty(&snap).unwrap();
    let back = Snapshot::from_json(&json).unwrap();
    assert_eq!(back, snap);
    assert_eq!(back.format, "phasescope-snapshot");
    assert_eq!(back.version, env!("CARGO_PKG_VERSION"));

    // Two copies merged through the pairs double every count and keep the percentiles.
    let series = &back.taps["t"].phases["parse"]["all"];
    let mut merged = back.hdr.empty_histogram().unwrap();
    series.add_to(&mut merged).unwrap();
    series.add_to(&mut merged).unwrap();
    assert_eq!(merged.len(), 10);
    assert_eq!(merged.value_at_quantile(0.5) as f64 / 1e9, series.p50);
    // The histogram knows the max only to its precision; the snapshot's is exact.
    let exact_max = series.max * 1e9;
    let hdr_max = merged.max() as f64;
    assert!(hdr_max >= exact_max && hdr_max <= exact_max + hdr_slack(exact_max));

    let mut newer: serde_json::Value = serde_json::from_str(&json).unwrap();
    newer["format_version"] = 99.into();
    assert!(Snapshot::from_json(&newer.to_string()).is_err());
    assert!(Snapshot::from_json("{\"format\": \"x\"}").is_err());
}

/// The relay's one call per exchange counts what the separate calls would: its bytes in
/// `phasescope_bytes_total`, its head in the request-head shapes, its phases; a probe's
/// exchange (no head) only stays out of the shapes.
#[test]
fn an_exchange_relayed_counts_what_the_separate_calls_count() {
    use phasescope::recorder::HeadShape;
    let reg = registry();
    let one = tap("one", Protocol::Http, RouteRule::None);
    let many = tap("many", Protocol::Http, RouteRule::None);
    let one_m = reg
        .tap(&one, Arc::new(RouteTable::new(&one).unwrap()))
        .unwrap();
    let many_m = reg
        .tap(&many, Arc::new(RouteTable::new(&many).unwrap()))
        .unwrap();
    let mut rng = Rng::new(16);
    for i in 0..50u64 {
        let mut record = exchange(
            Default::default(),
            "GET",
            200,
            phases(&[(Phase::Parse, rng.below(1_000)), (Phase::Total, 5_000 + i)]),
        );
        record.request_bytes = 30 + rng.below(100);
        record.response_bytes = 60 + rng.below(1_000);
        let head = (i % 7 != 0).then_some(HeadShape {
            bytes: 20 + rng.below(200) as usize,
            fields: rng.below(20) as usize,
        });
        one_m.exchange_relayed(&record, head);
        many_m.event(Event::Bytes(Direction::Request, record.request_bytes));
        many_m.event(Event::Bytes(Direction::Response, record.response_bytes));
        if let Some(h) = head {
            many_m.event(Event::RequestHead(h));
        }
        many_m.exchange(&record);
    }
    let e = Exposition::parse(&reg.encode_prometheus());
    for d in ["request", "response"] {
        let got = e.value(BYTES, &[("tap", "one"), ("direction", d)]);
        assert!(got > 0.0, "{d}");
        assert_eq!(
            got,
            e.value(BYTES, &[("tap", "many"), ("direction", d)]),
            "{d}"
        );
    }
    for p in ["parse", "total"] {
        let count = |t| e.value(DURATION_COUNT, &[("tap", t), ("phase", p)]);
        assert_eq!(count("one"), 50.0);
        assert_eq!(count("one"), count("many"));
    }
    let snap = serde_json::to_value(reg.snapshot()).unwrap();
    let heads = |t: &str| snap["taps"][t]["request_heads"].clone();
    assert_eq!(heads("one")["count"], 42, "{snap}");
    assert_eq!(heads("one"), heads("many"));
}

/// Windows cut while four threads record: every exchange is in exactly one window, and
/// every error. A snapshot followed by a reset lost what was recorded between the two
/// (on a loaded machine, half of a duet bench's 250 ms windows).
#[test]
fn cut_windows_lose_nothing_recorded_meanwhile() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 50_000;
    let reg = registry();
    let cfg = tap("t", Protocol::Http, RouteRule::None);
    let routes = Arc::new(RouteTable::new(&cfg).unwrap());
    let all = routes.resolve(b"GET", b"/");
    let m = reg.tap(&cfg, Arc::clone(&routes)).unwrap();
    reg.reset();
    let done = std::sync::atomic::AtomicU64::new(0);
    let mut windows: Vec<Snapshot> = Vec::new();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let (m, done) = (&m, &done);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let p = phases(&[(Phase::Total, 1_000 + i % 100)]);
                    m.exchange(&exchange(all, "GET", 200, p));
                    if i % 1000 == 0 {
                        m.event(Event::Error(ErrorKind::UpstreamReset));
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        while done.load(std::sync::atomic::Ordering::SeqCst) < THREADS {
            windows.push(reg.cut());
        }
    });
    windows.push(reg.cut());
    assert!(
        windows.len() > 2,
        "the threads finished before a second cut"
    );
    let (mut exchanges, mut errors) = (0, 0);
    for w in &windows {
        let t = &w.taps["t"];
        exchanges += t.phases.get("total").map_or(0, |r| r["all"].count);
        errors += t.errors.get("upstream_reset").copied().unwrap_or(0);
    }
    assert_eq!(
        exchanges,
        THREADS * PER_THREAD,
        "over {} windows",
        windows.len()
    );
    assert_eq!(
        errors,
        THREADS * PER_THREAD / 1000,
        "over {} windows",
        windows.len()
    );
}

//! The full chain with real processes: client → HTTP tap → Webdis → RESP tap → Redis, in
//! one phasescope process, and the Webdis decomposition it produces under load.

mod support;

use std::fs;

use serde_json::Value;
use support::{free_port, run_wrk, Proxy, RedisServer, Webdis};

struct Chain {
    _redis: RedisServer,
    proxy: Proxy,
    _webdis: Webdis,
    _dir: tempfile::TempDir,
}

fn chain() -> Chain {
    let redis = RedisServer::start();
    let resp_port = free_port();
    let webdis_port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chain.toml");
    fs::write(
        &config,
        format!(
            r#"
[[tap]]
name = "webdis"
protocol = "http"
listen = "127.0.0.1:0"
upstream = "127.0.0.1:{webdis_port}"
routes = "webdis"

[[tap]]
name = "redis"
protocol = "resp"
listen = "127.0.0.1:{resp_port}"
upstream = "127.0.0.1:{redis_port}"

[[correlate]]
kind = "webdis"
http = "webdis"
resp = "redis"
"#,
            redis_port = redis.port()
        ),
    )
    .unwrap();
    // The RESP tap listens before Webdis opens its Redis pool through it.
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let webdis = Webdis::start_at(resp_port, webdis_port);
    Chain {
        _redis: redis,
        proxy,
        _webdis: webdis,
        _dir: dir,
    }
}

fn snapshot(proxy: &Proxy) -> Value {
    let r = proxy.admin_get("/api/snapshot");
    assert_eq!(r.status, 200);
    serde_json::from_slice(&r.body).unwrap()
}

fn series<'a>(snap: &'a Value, tap: &str, phase: &str, route: &str) -> &'a Value {
    &snap["taps"][tap]["phases"][phase][route]
}

fn sum(snap: &Value, tap: &str, phase: &str, route: &str) -> f64 {
    series(snap, tap, phase, route)["sum"]
        .as_f64()
        .unwrap_or(0.0)
}

fn count(snap: &Value, tap: &str, phase: &str, route: &str) -> u64 {
    series(snap, tap, phase, route)["count"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn under_load_the_wait_on_webdis_splits_into_webdis_and_redis() {
    let c = chain();
    // Something to GET, then load on GET and on SET.
    let set = c.proxy.url("/SET/k/v");
    assert_eq!(support::http_get(c.proxy.addr(), "/SET/k/v").status, 200);
    for url in [c.proxy.url("/GET/k"), set] {
        let report = run_wrk(&url, 3, 20, 2);
        assert_eq!(report.non_2xx_3xx, 0, "{}", report.output);
        assert_eq!(report.socket_errors, [0; 4], "{}", report.output);
        assert!(report.requests > 100, "{}", report.output);
    }

    let snap = snapshot(&c.proxy);
    let corr = &snap["taps"]["webdis"]["totals"]["correlations"];
    let matched = corr["matched"].as_u64().unwrap();
    let unmatched = corr["unmatched"].as_u64().unwrap();
    assert!(
        matched as f64 >= 0.99 * (matched + unmatched) as f64,
        "matched {matched}, unmatched {unmatched}"
    );

    for route in ["GET", "SET"] {
        let waits = count(&snap, "webdis", "upstream_wait", route);
        assert!(waits > 100, "{route}: {waits} exchanges");
        let mean_wait = sum(&snap, "webdis", "upstream_wait", route) / waits as f64;
        let parts = ["backend_in", "backend", "backend_out"];
        let mean_parts: f64 = parts
            .iter()
            .map(|p| sum(&snap, "webdis", p, route) / count(&snap, "webdis", p, route) as f64)
            .sum();
        assert!(
            (mean_parts - mean_wait).abs() <= 0.05 * mean_wait,
            "{route}: upstream_wait mean {mean_wait} s, decomposition {mean_parts} s"
        );

        // Redis as the HTTP tap sees it, against Redis as the RESP tap sees it.
        let backend = sum(&snap, "webdis", "backend", route)
            / count(&snap, "webdis", "backend", route) as f64;
        let resp_n = count(&snap, "redis", "upstream_wait", route);
        let resp = (sum(&snap, "redis", "upstream_wait", route)
            + sum(&snap, "redis", "queue", route))
            / resp_n as f64;
        assert!(
            (backend - resp).abs() <= 0.05 * resp,
            "{route}: backend mean {backend} s, RESP tap's wait mean {resp} s"
        );

        // "Redis queue" (backend_queue) is the part of backend the command waited behind
        // earlier replies: one per matched request, within backend, and as the RESP tap
        // measures its queue (that tap also times Webdis's own commands, so 5 % apart).
        let n = count(&snap, "webdis", "backend", route);
        assert_eq!(count(&snap, "webdis", "backend_queue", route), n, "{route}");
        let queue_sum = sum(&snap, "webdis", "backend_queue", route);
        assert!(queue_sum <= sum(&snap, "webdis", "backend", route) + 1e-9);
        let queue = queue_sum / n as f64;
        let resp_queue = sum(&snap, "redis", "queue", route) / resp_n as f64;
        eprintln!("{route}: backend {backend:.6} s, of which Redis queue {queue:.6} s (RESP tap's queue per command {resp_queue:.6} s)");
        assert!(
            (queue - resp_queue).abs() <= 0.05 * backend,
            "{route}: backend_queue mean {queue} s, RESP tap's queue per command {resp_queue} s"
        );
    }
}

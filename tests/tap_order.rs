//! Taps front to back: the report (text, JSON), the snapshot and the SVG show first the
//! taps clients reach, then the taps behind them, whatever their names or their order in
//! the config. The chain is real: Webdis in front of Redis, an HTTP tap in front of
//! Webdis, a RESP tap between Webdis and Redis, and a second HTTP tap straight to Webdis.

mod report_support;
mod support;

use std::fs;
use std::time::Duration;

use report_support::phasescope_ok;
use serde_json::Value;
use support::{free_port, http_get, loopback, wait_for, Proxy, RedisServer, Webdis};

#[test]
fn taps_are_shown_front_to_back() {
    let redis = RedisServer::start();
    let webdis_port = free_port();
    let webdis_tap = free_port();
    let api_tap = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chain.toml");
    // Config order and name order both put `redis` first; it is behind `webdis`.
    fs::write(
        &config,
        format!(
            r#"
[[tap]]
name = "redis"
protocol = "resp"
listen = "127.0.0.1:0"
upstream = "127.0.0.1:{redis_port}"

[[tap]]
name = "webdis"
listen = "127.0.0.1:{webdis_tap}"
upstream = "127.0.0.1:{webdis_port}"
routes = "webdis"

[[tap]]
name = "api"
listen = "127.0.0.1:{api_tap}"
upstream = "127.0.0.1:{webdis_port}"

[[correlate]]
kind = "webdis"
http = "webdis"
resp = "redis"
"#,
            redis_port = redis.port(),
        ),
    )
    .unwrap();
    // --listen moves the first tap, `redis`, to the proxy's port: Webdis talks to Redis
    // through it.
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let _webdis = Webdis::start_at(proxy.listen_port(), webdis_port);
    for tap in [webdis_tap, api_tap] {
        for _ in 0..5 {
            assert_eq!(http_get(loopback(tap), "/SET/k/v").status, 200);
        }
    }
    // An exchange is recorded just after its response is written.
    let snapshot =
        || -> Value { serde_json::from_slice(&proxy.admin_get("/api/snapshot").body).unwrap() };
    let recorded = |snap: &Value, tap: &str| snap["taps"][tap]["totals"]["requests"].as_u64();
    assert!(wait_for(Duration::from_secs(10), || {
        let snap = snapshot();
        recorded(&snap, "webdis") == Some(5) && recorded(&snap, "api") == Some(5)
    }));
    let snap = snapshot();
    let position = |tap: &str| snap["taps"][tap]["position"].as_u64();
    assert_eq!(
        [position("webdis"), position("api"), position("redis")],
        [Some(0), Some(1), Some(2)],
        "{snap}"
    );

    let url = format!("http://{}", proxy.admin_addr());
    let text = phasescope_ok(&["report", "--from", &url], 0);
    let order: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("tap "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(order, ["webdis", "api", "redis"], "{text}");

    let json: Value = serde_json::from_str(&phasescope_ok(
        &["report", "--from", &url, "--format", "json"],
        0,
    ))
    .unwrap();
    let order: Vec<&str> = json["taps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tap"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["webdis", "api", "redis"], "{json}");

    let svg = dir.path().join("r.svg");
    phasescope_ok(
        &["report", "--from", &url, "--svg", svg.to_str().unwrap()],
        0,
    );
    let svg = fs::read_to_string(svg).unwrap();
    let at = |tap: &str| {
        svg.find(&format!("{tap}: where the time goes"))
            .unwrap_or_else(|| panic!("no title of tap {tap} in the SVG"))
    };
    assert!(
        at("webdis") < at("api") && at("api") < at("redis"),
        "SVG order: webdis {}, api {}, redis {}",
        at("webdis"),
        at("api"),
        at("redis")
    );
}

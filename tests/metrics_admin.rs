//! The admin server over real HTTP on loopback, with a raw TCP client.

mod metrics_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_support::{exchange, phases, tap, Exposition};
use phasescope::admin;
use phasescope::config::{MetricsConfig, Protocol, RouteRule};
use phasescope::metrics::Registry;
use phasescope::phase::Phase;
use phasescope::recorder::Recorder;
use phasescope::routes::RouteTable;
use phasescope::snapshot::Snapshot;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Ground-truth bound for things that take milliseconds; generous for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut raw))
        .await
        .expect("reply within the patience")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn start(
    registry: Arc<Registry>,
) -> (
    SocketAddr,
    oneshot::Sender<()>,
    JoinHandle<anyhow::Result<()>>,
) {
    let server = admin::bind("127.0.0.1:0".parse().unwrap(), registry).unwrap();
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback() && addr.port() != 0);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    (addr, stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_serves_metrics_snapshot_and_reset() {
    let reg = Registry::new(&MetricsConfig::default()).unwrap();
    let cfg = tap("webdis", Protocol::Http, RouteRule::Webdis);
    let routes = Arc::new(RouteTable::new(&cfg).unwrap());
    let m = reg.tap(&cfg, Arc::clone(&routes)).unwrap();
    for i in 0..50 {
        let id = routes.resolve(b"GET", b"/GET/k");
        m.exchange(&exchange(
            id,
            "GET",
            200,
            phases(&[(Phase::Total, 10_000 + i)]),
        ));
    }
    let (addr, stop, task) = start(Arc::clone(&reg));

    let r = request(addr, "GET", "/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));

    let r = request(addr, "HEAD", "/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, ""), "HEAD: headers only");

    let r = request(addr, "GET", "/no/such/thing").await;
    assert_eq!(r.status, 404);
    let r = request(addr, "GET", "/api/reset").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.headers["allow"], "POST");
    let r = request(addr, "POST", "/metrics").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.headers["allow"], "GET, HEAD");

    let r = request(addr, "GET", "/").await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"].starts_with("text/html"));
    assert!(r.body.contains("/api/snapshot"));

    let with = [("tap", "webdis"), ("phase", "total"), ("route", "GET")];
    let r = request(addr, "GET", "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers["content-type"].starts_with("text/plain; version=0.0.4"),
        "{}",
        r.headers["content-type"]
    );
    let e = Exposition::parse(&r.body);
    assert_eq!(
        e.value("phasescope_phase_duration_seconds_count", &with),
        50.0
    );

    let r = request(addr, "GET", "/api/snapshot").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "application/json");
    let snap = Snapshot::from_json(&r.body).unwrap();
    assert_eq!(snap.taps["webdis"].phases["total"]["GET"].count, 50);

    let r = request(addr, "POST", "/api/reset").await;
    assert_eq!(r.status, 200);
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["reset"], true);

    let snap = Snapshot::from_json(&request(addr, "GET", "/api/snapshot").await.body).unwrap();
    assert!(
        snap.taps["webdis"].phases.is_empty(),
        "reset empties the HDR copies"
    );
    let e = Exposition::parse(&request(addr, "GET", "/metrics").await.body);
    assert_eq!(
        e.value("phasescope_phase_duration_seconds_count", &with),
        50.0,
        "Prometheus counters survive a reset"
    );

    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("serve returns after shutdown")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_metrics_still_answers_health_and_build_info() {
    let reg = Registry::new(&MetricsConfig {
        enabled: false,
        buckets: Vec::new(),
    })
    .unwrap();
    let cfg = tap("t", Protocol::Http, RouteRule::None);
    let rec = reg
        .recorder(&cfg, Arc::new(RouteTable::new(&cfg).unwrap()))
        .unwrap();
    rec.exchange(&exchange(
        Default::default(),
        "GET",
        200,
        phases(&[(Phase::Total, 1)]),
    ));
    let (addr, stop, task) = start(reg);

    assert_eq!(request(addr, "GET", "/healthz").await.status, 200);
    let r = request(addr, "GET", "/metrics").await;
    assert_eq!(r.status, 200);
    let e = Exposition::parse(&r.body);
    assert_eq!(e.samples.len(), 1);
    assert_eq!(e.samples[0].name, "phasescope_build_info");

    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_taken_port_fails_at_bind_with_the_address() {
    let reg = Registry::new(&MetricsConfig::default()).unwrap();
    let first = admin::bind("127.0.0.1:0".parse().unwrap(), Arc::clone(&reg)).unwrap();
    let addr = first.local_addr();
    let err = admin::bind(addr, reg).unwrap_err();
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}

//! Helpers shared by the report and compare tests: synthetic snapshots recorded through
//! the real metrics registry, an upstream with an adjustable delay, and running the
//! binary's report commands.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use phasescope::config::{MetricsConfig, Protocol, RouteRule, TapConfig};
use phasescope::metrics::Registry;
use phasescope::phase::{Phase, Phases};
use phasescope::recorder::{ExchangeId, ExchangeRecord, Recorder};
use phasescope::routes::RouteTable;
use phasescope::snapshot::Snapshot;

/// A small deterministic generator (SplitMix64) with a normal deviate, so that synthetic
/// runs are reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    /// Log-normal around `median_ns` with log-spread `sigma`, in whole nanoseconds.
    pub fn lognormal(&mut self, median_ns: f64, sigma: f64) -> u64 {
        (median_ns * (sigma * self.normal()).exp()).round().max(1.0) as u64
    }
}

/// How one phase is distributed in a synthetic run: (phase, median ns, log-spread).
pub type PhaseSpec = (Phase, f64, f64);

/// One synthetic tap: name, protocol, and per route its exchange count and phases.
pub struct TapSpec<'a> {
    pub name: &'a str,
    pub protocol: Protocol,
    pub routes: &'a [(&'a str, usize, &'a [PhaseSpec])],
}

fn tap_config(name: &str, protocol: Protocol) -> TapConfig {
    let mut t = TapConfig::new(
        name,
        protocol,
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2",
    );
    t.routes = RouteRule::Webdis;
    t
}

/// Records the exchanges `taps` describe through a fresh [`Registry`] and returns its
/// snapshot: the same code path the admin server's `/api/snapshot` takes. `total` is
/// the sum of the sequential phases drawn, so shares are meaningful; when the backend
/// phases are given, upstream_wait is their sum.
pub fn synthetic(seed: u64, taps: &[TapSpec<'_>]) -> Snapshot {
    let registry = Registry::new(&MetricsConfig::default()).unwrap();
    let mut rng = Rng::new(seed);
    for spec in taps {
        let cfg = tap_config(spec.name, spec.protocol);
        let routes = Arc::new(RouteTable::new(&cfg).unwrap());
        let metrics = registry.tap(&cfg, Arc::clone(&routes)).unwrap();
        for (route, count, phases) in spec.routes {
            let id = match spec.protocol {
                Protocol::Http => routes.resolve(b"GET", format!("/{route}/k").as_bytes()),
                Protocol::Resp => routes.resolve_command(route),
            };
            for _ in 0..*count {
                let mut p = Phases::default();
                for &(phase, median, sigma) in *phases {
                    p.set(phase, rng.lognormal(median, sigma));
                }
                // As the correlator splits it: the wait is Webdis in, Redis, Webdis out.
                let backend: Vec<u64> = [Phase::BackendIn, Phase::Backend, Phase::BackendOut]
                    .iter()
                    .filter_map(|&b| p.get(b))
                    .collect();
                if !backend.is_empty() {
                    p.set(Phase::UpstreamWait, backend.iter().sum());
                }
                // parse lies inside client_recv, the backend phases inside upstream_wait
                let total = p
                    .iter()
                    .filter(|(phase, _)| {
                        !matches!(
                            phase,
                            Phase::Parse | Phase::BackendIn | Phase::Backend | Phase::BackendOut
                        )
                    })
                    .map(|(_, v)| v)
                    .sum();
                p.set(Phase::Total, total);
                metrics.exchange(&ExchangeRecord {
                    id: ExchangeId::NONE,
                    route: id,
                    method: "GET",
                    target: b"",
                    status: 200,
                    request_bytes: 40,
                    response_bytes: 80,
                    phases: p,
                    failure: None,
                    error_reply: false,
                });
            }
        }
    }
    registry.snapshot()
}

/// The recorded fixture's taps: a Webdis HTTP tap with the correlator's phases and the
/// RESP tap behind it, two routes each, kept small.
pub fn fixture_snapshot() -> Snapshot {
    const GET: &[PhaseSpec] = &[
        (Phase::ClientRecv, 2_000.0, 0.3),
        (Phase::Parse, 400.0, 0.2),
        (Phase::UpstreamSend, 3_000.0, 0.3),
        (Phase::UpstreamWait, 90_000.0, 0.4),
        (Phase::BackendIn, 30_000.0, 0.3),
        (Phase::Backend, 25_000.0, 0.5),
        (Phase::BackendOut, 30_000.0, 0.3),
        (Phase::Write, 4_000.0, 0.3),
        (Phase::ProxyOverhead, 5_000.0, 0.2),
    ];
    const SET: &[PhaseSpec] = &[
        (Phase::ClientRecv, 2_500.0, 0.3),
        (Phase::Parse, 500.0, 0.2),
        (Phase::UpstreamSend, 3_000.0, 0.3),
        (Phase::UpstreamWait, 120_000.0, 0.4),
        (Phase::Write, 4_000.0, 0.3),
        (Phase::ProxyOverhead, 5_000.0, 0.2),
    ];
    const RESP: &[PhaseSpec] = &[
        (Phase::ClientRecv, 1_000.0, 0.3),
        (Phase::Parse, 150.0, 0.2),
        (Phase::UpstreamWait, 20_000.0, 0.5),
        (Phase::Write, 2_000.0, 0.3),
    ];
    synthetic(
        20_240_601,
        &[
            TapSpec {
                name: "webdis",
                protocol: Protocol::Http,
                routes: &[("GET", 40, GET), ("SET", 25, SET)],
            },
            TapSpec {
                name: "redis",
                protocol: Protocol::Resp,
                routes: &[("GET", 30, RESP), ("SET", 20, RESP)],
            },
        ],
    )
}

/// `phasescope ARGS` with the caller's PHASESCOPE_* variables removed, run from the crate
/// root. Returns the finished process's output.
pub fn phasescope(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_phasescope"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .env("NO_COLOR", "1");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PHASESCOPE_") {
            cmd.env_remove(key);
        }
    }
    cmd.output().unwrap()
}

/// Like [`phasescope`], but fails the test unless it exits with `code`; returns stdout.
pub fn phasescope_ok(args: &[&str], code: i32) -> String {
    let out = phasescope(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "phasescope {args:?} exited with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Writes `snap` as a snapshot file.
pub fn write_snapshot(snap: &Snapshot, path: &Path) {
    std::fs::write(path, serde_json::to_string(snap).unwrap() + "\n").unwrap();
}

/// An HTTP/1.1 upstream on a loopback port that waits `delay` before every answer
/// (keep-alive, a thread per connection). The delay can change between requests.
pub struct SlowUpstream {
    pub addr: SocketAddr,
    delay_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl SlowUpstream {
    pub fn start(delay: Duration) -> SlowUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let delay_us = Arc::new(AtomicU64::new(delay.as_micros() as u64));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, s) = (Arc::clone(&delay_us), Arc::clone(&stop));
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let d = Arc::clone(&d);
                thread::spawn(move || serve(conn, &d));
            }
        });
        SlowUpstream {
            addr,
            delay_us,
            stop,
        }
    }

    pub fn set_delay(&self, delay: Duration) {
        self.delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
    }
}

impl Drop for SlowUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(mut conn: TcpStream, delay_us: &AtomicU64) {
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            thread::sleep(Duration::from_micros(delay_us.load(Ordering::Relaxed)));
            let body = b"ok";
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            let mut out = head.into_bytes();
            out.extend_from_slice(body);
            if conn.write_all(&out).is_err() {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

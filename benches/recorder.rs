//! What recording one exchange costs on the relay's hot path: one thread alone, and two
//! threads recording into the same tap at once (the case per-thread shards exist for).
//! The last group is the design's baseline: the same observations into one shared
//! prometheus Histogram from two threads.
//!
//! Run briefly: `cargo bench --bench recorder -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use phasescope::config::{MetricsConfig, Protocol, RouteRule, TapConfig};
use phasescope::metrics::{Registry, TapMetrics};
use phasescope::phase::{Phase, Phases};
use phasescope::recorder::{ExchangeId, ExchangeRecord, Recorder, RouteId};
use phasescope::routes::RouteTable;

/// The phases of a typical keep-alive exchange: nine observations.
fn typical_phases(jitter: u64) -> Phases {
    let mut p = Phases::default();
    for (phase, ns) in [
        (Phase::ClientRecv, 2_000),
        (Phase::Parse, 300),
        (Phase::UpstreamSend, 1_500),
        (Phase::UpstreamWait, 25_000),
        (Phase::UpstreamRecv, 800),
        (Phase::ResponseParse, 250),
        (Phase::Write, 1_800),
        (Phase::ProxyOverhead, 900),
        (Phase::Total, 32_000),
    ] {
        p.set(phase, ns + jitter);
    }
    p
}

fn setup() -> (Arc<Registry>, Arc<TapMetrics>, RouteId) {
    let mut cfg = TapConfig::new(
        "bench",
        Protocol::Http,
        "127.0.0.1:1".parse().expect("address"),
        "127.0.0.1:2",
    );
    cfg.routes = RouteRule::Webdis;
    let routes = Arc::new(RouteTable::new(&cfg).expect("route table"));
    let route = routes.resolve(b"GET", b"/GET/key");
    let registry = Registry::new(&MetricsConfig::default()).expect("registry");
    let tap = registry.tap(&cfg, routes).expect("tap");
    (registry, tap, route)
}

fn record(tap: &TapMetrics, route: RouteId, phases: &Phases) {
    tap.exchange(black_box(&ExchangeRecord {
        id: ExchangeId::NONE,
        route,
        method: "GET",
        target: b"",
        status: 200,
        request_bytes: 40,
        response_bytes: 120,
        phases: *phases,
        failure: None,
        error_reply: false,
    }));
}

/// Runs `work(iters)` on `threads` threads released together; the wall time they take is
/// the time per exchange *per thread*, the figure comparable with the single-thread one.
fn concurrently(threads: usize, iters: u64, work: impl Fn(u64) + Sync) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    work(iters);
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().expect("bench thread");
        }
        start.elapsed()
    })
}

fn bench(c: &mut Criterion) {
    let (registry, tap, route) = setup();
    let phases: Vec<Phases> = (0..64).map(typical_phases).collect();

    let mut g = c.benchmark_group("record_exchange");
    g.bench_function("1_thread", |b| {
        let mut i = 0;
        b.iter(|| {
            record(&tap, route, &phases[i & 63]);
            i += 1;
        })
    });
    g.bench_function("2_threads", |b| {
        b.iter_custom(|iters| {
            concurrently(2, iters, |n| {
                for i in 0..n as usize {
                    record(&tap, route, &phases[i & 63]);
                }
            })
        })
    });
    // Control: the same two threads, each on a tap of its own, so they share nothing at
    // all. The gap between this and `2_threads` is what sharing a tap costs; the gap
    // between this and `1_thread` is the machine (two threads on a busy 2-core box).
    let (_, other_tap, other_route) = setup();
    g.bench_function("2_threads_own_taps", |b| {
        b.iter_custom(|iters| {
            let taps = [(&tap, route), (&other_tap, other_route)];
            let next = std::sync::atomic::AtomicUsize::new(0);
            concurrently(2, iters, |n| {
                let (t, r) = taps[next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2];
                for i in 0..n as usize {
                    record(t, r, &phases[i & 63]);
                }
            })
        })
    });
    g.finish();

    let (_, tap2, _) = setup();
    let routes = tap2.routes();
    c.bench_function("resolve_route/webdis_known", |b| {
        b.iter(|| routes.resolve(black_box(b"GET"), black_box(b"/GET/some-key?x=1")))
    });

    let shared = prometheus::Histogram::with_opts(
        prometheus::HistogramOpts::new("h", "h")
            .buckets(registry.buckets().bounds_seconds().to_vec()),
    )
    .expect("histogram");
    c.bench_function(
        "baseline/shared_prometheus_histogram_9_obs_2_threads",
        |b| {
            b.iter_custom(|iters| {
                concurrently(2, iters, |n| {
                    for i in 0..n as usize {
                        for (_, ns) in phases[i & 63].iter() {
                            shared.observe(black_box(ns as f64 / 1e9));
                        }
                    }
                })
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);

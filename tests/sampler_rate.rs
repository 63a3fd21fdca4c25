//! The sampling rate kept to a budget of samples per second, against the server's own
//! truth: the burn upstream (30 µs in `http_parser_execute`, 70 µs in `backend_query` per
//! request, measured by its threads' CPU clocks) under keep-alive clients.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use phasescope::upstream::profile::{ComponentRules, ProfileDelta, Profiler, DEFAULT_STACK_BYTES};
use support::{BurnUpstream, IO_TIMEOUT};

const HZ: u32 = 997;

/// Keep-alive clients sending `GET /` until `stop`, or `GET /cpu300` (300 µs in
/// `backend_query` instead of 70) while `heavy`.
fn load(
    addr: SocketAddr,
    clients: usize,
    stop: Arc<AtomicBool>,
    heavy: Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            let (stop, heavy) = (stop.clone(), heavy.clone());
            thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    let request: &[u8] = if heavy.load(Ordering::Relaxed) {
                        b"GET /cpu300 HTTP/1.1\r\nHost: b\r\n\r\n"
                    } else {
                        b"GET / HTTP/1.1\r\nHost: b\r\n\r\n"
                    };
                    stream.write_all(request).unwrap();
                    let mut got = Vec::new();
                    while !got.ends_with(b"\r\n\r\nok") {
                        let n = stream.read(&mut buf).unwrap();
                        assert!(n > 0, "burn upstream closed the connection");
                        got.extend_from_slice(&buf[..n]);
                    }
                }
            })
        })
        .collect()
}

/// The process's user + system time from /proc/PID/stat, seconds.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `after` starts at field 3.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn samples_of(delta: &ProfileDelta, symbol: &str) -> u64 {
    delta
        .symbols
        .iter()
        .filter(|s| s.symbol == symbol)
        .map(|s| s.samples)
        .sum()
}

/// How a test sets the budget.
enum Budget {
    /// This many samples a second.
    Fixed(u32),
    /// What the first second at the configured rate gave, divided by this.
    OfFirstSecond(f64),
}

/// A profiler of the burn upstream under `clients` keep-alive clients: a second at the
/// configured rate, then with `budget` for `seconds` (and, when `switch`, requests of
/// another split from then on). Returns every collect from that first second on, the
/// process's CPU over them, and the budget.
fn budgeted(
    clients: usize,
    budget: Budget,
    seconds: u64,
    switch: bool,
) -> (Vec<ProfileDelta>, f64, u32, BurnUpstreamRun) {
    let mut burn = BurnUpstream::start(30, 70);
    let pid = burn.process().pid();
    let stop = Arc::new(AtomicBool::new(false));
    let heavy = Arc::new(AtomicBool::new(false));
    let clients = load(burn.addr(), clients, stop.clone(), heavy.clone());
    let rules = ComponentRules::new(&[]).unwrap();
    let mut profiler = Profiler::start(pid, HZ, DEFAULT_STACK_BYTES, rules).unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !profiler.stacks_ready() && Instant::now() < until {
        thread::sleep(Duration::from_millis(100));
    }
    // A second to settle (the first collects name every symbol), then one to measure.
    profiler.collect().unwrap();
    thread::sleep(Duration::from_secs(1));
    profiler.collect().unwrap();
    let truth_before = burn.truth();
    let cpu_before = process_cpu(pid);
    let start = Instant::now();
    thread::sleep(Duration::from_secs(1));
    let first = profiler.collect().unwrap();
    let per_second = first.taken as f64 / start.elapsed().as_secs_f64();
    let budget = match budget {
        Budget::Fixed(n) => n,
        Budget::OfFirstSecond(divisor) => (per_second / divisor).max(5.0) as u32,
    };
    profiler.set_budget(budget);
    heavy.store(switch, Ordering::Relaxed);
    let mut deltas = vec![first];
    for _ in 0..seconds {
        thread::sleep(Duration::from_secs(1));
        deltas.push(profiler.collect().unwrap());
    }
    let cpu = process_cpu(pid) - cpu_before;
    let truth_after = burn.truth();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    eprintln!(
        "first second: {per_second:.0} samples/s at {HZ} Hz; budget {budget}/s; then per second (taken, period ×): {:?}; CPU {cpu:.2} s",
        deltas
            .iter()
            .map(|d| (d.taken, d.period_multiple))
            .collect::<Vec<_>>()
    );
    let run = BurnUpstreamRun {
        parser_ns: truth_after.parser_ns - truth_before.parser_ns,
        backend_ns: truth_after.backend_ns - truth_before.backend_ns,
    };
    (deltas, cpu, budget, run)
}

struct BurnUpstreamRun {
    parser_ns: u64,
    backend_ns: u64,
}

#[test]
fn a_busy_server_is_sampled_at_tens_of_hz_and_still_fills_its_budget() {
    // One client keeps one thread of the server burning: up to a core. The default
    // budget, what a `profile = true` tap gets unless it says otherwise (80 samples a
    // second: 2,400 to 4,800 in a 60 s window).
    let default = phasescope::config::ProcessConfig::default().sample_budget;
    assert!(default > 0, "profiling keeps a budget by default");
    let seconds = 10;
    let (deltas, cpu, budget, _) = budgeted(1, Budget::Fixed(default), seconds, false);
    let cores = cpu / seconds as f64;
    // A server given most of a core is sampled at tens of Hz (a busy machine gives it
    // less, and a higher rate is then within the budget). After the first collects the
    // rate is kept: the budget is met, at least a third of it (below that the period
    // halves), never more than half again over it.
    support::assert_kept_to_budget(&deltas, HZ, budget, (cpu, cores), 3);
}

#[test]
fn shares_stay_within_two_points_across_a_rate_change() {
    // A second at 997 Hz with the parser at 30 % of the burns, then a budget a
    // third of what that gave (the period doubles or quadruples) while the requests burn
    // 300 µs in the backend (the parser at 9 %): counted once each, the many samples of
    // the first second would pull the share up by points; weighed by their period they
    // give the truth of the whole.
    let (deltas, cpu, _, truth) = budgeted(2, Budget::OfFirstSecond(3.0), 10, true);
    let multiples: Vec<u64> = deltas.iter().map(|d| d.period_multiple).collect();
    assert!(
        multiples.iter().any(|&m| m > 1),
        "the rate never changed: {multiples:?}"
    );
    let share = |weigh: bool| {
        let (mut parser, mut backend) = (0.0, 0.0);
        let mut weight = 1.0;
        for d in &deltas {
            // Counted once each: undo the weight of the period the samples were taken at
            // (the one before this collect changed it).
            let w = if weigh { 1.0 } else { 1.0 / weight };
            parser += samples_of(d, "http_parser_execute") as f64 * w;
            backend += samples_of(d, "backend_query") as f64 * w;
            weight = d.period_multiple as f64;
        }
        parser / (parser + backend)
    };
    let (sampled, unweighted) = (share(true), share(false));
    let real = truth.parser_ns as f64 / (truth.parser_ns + truth.backend_ns) as f64;
    eprintln!(
        "parser {:.1} % of the two burns sampled ({:.1} % counting each sample once), {:.1} % by their clocks",
        sampled * 100.0,
        unweighted * 100.0,
        real * 100.0
    );
    assert!(
        (sampled - real).abs() <= 0.02,
        "parser share sampled {sampled:.3}, true {real:.3}"
    );
    support::assert_weighted_stand_for(&deltas, HZ, cpu);
}

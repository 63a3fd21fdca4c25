//! Memory follows the load: after a burst of requests all in flight at once, the proxy's
//! resident memory comes back to what the same number of idle connections costs when they
//! are opened one by one (docs/BENCHMARKS.md has the figures; this checks the behaviour,
//! with loose bounds).
//!
//! Both figures are measured in the same run, each on a fresh proxy: `bench-client
//! --hold N` (one request per connection, one connection after another, in front of an
//! upstream that answers at once) and `bench-client --burst N` (N connections, each
//! sending its request as soon as it is open, in front of an upstream that holds every
//! answer for longer than opening all N takes, so that all N are in flight together).

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::{accepts, free_port, loopback, wait_for, Proxy, STARTUP_DEADLINE};

/// Connections per measurement (fewer if the descriptor limit does not allow them).
const CONNECTIONS: usize = 2_000;
/// How long the slow upstream holds each answer: longer than opening every connection
/// takes (each request goes out with its connection), so that all are in flight together
/// when the last is sent. A second or two alone; in full runs of the suite 5.3–8.3 s with
/// two busy loops beside it and 6.2 s without, where a hold of 4 s left the in-flight
/// check skipped in every run.
const UPSTREAM_DELAY_MS: u64 = 10_000;
/// How long the memory may take to come back: the buffer pools are trimmed every second,
/// and the allocator's own thread returns the pages freed on the heap along its decay of
/// 10 s (jemalloc's default; traced once, the burst's heap pages went back 8 s after the
/// last answer). Within 6 s the low figure had caught only the pools' part (+6.9 MB
/// against +4.4 MB for the same connections opened one by one, a full run).
const SETTLE: Duration = Duration::from_secs(12);

struct Upstream {
    child: Child,
    addr: SocketAddr,
}

impl Upstream {
    fn start(delay_ms: u64) -> Upstream {
        let addr = loopback(free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_fixed-upstream"))
            .args(["--listen", &addr.to_string()])
            .args(["--delay-ms", &delay_ms.to_string()])
            .spawn()
            .expect("fixed-upstream runs");
        assert!(
            wait_for(STARTUP_DEADLINE, || accepts(addr)),
            "fixed-upstream never listened on {addr}"
        );
        Upstream { child, addr }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `bench-client` holding its connections until dropped.
struct Client {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Client {
    fn start(proxy: SocketAddr, mode: &str, n: usize) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bench-client"))
            .args(["--connect", &proxy.to_string(), mode, &n.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("bench-client runs");
        let out = BufReader::new(child.stdout.take().unwrap());
        Client { child, out }
    }

    /// The next line it prints, which must start with `word`.
    fn expect(&mut self, word: &str) {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert!(
            line.starts_with(word),
            "bench-client printed {line:?}, expected {word}… (status {:?})",
            self.child.try_wait()
        );
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Closing its standard input ends it; a client that hangs is killed.
        drop(self.child.stdin.take());
        self.child.wait_timeout_or_kill(Duration::from_secs(10));
    }
}

trait WaitTimeout {
    /// Waits up to `timeout` for the process to exit, then kills it; true if it exited.
    fn wait_timeout_or_kill(&mut self, timeout: Duration) -> bool;
}

impl WaitTimeout for Child {
    fn wait_timeout_or_kill(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.try_wait() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.kill();
        let _ = self.wait();
        false
    }
}

/// VmRSS of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// Raises the descriptor limit as far as allowed (children inherit it) and returns how
/// many connections fit: the proxy needs two descriptors per client connection.
fn connections_that_fit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    let fit = (lim.rlim_cur.saturating_sub(256) / 2) as usize;
    CONNECTIONS.min(fit)
}

/// What one measurement found.
struct Measured {
    /// Growth of the proxy's RSS while the requests were in flight, in bytes.
    in_flight: u64,
    /// Growth once the connections were idle, in bytes.
    idle: u64,
    /// How long the client took to open every connection and send its request.
    opening: Duration,
}

/// A fresh proxy's RSS over `n` connections made with `mode`.
fn measure(upstream: &Upstream, mode: &str, n: usize, settle: bool) -> Measured {
    let mut proxy = Proxy::in_front_of(upstream.addr, &[]);
    let pid = proxy.process().pid();
    thread::sleep(Duration::from_millis(300));
    let before = rss(pid);
    let started = Instant::now();
    let mut client = Client::start(proxy.addr(), mode, n);
    let mut in_flight = 0;
    let opening;
    if mode == "--burst" {
        client.expect("sent");
        opening = started.elapsed();
        // The peak until the last answer: on a busy machine the proxy may still be
        // accepting the last connections when the first answers are due.
        let reader = thread::spawn(move || {
            client.expect("ready");
            client
        });
        while !reader.is_finished() {
            in_flight = in_flight.max(rss(pid).saturating_sub(before));
            thread::sleep(Duration::from_millis(25));
        }
        client = reader.join().expect("the client's reader");
    } else {
        client.expect("ready");
        opening = started.elapsed();
    }
    let idle = if settle {
        // The lowest figure within SETTLE: memory that came back stays back.
        let deadline = Instant::now() + SETTLE;
        let mut low = u64::MAX;
        while Instant::now() < deadline {
            low = low.min(rss(pid));
            thread::sleep(Duration::from_millis(200));
        }
        low
    } else {
        rss(pid)
    };
    let grown = idle.saturating_sub(before);
    eprintln!(
        "{mode} {n}: RSS before {} KiB, in flight +{} KiB, idle +{} KiB ({} B per connection)",
        before / 1024,
        in_flight / 1024,
        grown / 1024,
        grown / n as u64
    );
    drop(client);
    Measured {
        in_flight,
        idle: grown,
        opening,
    }
}

#[test]
fn memory_comes_back_after_a_burst_of_requests_in_flight() {
    let n = connections_that_fit();
    assert!(n >= 500, "the descriptor limit allows only {n} connections");
    let fast = Upstream::start(0);
    let slow = Upstream::start(UPSTREAM_DELAY_MS);

    let one_by_one = measure(&fast, "--hold", n, false).idle;
    let burst = measure(&slow, "--burst", n, true);
    let (in_flight, after_burst) = (burst.in_flight, burst.idle);

    // The burst did hold more while in flight than once idle (its buffers: a page or two
    // per request in flight), or this tests nothing. Against the burst's own idle figure:
    // the one-by-one figure comes from another proxy and varies by a third between runs.
    // That needs every request in flight together: relative to the upstream's hold, the
    // opening (from starting the client to its last request sent) must have taken less:
    // then no answer had come back when the last request went. A machine so loaded that
    // it did not is told, visibly, and the check that does not depend on it still runs.
    let hold = Duration::from_millis(UPSTREAM_DELAY_MS);
    if burst.opening < hold {
        assert!(
            in_flight as f64 >= 1.25 * after_burst as f64,
            "in flight +{in_flight} B is not above the same connections idle, +{after_burst} B"
        );
    } else {
        println!(
            "SKIPPED the in-flight check: opening {n} connections took {:?}, more than \
             the upstream's {hold:?} hold, so they were not all in flight together",
            burst.opening
        );
    }
    // Once idle, the burst's connections cost about what connections opened one by one
    // cost: the buffers went back to the system. Slack: 30 % and 1 MiB (allocator noise).
    let bound = one_by_one + one_by_one * 3 / 10 + 1024 * 1024;
    assert!(
        after_burst <= bound,
        "after the burst the proxy kept +{after_burst} B for {n} idle connections; \
         opened one by one they cost +{one_by_one} B (bound {bound} B)"
    );
}

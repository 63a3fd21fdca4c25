//! The upstream sampler against real processes with a known truth: the burn upstream
//! (30 µs in `http_parser_execute`, 70 µs in `backend_query` per request), Debian's
//! Webdis in front of Redis, and the PHP fixture.

mod amp;
mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use amp::AmpServer;
use phasescope::upstream::profile::{
    is_stripped, ComponentRules, ProfileDelta, Profiler, SymbolSamples, UserComponentRule,
    ANON_EXEC_OBJECT, DEFAULT_STACK_BYTES,
};
use support::{
    burn_upstream_binary, require_tool, run_wrk, BurnUpstream, RedisServer, Webdis, IO_TIMEOUT,
};

/// A profiler of `pid` with the defaults and the built-in rules.
fn start_profiler(pid: u32) -> Profiler {
    Profiler::start(
        pid,
        1000,
        DEFAULT_STACK_BYTES,
        ComponentRules::new(&[]).unwrap(),
    )
    .unwrap()
}

/// Deltas of several collects added up.
#[derive(Default, Debug)]
struct Totals {
    by_component: HashMap<String, u64>,
    symbols: HashMap<(String, String, String), u64>,
    lost: u64,
}

impl Totals {
    fn add(&mut self, delta: ProfileDelta) {
        for (component, n) in delta.by_component {
            *self.by_component.entry(component).or_insert(0) += n;
        }
        for SymbolSamples {
            symbol,
            object,
            component,
            samples,
        } in delta.symbols
        {
            *self.symbols.entry((symbol, object, component)).or_insert(0) += samples;
        }
        self.lost += delta.lost;
    }

    fn total(&self) -> u64 {
        self.by_component.values().sum()
    }

    fn component(&self, name: &str) -> u64 {
        self.by_component.get(name).copied().unwrap_or(0)
    }

    fn symbol(&self, name: &str) -> u64 {
        self.symbols
            .iter()
            .filter(|((symbol, _, _), _)| symbol == name)
            .map(|(_, n)| n)
            .sum()
    }

    /// Samples in user code of `object`, whatever component they fold into.
    fn in_object(&self, object: &str) -> u64 {
        self.symbols
            .iter()
            .filter(|((_, o, _), _)| o == object)
            .map(|(_, n)| n)
            .sum()
    }

    fn describe(&self) -> String {
        let mut components: Vec<_> = self.by_component.iter().collect();
        components.sort_by(|a, b| b.1.cmp(a.1));
        let mut symbols: Vec<_> = self.symbols.iter().collect();
        symbols.sort_by(|a, b| b.1.cmp(a.1));
        let mut text = format!("{} samples, {} lost\ncomponents:", self.total(), self.lost);
        for (component, n) in components {
            text.push_str(&format!(" {component}={n}"));
        }
        text.push_str("\ntop symbols:");
        for ((symbol, object, component), n) in symbols.into_iter().take(25) {
            text.push_str(&format!("\n  {n:6} {symbol} ({object}) -> {component}"));
        }
        text
    }
}

/// The debug file of the libc.so.6 that `pid` maps, by build id, where Debian's libc6-dbg
/// puts it: without it libc's unexported functions cannot be named.
fn require_libc_debug_file(pid: u32) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let libc = maps
        .lines()
        .filter_map(|l| l.split_ascii_whitespace().nth(5))
        .find(|p| p.ends_with("/libc.so.6"))
        .unwrap_or_else(|| panic!("process {pid} maps no libc.so.6"));
    let id = blazesym::helper::read_elf_build_id(libc)
        .unwrap()
        .expect("libc.so.6 has a build id");
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    assert!(
        std::path::Path::new(&debug).exists(),
        "{debug} is missing: install libc6-dbg"
    );
}

/// Keep-alive clients sending `GET /` to `addr` until `stop`; each waits for the whole
/// response before the next request.
fn load(addr: SocketAddr, clients: usize, stop: Arc<AtomicBool>) -> Vec<thread::JoinHandle<u64>> {
    (0..clients)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                stream.set_nodelay(true).unwrap();
                let request = b"GET / HTTP/1.1\r\nHost: burn\r\n\r\n";
                let mut buf = [0u8; 4096];
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) {
                    stream.write_all(request).unwrap();
                    let mut got = Vec::new();
                    while !got.ends_with(b"\r\n\r\nok") {
                        let n = stream.read(&mut buf).unwrap();
                        assert!(n > 0, "burn upstream closed the connection");
                        got.extend_from_slice(&buf[..n]);
                    }
                    done += 1;
                }
                done
            })
        })
        .collect()
}

/// Collects every `every` until `enough` says so or `deadline` passes.
fn profile_until(
    profiler: &mut Profiler,
    every: Duration,
    deadline: Duration,
    mut enough: impl FnMut(&Totals) -> bool,
) -> Totals {
    let mut totals = Totals::default();
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        thread::sleep(every);
        totals.add(profiler.collect().unwrap());
        if enough(&totals) {
            break;
        }
    }
    totals
}

/// This process's CPU time (user + system), all threads.
fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[test]
fn burn_upstream_parser_share_matches_the_truth() {
    let (parser_us, backend_us) = (30u32, 70u32);
    let mut burn = BurnUpstream::start(parser_us, backend_us);
    let pid = burn.process().pid();
    // Started before the clients connect: their server threads do not exist yet and must
    // be picked up by `collect`.
    // A user rule names the backend; it comes before the built-ins.
    let rules = ComponentRules::new(&[UserComponentRule {
        name: "backend".into(),
        symbol: Some("^backend_query$".into()),
        object: Some("^burn-upstream$".into()),
    }])
    .unwrap();
    let mut profiler = Profiler::start(pid, 1000, DEFAULT_STACK_BYTES, rules).unwrap();
    let threads_at_start = profiler.threads();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(burn.addr(), 2, stop.clone());
    // Warm-up: the first collect opens events on the connection threads.
    thread::sleep(Duration::from_millis(300));
    profiler.collect().unwrap();
    let before = burn.truth();
    assert!(
        profiler.threads() > threads_at_start,
        "the connection threads were not picked up ({} threads at start, {} now)",
        threads_at_start,
        profiler.threads()
    );

    let binary = burn_upstream_binary();
    let object = binary.file_name().unwrap().to_str().unwrap().to_owned();
    // About 2000 samples in the burn binary's code make the share's sampling error
    // (binomial, ~1 point) small against the 5-point tolerance.
    let totals = profile_until(
        &mut profiler,
        Duration::from_millis(500),
        Duration::from_secs(40),
        |t| t.in_object(&object) >= 2000,
    );
    let after = burn.truth();
    stop.store(true, Ordering::Relaxed);
    let requests: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    let text = totals.describe();
    eprintln!("{requests} requests\n{text}");
    // The connection threads exit with their connections: their events are closed.
    assert!(
        support::wait_for(Duration::from_secs(10), || {
            profiler.collect().unwrap();
            profiler.threads() == threads_at_start
        }),
        "events of exited threads were not closed ({} threads, {} at start)",
        profiler.threads(),
        threads_at_start
    );
    assert!(
        profiler.kernel_symbols(),
        "/proc/kallsyms is readable as root"
    );

    let in_binary = totals.in_object(&object);
    assert!(in_binary >= 1000, "too few samples in {object}:\n{text}");
    // The ring buffers hold what a busy thread writes between two collects.
    assert!(
        totals.lost * 100 <= totals.total(),
        "over 1 % lost:\n{text}"
    );
    assert!(
        totals.symbol("backend_query") > 0,
        "backend_query missing:\n{text}"
    );
    assert!(
        !is_stripped(&binary),
        "the burn upstream is built with symbols"
    );
    let parser = totals.component("http_parser");
    let share = parser as f64 / in_binary as f64;
    // The truth is what the two functions really cost in this run (the upstream's own
    // CPU clock around each call; about parser_us and backend_us), not the arguments.
    let parser_ns = (after.parser_ns - before.parser_ns) as f64;
    let backend_ns = (after.backend_ns - before.backend_ns) as f64;
    let truth = parser_ns / (parser_ns + backend_ns);
    eprintln!(
        "http_parser share of {object}'s user samples: {:.1} % (truth {:.1} %)",
        share * 100.0,
        truth * 100.0
    );
    assert!(
        (share - truth).abs() <= 0.05,
        "http_parser share {:.1} % is not within 5 points of {:.1} %:\n{text}",
        share * 100.0,
        truth * 100.0
    );
    let backend = totals.component("backend") as f64 / in_binary as f64;
    assert!(
        (backend - (1.0 - truth)).abs() <= 0.05,
        "the user rule's backend share {:.1} % is not within 5 points of {:.1} %:\n{text}",
        backend * 100.0,
        (1.0 - truth) * 100.0
    );
}

/// Samples of the burn upstream's own code, by what their stacks hold.
#[derive(Default, Debug)]
struct ParserStacks {
    /// Leaf in the binary.
    in_binary: u64,
    /// Leaf in the binary and `http_parser` somewhere on the stack.
    under_parser: u64,
    /// Leaf `http_parser_execute` itself.
    parser_self: u64,
    /// Leaf `scan_token`, called from `http_parser_execute`, called from `serve`.
    helper_chained: u64,
    helper: u64,
    truncated: u64,
    total: u64,
    inclusive_parser: u64,
}

impl ParserStacks {
    fn add(&mut self, delta: &ProfileDelta, object: &str) {
        let stacks = &delta.stacks;
        for stack in &stacks.stacks {
            let frames: Vec<_> = stacks.frames_of(stack).collect();
            let n = stack.samples;
            self.total += n;
            let Some(leaf) = frames.last() else { continue };
            if frames[0].name == phasescope::snapshot::TRUNCATED {
                self.truncated += n;
            }
            if leaf.object != object {
                continue;
            }
            self.in_binary += n;
            if frames.iter().any(|f| f.component == "http_parser") {
                self.under_parser += n;
            }
            if leaf.name == "http_parser_execute" {
                self.parser_self += n;
            }
            if leaf.name == "scan_token" {
                self.helper += n;
                let names: Vec<&str> = frames.iter().map(|f| f.name.as_str()).collect();
                if names.ends_with(&["serve", "http_parser_execute", "scan_token"]) {
                    self.helper_chained += n;
                }
            }
        }
        self.inclusive_parser += delta
            .inclusive
            .iter()
            .find(|(c, _)| c == "http_parser")
            .map_or(0, |(_, n)| *n);
    }
}

/// The parser spends all of its CPU in a helper it calls: the running function is never
/// the parser, but its stack is. The inclusive share must match what the upstream's own
/// CPU clock measured around the parser call, and the self share must be near 0.
#[test]
fn burn_upstream_parser_inclusive_share_through_a_helper() {
    let (parser_us, backend_us) = (30u32, 70u32);
    let mut burn = BurnUpstream::start_with(parser_us, backend_us, |c| {
        c.env("BURN_PARSER_HELPER", "1");
    });
    let pid = burn.process().pid();
    let mut profiler = start_profiler(pid);
    assert!(profiler.user_stacks());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(burn.addr(), 2, stop.clone());
    thread::sleep(Duration::from_millis(300));
    profiler.collect().unwrap();
    let before = burn.truth();
    let binary = burn_upstream_binary();
    let object = binary.file_name().unwrap().to_str().unwrap().to_owned();
    let mut seen = ParserStacks::default();
    let mut lost = 0;
    let end = Instant::now() + Duration::from_secs(40);
    while Instant::now() < end && seen.in_binary < 2000 {
        thread::sleep(Duration::from_millis(500));
        let delta = profiler.collect().unwrap();
        lost += delta.lost;
        seen.add(&delta, &object);
    }
    let after = burn.truth();
    stop.store(true, Ordering::Relaxed);
    let requests: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    eprintln!("{requests} requests, {lost} lost: {seen:?}");
    assert!(seen.in_binary >= 1000, "too few samples: {seen:?}");
    assert!(
        lost * 100 <= seen.total,
        "over 1 % lost: {lost} of {seen:?}"
    );
    let parser_ns = (after.parser_ns - before.parser_ns) as f64;
    let backend_ns = (after.backend_ns - before.backend_ns) as f64;
    let truth = parser_ns / (parser_ns + backend_ns);
    let inclusive = seen.under_parser as f64 / seen.in_binary as f64;
    let self_share = seen.parser_self as f64 / seen.in_binary as f64;
    eprintln!(
        "http_parser inclusive {:.1} % (truth {:.1} %), self {:.2} %; {:.1} % of samples truncated",
        inclusive * 100.0,
        truth * 100.0,
        self_share * 100.0,
        seen.truncated as f64 * 100.0 / seen.total as f64
    );
    // Within 6 points: the fixture's requests are all alike, a cycle of about 100 µs of
    // CPU, and a sampler on a fixed period (1 ms of each thread's CPU) falls on the same
    // few places of the cycle for a while, so the shares part from the truth more than
    // independent samples would. 16 runs at 1000 Hz read 28.6 to 31.9 % against 30.2 to
    // 30.4 %, and twice 35.1 and 35.3 % (one of them a fresh clone's full run); at 997 Hz
    // 12 runs read 29.3 to 34.2 %. A chain broken at the helper reads about 0.
    assert!(
        (inclusive - truth).abs() <= 0.06,
        "http_parser inclusive {:.1} % is not within 6 points of the truth {:.1} %: {seen:?}",
        inclusive * 100.0,
        truth * 100.0
    );
    assert!(
        self_share <= 0.02,
        "http_parser self {self_share}: {seen:?}"
    );
    // Every helper sample is chained to its callers, and few stacks are cut.
    assert!(
        seen.helper_chained * 100 >= seen.helper * 98,
        "scan_token not under serve → http_parser_execute: {seen:?}"
    );
    assert!(seen.truncated * 100 <= seen.total * 2, "{seen:?}");
    // The component's inclusive count covers at least the samples under it in the binary
    // (plus its system calls).
    assert!(seen.inclusive_parser >= seen.under_parser, "{seen:?}");
}

/// `perf record --call-graph dwarf` and `perf report --children` on the same process at
/// the same time: the parser's inclusive share (perf's "Children") agrees with ours.
#[test]
fn inclusive_shares_agree_with_perf() {
    let perf = require_tool("perf");
    let mut burn = BurnUpstream::start_with(30, 70, |c| {
        c.env("BURN_PARSER_HELPER", "1");
    });
    let pid = burn.process().pid();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(burn.addr(), 2, stop.clone());
    thread::sleep(Duration::from_millis(300));
    let mut profiler = Profiler::start(
        pid,
        997,
        DEFAULT_STACK_BYTES,
        ComponentRules::new(&[]).unwrap(),
    )
    .unwrap();
    profiler.collect().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("perf.data");
    // The threads exist already: perf follows them from the start.
    let record = Command::new(&perf)
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "997",
            "--call-graph",
            "dwarf,16384",
        ])
        .arg("-p")
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep", "4"])
        .output()
        .unwrap();
    let delta = profiler.collect().unwrap();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert!(
        record.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&record.stderr)
    );
    let total: u64 = delta.stacks.total();
    let ours = delta
        .inclusive
        .iter()
        .find(|(c, _)| c == "http_parser")
        .map_or(0, |(_, n)| *n) as f64
        / total as f64;
    let report = Command::new(&perf)
        .arg("report")
        .arg("-i")
        .arg(&data)
        .args([
            "--children",
            "--stdio",
            "-g",
            "none",
            "--sort",
            "symbol",
            "--percent-limit",
            "0",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success(),
        "perf report: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    // `Children  Self  Symbol …`: "    26.10%     0.02%  [.] http_parser_execute  -  -".
    let children = text
        .lines()
        .find(|l| l.split_whitespace().nth(3) == Some("http_parser_execute"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.trim_end_matches('%').parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no http_parser_execute in perf report:\n{text}"))
        / 100.0;
    eprintln!(
        "http_parser inclusive: ours {:.1} % of {total} samples, perf --children {:.1} %",
        ours * 100.0,
        children * 100.0
    );
    assert!(
        (ours - children).abs() <= 0.04,
        "ours {ours:.3} against perf's {children:.3}:\n{text}"
    );
}

#[test]
fn webdis_components_under_load() {
    let redis = RedisServer::start();
    let mut webdis = Webdis::start(redis.port());
    let pid = webdis.process().pid();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let own = exe.file_name().unwrap().to_str().unwrap().to_owned();
    let ldd = Command::new(require_tool("ldd"))
        .arg(&exe)
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();

    let mut profiler = start_profiler(pid);
    let url = webdis.url("/GET/phasescope-profile");
    let load = thread::spawn(move || run_wrk(&url, 6, 20, 2));
    thread::sleep(Duration::from_millis(500));
    profiler.collect().unwrap();

    // The sampler's own cost: this process's CPU time over the window (the load generator
    // is a child process, not counted) per second of wall time.
    let (cpu_before, wall_before) = (process_cpu(), Instant::now());
    let totals = profile_until(
        &mut profiler,
        Duration::from_secs(1),
        Duration::from_secs(4),
        |_| false,
    );
    let cost = (process_cpu() - cpu_before).as_secs_f64() / wall_before.elapsed().as_secs_f64();
    let report = load.join().unwrap();
    let text = totals.describe();
    eprintln!(
        "wrk: {} requests\n{text}\nsampler cost: {:.2} ms CPU per second at 1 kHz on {} threads",
        report.requests,
        cost * 1000.0,
        profiler.threads()
    );

    assert!(report.requests > 0, "{}", report.output);
    let mut expected = vec![own.as_str(), "event_loop", "libc.so.6", "kernel_network"];
    if ldd.contains("libhiredis") {
        expected.push("redis_client");
    }
    for component in expected {
        assert!(
            totals.component(component) > 0,
            "component {component} missing (ldd: {ldd}):\n{text}"
        );
    }
    if is_stripped(&exe) {
        // Its code has no names: it reads as one component after the file.
        assert!(totals.component(&own) > 0);
    }
    // libc.so.6 has only its exported symbols; its debug file (libc6-dbg) names the rest
    // (the IFUNC variants of memcpy and strlen, malloc's internals): next to nothing of
    // libc stays unnamed.
    require_libc_debug_file(pid);
    let in_libc = totals.in_object("libc.so.6");
    let unnamed = totals
        .symbols
        .iter()
        // What no symbol covers reads as the library's name and the function's offset.
        .filter(|((symbol, object, _), _)| {
            object == "libc.so.6" && symbol.starts_with("libc.so.6+0x")
        })
        .map(|(_, n)| n)
        .sum::<u64>();
    assert!(in_libc >= 100, "{in_libc} samples in libc.so.6:\n{text}");
    assert!(
        unnamed * 20 <= in_libc,
        "{unnamed} of {in_libc} libc.so.6 samples unnamed:\n{text}"
    );
    assert!(
        totals
            .symbols
            .keys()
            .all(|(symbol, _, _)| !symbol.starts_with("__GI_")),
        "glibc's hidden aliases are named by their public names:\n{text}"
    );
    // CPU this process used over the wall time: waiting for a CPU does not add to it, and
    // on a busy machine Webdis runs less and gives fewer samples to read.
    assert!(
        cost < 0.1,
        "the sampler took {:.1} % of a CPU",
        cost * 100.0
    );
}

/// Inclusive samples by component, and the truncated ones, of several collects.
#[derive(Default, Debug)]
struct Inclusive {
    by_component: HashMap<String, u64>,
    truncated: u64,
    total: u64,
}

impl Inclusive {
    fn add(&mut self, delta: &ProfileDelta) {
        for (component, n) in &delta.inclusive {
            *self.by_component.entry(component.clone()).or_insert(0) += n;
        }
        self.truncated += delta.stacks.truncated_samples;
        self.total += delta.total();
    }

    fn share(&self, component: &str) -> f64 {
        self.by_component.get(component).copied().unwrap_or(0) as f64 / self.total.max(1) as f64
    }
}

/// Webdis's walks read a few KiB of its stack: after the first collects the events copy
/// that much (with headroom) instead of 16 KiB per sample, and the stacks stay whole: as
/// few truncated, and the components at their roots on as many of them as before.
#[test]
fn the_stack_copy_shrinks_to_what_webdis_walks_read() {
    let redis = RedisServer::start();
    let mut webdis = Webdis::start(redis.port());
    let pid = webdis.process().pid();
    let mut profiler = start_profiler(pid);
    assert_eq!(profiler.stack_bytes(), DEFAULT_STACK_BYTES);
    let url = webdis.url("/GET/phasescope-profile");
    let load = thread::spawn(move || run_wrk(&url, 14, 20, 2));
    thread::sleep(Duration::from_millis(300));
    profiler.collect().unwrap();
    let mut before = Inclusive::default();
    let mut after = Inclusive::default();
    let end = Instant::now() + Duration::from_secs(12);
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(500));
        let full = profiler.stack_bytes() == DEFAULT_STACK_BYTES;
        let delta = profiler.collect().unwrap();
        if full {
            before.add(&delta);
        } else {
            after.add(&delta);
        }
    }
    let report = load.join().unwrap();
    let copied = profiler.stack_bytes();
    eprintln!(
        "{} requests; copy {DEFAULT_STACK_BYTES} → {copied} bytes\nbefore: {before:?}\nafter: {after:?}",
        report.requests
    );
    assert!(
        (1024..=DEFAULT_STACK_BYTES / 2).contains(&copied),
        "the copy is {copied} bytes"
    );
    assert!(before.total >= 300 && after.total >= 300, "too few samples");
    let truncated = |i: &Inclusive| i.truncated as f64 / i.total as f64;
    assert!(
        truncated(&after) <= truncated(&before) + 0.01,
        "{:.2} % truncated with the smaller copy, {:.2} % with 16 KiB",
        truncated(&after) * 100.0,
        truncated(&before) * 100.0
    );
    // The copy decides how far up the user stack a walk gets: the components at the root
    // of Webdis's stacks (its event loop, its own `main`) are on as many stacks as before.
    // The rest move with the load (the kernel's share of the work, for one), which
    // changes over the test on a shared machine, not with the copy.
    let roots: Vec<&String> = before
        .by_component
        .keys()
        .filter(|c| before.share(c) >= 0.9)
        .collect();
    assert!(!roots.is_empty(), "{before:?}");
    for component in roots {
        let (a, b) = (after.share(component), before.share(component));
        assert!(
            a >= b - 0.02,
            "{component}: inclusive {:.1} % with the smaller copy, {:.1} % with 16 KiB",
            a * 100.0,
            b * 100.0
        );
    }
}

#[test]
fn php_fixture_regex_and_engine() {
    let server = AmpServer::start(&[]);
    let pid = server.pid();
    let mut profiler = start_profiler(pid);
    let url = server.url("/");
    // Rounds of load until PCRE2 has been seen a few times (about 1 % of the fixture's
    // CPU), so that a slow machine only makes the test longer.
    let mut totals = Totals::default();
    let mut requests = 0;
    let deadline = Instant::now() + Duration::from_secs(40);
    while Instant::now() < deadline && totals.component("regex") < 20 {
        let url = url.clone();
        let load = thread::spawn(move || run_wrk(&url, 3, 10, 1));
        while !load.is_finished() {
            thread::sleep(Duration::from_millis(500));
            totals.add(profiler.collect().unwrap());
        }
        let report = load.join().unwrap();
        assert!(report.requests > 0, "{}", report.output);
        requests += report.requests;
    }
    totals.add(profiler.collect().unwrap());
    let text = totals.describe();
    eprintln!("wrk: {requests} requests\n{text}");
    assert!(
        totals.component("php_engine") > 0,
        "php_engine missing:\n{text}"
    );
    let regex = totals.component("regex");
    let jit = totals.in_object(ANON_EXEC_OBJECT);
    assert!(regex > 0, "regex (PCRE2 or its JIT) missing:\n{text}");
    eprintln!(
        "regex share {:.1} % ({jit} samples in JIT code)",
        regex as f64 * 100.0 / totals.total() as f64
    );
}

/// The process goes away (a restart): `collect` says so instead of returning empty deltas,
/// so the watcher re-finds the process and starts a new profiler.
#[test]
fn collect_fails_once_the_process_is_gone() {
    let mut burn = BurnUpstream::start(1, 1);
    let pid = burn.process().pid();
    let mut profiler = start_profiler(pid);
    profiler.collect().unwrap();
    burn.process().kill();
    let error = profiler.collect().unwrap_err();
    assert!(!error.is_permission(), "{error:?}");
    assert!(error.to_string().contains(&format!("pid {pid}")), "{error}");
    assert!(Profiler::start(
        pid,
        1000,
        DEFAULT_STACK_BYTES,
        ComponentRules::new(&[]).unwrap()
    )
    .is_err());
}

/// Without privileges the error says what to grant: a child running this test binary as
/// `nobody` tries to sample a process of root's.
#[test]
fn no_permission_says_what_to_grant() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        panic!("this test drops from root to nobody; run the suite as root");
    }
    let mut burn = BurnUpstream::start(1, 1);
    let pid = burn.process().pid();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe);
    child
        .args(["--exact", "permission_child", "--ignored", "--nocapture"])
        .env("PHASESCOPE_PROFILE_CHILD_PID", pid.to_string());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        child.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = child.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "child failed:\n{text}");
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("PROFILE-ERROR: "))
        .unwrap_or_else(|| panic!("the child printed no error:\n{text}"));
    eprintln!("as nobody: {line}");
    for needle in ["CAP_PERFMON", "perf_event_paranoid", &format!("pid {pid}")] {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
}

/// Run by `no_permission_says_what_to_grant` as an unprivileged child.
#[test]
#[ignore = "run as a child by no_permission_says_what_to_grant"]
fn permission_child() {
    let pid: u32 = std::env::var("PHASESCOPE_PROFILE_CHILD_PID")
        .expect("PHASESCOPE_PROFILE_CHILD_PID")
        .parse()
        .unwrap();
    match Profiler::start(
        pid,
        1000,
        DEFAULT_STACK_BYTES,
        ComponentRules::new(&[]).unwrap(),
    ) {
        Ok(_) => panic!("an unprivileged user could sample root's process {pid}"),
        Err(error) => {
            assert!(error.is_permission(), "{error:?}");
            println!("PROFILE-ERROR: {error}");
        }
    }
}

/// Webdis's CPU time (user + system, all threads) from /proc/PID/stat.
fn process_cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let utime: f64 = fields[11].parse().unwrap();
    let stime: f64 = fields[12].parse().unwrap();
    Duration::from_secs_f64((utime + stime) / ticks)
}

/// A measurement, not a check: Webdis's CPU per request under wrk with the sampler on and
/// off, alternating rounds (the sampling interrupts are charged to the sampled threads),
/// and the sampler's own CPU per second. Run it alone:
/// `cargo nextest run --release --test upstream_profile --run-ignored only -E 'test(overhead)' --no-capture`
#[test]
#[ignore = "a measurement; run on its own"]
fn sampler_overhead_on_webdis() {
    let redis = RedisServer::start();
    let mut webdis = Webdis::start(redis.port());
    let pid = webdis.process().pid();
    let url = webdis.url("/GET/phasescope-profile");
    let seconds = 3;
    let mut rounds = Vec::new();
    for round in 0..8 {
        let profiled = round % 2 == 1;
        // Started (and its symbol tables loaded by a first collect under load) before the
        // window: the steady cost is what a long-running watcher pays.
        let mut profiler = profiled.then(|| {
            Profiler::start(
                pid,
                1000,
                DEFAULT_STACK_BYTES,
                ComponentRules::new(&[]).unwrap(),
            )
            .unwrap()
        });
        if let Some(profiler) = profiler.as_mut() {
            let url = url.clone();
            let warm = thread::spawn(move || run_wrk(&url, 1, 20, 2));
            warm.join().unwrap();
            profiler.collect().unwrap();
        }
        let (webdis_before, own_before, wall) =
            (process_cpu_of(pid), process_cpu(), Instant::now());
        let url = url.clone();
        let load = thread::spawn(move || run_wrk(&url, seconds, 20, 2));
        let mut samples = 0;
        while !load.is_finished() {
            thread::sleep(Duration::from_millis(1000));
            if let Some(profiler) = profiler.as_mut() {
                samples += profiler.collect().unwrap().total();
            }
        }
        let report = load.join().unwrap();
        let webdis_cpu = (process_cpu_of(pid) - webdis_before).as_secs_f64();
        let own = (process_cpu() - own_before).as_secs_f64() / wall.elapsed().as_secs_f64();
        let per_request = webdis_cpu * 1e6 / report.requests as f64;
        eprintln!(
            "round {round} profiling {profiled}: {} requests, webdis {per_request:.2} us CPU per request, \
             {samples} samples, this process {:.2} ms CPU per second",
            report.requests,
            own * 1000.0
        );
        rounds.push((profiled, per_request, own));
    }
    let mean = |on: bool, pick: fn(&(bool, f64, f64)) -> f64| {
        let values: Vec<f64> = rounds.iter().filter(|r| r.0 == on).map(pick).collect();
        values.iter().sum::<f64>() / values.len() as f64
    };
    eprintln!(
        "webdis CPU per request: {:.2} us profiled, {:.2} us not; sampler {:.2} ms CPU per second",
        mean(true, |r| r.1),
        mean(false, |r| r.1),
        mean(true, |r| r.2) * 1000.0
    );
}

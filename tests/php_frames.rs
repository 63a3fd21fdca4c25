//! The PHP frame sampler (src/upstream/profile/php/) against the real `php` binary: a
//! fixture (tests/fixtures/php-burn.php) whose CPU goes, by construction, to two known
//! functions run inside Fibers resumed from an event loop, and which measures that CPU
//! itself. The sampled shares must match what the script measured in the same run, and
//! what Excimer (PHP's in-process sampler) sees; an idle server must give no samples.
//!
//! Needs root (or CAP_SYS_PTRACE) for process_vm_readv on the fixture.

mod support;

use std::fs;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use phasescope::upstream::profile::php::{self, PhpFrame, PhpSampler};
use tempfile::TempDir;

use support::{loopback, parse_response, require_tool, HttpConn, Managed, STARTUP_DEADLINE};

const PARSE: &str = "Burn\\Parser::parseHead";
const QUERY: &str = "Burn\\Backend::query";
/// How far a sampled share may be from the measured one, in percentage points.
const TOLERANCE: f64 = 5.0;
const SAMPLE_FOR: Duration = Duration::from_secs(3);

/// The tests load the machine's cores; run one at a time so that none skews another.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The fixture on a port it picked itself, killed on drop.
struct Burn {
    process: Managed,
    port: u16,
    dir: TempDir,
}

impl Burn {
    fn start(env: &[(&str, &str)]) -> Burn {
        let php = require_tool("php");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/php-burn.php");
        let dir = tempfile::Builder::new()
            .prefix("php-burn-")
            .tempdir()
            .unwrap();
        let log = dir.path().join("php-burn.log");
        let mut command = Command::new(php);
        command.arg(script).arg("0").current_dir(dir.path());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut process = Managed::spawn("php-burn.php", &mut command, &log);
        let deadline = Instant::now() + STARTUP_DEADLINE;
        let port = loop {
            let text = fs::read_to_string(&log).unwrap_or_default();
            if let Some(rest) = text.split("listening on 127.0.0.1:").nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(port) = digits.parse::<u16>() {
                    break port;
                }
            }
            if let Some(status) = process.exited() {
                panic!("php-burn.php exited with {status}\n{}", process.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "php-burn.php did not start within {STARTUP_DEADLINE:?}\n{}",
                process.log_tail()
            );
            thread::sleep(Duration::from_millis(20));
        };
        Burn { process, port, dir }
    }

    fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    fn get(&self, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        let raw = HttpConn::connect(self.addr()).exchange(request.as_bytes());
        let response = parse_response(&raw);
        assert_eq!(response.status, 200, "{path}\n{}", self.process.log_tail());
        response.body_text()
    }

    fn truth(&self) -> Truth {
        let body = self.get("/truth");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        let field = |name: &str| {
            json[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{name} in {body}"))
        };
        Truth {
            parse_us: field("parse_us"),
            query_us: field("query_us"),
            total_us: field("total_us"),
            requests: field("requests"),
        }
    }
}

/// What the script measured, cumulative since its start.
#[derive(Clone, Copy, Debug)]
struct Truth {
    parse_us: f64,
    query_us: f64,
    total_us: f64,
    requests: f64,
}

impl Truth {
    /// Shares of the CPU time between two readings, in percent: (parse, query).
    fn shares_since(&self, before: &Truth) -> (f64, f64) {
        let total = self.total_us - before.total_us;
        (
            100.0 * (self.parse_us - before.parse_us) / total,
            100.0 * (self.query_us - before.query_us) / total,
        )
    }
}

/// Keep-alive clients sending /work back to back until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let threads = (0..clients)
            .map(|_| {
                let stop = stop.clone();
                let done = done.clone();
                thread::spawn(move || {
                    let mut conn = HttpConn::connect(addr);
                    let request = b"GET /work HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
                    while !stop.load(Ordering::Relaxed) {
                        let raw = conn.exchange(request);
                        assert_eq!(parse_response(&raw).status, 200);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Load {
            stop,
            done,
            threads,
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Inclusive share (percent) of the samples whose stack holds `function`.
fn inclusive(stacks: &[(Vec<PhpFrame>, u64)], function: &str) -> f64 {
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let with: u64 = stacks
        .iter()
        .filter(|(stack, _)| stack.iter().any(|f| &*f.function == function))
        .map(|(_, n)| n)
        .sum();
    100.0 * with as f64 / total.max(1) as f64
}

fn show(stacks: &[(Vec<PhpFrame>, u64)], top: usize) -> String {
    let mut sorted: Vec<_> = stacks.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1));
    sorted
        .iter()
        .take(top)
        .map(|(stack, n)| {
            let names: Vec<&str> = stack.iter().map(|f| &*f.function).collect();
            format!("{n:6} {}\n", names.join(";"))
        })
        .collect()
}

/// Samples `burn` under load for [`SAMPLE_FOR`]; returns the stacks, the truth shares in
/// that window and the sampler's CPU share of one core.
fn sample_under_load(burn: &Burn, between: impl FnOnce()) -> Sampled {
    let target = php::detect(burn.process.pid())
        .expect("detect")
        .expect("the fixture is PHP");
    let load = Load::start(burn.addr(), 3);
    // Past the first requests (class loading, the first fibers).
    assert!(
        support::wait_for(Duration::from_secs(10), || load
            .done
            .load(Ordering::Relaxed)
            > 50),
        "no load got through\n{}",
        burn.process.log_tail()
    );
    let before = burn.truth();
    let mut sampler = PhpSampler::start(target, 1000).expect("sampler");
    let _ = sampler.collect();
    let cpu_before = sampler.sampler_cpu();
    let started = Instant::now();
    thread::sleep(SAMPLE_FOR);
    let mut stacks = sampler.collect();
    let elapsed = started.elapsed();
    let cpu_after = sampler.sampler_cpu();
    let after = burn.truth();
    between();
    drop(sampler);
    drop(load);
    let cost = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => 100.0 * (b - a).as_secs_f64() / elapsed.as_secs_f64(),
        _ => f64::NAN,
    };
    let (ticks, off_cpu, errors, truncated, reads, torn) = (
        stacks.ticks(),
        stacks.off_cpu(),
        stacks.errors(),
        stacks.truncated(),
        stacks.reads(),
        stacks.torn(),
    );
    let stacks = stacks.take();
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    println!(
        "ticks {ticks}, on-CPU samples {samples}, off-CPU {off_cpu}, errors {errors}, \
         torn walks retried {torn}, truncated {truncated}, reads {reads} ({:.2} per sample), requests {}, \
         sampler CPU {cost:.2}% of a core",
        reads as f64 / samples.max(1) as f64,
        after.requests - before.requests,
    );
    Sampled {
        truth: after.shares_since(&before),
        stacks,
        cost,
    }
}

struct Sampled {
    stacks: Vec<(Vec<PhpFrame>, u64)>,
    /// (parseHead, query) in percent of the process's CPU time.
    truth: (f64, f64),
    cost: f64,
}

#[test]
fn shares_match_the_measured_truth_and_fibers_chain_under_the_resumer() {
    let _serial = serial();
    let burn = Burn::start(&[("BURN_PARSE_US", "300"), ("BURN_QUERY_US", "700")]);
    let target = php::detect(burn.process.pid()).unwrap().unwrap();
    assert!(target.version().starts_with("8."), "{}", target.version());
    let sampled = sample_under_load(&burn, || {});
    let stacks = &sampled.stacks;
    let parse = inclusive(stacks, PARSE);
    let query = inclusive(stacks, QUERY);
    let (parse_truth, query_truth) = sampled.truth;
    println!(
        "PHP {}: parseHead sampled {parse:.1}% vs measured {parse_truth:.1}%, query sampled \
         {query:.1}% vs measured {query_truth:.1}%\n{}",
        target.version(),
        show(stacks, 8)
    );
    if std::env::var_os("PHP_FRAMES_DEBUG").is_some() {
        let mut sorted: Vec<_> = stacks.iter().collect();
        sorted.sort_by(|a, b| b.1.cmp(&a.1));
        for (stack, n) in sorted.iter().take(6) {
            println!("{n} {stack:?}");
        }
    }
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    assert!(
        samples > 1000,
        "too few samples: {samples}\n{}",
        show(stacks, 8)
    );
    assert!(
        (parse - parse_truth).abs() <= TOLERANCE,
        "parseHead {parse:.1}% sampled, {parse_truth:.1}% measured\n{}",
        show(stacks, 8)
    );
    assert!(
        (query - query_truth).abs() <= TOLERANCE,
        "query {query:.1}% sampled, {query_truth:.1}% measured\n{}",
        show(stacks, 8)
    );

    // A parseHead stack, root first: {main} → the loop → its deferred closure →
    // Fiber::resume → the fiber's closure → Server::handle → parseHead.
    let (stack, _) = stacks
        .iter()
        .filter(|(stack, _)| stack.iter().any(|f| &*f.function == PARSE))
        .max_by_key(|(_, n)| *n)
        .unwrap();
    let names: Vec<&str> = stack.iter().map(|f| &*f.function).collect();
    let at = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("{name} not in {names:?}"))
    };
    assert_eq!(names[0], "{main}", "{names:?}");
    assert!(stack[0].file.ends_with("php-burn.php"), "{:?}", stack[0]);
    assert!(
        at("Burn\\EventLoop::run") < at("Fiber::resume"),
        "{names:?}"
    );
    assert!(
        at("Fiber::resume") < at("Burn\\Server::handle"),
        "{names:?}"
    );
    assert!(at("Burn\\Server::handle") < at(PARSE), "{names:?}");
    // Between the loop and Fiber::resume, the loop's deferred closure, named as PHP's
    // traces name it (`Burn\Server->Burn\{closure}()`), with `::`.
    let resumer = &stack[at("Fiber::resume") - 1];
    assert_eq!(
        &*resumer.function, "Burn\\Server::Burn\\{closure}",
        "{names:?}"
    );
    // The fiber's own closure is another declaration, on another line.
    let fiber_closure = &stack[at("Fiber::resume") + 1];
    assert_eq!(fiber_closure.function, resumer.function);
    assert_ne!(fiber_closure.line, resumer.line, "{stack:?}");
    let parse_frame = &stack[at(PARSE)];
    assert!(parse_frame.file.ends_with("php-burn.php") && parse_frame.line > 0);
    let resume = &stack[at("Fiber::resume")];
    assert_eq!(
        (&*resume.file, resume.line),
        ("", 0),
        "internal functions have no file"
    );

    assert!(
        sampled.cost.is_nan() || sampled.cost < 5.0,
        "the sampler used {:.2}% of a core",
        sampled.cost
    );
}

#[test]
fn an_idle_server_gives_no_samples() {
    let _serial = serial();
    let burn = Burn::start(&[]);
    // One request so that the loop is in its steady state (classes loaded, a fiber run).
    assert_eq!(burn.get("/work"), "ok\n");
    let target = php::detect(burn.process.pid()).unwrap().unwrap();
    let mut sampler = PhpSampler::start(target, 1000).unwrap();
    let _ = sampler.collect();
    thread::sleep(Duration::from_secs(1));
    let mut stacks = sampler.collect();
    let (ticks, off_cpu) = (stacks.ticks(), stacks.off_cpu());
    let stacks = stacks.take();
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    println!(
        "idle: {ticks} ticks, {off_cpu} off CPU, {samples} samples\n{}",
        show(&stacks, 5)
    );
    assert!(ticks >= 900, "the sampler ticked {ticks} times in a second");
    // The loop wakes every 100 ms to look for signals: a sample or two may catch that.
    assert!(
        samples <= 5,
        "an idle server gave {samples} samples\n{}",
        show(&stacks, 5)
    );
}

#[test]
fn shares_agree_with_excimer() {
    let _serial = serial();
    let excimer_out = tempfile::Builder::new()
        .prefix("excimer-")
        .tempdir()
        .unwrap();
    let out = excimer_out.path().join("collapsed.txt");
    let burn = Burn::start(&[
        ("BURN_PARSE_US", "300"),
        ("BURN_QUERY_US", "700"),
        ("EXCIMER_OUT", out.to_str().unwrap()),
    ]);
    let _ = &burn.dir;
    assert_eq!(burn.get("/profile/start"), "started\n");
    let sampled = sample_under_load(&burn, || {
        assert_eq!(burn.get("/profile/stop"), "written\n");
    });
    assert!(
        support::wait_for(Duration::from_secs(10), || out.exists()),
        "Excimer wrote nothing\n{}",
        burn.process.log_tail()
    );
    let text = fs::read_to_string(&out).unwrap();
    // Collapsed stacks: `frame;frame;… count` per line, root first.
    let mut total = 0u64;
    let (mut parse_n, mut query_n) = (0u64, 0u64);
    for line in text.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        total += count;
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.contains(&PARSE) {
            parse_n += count;
        }
        if frames.contains(&QUERY) {
            query_n += count;
        }
    }
    assert!(total > 500, "Excimer took {total} samples:\n{text}");
    let mut lines: Vec<(u64, &str)> = text
        .lines()
        .filter_map(|l| {
            l.rsplit_once(' ')
                .and_then(|(s, n)| Some((n.parse().ok()?, s)))
        })
        .collect();
    lines.sort_by(|a, b| b.0.cmp(&a.0));
    for (n, stack) in lines.iter().take(10) {
        println!("excimer {n:6} {stack}");
    }
    let excimer = (
        100.0 * parse_n as f64 / total as f64,
        100.0 * query_n as f64 / total as f64,
    );
    let ours = (
        inclusive(&sampled.stacks, PARSE),
        inclusive(&sampled.stacks, QUERY),
    );
    let rest = |(a, b): (f64, f64)| 100.0 - a - b;
    println!(
        "Excimer ({total} samples) parseHead {:.1}%, query {:.1}%, rest {:.1}%; \
         ours parseHead {:.1}%, query {:.1}%, rest {:.1}%; measured {:.1}% / {:.1}%",
        excimer.0,
        excimer.1,
        rest(excimer),
        ours.0,
        ours.1,
        rest(ours),
        sampled.truth.0,
        sampled.truth.1,
    );
    for (name, a, b) in [
        ("parseHead", ours.0, excimer.0),
        ("query", ours.1, excimer.1),
        ("rest", rest(ours), rest(excimer)),
    ] {
        assert!(
            (a - b).abs() <= TOLERANCE,
            "{name}: ours {a:.1}%, Excimer {b:.1}%\n{}",
            show(&sampled.stacks, 8)
        );
    }
}

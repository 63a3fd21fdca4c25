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

use phasescope::upstream::profile::php::{self, PhpFrame, PhpPace, PhpSampler};
use tempfile::TempDir;

use support::{loopback, parse_response, require_tool, HttpConn, Managed, STARTUP_DEADLINE};

const PARSE: &str = "Burn\\Parser::parseHead";
const QUERY: &str = "Burn\\Backend::query";
/// How far a sampled share may be from the measured one, in percentage points.
const TOLERANCE: f64 = 5.0;
const SAMPLE_FOR: Duration = Duration::from_secs(3);
/// CPU per /work request in each burn function (30:70), long against the loop's own work
/// per request (accept, parse, two fiber switches, the write) so that "the rest" is a few
/// percent.
const PARSE_US: &str = "600";
const QUERY_US: &str = "1400";

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
    sorted.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    sorted
        .iter()
        .take(top)
        .map(|(stack, n)| {
            let names: Vec<&str> = stack.iter().map(|f| &*f.function).collect();
            format!("{n:6} {}\n", names.join(";"))
        })
        .collect()
}

/// A thread that only sleeps to absolute 1 ms deadlines for `time`, as the sampler's
/// loop does, and returns its CPU share of one core: what the wake-ups alone cost on this
/// machine (on a virtual machine they cost several times what they do on bare metal).
fn wakeup_baseline(time: Duration) -> JoinHandle<f64> {
    thread::spawn(move || {
        let thread_cpu = || {
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `now` is a valid timespec to write to.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
            Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
        };
        let start = Instant::now();
        let cpu = thread_cpu();
        let mut deadline = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut deadline) };
        while start.elapsed() < time {
            deadline.tv_nsec += 1_000_000;
            if deadline.tv_nsec >= 1_000_000_000 {
                deadline.tv_nsec -= 1_000_000_000;
                deadline.tv_sec += 1;
            }
            // SAFETY: a valid absolute deadline; no remainder with TIMER_ABSTIME.
            unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &deadline,
                    std::ptr::null_mut(),
                )
            };
        }
        100.0 * (thread_cpu() - cpu).as_secs_f64() / start.elapsed().as_secs_f64()
    })
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
    let machine_before = support::CpuTimes::now();
    // 997 Hz as the proxy's default: a sampler paced by the thread's CPU time at exactly
    // 1 kHz runs in lockstep with Excimer's 1 ms CPU timer on the same thread.
    let mut sampler = PhpSampler::start(target, 997).expect("sampler");
    let _ = sampler.collect();
    let cpu_before = sampler.sampler_cpu();
    let started = Instant::now();
    let baseline = wakeup_baseline(SAMPLE_FOR);
    run_for_cpu(burn.process.pid());
    let mut stacks = sampler.collect();
    let elapsed = started.elapsed();
    let cpu_after = sampler.sampler_cpu();
    let after = burn.truth();
    // The hypervisor's share of the machine's CPU time over the window (/proc/stat):
    // while it holds a CPU, our sampler on it reads late, whatever its priority.
    let steal = machine_before
        .zip(support::CpuTimes::now())
        .and_then(|(b, a)| a.steal_since(&b))
        .unwrap_or(f64::NAN);
    between();
    let realtime = sampler.realtime();
    drop(sampler);
    drop(load);
    let cost = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => 100.0 * (b - a).as_secs_f64() / elapsed.as_secs_f64(),
        _ => f64::NAN,
    };
    let wakeups = baseline.join().unwrap();
    let late = stacks.late();
    let (missed, ticks, off_cpu, errors, truncated, reads, torn) = (
        stacks.missed(),
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
        "ticks {ticks} ({missed} missed), on-CPU samples {samples}, off-CPU {off_cpu}, errors {errors}, \
         torn walks retried {torn}, truncated {truncated}, reads {reads} ({:.2} per sample), requests {}, \
         sampler CPU {cost:.2}% of a core (a bare 1 kHz sleep loop: {wakeups:.2}%), \
         steal {steal:.1}% of the machine's CPU time, {late} read late (real-time sampler: {realtime})",
        reads as f64 / samples.max(1) as f64,
        after.requests - before.requests,
    );
    Sampled {
        truth: after.shares_since(&before),
        stacks,
        cost,
        wakeups,
        rate: samples as f64 / elapsed.as_secs_f64(),
        late_share: late as f64 / samples.max(1) as f64,
    }
}

/// The CPU the PHP thread must have run while sampled: at 997 Hz, 1,500 samples.
const SAMPLE_CPU: Duration = Duration::from_millis(1500);

/// Waits [`SAMPLE_FOR`], and then on until the PHP process's main thread has run
/// [`SAMPLE_CPU`] since the call (a thread that waits for a CPU most of the time, on a
/// loaded machine, takes longer to give as many samples), for at most 10 × SAMPLE_FOR.
fn run_for_cpu(pid: u32) {
    let cpu = || -> Option<u64> {
        let text = fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
        text.split_whitespace().next()?.parse().ok()
    };
    let started = Instant::now();
    let from = cpu();
    thread::sleep(SAMPLE_FOR);
    while started.elapsed() < SAMPLE_FOR * 10 {
        let ran = from.zip(cpu()).map(|(a, b)| b.saturating_sub(a));
        if ran.is_none_or(|ns| ns >= SAMPLE_CPU.as_nanos() as u64) {
            return;
        }
        thread::sleep(Duration::from_millis(250));
    }
}

struct Sampled {
    stacks: Vec<(Vec<PhpFrame>, u64)>,
    /// (parseHead, query) in percent of the process's CPU time.
    truth: (f64, f64),
    /// The sampler thread's CPU, and that of a thread that only wakes up as often, in
    /// percent of one core.
    cost: f64,
    wakeups: f64,
    /// Stacks read a second.
    rate: f64,
    /// The share of the samples whose stack was read late (the sampler waited for a CPU).
    late_share: f64,
}

#[test]
fn shares_match_the_measured_truth_and_fibers_chain_under_the_resumer() {
    let _serial = serial();
    let burn = Burn::start(&[("BURN_PARSE_US", PARSE_US), ("BURN_QUERY_US", QUERY_US)]);
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
        sorted.sort_by_key(|entry| std::cmp::Reverse(entry.1));
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

    // What reading stacks costs on top of waking up as often, relative to how often it
    // read one (a stack a millisecond of the thread's CPU: a thread on a CPU half the time
    // is read half as often). Per 1,000 stacks a second: under 2 % of a core built with
    // optimisations (about 0.5 % measured), several times that unoptimised (6.5 to 7.1 %
    // measured on a quiet machine, 9.3 and 10.9 % while the hypervisor took 16 and 22 %
    // of the CPUs' time).
    let per_thousand = if cfg!(debug_assertions) { 12.0 } else { 2.0 };
    let budget = per_thousand * sampled.rate / 1000.0;
    assert!(
        sampled.cost.is_nan() || sampled.cost - sampled.wakeups < budget,
        "the sampler used {:.2}% of a core, {:.2}% more than its wake-ups alone, reading \
         {:.0} stacks a second (budget {budget:.2}%)",
        sampled.cost,
        sampled.cost - sampled.wakeups,
        sampled.rate
    );
}

/// Under the default budget (what a `profile = true` tap gets), a PHP server burning a
/// core is sampled at tens of Hz, still takes samples of the order of the budget, and
/// its samples, each weighed by its period, give the script's own shares and stand for
/// the CPU its thread ran.
#[test]
fn under_the_default_budget_a_busy_server_is_sampled_at_tens_of_hz_and_its_shares_hold() {
    kept_to_the_budget(PhpPace::CpuTime);
}

/// The same with the sampler paced by a timer and the thread's state, as it is where perf
/// events cannot be opened: a tick counts while the thread is running or waiting to run,
/// so the weighted ticks stand for its run and run-queue time together.
#[test]
fn paced_by_a_timer_a_busy_server_keeps_to_the_budget_too() {
    kept_to_the_budget(PhpPace::Timer);
}

fn kept_to_the_budget(pace: PhpPace) {
    use phasescope::upstream::profile::{ComponentRules, PhpProfiler, UserComponentRule};
    let _serial = serial();
    let burn = Burn::start(&[("BURN_PARSE_US", PARSE_US), ("BURN_QUERY_US", QUERY_US)]);
    let pid = burn.process.pid();
    let rule = |name: &str, symbol: &str| UserComponentRule {
        name: name.to_owned(),
        symbol: Some(symbol.to_owned()),
        object: None,
    };
    let rules = ComponentRules::new(&[
        rule("parser", r"^Burn\\Parser::"),
        rule("backend", r"^Burn\\Backend::"),
    ])
    .unwrap();
    let hz = 997;
    let mut profiler = PhpProfiler::start_paced(pid, hz, rules, pace)
        .expect("php frames readable")
        .expect("the fixture is PHP");
    assert_eq!(
        profiler.sampler().cpu_paced(),
        pace == PhpPace::CpuTime,
        "paced otherwise than asked"
    );
    let budget = phasescope::config::ProcessConfig::default().sample_budget;
    assert!(budget > 0, "profiling keeps a budget by default");
    profiler.set_budget(budget);
    let load = Load::start(burn.addr(), 3);
    assert!(
        support::wait_for(Duration::from_secs(10), || load
            .done
            .load(Ordering::Relaxed)
            > 50),
        "no load got through\n{}",
        burn.process.log_tail()
    );
    let _ = profiler.collect();
    // schedstat: time on a CPU, then time waiting for one, in nanoseconds.
    let thread_cpu = || -> (f64, f64) {
        let text = fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap_or_default();
        let mut ns = text
            .split_whitespace()
            .map(|n| n.parse().unwrap_or(0.0) / 1e9);
        (ns.next().unwrap_or(0.0), ns.next().unwrap_or(0.0))
    };
    let (before, cpu_before, started) = (burn.truth(), thread_cpu(), Instant::now());
    let sampler_before = profiler.sampler().sampler_cpu();
    let mut deltas = Vec::new();
    for _ in 0..5 {
        thread::sleep(Duration::from_secs(1));
        deltas.push(profiler.collect());
    }
    let (sampler_after, window) = (profiler.sampler().sampler_cpu(), started.elapsed());
    let (after, cpu_after) = (burn.truth(), thread_cpu());
    let (cpu_s, queued_s) = (cpu_after.0 - cpu_before.0, cpu_after.1 - cpu_before.1);
    let cores = cpu_s / started.elapsed().as_secs_f64();
    // What the weighted samples stand for: CPU time, or for ticks of a timer the time the
    // thread was running or waiting to run.
    let stood_for = match pace {
        PhpPace::CpuTime => cpu_s,
        PhpPace::Timer => cpu_s + queued_s,
    };
    drop(load);
    let (parse_truth, query_truth) = after.shares_since(&before);
    // The sampler thread's own cost at the budget's rate (docs/BENCHMARKS.md).
    if let (Some(a), Some(b)) = (sampler_before, sampler_after) {
        let share = 100.0 * (b - a).as_secs_f64() / window.as_secs_f64();
        println!("sampler thread CPU {share:.2} % of a core");
    }
    support::assert_kept_to_budget(&deltas, hz, budget, (stood_for, cores), 1);
    let weighted: u64 = deltas.iter().map(|d| d.total()).sum();
    let inclusive = |component: &str| {
        let with: u64 = deltas
            .iter()
            .flat_map(|d| d.inclusive.iter())
            .filter(|(c, _)| c == component)
            .map(|(_, n)| n)
            .sum();
        100.0 * with as f64 / weighted.max(1) as f64
    };
    // Fewer samples read a share less closely: held to three standard errors of a share
    // read from samples of the weights taken, or the usual tolerance where that is wider.
    for (component, truth) in [("parser", parse_truth), ("backend", query_truth)] {
        let sampled = inclusive(component);
        let (tolerance, effective) = support::share_tolerance(&deltas, truth, 3.0, TOLERANCE);
        println!(
            "{component}: sampled {sampled:.1} %, the script's clock {truth:.1} % (±{tolerance:.1} from {effective:.0} samples as weighed)"
        );
        assert!(
            (sampled - truth).abs() <= tolerance,
            "{component}: sampled {sampled:.1} % at the budget's rate, the script's clock {truth:.1} %"
        );
    }
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
    let cpu_before = sampler.sampler_cpu();
    thread::sleep(Duration::from_secs(1));
    let mut stacks = sampler.collect();
    let cost = match (cpu_before, sampler.sampler_cpu()) {
        (Some(a), Some(b)) => 100.0 * (b - a).as_secs_f64(),
        _ => f64::NAN,
    };
    let (ticks, off_cpu) = (stacks.ticks(), stacks.off_cpu());
    let stacks = stacks.take();
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    println!(
        "idle: {ticks} ticks, {off_cpu} off CPU, {samples} samples, sampler CPU {cost:.2}% \
         of a core\n{}",
        show(&stacks, 5)
    );
    if sampler.cpu_paced() {
        // Paced by the thread's CPU time: an idle thread makes (nearly) no tick at all.
        assert!(
            ticks <= 20,
            "an idle thread paced {ticks} samples in a second"
        );
    } else {
        assert!(ticks >= 900, "the sampler ticked {ticks} times in a second");
    }
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
    let modules = Command::new(require_tool("php"))
        .arg("-m")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&modules.stdout).contains("excimer"),
        "the excimer extension is missing: run scripts/test, which installs php-excimer"
    );
    // Excimer is the reference, but on a machine whose load comes and goes its own
    // reading can stray from what the script measured (its timer signal is served at the
    // next VM interrupt check). A round where Excimer itself is off the truth by more than
    // the tolerance says nothing of ours: it is taken again, up to three times.
    let (mut strayed, mut late) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let round = excimer_round();
        let (ours, excimer, truth) = (round.ours, round.excimer, round.truth);
        let rest = |(a, b): (f64, f64)| 100.0 - a - b;
        println!(
            "Excimer ({} samples) parseHead {:.1}%, query {:.1}%, rest {:.1}%; \
             ours parseHead {:.1}%, query {:.1}%, rest {:.1}%; measured {:.1}% / {:.1}%",
            round.excimer_samples,
            excimer.0,
            excimer.1,
            rest(excimer),
            ours.0,
            ours.1,
            rest(ours),
            truth.0,
            truth.1,
        );
        if (excimer.0 - truth.0).abs() > TOLERANCE || (excimer.1 - truth.1).abs() > TOLERANCE {
            strayed.push(excimer);
            continue;
        }
        // Within the tolerance of Excimer; or, where the two are further apart, ours the
        // nearer to the fixture's own measurement. Two samplers each near the truth can
        // err in opposite directions: a loaded run read Excimer 4.9 points above the
        // measured query share, ours 2.2 below, 7.1 apart. What fails is ours off where
        // the reference is on.
        let off: Vec<String> = [
            ("parseHead", ours.0, excimer.0, truth.0),
            ("query", ours.1, excimer.1, truth.1),
            ("rest", rest(ours), rest(excimer), rest(truth)),
        ]
        .into_iter()
        .filter(|&(_, a, b, t)| (a - b).abs() > TOLERANCE && (a - t).abs() >= (b - t).abs())
        .map(|(name, a, b, t)| format!("{name}: ours {a:.1}%, Excimer {b:.1}%, measured {t:.1}%"))
        .collect();
        if off.is_empty() {
            return;
        }
        // Ours off, but a tenth of its stacks or more were read late (it waited for a CPU
        // even at its real-time priority: the hypervisor held this machine's CPUs): the
        // round measured the machine, and is taken again like a stray of the reference.
        assert!(
            round.late_share >= LATE_LIMIT,
            "{} ({:.1}% of our stacks read late)\n{}",
            off.join("; "),
            100.0 * round.late_share,
            round.stacks
        );
        late.push(off.join("; "));
    }
    // Every round was the machine's: the reference off the fixture's own measurement
    // (its CPU timer is served by a thread that waits for a CPU before it can set the
    // VM's interrupt flag), or ours read late. Said where the run's output shows it, not
    // as a failure of our sampler.
    println!(
        "SKIPPED the comparison with Excimer: in three rounds Excimer strayed from the \
         measured truth by more than {TOLERANCE} points {strayed:?}, or ours was off while \
         {:.0}% or more of its stacks were read late {late:?}; the machine is too loud",
        100.0 * LATE_LIMIT
    );
}

/// The share of our stacks read late past which a round says more of the machine than of
/// the sampler: quiet, 1 to 6 %; two busy loops beside it, 0.5 to 4 %; while the
/// hypervisor took 16 to 18 % of the CPUs' time (steal), 22 to 26 %, and then both
/// samplers read the code after each response 4 to 5 points above the measured truth, as
/// in the CI round this bound was written for (ours 9.7 points off the query share).
const LATE_LIMIT: f64 = 0.10;

/// One round of the comparison: the fixture under load with Excimer running in it and
/// our sampler beside it.
struct ExcimerRound {
    /// (parseHead, query) inclusive, in percent.
    ours: (f64, f64),
    excimer: (f64, f64),
    truth: (f64, f64),
    excimer_samples: u64,
    /// The share of our samples whose stack was read late.
    late_share: f64,
    /// Our top stacks, for a failure message.
    stacks: String,
}

fn excimer_round() -> ExcimerRound {
    excimer_round_with(&[])
}

/// [`excimer_round`] with the fixture's environment extended by `extra`.
fn excimer_round_with(extra: &[(&str, &str)]) -> ExcimerRound {
    let excimer_out = tempfile::Builder::new()
        .prefix("excimer-")
        .tempdir()
        .unwrap();
    let out = excimer_out.path().join("collapsed.txt");
    let mut env = vec![
        ("BURN_PARSE_US", PARSE_US),
        ("BURN_QUERY_US", QUERY_US),
        ("EXCIMER_OUT", out.to_str().unwrap()),
    ];
    env.extend_from_slice(extra);
    let burn = Burn::start(&env);
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
    lines.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    for (n, stack) in lines.iter().take(10) {
        println!("excimer {n:6} {stack}");
    }
    ExcimerRound {
        ours: (
            inclusive(&sampled.stacks, PARSE),
            inclusive(&sampled.stacks, QUERY),
        ),
        excimer: (
            100.0 * parse_n as f64 / total as f64,
            100.0 * query_n as f64 / total as f64,
        ),
        truth: sampled.truth,
        excimer_samples: total,
        late_share: sampled.late_share,
        stacks: show(&sampled.stacks, 8),
    }
}

/// Which sampler is off when PHP code spends its CPU in the kernel (issue: on an amphp
/// server ours and Excimer parted by 10 to 14 points on League\Uri and on the stream's
/// writes, and which side was wrong was not known). Here `Backend::query` spends its
/// time writing 16 KiB to a local socket and reading it back, timed by the script with
/// getrusage, system time included. Ours must follow the script's clock; Excimer's
/// offset is printed, not held: its CPU timer is served at the next VM interrupt check,
/// after the system call has returned, so what the kernel did is charged to whatever PHP
/// code runs next (two runs, quiet: Excimer query 61.4 %, rest 12.0 % against 64.8 % and
/// 6.9 % measured; ours 64.4 % and 7.2 %).
#[test]
fn in_the_kernel_ours_follows_the_scripts_clock() {
    let _serial = serial();
    for _ in 0..3 {
        let round = excimer_round_with(&[("BURN_QUERY_WRITES", "16384")]);
        let (ours, excimer, truth) = (round.ours, round.excimer, round.truth);
        println!(
            "socket writes: ours parseHead {:.1}%, query {:.1}%; Excimer {:.1}%, {:.1}%; \
             measured {:.1}%, {:.1}% ({:.1}% of our stacks read late)",
            ours.0,
            ours.1,
            excimer.0,
            excimer.1,
            truth.0,
            truth.1,
            100.0 * round.late_share
        );
        let off = (ours.0 - truth.0).abs() > TOLERANCE || (ours.1 - truth.1).abs() > TOLERANCE;
        if !off {
            return;
        }
        // Read late, as in `shares_agree_with_excimer`: the round measured the machine.
        assert!(
            round.late_share >= LATE_LIMIT,
            "ours off the script's clock: parseHead {:.1}% against {:.1}%, query {:.1}% \
             against {:.1}%\n{}",
            ours.0,
            truth.0,
            ours.1,
            truth.1,
            round.stacks
        );
    }
    println!(
        "SKIPPED: in three rounds ours was off while {:.0}% or more of its stacks were read \
         late; the machine is too loud",
        100.0 * LATE_LIMIT
    );
}

/// A loop that makes no system call: the thread's CPU time in /proc is only brought up
/// to date at scheduler ticks, and every tick must still count.
#[test]
fn a_busy_loop_without_syscalls_counts_every_tick() {
    let _serial = serial();
    let php = require_tool("php");
    let dir = tempfile::Builder::new()
        .prefix("php-spin-")
        .tempdir()
        .unwrap();
    let log = dir.path().join("spin.log");
    let script = "function spinForever() { $x = 0.0; while (true) { $x += 1.5; } } \
                  echo \"spinning\\n\"; spinForever();";
    let mut command = Command::new(php);
    command.arg("-r").arg(script);
    let process = Managed::spawn("php -r spin", &mut command, &log);
    assert!(support::wait_for(STARTUP_DEADLINE, || fs::read_to_string(
        &log
    )
    .is_ok_and(|t| t.contains("spinning"))));
    let target = php::detect(process.pid()).unwrap().unwrap();
    let mut sampler = PhpSampler::start(target, 1000).unwrap();
    let _ = sampler.collect();
    thread::sleep(Duration::from_secs(1));
    let mut stacks = sampler.collect();
    let (ticks, off_cpu, errors, torn, missed) = (
        stacks.ticks(),
        stacks.off_cpu(),
        stacks.errors(),
        stacks.torn(),
        stacks.missed(),
    );
    let stacks = stacks.take();
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    println!(
        "busy loop: {ticks} ticks ({missed} missed by a late sampler), {off_cpu} off CPU, \
         {errors} errors, {torn} torn, {samples} samples\n{}",
        show(&stacks, 3)
    );
    let taken = ticks - missed;
    assert!(
        off_cpu * 50 <= taken && samples as f64 >= 0.95 * taken as f64,
        "{samples} samples and {off_cpu} off CPU of {taken} ticks for a thread always on CPU"
    );
    assert!(
        inclusive(&stacks, "spinForever") > 99.0,
        "{}",
        show(&stacks, 3)
    );
}

#[test]
fn a_process_that_is_not_php_is_none_and_a_gone_one_an_error() {
    // This test binary: no Zend engine in it or its libraries.
    assert!(php::detect(std::process::id()).unwrap().is_none());
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let err = php::detect(pid).unwrap_err();
    assert!(err.to_string().contains(&pid.to_string()), "{err}");
}

/// The whole path for a PHP upstream: a sampling proxy in front of the fixture finds it is
/// PHP, samples its PHP frames, and the snapshot and the report give the parser's share
/// with all it calls (a user rule names `Burn\Parser` as the parser), against what the
/// script measured over the same window; the flame graph names the PHP functions.
#[test]
fn through_the_proxy_the_report_splits_a_php_server_by_php_function() {
    let _serial = serial();
    let burn = Burn::start(&[("BURN_PARSE_US", PARSE_US), ("BURN_QUERY_US", QUERY_US)]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("php.toml");
    // Every sample (`sample_budget = 0`): the shares below are held to 5 points, and at
    // the budget's rate (62 Hz on a busy core) the 4 s give about 300 samples, a share of
    // 30 % within ±2.6 points (one standard error).
    fs::write(
        &config,
        format!(
            "[[tap]]\nname = \"php\"\nlisten = \"127.0.0.1:1\"\nupstream = \"{}\"\n\
             [tap.process]\nprofile = true\ninterval = \"250ms\"\nsample_budget = 0\n\
             [[tap.process.component]]\nname = \"http_parser\"\nsymbol = '^Burn\\\\Parser::'\n",
            burn.addr()
        ),
    )
    .unwrap();
    let proxy = support::Proxy::in_front_of(burn.addr(), &["--config", config.to_str().unwrap()]);
    let snapshot = || -> serde_json::Value {
        serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap()
    };
    assert!(
        support::wait_for(Duration::from_secs(20), || snapshot()["taps"]["php"]
            ["upstream"]["frames"]
            == "php"),
        "the proxy did not sample PHP frames\n{}",
        proxy.log_tail()
    );
    let load = Load::start(proxy.addr(), 3);
    assert!(
        support::wait_for(Duration::from_secs(10), || load
            .done
            .load(Ordering::Relaxed)
            > 50),
        "no load got through the proxy\n{}",
        proxy.log_tail()
    );
    let reset = support::http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(parse_response(&reset).status, 200);
    let before = burn.truth();
    run_for_cpu(burn.process.pid());
    let after = burn.truth();
    let rate_loaded = snapshot()["taps"]["php"]["upstream"]["rate_hz"]
        .as_f64()
        .unwrap_or(f64::NAN);
    drop(load);
    // Past the watcher's next collect.
    thread::sleep(Duration::from_millis(600));
    let snap = snapshot();
    let u = &snap["taps"]["php"]["upstream"];
    let total: u64 = u["samples"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(total > 1000, "too few samples: {u}");
    // Without a budget every sample is taken at the configured rate and counts about
    // once: a read that failed was taken and counts nowhere, and a read that woke late
    // stands for the periods since (2,426 taken for 2,430 counted in one run); the
    // budget's own test is `under_the_default_budget_…`.
    let taken = u["samples_taken"].as_u64().unwrap_or(0);
    assert!(taken.abs_diff(total) <= total / 50, "{taken} taken: {u}");
    assert_eq!(rate_loaded, 997.0, "{u}");
    let parser = u["inclusive"]["http_parser"].as_u64().unwrap_or(0) as f64 * 100.0 / total as f64;
    let (parse_truth, _) = after.shares_since(&before);
    println!("through the proxy: {total} samples, http_parser {parser:.1}% vs measured {parse_truth:.1}%");
    assert!(
        (parser - parse_truth).abs() <= TOLERANCE,
        "http_parser {parser:.1}% against {parse_truth:.1}% measured: {u}"
    );
    let functions = u["functions"].as_array().unwrap();
    assert!(
        functions.iter().any(|f| f["name"] == PARSE
            && f["component"] == "http_parser"
            && f["object"].as_str().unwrap().ends_with("php-burn.php")),
        "{functions:?}"
    );

    let out = dir.path().join("php.svg");
    let report = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["report", "--from"])
        .arg(format!("http://{}", proxy.admin_addr()))
        .arg("--flamegraph")
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert!(
        text.contains("with all they call (php call stacks"),
        "{text}"
    );
    // The what-if takes the parser's own work: parseHead and the script's `Cpu::spin` it
    // burns in (a helper of its own script), not a callback; so it is the measured share
    // too (the report reads a later window than `u`: the same tolerance).
    let what_if: f64 = text
        .split("(HTTP parser is ")
        .nth(1)
        .and_then(|rest| {
            rest.split(" % of its CPU: it and the helpers it calls")
                .next()
        })
        .and_then(|share| share.parse().ok())
        .unwrap_or_else(|| panic!("no what-if on the parser's own work in\n{text}"));
    assert!(
        (what_if - parse_truth).abs() <= TOLERANCE,
        "the what-if's {what_if} % against {parse_truth:.1} % measured\n{text}"
    );
    let svg = fs::read_to_string(&out).unwrap();
    for name in ["parseHead", "Fiber::resume", "{main}"] {
        assert!(svg.contains(name), "{name} missing from the flame graph");
    }
}

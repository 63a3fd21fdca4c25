//! The Python frame sampler (src/upstream/profile/python/) against Debian's CPython 3.11:
//! a threaded fixture (tests/fixtures/py-burn.py) whose handlers burn CPU in three named
//! functions, each timed in the process with time.thread_time. The sampled shares must
//! match what the script measured in the same run, and what py-spy (CPython's
//! out-of-process sampler) records of the same process and load wherever py-spy itself
//! is within the tolerance of the script's clocks (it samples wall-clock time, which on a
//! loaded machine drifts: see `py_spy`); each function must be
//! named with its file and first line; the C function `math.sin` ends in (libm) must be a
//! native frame under `compute_report`.
//!
//! Needs root (or CAP_SYS_PTRACE and CAP_PERFMON) for process_vm_readv and perf events.

mod support;

use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use phasescope::snapshot::Stacks;
use phasescope::upstream::profile::{ComponentRules, PyProfiler};
use tempfile::TempDir;

use support::{
    debian_python as python, loopback, parse_response, require_tool, HttpConn, Managed,
    STARTUP_DEADLINE,
};

const FUNCTIONS: [&str; 3] = ["compute_report", "parse_items", "checksum"];
/// How far a sampled share may be from a reference, in percentage points.
const TOLERANCE: f64 = 5.0;
const SAMPLE_FOR: Duration = Duration::from_secs(3);

/// The tests load the machine's cores; run one at a time so that none skews another.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Debian's interpreter, the one the issue is about (a python3 earlier in PATH may be
/// another build).
/// The fixture on a port it picked itself, killed on drop.
struct Burn {
    process: Managed,
    port: u16,
    _dir: TempDir,
}

impl Burn {
    fn start() -> Burn {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/py-burn.py");
        let dir = tempfile::Builder::new()
            .prefix("py-burn-")
            .tempdir()
            .unwrap();
        let log = dir.path().join("py-burn.log");
        let mut command = Command::new(python());
        command.arg(script).arg("0").current_dir(dir.path());
        let mut process = Managed::spawn("py-burn.py", &mut command, &log);
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
                panic!("py-burn.py exited with {status}\n{}", process.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "py-burn.py did not start\n{}",
                process.log_tail()
            );
            thread::sleep(Duration::from_millis(20));
        };
        Burn {
            process,
            port,
            _dir: dir,
        }
    }

    fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    fn truth(&self) -> serde_json::Value {
        let request = b"GET /__truth HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        let raw = HttpConn::connect(self.addr()).exchange(request);
        let response = parse_response(&raw);
        assert_eq!(response.status, 200, "{}", self.process.log_tail());
        serde_json::from_str(&response.body_text()).unwrap()
    }
}

/// Each function's share (percent) of the process's CPU between two truths.
fn measured(before: &serde_json::Value, after: &serde_json::Value) -> HashMap<&'static str, f64> {
    let cpu = |v: &serde_json::Value| v["process_cpu_ns"].as_f64().unwrap();
    let total = cpu(after) - cpu(before);
    FUNCTIONS
        .iter()
        .map(|&f| {
            let spent = |v: &serde_json::Value| v["functions"][f]["cpu_ns"].as_f64().unwrap();
            (f, 100.0 * (spent(after) - spent(before)) / total)
        })
        .collect()
}

/// Keep-alive clients cycling through the three burn paths until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: usize) -> Load {
        Load::start_with(addr, clients, false)
    }

    /// With `shuffled`, each client picks its next path at random (2:1:1 still): a load
    /// that repeats one cycle of fixed costs has a period of its own, and a sampling
    /// period near a multiple of it reads the same point of the cycle again and again (at
    /// 62 Hz, every 16 ms of a thread's CPU: a few requests).
    fn start_with(addr: SocketAddr, clients: usize, shuffled: bool) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..clients)
            .map(|client| {
                let stop = stop.clone();
                thread::spawn(move || {
                    let mut conn = HttpConn::connect(addr);
                    // 2:1:1, so the three shares differ.
                    let paths = ["/report", "/parse", "/report", "/checksum"];
                    // xorshift64, seeded per client.
                    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (client as u64 + 1);
                    for (i, path) in paths.iter().cycle().enumerate() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let path = if shuffled {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            paths[(seed % 4) as usize]
                        } else {
                            let _ = i;
                            path
                        };
                        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
                        let raw = conn.exchange(request.as_bytes());
                        assert_eq!(parse_response(&raw).status, 200);
                    }
                })
            })
            .collect();
        Load { stop, threads }
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

/// Share (percent) of the samples whose stack holds a frame named `function`.
fn inclusive(stacks: &Stacks, function: &str) -> f64 {
    let total: u64 = stacks.stacks.iter().map(|s| s.samples).sum();
    let with: u64 = stacks
        .stacks
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|&i| stacks.frames[i as usize].name == function)
        })
        .map(|s| s.samples)
        .sum();
    100.0 * with as f64 / total.max(1) as f64
}

fn show(stacks: &Stacks, top: usize) -> String {
    let mut sorted: Vec<_> = stacks.stacks.iter().collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.samples));
    sorted
        .iter()
        .take(top)
        .map(|s| {
            let names: Vec<&str> = s
                .frames
                .iter()
                .map(|&i| stacks.frames[i as usize].name.as_str())
                .collect();
            format!("{:6} {}\n", s.samples, names.join(";"))
        })
        .collect()
}

/// py-spy's raw output (`thread (tid);frame;frame count` per line, frames as
/// `name (file:line)`): the share of samples holding `function`.
fn py_spy_share(raw: &str, function: &str) -> f64 {
    let (mut total, mut with) = (0u64, 0u64);
    for line in raw.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        total += n;
        let prefix = format!("{function} (");
        if stack.split(';').any(|frame| frame.starts_with(&prefix)) {
            with += n;
        }
    }
    100.0 * with as f64 / total.max(1) as f64
}

fn top_lines(raw: &str, top: usize) -> String {
    let mut lines: Vec<(u64, &str)> = raw
        .lines()
        .filter_map(|l| {
            l.rsplit_once(' ')
                .and_then(|(s, n)| Some((n.parse().ok()?, s)))
        })
        .collect();
    lines.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    lines
        .iter()
        .take(top)
        .map(|(n, s)| {
            format!(
                "{n:6} {}\n",
                s.rsplit(';').take(3).collect::<Vec<_>>().join(" < ")
            )
        })
        .collect()
}

/// Starts py-spy recording `pid` for `duration` into `out` (raw folded stacks), without
/// stopping the process (as phasescope reads it), at the real-time priority phasescope's
/// sampler takes (`chrt -f 1`): at normal priority, on a loaded machine, it samples in
/// bursts when it gets a CPU. Only the stacks of the thread holding the GIL (`--gil`):
/// Python code running, not threads blocked in a read. It still samples wall-clock time,
/// so a GIL holder waiting for a CPU counts: at a load average of 14 on this 2-core
/// machine its `parse_items` read 6 to 8 points above the function's own clock.
fn py_spy(pid: u32, duration: Duration, out: &std::path::Path) -> std::process::Child {
    Command::new(require_tool("chrt"))
        .args(["-f", "1"])
        .arg(require_tool("py-spy"))
        .args([
            "record",
            "--nonblocking",
            "--gil",
            "--format",
            "raw",
            "--rate",
            "250",
        ])
        .args(["--duration", &duration.as_secs().to_string()])
        .arg("--pid")
        .arg(pid.to_string())
        .arg("-o")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("py-spy")
}

#[test]
fn shares_match_the_functions_own_clocks_and_py_spy() {
    let _serial = serial();
    let burn = Burn::start();
    let pid = burn.process.pid();
    let rules = ComponentRules::new(&[]).unwrap();
    let mut profiler = PyProfiler::start(pid, 1000, rules)
        .expect("python frames readable")
        .expect("CPython detected");
    let load = Load::start(burn.addr(), 2);
    thread::sleep(Duration::from_millis(300));
    let _ = profiler.collect().unwrap();
    let stat = |pid: u32| -> f64 {
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = text.rsplit_once(')').unwrap().1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) * 10.0
    };
    let stat_before = stat(pid);
    let sampler_before = profiler.sampler().sampler_cpu();
    let started = Instant::now();
    let before = burn.truth();
    let spy_out = tempfile::NamedTempFile::new().unwrap();
    let spy = py_spy(pid, SAMPLE_FOR, spy_out.path());
    thread::sleep(SAMPLE_FOR);
    let delta = profiler.collect().unwrap();
    // The sampler's own cost (docs/BENCHMARKS.md): its thread's CPU over the window.
    if let (Some(a), Some(b)) = (sampler_before, profiler.sampler().sampler_cpu()) {
        let share = 100.0 * (b - a).as_secs_f64() / started.elapsed().as_secs_f64();
        eprintln!("sampler thread CPU {share:.2} % of a core");
    }
    let after = burn.truth();
    eprintln!("/proc stat CPU {:.0} ms", stat(pid) - stat_before);
    let spy = spy.wait_with_output().unwrap();
    drop(load);
    let spy_raw = fs::read_to_string(spy_out.path()).unwrap_or_default();
    assert!(
        !spy_raw.is_empty(),
        "py-spy recorded nothing: {}",
        String::from_utf8_lossy(&spy.stderr)
    );
    let truth = measured(&before, &after);
    let stacks = &delta.stacks;
    eprintln!(
        "CPython {}, {} samples, {} lost\n{}",
        profiler.version(),
        delta.total(),
        delta.lost,
        show(stacks, 12)
    );
    let cpu_ms = (after["process_cpu_ns"].as_f64().unwrap()
        - before["process_cpu_ns"].as_f64().unwrap())
        / 1e6;
    let spy_total: u64 = spy_raw
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    eprintln!(
        "process CPU {cpu_ms:.0} ms; py-spy's {spy_total} samples:\n{}",
        top_lines(&spy_raw, 8)
    );
    eprintln!("| function | own clock | py-spy | phasescope |");
    for f in FUNCTIONS {
        let (own, spied, sampled) = (truth[f], py_spy_share(&spy_raw, f), inclusive(stacks, f));
        eprintln!("| {f} | {own:.1} % | {spied:.1} % | {sampled:.1} % |");
    }
    assert!(delta.total() > 500, "{} samples", delta.total());
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/py-burn.py");
    for f in FUNCTIONS {
        let (own, spied, sampled) = (truth[f], py_spy_share(&spy_raw, f), inclusive(stacks, f));
        assert!(own > 10.0, "{f} burns a tenth at least: {own:.1} %");
        assert!(
            (sampled - own).abs() <= TOLERANCE,
            "{f}: sampled {sampled:.1} %, its own clock {own:.1} %\n{}",
            show(stacks, 12)
        );
        // py-spy samples wall-clock time: a thread that holds the GIL while it waits for
        // a CPU counts, so on a loaded machine its shares drift toward where threads are
        // preempted (the return of a system call: `time.thread_time_ns`), by ten points
        // and more at a load average of 14 on 2 cores. Where it tracks the functions' own
        // clocks it is a second reference, and phasescope must agree with it.
        // Where the two are further apart than that, ours must be the closer to the
        // function's own clock (as the PHP test holds Excimer): a full loaded run read
        // compute_report 34.8 % ours, 29.6 % py-spy, 33.8 % by its own clock.
        if (spied - own).abs() <= TOLERANCE {
            assert!(
                (sampled - spied).abs() <= TOLERANCE || (sampled - own).abs() < (spied - own).abs(),
                "{f}: sampled {sampled:.1} %, py-spy {spied:.1} %, its own clock {own:.1} %"
            );
        } else {
            eprintln!(
                "{f}: py-spy is {:.1} points off the function's own clock: not compared",
                spied - own
            );
        }
        // Named with the file and first line the interpreter itself gives.
        let line = before["functions"][f]["line"].as_u64().unwrap() as u32;
        let frame = stacks.frames.iter().find(|fr| fr.name == f).unwrap();
        assert_eq!(frame.object, file, "{frame:?}");
        assert_eq!(frame.line, Some(line), "{frame:?}");
        assert_eq!(frame.component, "py-burn.py", "the server's own file");
    }
}

/// Under the default budget (what a `profile = true` tap gets), a server burning up to a
/// core is sampled at tens of Hz, still takes samples of the order of the budget, and
/// its samples, each weighed by its period, give the functions' shares of their own
/// clocks and stand for the process's CPU as its own clock counts it.
#[test]
fn under_the_default_budget_a_busy_server_is_sampled_at_tens_of_hz_and_its_shares_hold() {
    let _serial = serial();
    let burn = Burn::start();
    let rules = ComponentRules::new(&[]).unwrap();
    let hz = 997;
    let mut profiler = PyProfiler::start(burn.process.pid(), hz, rules)
        .expect("python frames readable")
        .expect("CPython detected");
    let budget = phasescope::config::ProcessConfig::default().sample_budget;
    assert!(budget > 0, "profiling keeps a budget by default");
    profiler.set_budget(budget);
    let load = Load::start_with(burn.addr(), 2, true);
    thread::sleep(Duration::from_millis(300));
    // The first collect names the native frames (a second in a debug build): the window
    // starts at a second one, so that its samples and the script's clocks cover the same
    // time.
    let _ = profiler.collect().unwrap();
    let _ = profiler.collect().unwrap();
    let before = burn.truth();
    let started = Instant::now();
    let sampler_before = profiler.sampler().sampler_cpu();
    let mut deltas = Vec::new();
    for _ in 0..5 {
        thread::sleep(Duration::from_secs(1));
        deltas.push(profiler.collect().unwrap());
    }
    let (sampler_after, window) = (profiler.sampler().sampler_cpu(), started.elapsed());
    let seconds = window.as_secs_f64();
    let after = burn.truth();
    drop(load);
    let truth = measured(&before, &after);
    let cpu_s = (after["process_cpu_ns"].as_f64().unwrap()
        - before["process_cpu_ns"].as_f64().unwrap())
        / 1e9;
    let cores = cpu_s / seconds;
    // The sampler thread's own cost at the budget's rate (docs/BENCHMARKS.md).
    if let (Some(a), Some(b)) = (sampler_before, sampler_after) {
        let share = 100.0 * (b - a).as_secs_f64() / seconds;
        eprintln!("sampler thread CPU {share:.2} % of a core");
    }
    support::assert_kept_to_budget(&deltas, hz, budget, (cpu_s, cores), 1);
    // Fewer samples read a share less closely: held to four standard errors of a share
    // read from samples of the weights taken, or the usual tolerance where that is wider
    // (counted as taken, 62 Hz looked biased: `support::share_tolerance`). Four, not the
    // PHP test's three: in 19 runs the three shares strayed by standard deviations of
    // 2.7, 2.0 and 2.5 points where independent samples of this effective count give 2.5,
    // 2.3 and 2.0, and each read a little low on average (-0.8, -1.1 and -0.6 points);
    // one run read checksum 7.1 points low, 3.6 of its standard errors.
    let stacked: u64 = deltas.iter().map(|d| d.stacks.total()).sum();
    for f in FUNCTIONS {
        let sampled = deltas
            .iter()
            .map(|d| inclusive(&d.stacks, f) * d.stacks.total() as f64)
            .sum::<f64>()
            / stacked.max(1) as f64;
        let own = truth[f];
        let (tolerance, effective) = support::share_tolerance(&deltas, own, 4.0, TOLERANCE);
        eprintln!(
            "{f}: sampled {sampled:.1} %, its own clock {own:.1} % (±{tolerance:.1} from {effective:.0} samples as weighed)"
        );
        assert!(
            (sampled - own).abs() <= tolerance,
            "{f}: sampled {sampled:.1} % at the budget's rate, its own clock {own:.1} %"
        );
    }
}

#[test]
fn a_c_function_is_a_native_frame_under_its_python_caller() {
    let _serial = serial();
    let burn = Burn::start();
    let rules = ComponentRules::new(&[]).unwrap();
    let mut profiler = PyProfiler::start(burn.process.pid(), 1000, rules)
        .unwrap()
        .unwrap();
    let load = Load::start(burn.addr(), 1);
    thread::sleep(Duration::from_millis(1500));
    let delta = profiler.collect().unwrap();
    drop(load);
    let stacks = &delta.stacks;
    // libm's sin (glibc names it by the instruction set it picked: __sin_fma, __sin_avx2).
    let under_report: u64 = stacks
        .stacks
        .iter()
        .filter(|s| {
            let names: Vec<&str> = s
                .frames
                .iter()
                .map(|&i| stacks.frames[i as usize].name.as_str())
                .collect();
            names.len() >= 2
                && names[names.len() - 2] == "compute_report"
                && names[names.len() - 1].contains("sin")
                && stacks.frames[*s.frames.last().unwrap() as usize]
                    .object
                    .starts_with("libm")
        })
        .map(|s| s.samples)
        .sum();
    assert!(
        under_report * 50 >= delta.total(),
        "{under_report} of {} samples in libm's sin under compute_report\n{}",
        delta.total(),
        show(stacks, 12)
    );
    // The interpreter's loop itself is never a frame: Python functions stand for it.
    assert!(
        !stacks
            .frames
            .iter()
            .any(|f| f.name.contains("_PyEval_EvalFrameDefault")),
        "{}",
        show(stacks, 12)
    );
}

/// The children of `parent` (gunicorn's workers), from /proc.
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// gunicorn with two sync workers serving tests/fixtures/py_wsgi.py, once both accept:
/// (the master, its port, its workers).
fn gunicorn(dir: &std::path::Path) -> (Managed, u16, Vec<u32>) {
    let port = support::free_port();
    let log = dir.join("gunicorn.log");
    let mut command = Command::new(require_tool("gunicorn"));
    command
        .args(["--workers", "2", "--bind"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--chdir")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
        .arg("py_wsgi:app");
    let server = Managed::spawn("gunicorn", &mut command, &log);
    let master = server.pid();
    let ready = support::wait_for(STARTUP_DEADLINE, || {
        children(master).len() == 2 && support::accepts(loopback(port))
    });
    assert!(ready, "gunicorn did not start\n{}", server.log_tail());
    let workers = children(master);
    (server, port, workers)
}

/// Two clients, a connection per request (a sync worker closes each), for `load`.
fn load_gunicorn(addr: SocketAddr, load: Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<JoinHandle<()>> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let raw = HttpConn::connect(addr)
                        .exchange(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
                    assert_eq!(parse_response(&raw).status, 200);
                }
            })
        })
        .collect();
    thread::sleep(load);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
}

#[test]
fn behind_the_proxy_every_gunicorn_worker_is_sampled_by_python_function() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (mut server, port, workers) = gunicorn(dir.path());
    let mut proxy = support::Proxy::in_front_of(loopback(port), &["--profile-upstream"]);
    let log_path = proxy.process().log_path().to_owned();
    // Each process of the group (the master and both workers) gets a sampler of its own.
    let sampled = |pid: u32| {
        fs::read_to_string(&log_path).is_ok_and(|log| {
            log.lines()
                .any(|l| l.contains("Python call stacks") && l.contains(&format!("pid={pid}")))
        })
    };
    let all = support::wait_for(STARTUP_DEADLINE, || workers.iter().all(|&w| sampled(w)));
    assert!(
        all,
        "workers {workers:?} not all sampled\n{}",
        proxy.log_tail()
    );
    load_gunicorn(proxy.addr(), Duration::from_secs(2));
    // The samples come with the watcher's collects; the first one names the native leaves
    // with the symbol tables of python3 and its libraries, seconds on a loaded machine.
    let upstream = || {
        let snapshot: serde_json::Value =
            serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap();
        snapshot["taps"]["webdis"]["upstream"].clone()
    };
    support::wait_for(Duration::from_secs(30), || {
        let u = upstream();
        u["functions"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["name"] == "render_page"))
    });
    let u = &upstream();
    assert_eq!(u["frames"], "python", "{u:#}");
    assert_eq!(u["processes"].as_array().map(Vec::len), Some(3), "{u:#}");
    let functions = u["functions"].as_array().expect("functions");
    let render = functions
        .iter()
        .find(|f| f["name"] == "render_page")
        .unwrap_or_else(|| panic!("render_page missing: {u:#}"));
    assert_eq!(render["component"], "py_wsgi.py", "{render}");
    server.stop(Duration::from_secs(5));
}

#[test]
fn each_gunicorn_worker_has_its_python_frames() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (mut server, port, workers) = gunicorn(dir.path());
    let mut profilers: Vec<PyProfiler> = workers
        .iter()
        .map(|&pid| {
            PyProfiler::start(pid, 1000, ComponentRules::new(&[]).unwrap())
                .expect("python frames readable")
                .expect("a gunicorn worker is CPython")
        })
        .collect();
    // Two clients, so that both workers accept.
    load_gunicorn(loopback(port), Duration::from_secs(2));
    for (pid, profiler) in workers.iter().zip(&mut profilers) {
        let delta = profiler.collect().unwrap();
        let stacks = &delta.stacks;
        eprintln!(
            "worker {pid}: {} samples\n{}",
            delta.total(),
            show(stacks, 4)
        );
        let share = inclusive(stacks, "render_page");
        assert!(
            delta.total() > 50 && share > 30.0,
            "worker {pid}: render_page in {share:.1} % of {} samples\n{}",
            delta.total(),
            show(stacks, 8)
        );
        let frame = stacks
            .frames
            .iter()
            .find(|f| f.name == "render_page")
            .unwrap();
        assert_eq!(frame.component, "py_wsgi.py", "{frame:?}");
        // gunicorn's own code by its package; its request parser as the HTTP parser.
        let components: Vec<&str> = stacks.frames.iter().map(|f| f.component.as_str()).collect();
        assert!(components.contains(&"gunicorn"), "{components:?}");
    }
    server.stop(Duration::from_secs(5));
}

#[test]
fn an_idle_server_gives_no_samples() {
    let _serial = serial();
    let burn = Burn::start();
    let rules = ComponentRules::new(&[]).unwrap();
    let mut profiler = PyProfiler::start(burn.process.pid(), 1000, rules)
        .unwrap()
        .unwrap();
    // Its threads wait in accept and select: off a CPU, so no period of CPU ends.
    let _ = profiler.collect().unwrap();
    thread::sleep(Duration::from_secs(1));
    let delta = profiler.collect().unwrap();
    assert!(
        delta.total() <= 20,
        "{} samples in an idle second\n{}",
        delta.total(),
        show(&delta.stacks, 8)
    );
}

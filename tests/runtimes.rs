//! In front of servers of other runtimes, what the report concludes must hold
//! (docs/report.md, "Call stacks"): Node, whose parser (llhttp) calls the JavaScript
//! handler back, and a threaded Python server, whose every stack is the interpreter's
//! loop when its own frames are not read.
//!
//! - Node 20 (Debian's nodejs) with `--perf-basic-prof`, a handler burning CPU in
//!   `computeReport`: the HTTP parser's own work at most 5 % of the CPU, no
//!   `parser_worth_replacing`, and the handler the first place to act; node's own
//!   `--cpu-prof` on the same process and load is the truth that the handler is where its
//!   CPU goes. Its JIT frames are walked by their frame pointers: once node's unwind
//!   tables are read, at most 10 % of the stacks are cut short (with `stack_bytes` at 32
//!   KiB: libuv keeps 12 KiB of epoll events on the stack below every callback), and
//!   `computeReport` with all it calls is within 5 points of `--cpu-prof`'s share.
//! - Python 3.11 (Debian's python3), a ThreadingHTTPServer whose handler burns CPU: no
//!   line of the hot path is the interpreter's loop at 90 % or more, in the JSON or the
//!   text.

mod support;

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::*;

/// Starts `command` (a server printing "listening on 127.0.0.1:PORT"), waits until it
/// accepts, and returns it with its address.
fn start_server(name: &str, command: &mut Command, dir: &Path) -> (Managed, std::net::SocketAddr) {
    let log = dir.join(format!("{name}.log"));
    let server = Managed::spawn(name, command, &log);
    let mut port = None;
    assert!(
        wait_for(STARTUP_DEADLINE, || {
            port = fs::read_to_string(&log)
                .unwrap_or_default()
                .split("listening on 127.0.0.1:")
                .nth(1)
                .and_then(|rest| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<u16>().ok()
                });
            port.is_some_and(|p| accepts(loopback(p)))
        }),
        "{}",
        server.log_tail()
    );
    (server, loopback(port.unwrap_or(0)))
}

/// The proxy in front of `addr`, sampling it with call stacks (and `flags`), once it
/// watches `pid`.
fn sampling_proxy(addr: std::net::SocketAddr, pid: u32, flags: &[&str]) -> Proxy {
    let args: Vec<&str> = ["--profile-upstream"]
        .iter()
        .chain(flags)
        .copied()
        .collect();
    let proxy = Proxy::in_front_of(addr, &args);
    let watched = wait_for(STARTUP_DEADLINE, || {
        let snap: Value =
            serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap_or_default();
        snap["taps"]["webdis"]["upstream"]["pid"].as_u64() == Some(u64::from(pid))
    });
    assert!(
        watched,
        "the proxy never watched pid {pid}\n{}",
        proxy.log_tail()
    );
    proxy
}

/// `phasescope report` of the snapshot saved at `saved`, with `flags`.
fn report(saved: &Path, flags: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args(["report", "--from", saved.to_str().unwrap()])
        .args(flags)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Loads the proxy until the upstream has `samples`, saves the snapshot and returns the
/// report as JSON and as text.
fn load_and_report(proxy: &Proxy, dir: &Path, samples: u64) -> (Value, String) {
    load_until_sampled(proxy, "webdis", samples);
    let saved = dir.join("snapshot.json");
    fs::write(&saved, proxy.admin_get("/api/snapshot").body_text()).unwrap();
    let json = serde_json::from_str(&report(&saved, &["--format", "json", "--top", "10"]))
        .unwrap_or_else(|e| panic!("{e}"));
    (json, report(&saved, &["--top", "10"]))
}

/// The hot path's entries as failure messages print them.
fn shown(hot: &[Value]) -> Vec<String> {
    hot.iter()
        .map(|h| {
            format!(
                "{} ({}) {:.1} % listed, {:.1} % inclusive",
                h["name"].as_str().unwrap_or(""),
                h["component"].as_str().unwrap_or(""),
                h["listed"].as_f64().unwrap_or(0.0) * 100.0,
                h["inclusive"].as_f64().unwrap_or(0.0) * 100.0
            )
        })
        .collect()
}

/// node's `--cpu-prof` profile in `dir`: the share of its non-idle samples whose running
/// function is `name`.
fn cpu_prof_self_share(dir: &Path, name: &str) -> f64 {
    let profile = cpu_profile(dir);
    let (mut hits, mut total) = (0u64, 0u64);
    for node in profile["nodes"].as_array().unwrap() {
        let function = node["callFrame"]["functionName"].as_str().unwrap_or("");
        let n = node["hitCount"].as_u64().unwrap_or(0);
        if function == "(idle)" {
            continue;
        }
        total += n;
        if function == name {
            hits += n;
        }
    }
    assert!(total > 0, "an empty profile");
    hits as f64 / total as f64
}

/// The `.cpuprofile` node wrote in `dir`.
fn cpu_profile(dir: &Path) -> Value {
    let file = fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cpuprofile"))
        .unwrap_or_else(|| panic!("no .cpuprofile in {}", dir.display()));
    serde_json::from_str(&fs::read_to_string(file).unwrap()).unwrap()
}

/// node's `--cpu-prof` profile in `dir`: the share of its non-idle samples outside native
/// callbacks with a function named `name` on the stack (the function with all it calls).
fn cpu_prof_inclusive_share(dir: &Path, name: &str) -> f64 {
    let profile = cpu_profile(dir);
    let nodes = profile["nodes"].as_array().unwrap();
    let by_id: HashMap<u64, &Value> = nodes
        .iter()
        .map(|n| (n["id"].as_u64().unwrap(), n))
        .collect();
    // Each node's samples with everything below it, from the roots down.
    fn below(node: &Value, by_id: &HashMap<u64, &Value>) -> u64 {
        let children = node["children"].as_array().cloned().unwrap_or_default();
        node["hitCount"].as_u64().unwrap_or(0)
            + children
                .iter()
                .filter_map(|c| by_id.get(&c.as_u64().unwrap_or(0)))
                .map(|c| below(c, by_id))
                .sum::<u64>()
    }
    // The samples of the outermost frames named `name`, with all below them.
    fn hits_under(node: &Value, by_id: &HashMap<u64, &Value>, name: &str) -> u64 {
        if node["callFrame"]["functionName"].as_str() == Some(name) {
            return below(node, by_id);
        }
        node["children"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| by_id.get(&c.as_u64().unwrap_or(0)))
            .map(|c| hits_under(c, by_id, name))
            .sum()
    }
    // A native callback (`writev`: no script, a name of its own) is timed by the clock on
    // the wall, its system call with the time the thread then waited for a CPU; what
    // phasescope samples is time on a CPU. Both sides leave the system calls out.
    let native = |n: &Value| {
        let f = &n["callFrame"];
        let name = f["functionName"].as_str().unwrap_or("");
        f["url"].as_str() == Some("") && !name.is_empty() && !name.starts_with('(')
    };
    let total: u64 = nodes
        .iter()
        .filter(|n| n["callFrame"]["functionName"].as_str() != Some("(idle)") && !native(n))
        .map(|n| n["hitCount"].as_u64().unwrap_or(0))
        .sum();
    let hits = hits_under(&nodes[0], &by_id, name);
    assert!(total > 0, "an empty profile");
    hits as f64 / total as f64
}

fn snapshot(proxy: &Proxy) -> Value {
    serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap()
}

/// The upstream's sampled stacks in a snapshot, each as its frames' names (root first),
/// with their samples.
fn stack_samples(snap: &Value) -> HashMap<Vec<String>, u64> {
    let stacks = &snap["taps"]["webdis"]["upstream"]["stacks"];
    let frames = stacks["frames"].as_array().cloned().unwrap_or_default();
    let mut out = HashMap::new();
    for s in stacks["stacks"].as_array().into_iter().flatten() {
        let names: Vec<String> = s["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let f = &frames[i.as_u64().unwrap() as usize];
                format!(
                    "{} {}",
                    f["name"].as_str().unwrap(),
                    f["object"].as_str().unwrap()
                )
            })
            .collect();
        *out.entry(names).or_insert(0) += s["samples"].as_u64().unwrap();
    }
    out
}

/// The stacks sampled between two snapshots.
struct Walked {
    stacks: Vec<(Vec<String>, u64)>,
    total: u64,
}

impl Walked {
    fn between(before: &HashMap<Vec<String>, u64>, after: &HashMap<Vec<String>, u64>) -> Walked {
        let mut stacks: Vec<(Vec<String>, u64)> = after
            .iter()
            .map(|(k, &n)| {
                (
                    k.clone(),
                    n.saturating_sub(before.get(k).copied().unwrap_or(0)),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        stacks.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let total = stacks.iter().map(|(_, n)| n).sum();
        assert!(total > 0, "no samples between the two snapshots");
        Walked { stacks, total }
    }

    fn is_cut(stack: &[String]) -> bool {
        stack.first().is_some_and(|f| f.starts_with("[truncated]"))
    }

    fn cut_short(&self) -> f64 {
        let cut: u64 = self
            .stacks
            .iter()
            .filter(|(s, _)| Walked::is_cut(s))
            .map(|(_, n)| n)
            .sum();
        cut as f64 / self.total as f64
    }

    /// The largest stacks cut short, for a failure's message.
    fn cut_examples(&self) -> String {
        self.stacks
            .iter()
            .filter(|(s, _)| Walked::is_cut(s))
            .take(5)
            .map(|(s, n)| format!("{n}: {}", s.join(" ; ")))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The share of the samples of the thread `name` runs on (the stacks not rooted in
    /// another thread's `start_thread`; a stack cut short counts, its thread unknown)
    /// outside system calls (see [`cpu_prof_inclusive_share`]) with a frame named `name`
    /// on the stack.
    fn share(&self, name: &str) -> f64 {
        let other_thread = |s: &[String]| s.iter().take(2).any(|f| f.starts_with("start_thread "));
        let system_call = |s: &[String]| s.iter().any(|f| f.starts_with("do_syscall_64 "));
        let (mut hits, mut total) = (0, 0);
        for (s, n) in &self.stacks {
            if s.iter().any(|f| f.contains(name)) {
                hits += n;
            } else if other_thread(s) || system_call(s) {
                continue;
            }
            total += n;
        }
        hits as f64 / total.max(1) as f64
    }
}

#[test]
fn node_the_handler_is_the_place_to_act_not_the_parser_that_calls_it() {
    let node = require_tool("node");
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("cpu-prof");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/node-server.js");
    let (mut server, addr) = start_server(
        "node-server",
        // In the scratch folder: node writes a log of its own there (`isolate-…-v8.log`).
        Command::new(node)
            .current_dir(dir.path())
            .args(["--perf-basic-prof", "--no-turbo-inlining", "--cpu-prof"])
            .arg("--cpu-prof-dir")
            .arg(&profiles)
            .arg(&script)
            .args(["0", "20000"]),
        dir.path(),
    );
    let proxy = sampling_proxy(addr, server.pid(), &["--stack-bytes", "32768"]);
    // The stacks are counted from after a first load: the unwind tables of node's binary
    // (100 MB) load beside the first samples, which are a leaf each until then.
    load_until_sampled(&proxy, "webdis", 500);
    let before = stack_samples(&snapshot(&proxy));
    let (json, text) = load_and_report(&proxy, dir.path(), 2500);
    let walked = Walked::between(&before, &stack_samples(&snapshot(&proxy)));
    // node writes its profile as it exits.
    server.signal(libc::SIGTERM);
    assert!(
        wait_for(STARTUP_DEADLINE, || server.exited().is_some()),
        "{}",
        server.log_tail()
    );
    let truth = cpu_prof_self_share(&profiles, "computeReport");
    let truth_with_callees = cpu_prof_inclusive_share(&profiles, "computeReport");
    let ours = walked.share("computeReport");
    eprintln!(
        "stacks cut short {:.1} % of {}; computeReport with all it calls: ours {:.1} %, \
         node --cpu-prof {:.1} %",
        walked.cut_short() * 100.0,
        walked.total,
        ours * 100.0,
        truth_with_callees * 100.0
    );
    // JIT frames are walked by their frame pointers down to the thread's first frame.
    assert!(
        walked.cut_short() <= 0.10,
        "{:.1} % of {} stacks cut short:\n{}",
        walked.cut_short() * 100.0,
        walked.total,
        walked.cut_examples()
    );
    assert!(
        (ours - truth_with_callees).abs() <= 0.05,
        "computeReport with all it calls: ours {ours:.3}, node's {truth_with_callees:.3}"
    );

    let inside = &json["taps"][0]["inside"];
    let hot = inside["hot"].as_array().cloned().unwrap_or_default();
    let shown = shown(&hot);
    eprintln!(
        "node --cpu-prof: computeReport {:.1} % of its samples\nhot path: {shown:#?}\nwhat if: {}",
        truth * 100.0,
        inside["what_if"]
    );
    // The truth's premise: the handler is where node's CPU goes.
    assert!(
        truth_with_callees >= 0.3,
        "computeReport only {truth_with_callees:.3} in node's own profile"
    );
    assert!(
        hot.first()
            .and_then(|h| h["name"].as_str())
            .is_some_and(|n| n.contains("computeReport")),
        "the handler is not the first place to act: {shown:#?}"
    );
    let w = &inside["what_if"];
    if !w.is_null() {
        assert!(w["share"].as_f64().unwrap() <= 0.05, "{w}\n{text}");
    }
    let ids: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(!ids.contains(&"parser_worth_replacing"), "{ids:?}\n{text}");
    no_hot_line_of_nearly_all(&text);
}

#[test]
fn python_the_interpreters_loop_is_never_nearly_all_of_a_line() {
    let python = require_tool("python3");
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/py-server.py");
    let (mut server, addr) = start_server(
        "py-server",
        Command::new(python).arg(&script).args(["0", "2000"]),
        dir.path(),
    );
    let proxy = sampling_proxy(addr, server.pid(), &[]);
    let (json, text) = load_and_report(&proxy, dir.path(), 1000);
    let inside = &json["taps"][0]["inside"];
    let hot = inside["hot"].as_array().cloned().unwrap_or_default();
    let shown = shown(&hot);
    eprintln!("hot path: {shown:#?}");
    assert!(!hot.is_empty(), "{text}");
    for h in &hot {
        assert!(
            h["listed"].as_f64().unwrap() < 0.9,
            "a line of nearly all the CPU: {shown:#?}"
        );
    }
    no_hot_line_of_nearly_all(&text);
    server.kill();
}

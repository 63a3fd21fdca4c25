//! A server of several processes (issue 51's first item): nginx with two workers behind a
//! tap with `find = "auto"`. The server is every process holding its listening socket:
//! the inside CPU is the workers' (their own /proc says how much), the samples cover the
//! workers' CPU, and a worker the master replaces is followed. Before, the master alone
//! was watched: `inside nginx (pid …, 1 thread): per request 0.0 µs on CPU … not sampled`.
//! The same for a forking Python server (socketserver.ForkingMixIn) whose children are
//! forked after the proxy found it, and for an SO_REUSEPORT pair.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use support::*;

fn snapshot(proxy: &Proxy) -> Value {
    let r = proxy.admin_get("/api/snapshot");
    serde_json::from_str(&r.body_text()).unwrap()
}

fn upstream(proxy: &Proxy) -> Value {
    snapshot(proxy)["taps"]["webdis"]["upstream"].clone()
}

fn reset(proxy: &Proxy) {
    let raw = http_exchange(
        proxy.admin_addr(),
        b"POST /api/reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(parse_response(&raw).status == 200, "reset failed");
}

/// nginx, two workers, serving a 64 KiB text file gzip'ed at level 9 (each request
/// costs a worker milliseconds of CPU), in the foreground under the test. `reuseport`:
/// each worker listens on a socket of its own (the master holds them all), and the
/// kernel spreads the connections over them.
fn nginx(dir: &Path, port: u16) -> Managed {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    // Text that compresses, but not to nothing: words from a small generator.
    let mut text = String::new();
    let mut x: u64 = 12345;
    while text.len() < 64 * 1024 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&format!("w{} ", (x >> 33) % 5000));
    }
    std::fs::write(www.join("data.txt"), text).unwrap();
    let d = dir.display();
    let conf = format!(
        "user root;\nworker_processes 2;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n access_log off;\n gzip on;\n gzip_comp_level 9;\n gzip_min_length 0;\n\
         gzip_types text/plain;\n types {{ text/plain txt; }}\n\
         client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
         server {{ listen 127.0.0.1:{port} reuseport; root {d}/www; }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let mut c = Command::new(require_tool("nginx"));
    c.arg("-c").arg(dir.join("nginx.conf")).arg("-p").arg(dir);
    let m = Managed::spawn("nginx", &mut c, &dir.join("nginx.log"));
    assert!(
        wait_for(STARTUP_DEADLINE, || accepts(loopback(port))
            && workers(m.pid()).len() == 2),
        "nginx did not start on {port}\n{}\n{}",
        m.log_tail(),
        std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
    );
    m
}

/// The children of `parent` (from every process's /proc/PID/stat), ascending.
fn workers(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields[1].parse::<u32>().ok() == Some(parent) && fields[0] != "Z" {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// utime + stime of a live process, seconds; 0 once it is gone.
fn lifetime_cpu(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / per_second
}

/// Two clients asking for the gzip'ed file over keep-alive for `load`; the answers.
fn load(addr: SocketAddr, load: Duration) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, answered) = (Arc::clone(&stop), Arc::clone(&answered));
            thread::spawn(move || client(addr, &stop, &answered))
        })
        .collect();
    thread::sleep(load);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    answered.load(Ordering::Relaxed)
}

/// One request per connection: each is a new accept, which the kernel spreads over
/// the workers' SO_REUSEPORT sockets.
fn client(addr: SocketAddr, stop: &AtomicBool, answered: &AtomicU64) {
    let request =
        b"GET /data.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n";
    let mut got = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr) else {
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        got.clear();
        if s.write_all(request).is_ok()
            && s.read_to_end(&mut got).is_ok()
            && got.starts_with(b"HTTP/1.1 200")
        {
            answered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn every_worker_of_nginx_is_the_server_and_a_respawned_one_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = nginx(dir.path(), port);
    let master = server.pid();
    let first = workers(master);
    let mut proxy = Proxy::in_front_of(loopback(port), &["--profile-upstream"]);
    let found = wait_for(STARTUP_DEADLINE, || {
        upstream(&proxy)["pid"].as_u64() == Some(master as u64)
    });
    assert!(found, "nginx's master never watched\n{}", proxy.log_tail());
    // Let every sampler start, then measure over the load alone.
    thread::sleep(Duration::from_secs(2));
    reset(&proxy);
    let truth_before: f64 = first
        .iter()
        .chain([&master])
        .map(|&p| lifetime_cpu(p))
        .sum();
    let answered = load(proxy.addr(), Duration::from_secs(3));
    // The samples of the load's last second come with the watcher's next collects.
    thread::sleep(Duration::from_millis(2500));
    let truth = first
        .iter()
        .chain([&master])
        .map(|&p| lifetime_cpu(p))
        .sum::<f64>()
        - truth_before;
    let u = upstream(&proxy);
    let inside =
        u["cpu_user_seconds"].as_f64().unwrap() + u["cpu_system_seconds"].as_f64().unwrap();
    eprintln!("{answered} answers; inside {inside:.3} s; nginx's own /proc {truth:.3} s\n{u:#}");
    assert!(answered > 20, "too little load: {answered} answers");
    assert!(truth > 0.3, "the workers burnt only {truth:.3} s");
    // Per request, both divide by the same requests: the totals compare as well.
    assert!(
        (inside - truth).abs() <= 0.10 * truth,
        "inside {inside:.3} s of CPU, the workers' own /proc {truth:.3} s"
    );
    assert_eq!(u["threads"], 3, "{u}");
    let processes = u["processes"]
        .as_array()
        .expect("processes in the snapshot");
    assert_eq!(processes.len(), 3, "{u}");
    for w in &first {
        let p = processes
            .iter()
            .find(|p| p["pid"] == *w)
            .expect("each worker");
        assert!(p["cpu_seconds"].as_f64().unwrap() > 0.05 * truth, "{p}");
    }
    // The samples stand for the group's CPU: both workers sampled, not one.
    let samples: u64 = u["samples"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let hz = u["frequency_hz"].as_f64().unwrap();
    let sampled = samples as f64 / hz;
    assert!(
        (sampled - inside).abs() <= 0.25 * inside,
        "{samples} samples at {hz} Hz stand for {sampled:.3} s; the group ran {inside:.3} s"
    );
    let text = report(&proxy);
    eprintln!(
        "{}",
        text.lines()
            .find(|l| l.contains("inside nginx"))
            .unwrap_or("")
    );
    assert!(text.contains("; 3 processes, CPU by process: "), "{text}");

    // A worker killed: the master forks another, which the watcher follows.
    let victim = first[0];
    // SAFETY: a plain kill of a pid this test's nginx owns.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let respawned = wait_for(STARTUP_DEADLINE, || {
        let w = workers(master);
        w.len() == 2 && !w.contains(&victim)
    });
    assert!(respawned, "nginx did not replace worker {victim}");
    let new = *workers(master).iter().find(|w| !first.contains(w)).unwrap();
    let joined = wait_for(STARTUP_DEADLINE, || {
        std::fs::read_to_string(proxy.process().log_path())
            .is_ok_and(|l| l.contains(&format!("pid {new} serves the upstream too")))
    });
    assert!(joined, "worker {new} never followed\n{}", proxy.log_tail());
    reset(&proxy);
    let answered = load(proxy.addr(), Duration::from_secs(2));
    let u = upstream(&proxy);
    let processes = u["processes"]
        .as_array()
        .expect("processes in the snapshot");
    let p = processes
        .iter()
        .find(|p| p["pid"] == new)
        .unwrap_or_else(|| panic!("{u}"));
    assert!(
        answered > 10 && p["cpu_seconds"].as_f64().unwrap() > 0.0,
        "{answered} answers; the new worker: {p}"
    );
    assert!(!processes.iter().any(|p| p["pid"] == victim), "{u}");
    assert_eq!(u["restarts"], 0, "a worker replaced is not a restart: {u}");
    server.stop(Duration::from_secs(5));
}

fn report(proxy: &Proxy) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_phasescope"))
        .args([
            "report",
            "--from",
            &format!("http://{}", proxy.admin_addr()),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One process of an SO_REUSEPORT pair: binds the port with SO_REUSEPORT and answers
/// each request after burning CPU, one connection at a time.
const REUSEPORT_SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    c.recv(4096)
    x = 0
    for i in range(200000):
        x = (x * 31 + i) % 1000003
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    c.close()
"#;

#[test]
fn independent_processes_sharing_a_port_with_so_reuseport_are_one_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let spawn = |name: &str| {
        let mut c = Command::new(require_tool("python3"));
        c.args(["-c", REUSEPORT_SERVER, &port.to_string()]);
        Managed::spawn(name, &mut c, &dir.path().join(format!("{name}.log")))
    };
    let (a, b) = (spawn("first"), spawn("second"));
    assert!(
        wait_for(STARTUP_DEADLINE, || {
            std::fs::read_to_string("/proc/net/tcp")
                .is_ok_and(|t| t.matches(&format!(":{port:04X} 00000000:0000 0A")).count() == 2)
        }),
        "the pair never listened\n{}\n{}",
        a.log_tail(),
        b.log_tail()
    );
    let proxy = Proxy::in_front_of(loopback(port), &[]);
    let lowest = a.pid().min(b.pid());
    let found = wait_for(STARTUP_DEADLINE, || {
        let u = upstream(&proxy);
        u["pid"].as_u64() == Some(lowest as u64) && u["threads"] == 2
    });
    assert!(found, "not both watched: {}", upstream(&proxy));
    reset(&proxy);
    let before = lifetime_cpu(a.pid()) + lifetime_cpu(b.pid());
    let answered = load(proxy.addr(), Duration::from_secs(2));
    let truth = lifetime_cpu(a.pid()) + lifetime_cpu(b.pid()) - before;
    let u = upstream(&proxy);
    let inside =
        u["cpu_user_seconds"].as_f64().unwrap() + u["cpu_system_seconds"].as_f64().unwrap();
    eprintln!("{answered} answers; inside {inside:.3} s; the pair's own /proc {truth:.3} s");
    assert!(
        answered > 10 && truth > 0.2,
        "too little load: {answered}, {truth:.3} s"
    );
    assert!(
        (inside - truth).abs() <= 0.10 * truth,
        "inside {inside:.3} s of CPU, the pair's own /proc {truth:.3} s"
    );
    let processes = u["processes"]
        .as_array()
        .expect("processes in the snapshot");
    for p in [a.pid(), b.pid()] {
        let p = processes
            .iter()
            .find(|x| x["pid"] == p)
            .unwrap_or_else(|| panic!("{u}"));
        assert!(p["cpu_seconds"].as_f64().unwrap() > 0.0, "{p}");
    }
}

/// The Python server `script` on a free port (its log in `dir`), its pid, and a proxy in
/// front of it once the proxy watches it.
fn forking_server(script: &str, dir: &Path) -> (Managed, u32, Proxy) {
    let port = free_port();
    let mut c = Command::new(require_tool("python3"));
    c.args(["-c", script, &port.to_string()]);
    let server = Managed::spawn("forking", &mut c, &dir.join("forking.log"));
    assert!(
        wait_for(STARTUP_DEADLINE, || accepts(loopback(port))),
        "{}",
        server.log_tail()
    );
    let parent = server.pid();
    let proxy = Proxy::in_front_of(loopback(port), &[]);
    let found = wait_for(STARTUP_DEADLINE, || {
        upstream(&proxy)["pid"].as_u64() == Some(parent as u64)
    });
    assert!(found, "the server never watched\n{}", proxy.log_tail());
    (server, parent, proxy)
}

/// A forking Python server (socketserver.ForkingMixIn): each connection is served by a
/// child forked for it, which keeps the listening socket it inherited and lives as long
/// as the connection (HTTP/1.1, keep-alive). Each request burns CPU in the child.
const FORKING_SERVER: &str = r#"
import http.server, socketserver, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        x = 0
        for i in range(60000):
            x = (x * 31 + i) % 1000003
        body = b"%d\n" % x
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(socketserver.ForkingMixIn, http.server.HTTPServer):
    pass
Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"#;

/// The children a forking server makes for the proxy's connections, forked after the
/// proxy found the server, are followed within a few turns (they hold the listening
/// socket; a new child starts a search at once, not at the tenth turn), and the inside
/// CPU over a load is within 10 % of the children's and the parent's own /proc. A child
/// per request, which lives milliseconds, is the next test's.
#[test]
fn a_forking_servers_children_are_followed_and_their_cpu_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, parent, proxy) = forking_server(FORKING_SERVER, dir.path());
    // One load throughout, over two keep-alive connections: two children, each forked
    // once, alive to the end.
    let url = proxy.url("/");
    let wrk = thread::spawn(move || run_wrk(&url, 10, 2, 1));
    let children = wait_for(STARTUP_DEADLINE, || workers(parent).len() == 2);
    assert!(children, "no children: {:?}", workers(parent));
    let kids = workers(parent);
    let joined = wait_for(STARTUP_DEADLINE, || {
        let u = upstream(&proxy);
        let pids: Vec<u64> = u["processes"]
            .as_array()
            .map(|p| p.iter().filter_map(|p| p["pid"].as_u64()).collect())
            .unwrap_or_default();
        kids.iter().all(|k| pids.contains(&u64::from(*k)))
    });
    assert!(
        joined,
        "children {kids:?} not followed: {}",
        upstream(&proxy)
    );
    reset(&proxy);
    let group: Vec<u32> = kids.iter().copied().chain([parent]).collect();
    let before: f64 = group.iter().map(|&p| lifetime_cpu(p)).sum();
    thread::sleep(Duration::from_secs(4));
    let truth = group.iter().map(|&p| lifetime_cpu(p)).sum::<f64>() - before;
    let u = upstream(&proxy);
    let inside =
        u["cpu_user_seconds"].as_f64().unwrap() + u["cpu_system_seconds"].as_f64().unwrap();
    let still = workers(parent);
    let answered = wrk.join().unwrap().requests;
    eprintln!(
        "{answered} answers; inside {inside:.3} s; the children's and parent's own /proc \
         {truth:.3} s; children {kids:?}, at the end {still:?}"
    );
    assert!(
        kids.iter().all(|k| still.contains(k)),
        "a child left during the window: {kids:?} then {still:?}"
    );
    // /proc counts clock ticks (10 ms): a third of a second or more keeps their error
    // under the bound.
    assert!(truth > 0.3, "the children burnt only {truth:.3} s");
    assert!(
        (inside - truth).abs() <= 0.10 * truth,
        "inside {inside:.3} s of CPU, the processes' own /proc {truth:.3} s\n{u:#}"
    );
    server.stop(Duration::from_secs(5));
}

/// [`FORKING_SERVER`] whose handler answers with the CPU its child has used so far
/// (`time.process_time()`, the child's own clock), and closes: a child per request.
const FORKING_PER_REQUEST: &str = r#"
import http.server, socketserver, sys, time
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        x = 0
        for i in range(60000):
            x = (x * 31 + i) % 1000003
        body = b"%.6f\n" % time.process_time()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(socketserver.ForkingMixIn, http.server.HTTPServer):
    pass
Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"#;

/// utime + stime of a process, and cutime + cstime (its reaped children's), seconds.
fn own_and_reaped_cpu(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|v| v.parse().unwrap())
        .collect();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ((f[0] + f[1]) / per_second, (f[2] + f[3]) / per_second)
}

/// A forking server whose child lives for one request (milliseconds, never seen by a
/// read of the group): its CPU reaches the parent's `cutime` when the parent reaps it,
/// and the inside CPU counts it from there. Truth: the parent's own /proc, its own CPU and
/// its reaped children's; and at least each child's own clock (sent in its answer, which
/// its exit follows) with the parent's own. Before, the inside line read the parent alone.
#[test]
fn a_forking_servers_child_per_request_is_counted_when_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, parent, proxy) = forking_server(FORKING_PER_REQUEST, dir.path());
    reset(&proxy);
    let before = own_and_reaped_cpu(parent);
    let mut children = 0.0;
    let mut answers = 0u32;
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until {
        let r = http_get(proxy.addr(), "/");
        assert_eq!(r.status, 200, "{}", r.body_text());
        children += r.body_text().trim().parse::<f64>().unwrap();
        answers += 1;
    }
    // ForkingMixIn reaps between requests and at its poll (every half second): wait for
    // the last children to be reaped and a read of the group after.
    assert!(
        wait_for(Duration::from_secs(10), || workers(parent).is_empty()),
        "children left: {:?}",
        workers(parent)
    );
    thread::sleep(Duration::from_millis(2500));
    let after = own_and_reaped_cpu(parent);
    let (own, reaped) = (after.0 - before.0, after.1 - before.1);
    let u = upstream(&proxy);
    let inside =
        u["cpu_user_seconds"].as_f64().unwrap() + u["cpu_system_seconds"].as_f64().unwrap();
    eprintln!(
        "{answers} answers, a child each; inside {inside:.3} s; the parent's /proc: itself \
         {own:.3} s, its reaped children {reaped:.3} s; the children's own clocks at their \
         answers {children:.3} s"
    );
    assert!(children > 0.3, "the children burnt only {children:.3} s");
    assert!(
        (inside - (own + reaped)).abs() <= 0.10 * (own + reaped),
        "inside {inside:.3} s of CPU, the parent's /proc {own:.3} s and {reaped:.3} s reaped\n{u:#}"
    );
    assert!(
        inside >= 0.95 * (children + own),
        "inside {inside:.3} s, below the children's own clocks {children:.3} s and the \
         parent's {own:.3} s"
    );
    server.stop(Duration::from_secs(5));
}

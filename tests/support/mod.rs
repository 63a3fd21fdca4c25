//! The shared harness of the integration tests: real servers (Redis, Webdis, the phasescope
//! binary) on free loopback ports, and raw-TCP HTTP helpers that return the exact bytes that
//! crossed the wire, so a test can compare what the proxy forwards with what the upstream
//! sends directly.
//!
//! Nothing needs setting up by hand: every server gets its own temporary directory and port.
//! A tool that is not installed fails the test with a pointer to `scripts/test` (which
//! installs it) instead of skipping it, so a green run always means the test ran.
//!
//! Processes never outlive their test: each handle kills its process on drop (which also
//! runs while a failing test unwinds), and every child is asked to die with the thread that
//! started it (`PR_SET_PDEATHSIG`) in case the test binary itself is killed. The consequence
//! is that a handle must not outlive the thread that created it (no process in a `static`).

// Each test file compiles this module on its own and uses a different part of it.
#![allow(dead_code)]

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a server may take to start answering; generous, the machine is shared.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(30);
/// How long one read may wait for the peer before the test fails instead of hanging.
pub const IO_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a process gets to exit after SIGTERM before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(15);
/// Attempts at starting a server whose port was taken between `free_port` and its bind.
const START_ATTEMPTS: usize = 4;

// ---------------------------------------------------------------------------------------
// Tools and ports
// ---------------------------------------------------------------------------------------

/// Debian's Python interpreter, the one the Python frame tests read (a `python3` earlier
/// in PATH may be another build, as pyenv's is on the developers' machines).
pub fn debian_python() -> PathBuf {
    let debian = PathBuf::from("/usr/bin/python3");
    if debian.exists() {
        debian
    } else {
        require_tool("python3")
    }
}

/// The path of an installed tool; panics (fails the test) when it is missing.
///
/// Looks in `PATH` and in the sbin directories, where Debian puts daemons such as
/// haproxy and nginx that a non-login `PATH` may lack.
pub fn require_tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(extra)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| panic!("{name} is missing: run scripts/test, which installs it"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A loopback port that nothing listens on right now.
///
/// Another process can still take it before the caller binds it; the `start` functions
/// below retry with a new port when their server exits at start. Within one test binary
/// the same port is never handed out twice.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if given.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// `127.0.0.1:port`.
/// An upstream that answers each request `delay` after the whole of it (head, and a body by
/// its Content-Length) arrived, pipelined ones in turn, with `answer(head)`; a connection
/// ends when the client closes or a write fails.
pub fn slow_upstream(delay: Duration, answer: fn(&str) -> Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let mut more = |conn: &mut TcpStream, buf: &mut Vec<u8>| match conn.read(&mut chunk)
                {
                    Ok(0) | Err(_) => false,
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        true
                    }
                };
                loop {
                    let end = loop {
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                        if !more(&mut conn, &mut buf) {
                            return;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |n| n.trim().parse().unwrap());
                    while buf.len() < end + length {
                        if !more(&mut conn, &mut buf) {
                            return;
                        }
                    }
                    buf.drain(..end + length);
                    thread::sleep(delay);
                    if conn.write_all(&answer(&head)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The release build of phasescope, built (or found up to date) once per test binary
/// (scripts/test builds it before the tests, so that this costs no test's time).
///
/// For claims about phasescope as it is run. A bench's power: in a debug build the proxy's
/// own CPU per request is several times the release build's, and on two cores it dilutes
/// the servers' difference in latency (the 5 % pair interleaved beside two busy loops: +1.2
/// to +1.7 % in debug, `unknown`, against +3.7 and +4.1 % in release, `different`, while
/// both builds measured the servers' CPU per request +4.7 to +5.0 % apart). The demo's
/// stacks: the debug build's frames are so much larger that 14 % of its upstream's stacks
/// outgrow the 16 KiB copied per sample, against none in release.
pub fn release_phasescope() -> &'static std::path::Path {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args(["build", "--release", "--bin", "phasescope"])
            .args(["--message-format", "json-render-diagnostics"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo build --release: {}",
            out.status
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|m| m["target"]["name"] == "phasescope")
            .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
            .expect("cargo build --release named no phasescope executable")
    })
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Whether something accepts TCP connections at `addr` right now.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// Polls `check` every 25 ms until it holds or `timeout` has passed; returns whether it held.
pub fn wait_for(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(25));
    }
}

/// The machine's CPU time so far, from /proc/stat's `cpu` line, in clock ticks.
#[derive(Clone, Copy, Debug)]
pub struct CpuTimes {
    /// All of it (user to steal; guest time is counted in user time already).
    pub total: u64,
    /// Idle and waiting for I/O.
    pub idle: u64,
    /// Taken by the hypervisor while this machine's CPUs had work to run.
    pub steal: u64,
}

impl CpuTimes {
    /// Now; `None` where /proc/stat cannot be read.
    pub fn now() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        Some(CpuTimes {
            total: fields.iter().take(8).sum(),
            idle: fields.get(3)? + fields.get(4).copied().unwrap_or(0),
            steal: fields.get(7).copied().unwrap_or(0),
        })
    }

    /// The share of all CPU time since `before` that the hypervisor stole, in percent;
    /// `None` if no time passed.
    pub fn steal_since(&self, before: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(before.total).filter(|t| *t > 0)?;
        Some(100.0 * self.steal.saturating_sub(before.steal) as f64 / total as f64)
    }
}

/// How many of the machine's cores were busy over `over` (from /proc/stat: all time but
/// idle and iowait, over all time, times the cores), with nothing of the test's own
/// running: the other work beside it. `None` where /proc/stat cannot be read.
pub fn busy_cores(over: Duration) -> Option<f64> {
    let before = CpuTimes::now()?;
    thread::sleep(over);
    let after = CpuTimes::now()?;
    let total = after.total.checked_sub(before.total).filter(|t| *t > 0)?;
    let busy = total.saturating_sub(after.idle.saturating_sub(before.idle));
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    Some(busy as f64 / total as f64 * cores as f64)
}

// ---------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------

/// A child process whose output goes to a log file, killed on drop.
pub struct Managed {
    name: String,
    child: Child,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Managed {
    /// Spawns `command` with stdin closed and stdout/stderr appended to `log`.
    pub fn spawn(name: &str, command: &mut Command, log: &Path) -> Managed {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let err = out.try_clone().unwrap();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Managed {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status
    }

    /// The end of the process's output, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = fs::read(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        format!(
            "--- last output of {} ({}) ---\n{}\n--- end ---",
            self.name,
            self.log.display(),
            String::from_utf8_lossy(&text[start..])
        )
    }

    /// Sends `signal` unless the process has already been reaped.
    pub fn signal(&mut self, signal: libc::c_int) {
        if self.exited().is_none() {
            let pid = libc::pid_t::try_from(self.child.id()).unwrap();
            // SAFETY: plain syscall on a pid this handle owns and has not reaped.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// SIGTERM, then waits up to `grace` for the exit; SIGKILL after that.
    /// Returns the exit status (a signal status if it had to be killed).
    pub fn stop(&mut self, grace: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        if !wait_for(grace, || self.exited().is_some()) {
            self.kill();
        }
        self.exited().unwrap()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What came of waiting for a freshly spawned server.
enum Startup {
    Ready,
    /// It exited before answering: most likely its port was taken meanwhile.
    Exited(ExitStatus),
}

fn await_ready(process: &mut Managed, mut ready: impl FnMut() -> bool) -> Startup {
    let deadline = Instant::now() + STARTUP_DEADLINE;
    loop {
        if let Some(status) = process.exited() {
            return Startup::Exited(status);
        }
        if ready() {
            return Startup::Ready;
        }
        if Instant::now() >= deadline {
            panic!(
                "{} did not become ready within {STARTUP_DEADLINE:?}\n{}",
                process.name,
                process.log_tail()
            );
        }
        thread::sleep(Duration::from_millis(25));
    }
}

/// Starts a server on fresh free ports until one attempt answers `ready`.
/// `spawn` gets the attempt number and returns the process and what it listens on.
fn start_with_retries<T>(
    what: &str,
    mut spawn: impl FnMut(usize) -> (Managed, T),
    mut ready: impl FnMut(&T) -> bool,
) -> (Managed, T) {
    let mut failures = String::new();
    for attempt in 0..START_ATTEMPTS {
        let (mut process, ports) = spawn(attempt);
        match await_ready(&mut process, || ready(&ports)) {
            Startup::Ready => return (process, ports),
            Startup::Exited(status) => {
                let _ = write!(
                    failures,
                    "\nattempt {attempt}: exited with {status}\n{}",
                    process.log_tail()
                );
            }
        }
    }
    panic!("{what} exited before it was ready, {START_ATTEMPTS} times:{failures}");
}

// ---------------------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------------------

/// A throwaway `redis-server` on a free loopback port, without persistence.
pub struct RedisServer {
    process: Managed,
    port: u16,
    _dir: TempDir,
}

impl RedisServer {
    /// Starts it and waits until `PING` answers `+PONG` (`-NOAUTH` with a password).
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts it with extra command-line options (e.g. `--enable-debug-command yes`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let binary = require_tool("redis-server");
        let dir = tempfile::Builder::new().prefix("redis-").tempdir().unwrap();
        let (process, port) = start_with_retries(
            "redis-server",
            |attempt| {
                let port = free_port();
                let mut command = Command::new(&binary);
                command
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                    .arg("--dir")
                    .arg(dir.path())
                    .args(["--logfile", ""])
                    .args(extra);
                let log = dir.path().join(format!("redis-{attempt}.log"));
                (Managed::spawn("redis-server", &mut command, &log), port)
            },
            |&port| {
                // With `--requirepass` an unauthenticated PING is answered -NOAUTH: ready too.
                try_resp_command(loopback(port), &["PING"])
                    .is_ok_and(|reply| reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH"))
            },
        );
        RedisServer {
            process,
            port,
            _dir: dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    pub fn process(&mut self) -> &mut Managed {
        &mut self.process
    }

    /// Sends one command on a new connection and returns the raw RESP reply.
    pub fn command(&self, args: &[&str]) -> Vec<u8> {
        resp_command(self.addr(), args)
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub fn resp_encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends one command to a RESP server on a new connection and returns the exact reply bytes.
pub fn resp_command(addr: SocketAddr, args: &[&str]) -> Vec<u8> {
    try_resp_command(addr, args).unwrap_or_else(|e| panic!("RESP {args:?} to {addr}: {e}"))
}

fn try_resp_command(addr: SocketAddr, args: &[&str]) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.write_all(&resp_encode(args))?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(len) = resp_frame_len(&reply) {
            reply.truncate(len);
            return Ok(reply);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("closed after {:?}", String::from_utf8_lossy(&reply)),
            ));
        }
        reply.extend_from_slice(&chunk[..n]);
    }
}

/// The length of the complete RESP2/RESP3 frame at the start of `buf`, if it is complete.
pub fn resp_frame_len(buf: &[u8]) -> Option<usize> {
    let line_end = find(buf, b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..line_end]).ok()?;
    let after_line = line_end + 2;
    match buf.first()? {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after_line),
        b'$' | b'!' | b'=' => {
            let len: i64 = line.parse().ok()?;
            if len < 0 {
                return Some(after_line);
            }
            let end = after_line + usize::try_from(len).ok()? + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let count: i64 = line.parse().ok()?;
            let items = match buf[0] {
                b'%' | b'|' => count.max(0) * 2,
                _ => count.max(0),
            };
            let mut at = after_line;
            for _ in 0..items {
                at += resp_frame_len(&buf[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// The ground-truth upstream that burns known CPU
// ---------------------------------------------------------------------------------------

/// `tests/fixtures/burn-upstream.c`, built with symbols on first use: an HTTP/1.1 server
/// that spends `parser_us` of CPU in `http_parser_execute()` and `backend_us` in
/// `backend_query()` per request, for tests that measure inside the upstream process.
pub struct BurnUpstream {
    process: Managed,
    port: u16,
    _dir: TempDir,
}

/// Compiles the fixture once per test binary, unless a build newer than the source is
/// there already: replacing the file under a running upstream would leave a profiler
/// that names frames by path (`perf report`) reading another build's symbols. Several
/// binaries may race, so each builds to its own file and renames it into place.
pub fn burn_upstream_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| burn_upstream_variant("burn-upstream", &[]))
        .clone()
}

/// The burn upstream built into `CARGO_TARGET_TMPDIR/NAME` with `extra` gcc flags (another
/// linker: `-fuse-ld=lld`; `-no-pie`; `-s` to strip it), with the same care as
/// [`burn_upstream_binary`]: a build newer than the source is kept, a new one is renamed
/// into place.
pub fn burn_upstream_variant(name: &str, extra: &[&str]) -> PathBuf {
    c_fixture("burn-upstream", name, extra)
}

/// tests/fixtures/SOURCE.c built with symbols (`-O1 -g -pthread`) and `extra` flags as
/// NAME in the target's scratch folder, unless a build newer than the source is there.
pub fn c_fixture(source: &str, name: &str, extra: &[&str]) -> PathBuf {
    let gcc = require_tool("gcc");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{source}.c"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    if is_newer(&out, &source) {
        return out;
    }
    let staging = out.with_extension(format!("tmp{}", std::process::id()));
    let output = Command::new(gcc)
        .args(["-O1", "-g", "-pthread", "-Wall"])
        .args(extra)
        .arg("-o")
        .arg(&staging)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc: {e}"));
    assert!(
        output.status.success(),
        "gcc {extra:?} failed on {}: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    fs::rename(&staging, &out).unwrap();
    out
}

/// Whether `built` exists and was written after `source`.
fn is_newer(built: &Path, source: &Path) -> bool {
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(built), modified(source)), (Some(b), Some(s)) if b >= s)
}

/// The Go HTTP server of tests/fixtures/go-upstream.go, built with `go build` (standard
/// library only, no cgo: a static binary with frame pointers and no `.eh_frame`, as Go
/// builds them). The build cache lives beside the binary, so only the first build
/// compiles the standard library; nothing is fetched from the network.
pub fn go_upstream_binary() -> PathBuf {
    let go = require_tool("go");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/go-upstream.go");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = tmp.join("go-upstream");
    if is_newer(&out, &source) {
        return out;
    }
    let staging = out.with_extension(format!("tmp{}", std::process::id()));
    let output = Command::new(go)
        .arg("build")
        .arg("-o")
        .arg(&staging)
        .arg(&source)
        .env("GOCACHE", tmp.join("go-cache"))
        .env("GOPATH", tmp.join("go-path"))
        .env("GOFLAGS", "")
        .env("GOPROXY", "off")
        .env("CGO_ENABLED", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot run go: {e}"));
    assert!(
        output.status.success(),
        "go build failed on {}: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    fs::rename(&staging, &out).unwrap();
    out
}

impl BurnUpstream {
    /// Starts it on a free port and waits until it accepts connections.
    pub fn start(parser_us: u32, backend_us: u32) -> BurnUpstream {
        BurnUpstream::start_with(parser_us, backend_us, |_| {})
    }

    /// Like `start`, with a hook to adjust the command (e.g. run it under `taskset`).
    pub fn start_with(
        parser_us: u32,
        backend_us: u32,
        adjust: impl FnMut(&mut Command),
    ) -> BurnUpstream {
        BurnUpstream::start_binary(&burn_upstream_binary(), parser_us, backend_us, adjust)
    }

    /// Like `start_with`, for a build of the fixture of its own ([`burn_upstream_variant`]).
    pub fn start_binary(
        binary: &Path,
        parser_us: u32,
        backend_us: u32,
        mut adjust: impl FnMut(&mut Command),
    ) -> BurnUpstream {
        let dir = tempfile::Builder::new().prefix("burn-").tempdir().unwrap();
        let (process, port) = start_with_retries(
            "burn-upstream",
            |attempt| {
                let port = free_port();
                let mut command = Command::new(binary);
                command.args([
                    port.to_string(),
                    parser_us.to_string(),
                    backend_us.to_string(),
                ]);
                adjust(&mut command);
                let log = dir.path().join(format!("burn-{attempt}.log"));
                (Managed::spawn("burn-upstream", &mut command, &log), port)
            },
            |&port| accepts(loopback(port)),
        );
        BurnUpstream {
            process,
            port,
            _dir: dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    pub fn process(&mut self) -> &mut Managed {
        &mut self.process
    }

    /// What its burns really cost so far (`GET /__truth`, asked directly).
    pub fn truth(&self) -> BurnTruth {
        let r = http_get(self.addr(), "/__truth");
        assert_eq!(r.status, 200, "burn-upstream /__truth");
        let text = r.body_text();
        let n: Vec<u64> = text
            .split_whitespace()
            .map(|v| v.parse().unwrap_or_else(|_| panic!("burn truth {text:?}")))
            .collect();
        assert_eq!(n.len(), 3, "burn truth {text:?}");
        BurnTruth {
            requests: n[0],
            parser_ns: n[1],
            backend_ns: n[2],
        }
    }
}

/// Requests the burn upstream served and the CPU its two functions took, measured by the
/// threads' CPU clocks around each call.
#[derive(Debug, Clone, Copy, Default)]
pub struct BurnTruth {
    pub requests: u64,
    pub parser_ns: u64,
    pub backend_ns: u64,
}

impl BurnTruth {
    /// CPU µs per request in `http_parser_execute` between `earlier` and `self`.
    pub fn parser_us_per_request_since(&self, earlier: &BurnTruth) -> f64 {
        self.per_request_us(earlier, self.parser_ns - earlier.parser_ns)
    }

    /// CPU µs per request in both burns between `earlier` and `self`.
    pub fn burn_us_per_request_since(&self, earlier: &BurnTruth) -> f64 {
        let ns = (self.parser_ns - earlier.parser_ns) + (self.backend_ns - earlier.backend_ns);
        self.per_request_us(earlier, ns)
    }

    fn per_request_us(&self, earlier: &BurnTruth, ns: u64) -> f64 {
        ns as f64 / 1e3 / (self.requests - earlier.requests).max(1) as f64
    }
}

// ---------------------------------------------------------------------------------------
// Prometheus
// ---------------------------------------------------------------------------------------

/// A Prometheus server on a free loopback port scraping one target every second.
pub struct Prometheus {
    process: Managed,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts it with extra command-line `flags` (e.g. a feature flag) and waits until
    /// it is ready.
    pub fn start(binary: &Path, target: SocketAddr, flags: &[&str]) -> Prometheus {
        Prometheus::start_with_rules(binary, target, flags, None)
    }

    /// [`Prometheus::start`] with a rule file (recording and alerting rules), evaluated
    /// every second.
    pub fn start_with_rules(
        binary: &Path,
        target: SocketAddr,
        flags: &[&str],
        rules: Option<&Path>,
    ) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("phasescope-prometheus-")
            .tempdir()
            .unwrap();
        let config = dir.path().join("prometheus.yml");
        let rule_files = rules
            .map(|r| format!("rule_files:\n  - '{}'\n", r.display()))
            .unwrap_or_default();
        fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
                 {rule_files}scrape_configs:\n  - job_name: phasescope\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let mut failures = String::new();
        for attempt in 0..4 {
            let addr = loopback(free_port());
            let mut command = Command::new(binary);
            command
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join(format!("data-{attempt}")).display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn")
                .args(flags);
            let log = dir.path().join(format!("prometheus-{attempt}.log"));
            let mut process = Managed::spawn("prometheus", &mut command, &log);
            let deadline = Instant::now() + STARTUP_DEADLINE;
            loop {
                if let Some(status) = process.exited() {
                    failures += &format!("\nattempt {attempt}: {status}\n{}", process.log_tail());
                    break;
                }
                if accepts(addr) && http_get(addr, "/-/ready").status == 200 {
                    return Prometheus {
                        process,
                        addr,
                        _dir: dir,
                    };
                }
                assert!(
                    Instant::now() < deadline,
                    "prometheus not ready within {STARTUP_DEADLINE:?}\n{}",
                    process.log_tail()
                );
                thread::sleep(Duration::from_millis(100));
            }
        }
        panic!("prometheus did not start:{failures}");
    }

    /// Its base URL, `http://127.0.0.1:PORT`, as `report --prometheus` takes it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `/api/v1/query` at `time` (Unix seconds); the `data` object. Fails the test on an
    /// error answer (a query that does not parse or evaluate).
    pub fn query(&self, expr: &str, time: f64) -> serde_json::Value {
        self.api(
            &format!(
                "/api/v1/query?query={}&time={time:.3}",
                percent_encode(expr)
            ),
            expr,
        )["data"]
            .clone()
    }

    /// `GET path` on the API: the answer, after checking that it is a success.
    fn api(&self, path: &str, expr: &str) -> serde_json::Value {
        let r = http_get(self.addr, path);
        let body: serde_json::Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("prometheus answered {} {e}: {}", r.status, r.body_text()));
        assert!(
            r.status == 200 && body["status"] == "success",
            "{path} failed: {expr}\n{}\n{}",
            r.status,
            body
        );
        body
    }

    /// The value of a query whose result is one sample, if it has one.
    pub fn scalar(&self, expr: &str, time: f64) -> Option<f64> {
        let data = self.query(expr, time);
        let result = data["result"].as_array()?;
        match result.as_slice() {
            [one] => one["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// `/api/v1/query_exemplars` from `start` to `end` (Unix seconds): the `data` array,
    /// one entry per series with its `exemplars`. Needs `--enable-feature=exemplar-storage`.
    pub fn exemplars(&self, expr: &str, start: f64, end: f64) -> Vec<serde_json::Value> {
        let path = format!(
            "/api/v1/query_exemplars?query={}&start={start:.3}&end={end:.3}",
            percent_encode(expr)
        );
        self.api(&path, expr)["data"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The `result` array of [`query`](Self::query).
    pub fn result(&self, expr: &str, time: f64) -> Vec<serde_json::Value> {
        self.query(expr, time)["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

pub fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Webdis
// ---------------------------------------------------------------------------------------

/// Debian's Webdis in the foreground on a free loopback port, in front of `redis_port`.
pub struct Webdis {
    process: Managed,
    port: u16,
    dir: TempDir,
}

impl Webdis {
    /// Writes its JSON config, starts it, and waits until `/PING` answers `PONG`
    /// (which also means its Redis connections are up).
    pub fn start(redis_port: u16) -> Webdis {
        Webdis::start_with_port(redis_port, free_port)
    }

    /// Like [`Webdis::start`], on a port chosen beforehand (e.g. one a proxy was already
    /// told to forward to).
    pub fn start_at(redis_port: u16, http_port: u16) -> Webdis {
        Webdis::start_with_port(redis_port, || http_port)
    }

    /// Like [`Webdis::start`], with config keys overridden (e.g. `{"threads": 1}` or
    /// `{"verbosity": 8}`).
    pub fn start_configured(redis_port: u16, overrides: serde_json::Value) -> Webdis {
        Webdis::start_inner(redis_port, free_port, overrides)
    }

    fn start_with_port(redis_port: u16, pick_port: impl FnMut() -> u16) -> Webdis {
        Webdis::start_inner(redis_port, pick_port, serde_json::json!({}))
    }

    fn start_inner(
        redis_port: u16,
        mut pick_port: impl FnMut() -> u16,
        overrides: serde_json::Value,
    ) -> Webdis {
        let binary = require_tool("webdis");
        let dir = tempfile::Builder::new()
            .prefix("webdis-")
            .tempdir()
            .unwrap();
        let (process, port) = start_with_retries(
            "webdis",
            |attempt| {
                let port = pick_port();
                let mut config = serde_json::json!({
                    "redis_host": "127.0.0.1",
                    "redis_port": redis_port,
                    "http_host": "127.0.0.1",
                    "http_port": port,
                    "threads": 2,
                    "pool_size": 4,
                    "daemonize": false,
                    "websockets": false,
                    "database": 0,
                    "verbosity": 3,
                    "logfile": dir.path().join(format!("webdis-{attempt}.log")),
                });
                if let (Some(c), Some(o)) = (config.as_object_mut(), overrides.as_object()) {
                    for (k, v) in o {
                        c.insert(k.clone(), v.clone());
                    }
                }
                let config_path = dir.path().join(format!("webdis-{attempt}.json"));
                fs::write(&config_path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
                let mut command = Command::new(&binary);
                command.arg(&config_path).current_dir(dir.path());
                let log = dir.path().join(format!("webdis-{attempt}.out"));
                (Managed::spawn("webdis", &mut command, &log), port)
            },
            |&port| {
                try_http_exchange(loopback(port), &get_request("/PING"))
                    .map(|raw| parse_response(&raw))
                    .is_ok_and(|response| response.status == 200 && response.body_contains("PONG"))
            },
        );
        Webdis { process, port, dir }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn process(&mut self) -> &mut Managed {
        &mut self.process
    }
}

/// The full Webdis chain in one phasescope process: client → HTTP tap `webdis` → Webdis →
/// RESP tap `redis` → Redis, the two taps correlated (`[[correlate]] kind = "webdis"`).
pub struct WebdisChain {
    pub proxy: Proxy,
    _webdis: Webdis,
    pub redis: RedisServer,
    _dir: TempDir,
}

impl WebdisChain {
    pub fn start() -> WebdisChain {
        WebdisChain::start_configured(serde_json::json!({}))
    }

    /// Like [`WebdisChain::start`], with Webdis config keys overridden (e.g.
    /// `{"threads": 1, "pool_size": 1}`).
    pub fn start_configured(webdis: serde_json::Value) -> WebdisChain {
        WebdisChain::start_with(webdis, "")
    }

    /// Like [`WebdisChain::start_configured`], with `redis_process` (TOML: a
    /// `[tap.process]` table) after the RESP tap, e.g. to sample Redis.
    pub fn start_with(webdis: serde_json::Value, redis_process: &str) -> WebdisChain {
        let redis = RedisServer::start();
        let resp_port = free_port();
        let webdis_port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("chain.toml");
        fs::write(
            &config,
            format!(
                r#"
[[tap]]
name = "webdis"
protocol = "http"
listen = "127.0.0.1:0"
upstream = "127.0.0.1:{webdis_port}"
routes = "webdis"

[[tap]]
name = "redis"
protocol = "resp"
listen = "127.0.0.1:{resp_port}"
upstream = "127.0.0.1:{redis_port}"
{redis_process}

[[correlate]]
kind = "webdis"
http = "webdis"
resp = "redis"
"#,
                redis_port = redis.port()
            ),
        )
        .unwrap();
        // The RESP tap listens before Webdis opens its Redis pool through it.
        let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
        let webdis = Webdis::start_inner(resp_port, || webdis_port, webdis);
        WebdisChain {
            proxy,
            _webdis: webdis,
            redis,
            _dir: dir,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The proxy
// ---------------------------------------------------------------------------------------

/// The phasescope binary under test, `run` with `--listen` and `--admin` on free ports.
pub struct Proxy {
    process: Managed,
    listen_port: u16,
    admin_port: u16,
    access_log: PathBuf,
    _dir: TempDir,
}

impl Proxy {
    /// Runs `phasescope run --listen … --admin … --access-log … ARGS` from the crate root
    /// (so the root config.toml is loaded and the flags override its first tap) and waits
    /// until the listen port accepts. The access log goes to the proxy's temporary
    /// directory unless `args` name one.
    pub fn start(args: &[&str]) -> Proxy {
        let dir = tempfile::Builder::new()
            .prefix("phasescope-")
            .tempdir()
            .unwrap();
        let access_log = match args.iter().position(|&arg| arg == "--access-log") {
            Some(at) => PathBuf::from(args.get(at + 1).expect("--access-log needs a value")),
            None => dir.path().join("access.log"),
        };
        let (process, (listen_port, admin_port)) = start_with_retries(
            "phasescope",
            |attempt| {
                let (listen_port, admin_port) = (free_port(), free_port());
                let mut command = Command::new(env!("CARGO_BIN_EXE_phasescope"));
                command
                    .current_dir(env!("CARGO_MANIFEST_DIR"))
                    .arg("run")
                    .args(["--listen", &loopback(listen_port).to_string()])
                    .args(["--admin", &loopback(admin_port).to_string()]);
                if !args.contains(&"--access-log") {
                    command.arg("--access-log").arg(&access_log);
                }
                command.args(args);
                // The environment overrides flags and files: keep the caller's out of the test.
                for (key, _) in std::env::vars_os() {
                    if key.to_string_lossy().starts_with("PHASESCOPE_") {
                        command.env_remove(key);
                    }
                }
                let log = dir.path().join(format!("phasescope-{attempt}.log"));
                let process = Managed::spawn("phasescope", &mut command, &log);
                (process, (listen_port, admin_port))
            },
            |&(listen_port, _)| accepts(loopback(listen_port)),
        );
        Proxy {
            process,
            listen_port,
            admin_port,
            access_log,
            _dir: dir,
        }
    }

    /// A proxy whose first tap forwards to `upstream`, plus `args`.
    pub fn in_front_of(upstream: SocketAddr, args: &[&str]) -> Proxy {
        let upstream = upstream.to_string();
        let mut all = vec!["--upstream", upstream.as_str()];
        all.extend_from_slice(args);
        Proxy::start(&all)
    }

    pub fn listen_port(&self) -> u16 {
        self.listen_port
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.listen_port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen_port)
    }

    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    pub fn admin_addr(&self) -> SocketAddr {
        loopback(self.admin_port)
    }

    pub fn access_log(&self) -> &Path {
        &self.access_log
    }

    /// The proxy's own output so far, for failure messages.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    pub fn process(&mut self) -> &mut Managed {
        &mut self.process
    }

    /// `GET path` on the admin server (retried until it accepts, within the start-up
    /// deadline, since it may start a moment after the listener).
    pub fn admin_get(&self, path: &str) -> Response {
        let addr = self.admin_addr();
        if !wait_for(STARTUP_DEADLINE, || accepts(addr)) {
            panic!("admin server at {addr} never accepted\n{}", self.log_tail());
        }
        parse_response(&http_exchange(addr, &get_request(path)))
    }

    /// SIGTERM and wait for the exit (SIGKILL after [`STOP_GRACE`]).
    pub fn stop(&mut self) -> ExitStatus {
        self.process.stop(STOP_GRACE)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Graceful first so an access log is flushed for a post-mortem; killed if it hangs.
        self.process.stop(Duration::from_secs(3));
    }
}

// ---------------------------------------------------------------------------------------
// Raw HTTP/1.x over TCP
// ---------------------------------------------------------------------------------------

/// `GET path HTTP/1.1` with a Host header, and `Connection: close` so one exchange
/// per connection also works against HTTP/1.1 servers that keep connections open.
pub fn get_request(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").into_bytes()
}

/// Sends `request` on a new connection and returns the exact bytes of the response.
pub fn http_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    try_http_exchange(addr, request).unwrap_or_else(|e| {
        panic!(
            "HTTP exchange with {addr} failed: {e}\nrequest: {:?}",
            String::from_utf8_lossy(request)
        )
    })
}

fn try_http_exchange(addr: SocketAddr, request: &[u8]) -> io::Result<Vec<u8>> {
    let mut conn = HttpConn::try_connect(addr)?;
    conn.stream.write_all(request)?;
    let deadline = Instant::now() + IO_TIMEOUT;
    conn.try_read_response(request_is_head(request), deadline)
}

/// `GET path` on a new connection, parsed.
pub fn http_get(addr: SocketAddr, path: &str) -> Response {
    parse_response(&http_exchange(addr, &get_request(path)))
}

fn request_is_head(request: &[u8]) -> bool {
    request.starts_with(b"HEAD ")
}

/// One client connection that reads responses byte-exactly, keeping whatever arrives
/// past the end of one response for the next.
pub struct HttpConn {
    stream: TcpStream,
    buf: Vec<u8>,
    peer: SocketAddr,
}

impl HttpConn {
    pub fn connect(addr: SocketAddr) -> HttpConn {
        Self::try_connect(addr).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"))
    }

    fn try_connect(addr: SocketAddr) -> io::Result<HttpConn> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_nodelay(true)?;
        Ok(HttpConn {
            stream,
            buf: Vec::new(),
            peer: addr,
        })
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Writes `bytes` in one call.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("writing to {}: {e}", self.peer));
    }

    /// Sends a request and reads its whole response (no body for HEAD).
    pub fn exchange(&mut self, request: &[u8]) -> Vec<u8> {
        self.send(request);
        self.read_response_for(request)
    }

    /// Reads the response to `request` (which decides whether a body can follow).
    pub fn read_response_for(&mut self, request: &[u8]) -> Vec<u8> {
        let deadline = Instant::now() + IO_TIMEOUT;
        self.try_read_response(request_is_head(request), deadline)
            .unwrap_or_else(|e| panic!("reading a response from {}: {e}", self.peer))
    }

    /// Reads one complete response to a non-HEAD request.
    pub fn read_response(&mut self) -> Vec<u8> {
        self.read_response_for(b"GET")
    }

    /// Reads just the response head (through the blank line) and returns it.
    pub fn read_head(&mut self, deadline: Instant) -> Vec<u8> {
        let end = self
            .head_end(deadline)
            .unwrap_or_else(|e| panic!("reading a response head from {}: {e}", self.peer));
        self.buf.drain(..end).collect()
    }

    /// After a chunked head, reads the next chunk and returns its data; `None` at the
    /// last (zero-size) chunk. Panics past `deadline`, showing what had arrived.
    pub fn read_chunk(&mut self, deadline: Instant) -> Option<Vec<u8>> {
        let (size, line_len) = self
            .chunk_size_line(0, deadline)
            .unwrap_or_else(|e| panic!("reading a chunk from {}: {e}", self.peer));
        if size == 0 {
            let end = self
                .trailers_end(line_len, deadline)
                .unwrap_or_else(|e| panic!("reading trailers from {}: {e}", self.peer));
            self.buf.drain(..end);
            return None;
        }
        let end = line_len + size + 2;
        self.fill_to(end, deadline)
            .unwrap_or_else(|e| panic!("reading chunk data from {}: {e}", self.peer));
        let data = self.buf[line_len..line_len + size].to_vec();
        self.buf.drain(..end);
        Some(data)
    }

    /// Reads until the peer closes; returns what arrived (after anything already buffered).
    pub fn read_to_close(&mut self, deadline: Instant) -> Vec<u8> {
        while self
            .fill(deadline)
            .unwrap_or_else(|e| panic!("reading from {} until close: {e}", self.peer))
            > 0
        {}
        std::mem::take(&mut self.buf)
    }

    /// Whether the peer has closed the connection (waits up to `timeout` for it).
    pub fn closed_by_peer(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        match self.fill(deadline) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
        }
    }

    /// Reads more bytes into the buffer; 0 means the peer closed.
    fn fill(&mut self, deadline: Instant) -> io::Result<usize> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.timed_out());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(self.timed_out())
            }
            Err(e) => Err(e),
        }
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "timed out; {} bytes buffered: {:?}",
                self.buf.len(),
                String::from_utf8_lossy(&self.buf[..self.buf.len().min(2000)])
            ),
        )
    }

    fn eof(&self, what: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "closed in the middle of {what}; had {:?}",
                String::from_utf8_lossy(&self.buf[..self.buf.len().min(2000)])
            ),
        )
    }

    fn fill_to(&mut self, len: usize, deadline: Instant) -> io::Result<()> {
        while self.buf.len() < len {
            if self.fill(deadline)? == 0 {
                return Err(self.eof("a body"));
            }
        }
        Ok(())
    }

    /// The offset just past the head's blank line.
    fn head_end(&mut self, deadline: Instant) -> io::Result<usize> {
        loop {
            if let Some(at) = find(&self.buf, b"\r\n\r\n") {
                return Ok(at + 4);
            }
            if self.fill(deadline)? == 0 {
                return Err(self.eof("a head"));
            }
        }
    }

    /// The chunk size at `at` and the offset just past its line.
    fn chunk_size_line(&mut self, at: usize, deadline: Instant) -> io::Result<(usize, usize)> {
        loop {
            if let Some(rel) = find(&self.buf[at..], b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[at..at + rel]).into_owned();
                let hex = line.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(hex, 16).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("chunk size {line:?}"))
                })?;
                return Ok((size, at + rel + 2));
            }
            if self.fill(deadline)? == 0 {
                return Err(self.eof("a chunk size"));
            }
        }
    }

    /// The offset just past the trailer section that starts at `at`.
    fn trailers_end(&mut self, at: usize, deadline: Instant) -> io::Result<usize> {
        let mut line_start = at;
        loop {
            if let Some(rel) = find(&self.buf[line_start..], b"\r\n") {
                if rel == 0 {
                    return Ok(line_start + 2);
                }
                line_start += rel + 2;
                continue;
            }
            if self.fill(deadline)? == 0 {
                return Err(self.eof("trailers"));
            }
        }
    }

    fn try_read_response(&mut self, head_request: bool, deadline: Instant) -> io::Result<Vec<u8>> {
        let head_len = self.head_end(deadline)?;
        let head = parse_head(&self.buf[..head_len]);
        let bodiless =
            head_request || head.status / 100 == 1 || head.status == 204 || head.status == 304;
        let end = if bodiless {
            head_len
        } else if head.is_chunked() {
            let mut at = head_len;
            loop {
                let (size, data_start) = self.chunk_size_line(at, deadline)?;
                if size == 0 {
                    break self.trailers_end(data_start, deadline)?;
                }
                at = data_start + size + 2;
                self.fill_to(at, deadline)?;
            }
        } else if let Some(len) = head.content_length() {
            let end = head_len + len;
            self.fill_to(end, deadline)?;
            end
        } else {
            while self.fill(deadline)? > 0 {}
            self.buf.len()
        };
        Ok(self.buf.drain(..end).collect())
    }
}

/// Where `needle` first occurs in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// A response taken apart: status line, headers in order and as sent, the body decoded
/// from chunked framing when it was chunked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub version: String,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn body_contains(&self, text: &str) -> bool {
        find(&self.body, text.as_bytes()).is_some()
    }

    fn is_chunked(&self) -> bool {
        self.header("transfer-encoding").is_some_and(|value| {
            value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
        })
    }

    fn content_length(&self) -> Option<usize> {
        self.header("content-length")
            .and_then(|value| value.trim().parse().ok())
    }
}

/// Parses a head (status line and header fields); the body is left empty.
pub fn parse_head(head: &[u8]) -> Response {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("").to_owned();
    let status = parts
        .next()
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP status line: {status_line:?}"));
    let reason = parts.next().unwrap_or("").to_owned();
    let headers = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.to_owned(), value.trim().to_owned()))
        })
        .collect();
    Response {
        version,
        status,
        reason,
        headers,
        body: Vec::new(),
    }
}

/// Parses a complete response as returned by [`HttpConn`]/[`http_exchange`].
pub fn parse_response(raw: &[u8]) -> Response {
    let head_len = find(raw, b"\r\n\r\n")
        .map(|at| at + 4)
        .unwrap_or_else(|| panic!("no end of head in {:?}", String::from_utf8_lossy(raw)));
    let mut response = parse_head(&raw[..head_len]);
    let rest = &raw[head_len..];
    response.body = if response.is_chunked() {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    response
}

/// The data of a chunked body (stops at the last chunk or where the bytes run out).
pub fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(line_end) = find(raw, b"\r\n") {
        let line = String::from_utf8_lossy(&raw[..line_end]);
        let Ok(size) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
        else {
            break;
        };
        if size == 0 {
            break;
        }
        let data = &raw[line_end + 2..];
        let take = size.min(data.len());
        body.extend_from_slice(&data[..take]);
        raw = data.get(size + 2..).unwrap_or(&[]);
    }
    body
}

// ---------------------------------------------------------------------------------------
// Load generators
// ---------------------------------------------------------------------------------------

/// What `ab` reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbReport {
    pub complete: u64,
    pub failed: u64,
    /// `Non-2xx responses`; ab prints the line only when there were some.
    pub non_2xx: u64,
    pub keep_alive: u64,
    pub output: String,
}

/// Runs `ab -k -n N -c C url` (HTTP/1.0 with `Connection: Keep-Alive`) and parses it.
pub fn run_ab(url: &str, requests: u32, concurrency: u32) -> AbReport {
    let mut ab = Command::new(require_tool("ab"));
    ab.args(["-k", "-q", "-s", "20"])
        .args(["-n", &requests.to_string(), "-c", &concurrency.to_string()])
        .arg(url);
    parse_ab(&run_load_tool("ab", &mut ab))
}

/// Runs a load generator to completion; its standard output and error together, or a
/// panic with them when it failed.
fn run_load_tool(name: &str, command: &mut Command) -> String {
    let output = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{name} failed ({}):\n{text}",
        output.status
    );
    text
}

/// Runs wrk with `args` (connections, script, URL) for `for_ms`, then kills it (SIGKILL):
/// its requests in flight stay unanswered, as when a client crashes or is stopped.
pub fn killed_wrk(args: &[&std::ffi::OsStr], for_ms: u64) {
    let mut wrk = Command::new(require_tool("wrk"))
        .args(["-d", "30s"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(for_ms));
    wrk.kill().unwrap();
    let _ = wrk.wait();
}

/// Parses ab's summary.
pub fn parse_ab(text: &str) -> AbReport {
    let number = |label: &str| -> Option<u64> {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    AbReport {
        complete: number("Complete requests:")
            .unwrap_or_else(|| panic!("no 'Complete requests' in ab's output:\n{text}")),
        failed: number("Failed requests:")
            .unwrap_or_else(|| panic!("no 'Failed requests' in ab's output:\n{text}")),
        non_2xx: number("Non-2xx responses:").unwrap_or(0),
        keep_alive: number("Keep-Alive requests:").unwrap_or(0),
        output: text.to_owned(),
    }
}

/// What `wrk` reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrkReport {
    pub requests: u64,
    /// connect, read, write, timeout; wrk prints the line only when one is non-zero.
    pub socket_errors: [u64; 4],
    /// `Non-2xx or 3xx responses`; printed only when there were some.
    pub non_2xx_3xx: u64,
    pub output: String,
}

/// Runs `wrk -d SECS -c C -t T url` and parses it.
/// Load on `proxy` (wrk, 4 connections, in rounds of 2 s) until the snapshot of `tap`
/// holds `samples` upstream samples, or 60 s have passed: on a busy machine the upstream
/// gets less CPU, so a fixed load gives fewer samples. Returns the requests sent; the
/// caller checks the samples it needs.
///
/// The samples are counted in periods of the configured rate: under a budget a busy
/// server's samples each count up to 32, and `samples` of them may be a few dozen taken.
/// A test that holds shares to a truth runs its proxy at the full rate
/// (`--sample-budget 0`).
pub fn load_until_sampled(proxy: &Proxy, tap: &str, samples: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut requests = 0;
    loop {
        let wrk = run_wrk(&proxy.url("/"), 2, 4, 1);
        assert_eq!(wrk.non_2xx_3xx, 0, "{}", wrk.output);
        requests += wrk.requests;
        // The watcher collects every interval (1 s): what the load made is in by then.
        thread::sleep(Duration::from_millis(1200));
        let snap: serde_json::Value =
            serde_json::from_str(&proxy.admin_get("/api/snapshot").body_text()).unwrap_or_default();
        let have: u64 = snap["taps"][tap]["upstream"]["samples"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
        if have >= samples || Instant::now() >= deadline {
            return requests;
        }
    }
}

pub fn run_wrk(url: &str, seconds: u32, connections: u32, threads: u32) -> WrkReport {
    let mut wrk = Command::new(require_tool("wrk"));
    wrk.args(["-d", &format!("{seconds}s")])
        .args(["-c", &connections.to_string(), "-t", &threads.to_string()])
        .args(["--timeout", "10s"])
        .arg(url);
    parse_wrk(&run_load_tool("wrk", &mut wrk))
}

/// Like `run_wrk`, but every request has its own path: `path` is a Lua format string with
/// two `%d`, filled with wrk's thread number and the thread's request count (for
/// example `/SET/k%d_%d/v`), so that no two requests of the run are alike.
pub fn run_wrk_distinct(
    base: &str,
    path: &str,
    seconds: u32,
    connections: u32,
    threads: u32,
) -> WrkReport {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("distinct.lua");
    std::fs::write(
        &script,
        format!(
            r#"local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
function request()
  n = n + 1
  return wrk.format("GET", string.format("{path}", tid, n))
end
"#
        ),
    )
    .unwrap();
    let mut wrk = Command::new(require_tool("wrk"));
    wrk.args(["-d", &format!("{seconds}s")])
        .args(["-c", &connections.to_string(), "-t", &threads.to_string()])
        .args(["--timeout", "10s"])
        .arg("-s")
        .arg(&script)
        .arg(base);
    parse_wrk(&run_load_tool("wrk", &mut wrk))
}

/// Parses wrk's summary.
pub fn parse_wrk(text: &str) -> WrkReport {
    let requests = text
        .lines()
        .find_map(|line| {
            let (count, rest) = line.trim().split_once(' ')?;
            rest.starts_with("requests in ")
                .then(|| count.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no 'N requests in' in wrk's output:\n{text}"));
    let mut socket_errors = [0; 4];
    if let Some(rest) = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Socket errors:"))
    {
        for (slot, name) in socket_errors
            .iter_mut()
            .zip(["connect", "read", "write", "timeout"])
        {
            *slot = rest
                .split(',')
                .find_map(|part| part.trim().strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("cannot read '{name}' in 'Socket errors:{rest}'"));
        }
    }
    let non_2xx_3xx = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Non-2xx or 3xx responses:"))
        .map(|rest| rest.trim().parse().unwrap())
        .unwrap_or(0);
    WrkReport {
        requests,
        socket_errors,
        non_2xx_3xx,
        output: text.to_owned(),
    }
}

/// No hot-path line of a report's text reads 90 % or more with all it calls
/// (docs/report.md, "Call stacks": a dispatcher is no place to act).
pub fn no_hot_line_of_nearly_all(text: &str) {
    for line in text.lines().filter(|l| l.contains(" with all it calls)")) {
        let share: f64 = line
            .split(" % with all it calls)")
            .next()
            .and_then(|l| l.rsplit('(').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0.0);
        assert!(share < 90.0, "{line}\n{text}");
    }
}

/// The checks every sampler's budget test makes on its one-second `deltas`: the rate came
/// down, to 100 Hz or less on a server of `cores` ≥ 0.8; from delta `settled_from` on the
/// samples taken a second lie between a third of `budget` and half again over it; and,
/// weighed by their period, the samples stand for `cpu_s` within a fifth (the CPU time
/// the periods count, or for a timer's ticks the time they count).
#[allow(dead_code)]
pub fn assert_kept_to_budget(
    deltas: &[phasescope::upstream::profile::ProfileDelta],
    hz: u32,
    budget: u32,
    (cpu_s, cores): (f64, f64),
    settled_from: usize,
) {
    let last = deltas.last().expect("no collect");
    let rate = f64::from(hz) / last.period_multiple.max(1) as f64;
    let per_delta: Vec<(u64, u64)> = deltas
        .iter()
        .map(|d| (d.taken, d.period_multiple))
        .collect();
    eprintln!(
        "{cores:.2} cores; per second (taken, period ×): {per_delta:?}; {rate:.1} Hz at the end"
    );
    assert!(
        last.period_multiple > 1,
        "the rate never came down: {per_delta:?}"
    );
    if cores >= 0.8 {
        assert!(rate <= 100.0, "sampled at {rate:.1} Hz on {cores:.2} cores");
    }
    let settled = &deltas[settled_from..];
    let per_second = settled.iter().map(|d| d.taken).sum::<u64>() as f64 / settled.len() as f64;
    assert!(
        per_second >= f64::from(budget) / 3.0 && per_second <= 1.5 * f64::from(budget),
        "{per_second:.0} samples a second for a budget of {budget}"
    );
    assert_weighted_stand_for(deltas, hz, cpu_s);
}

/// Weighed by their period (`hz` the configured rate), the samples of `deltas` stand for
/// `measured_s` within a fifth.
#[allow(dead_code)]
pub fn assert_weighted_stand_for(
    deltas: &[phasescope::upstream::profile::ProfileDelta],
    hz: u32,
    measured_s: f64,
) {
    let weighted: u64 = deltas.iter().map(|d| d.total()).sum();
    let sampled_s = weighted as f64 / f64::from(hz);
    eprintln!("weighted samples stand for {sampled_s:.2} s, measured {measured_s:.2} s");
    assert!(
        (sampled_s / measured_s - 1.0).abs() < 0.2,
        "weighted samples stand for {sampled_s:.2} s, measured {measured_s:.2} s"
    );
}

/// How far a share (in percent, of true value `truth` %) read from `deltas` may stray:
/// `se` standard errors of a share, or `floor` points where that is wider.
///
/// The standard error counts the samples as their weights make them, not as taken. Under
/// a budget the rate comes down after its first second: a five-second window then holds
/// about 960 samples of weight 1 and 250 of weight 16, and the share rests mostly on the
/// 250 (Kish's effective count, (Σw)² ÷ Σw², is about 380, not 1,210). Counted as taken,
/// the standard error was 0.56 of the true one, and the Python shares' ordinary spread at
/// 62 Hz (up to 7 points in 19 runs) read as a bias. A delta's samples are taken to weigh
/// alike (its weighted total over its count).
#[allow(dead_code)]
pub fn share_tolerance(
    deltas: &[phasescope::upstream::profile::ProfileDelta],
    truth: f64,
    se: f64,
    floor: f64,
) -> (f64, f64) {
    let (mut sum, mut squares) = (0.0, 0.0);
    for d in deltas.iter().filter(|d| d.taken > 0) {
        let total = d.total() as f64;
        sum += total;
        squares += total * total / d.taken as f64;
    }
    let effective = if squares > 0.0 {
        sum * sum / squares
    } else {
        0.0
    };
    let p = truth / 100.0;
    let tolerance = floor.max(100.0 * se * (p * (1.0 - p) / effective.max(1.0)).sqrt());
    (tolerance, effective)
}

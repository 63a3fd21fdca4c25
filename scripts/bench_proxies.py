#!/usr/bin/env python3
"""phasescope side by side with HAProxy and nginx: the driver behind scripts/bench-proxies.sh.

Starts one upstream (the project's fixed-response server, then real Webdis + Redis), puts
each proxy in front of it on loopback, and measures with wrk, alternating the proxies in
every round so that the machine's drift hits all of them alike. Reports medians with
their spread, per-round ratios to the references, the proxies' CPU per request, the
latency phasescope adds, memory per idle keep-alive connection, and callgrind's
instruction count per proxied request. Writes docs/BENCHMARKS.md and its chart.

Run it through scripts/bench-proxies.sh, which installs the tools and builds first.
"""

import argparse
import ctypes
import datetime
import json
import os
import platform
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import callgrind_split  # noqa: E402
from proxy_configs import HAPROXY_CFG, NGINX_CFG  # noqa: E402
import bench_report  # noqa: E402

# Where scripts/bench-proxies.sh's `cargo build --release` put them.
RELEASE = (ROOT / os.environ.get("CARGO_TARGET_DIR", "target")) / "release"
PHASESCOPE = RELEASE / "phasescope"
FIXED_UPSTREAM = RELEASE / "fixed-upstream"
CLIENT = RELEASE / "bench-client"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def tool(name):
    for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin", "/usr/local/sbin"]:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    sys.exit(f"{name} is missing: run scripts/bench-proxies.sh, which installs it")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    # Servers must not outlive the benchmark, even if it is killed.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def http_get(port, path):
    """One GET on a new connection; returns the response bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                return out
            out += b


class Server:
    """A child process with its output in a log file; stopped on exit."""

    def __init__(self, name, argv, workdir, env=None, port=None):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log = Path(workdir) / f"{name}.log"
        e = dict(os.environ)
        e.update(env or {})
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=workdir,
                env=e, preexec_fn=die_with_parent)
        self.port = port
        if port is not None:
            deadline = time.time() + 30
            while not accepts(port):
                if self.proc.poll() is not None or time.time() > deadline:
                    sys.exit(f"{name} did not start: see {self.log}\n{self.tail()}")
                time.sleep(0.05)

    def tail(self):
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def pids(self):
        """The process and its children (nginx's workers)."""
        pids = [self.proc.pid]
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
            pids += [int(p) for p in children.split()]
        except OSError:
            pass
        return pids

    def cpu_seconds(self):
        total = 0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                # utime and stime are fields 14 and 15 of /proc/PID/stat.
                total += int(fields[11]) + int(fields[12])
            except (OSError, IndexError, ValueError):
                pass
        return total / CLK_TCK

    def thread_cpu_seconds(self, prefixes):
        """CPU time of the process's threads whose name starts with one of `prefixes`, from
        schedstat (nanoseconds on a CPU): /proc/PID/stat counts in 10 ms ticks, too coarse
        for a thread that works a few milliseconds a second."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").glob("*"):
            try:
                if not (task / "comm").read_text().strip().startswith(prefixes):
                    continue
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                pass
        return total / 1e9

    def rss_kib(self):
        total = 0
        for pid in self.pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------------------
# The proxies
# ---------------------------------------------------------------------------------------


# name, label, and whether it is a proxy (has a process of its own to measure).
TARGETS = [
    ("direct", "direct (no proxy)"),
    ("phasescope", "phasescope"),
    ("phasescope-no-metrics", "phasescope --no-metrics"),
    ("haproxy-http", "HAProxy mode http"),
    ("haproxy-tcp", "HAProxy mode tcp"),
    ("nginx", "nginx proxy_pass"),
]
LAYOUT_TARGET = ("phasescope-work-stealing", "phasescope, work-stealing runtime")


def start_target(name, upstream, workdir, threads, maxconn, valgrind=None):
    """Starts proxy `name` in front of 127.0.0.1:`upstream`; returns the Server."""
    port = free_port()
    d = Path(workdir)
    prefix = list(valgrind or [])
    if name.startswith("phasescope"):
        argv = prefix + [PHASESCOPE, "run", "--listen", f"127.0.0.1:{port}",
                         "--upstream", f"127.0.0.1:{upstream}",
                         "--admin", f"127.0.0.1:{free_port()}"]
        env = {"PHASESCOPE_WORKERS": str(1 if "-1w" in name else threads)}
        if name.endswith("no-metrics"):
            argv.append("--no-metrics")
        if name.endswith("-profile") or name.endswith("-profile-leaf"):
            argv.append("--profile-upstream")
        if name.endswith("-profile-leaf"):
            argv += ["--stack-bytes", "0"]
        if name == "phasescope-work-stealing":
            env["PHASESCOPE_RUNTIME"] = "work-stealing"
        return Server(name, argv, d, env=env, port=port)
    if name.startswith("haproxy"):
        cfg = d / f"{name}.cfg"
        cfg.write_text(HAPROXY_CFG.format(maxconn=maxconn, threads=threads,
                                          mode=name.split("-")[1], port=port, upstream=upstream))
        return Server(name, prefix + [tool("haproxy"), "-db", "-f", cfg], d, port=port)
    if name == "nginx":
        ndir = d / "nginx"
        ndir.mkdir(exist_ok=True)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        cfg = ndir / "nginx.conf"
        cfg.write_text(NGINX_CFG.format(threads=threads, nofile=nofile, dir=ndir,
                                        connections=2 * maxconn + 64, upstream=upstream, port=port))
        return Server(name, prefix + [tool("nginx"), "-p", ndir, "-e", ndir / "nginx-error.log", "-c", cfg],
                      d, port=port)
    raise ValueError(name)


# ---------------------------------------------------------------------------------------
# wrk
# ---------------------------------------------------------------------------------------

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def to_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s|m|h)$", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def wrk(port, path, connections, seconds):
    threads = 1 if connections == 1 else 2
    argv = [tool("wrk"), f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
            f"http://127.0.0.1:{port}{path}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60).stdout
    r = {}
    m = re.search(r"(\d+) requests in", out)
    r["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    r["rps"] = float(m.group(1)) if m else 0.0
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        r[f"p{pct}_ms"] = to_ms(m.group(1)) if m else None
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    r["errors"] = errors
    return r


def throughput(upstream_name, upstream_port, path, targets, servers, concs, rounds, seconds):
    """Rounds of wrk runs, the targets' order rotated every round."""
    runs = []
    for rnd in range(rounds):
        for c in concs:
            k = (rnd + concs.index(c)) % len(targets)
            order = targets[k:] + targets[:k]
            for name in order:
                srv = servers.get(name)
                port = srv.port if srv else upstream_port
                cpu0 = srv.cpu_seconds() if srv else None
                r = wrk(port, path, c, seconds)
                if srv:
                    cpu = srv.cpu_seconds() - cpu0
                    r["cpu_us_per_req"] = cpu * 1e6 / r["requests"] if r["requests"] else None
                r.update(upstream=upstream_name, target=name, conns=c, round=rnd)
                runs.append(r)
                log(f"  {upstream_name:6} round {rnd + 1}/{rounds} c={c:<3} {name:26} "
                    f"{r['rps']:>9.0f} req/s  p50 {fmt_ms(r['p50_ms'])}  "
                    f"cpu {fmt(r.get('cpu_us_per_req'), 2)} us/req  errors {r['errors']}")
    return runs


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def fmt_ms(v):
    return "-" if v is None else f"{v * 1000:.0f}us"


# ---------------------------------------------------------------------------------------
# The upstream sampler's cost
# ---------------------------------------------------------------------------------------

# Without sampling, sampling the running function only (`--stack-bytes 0`), and sampling
# call stacks (at most the default 16 KiB of user stack per sample, unwound with DWARF CFI).
SAMPLER_TARGETS = ["phasescope", "phasescope-profile-leaf", "phasescope-profile"]
# The threads that watch the upstream (src/upstream/watch.rs: accounting, and sampling
# when profiling) and symbolize its samples (src/upstream/profile/symbols.rs).
WATCHER_THREADS = ("ps-up-", "upstream-symbol")


def sampler_cost(upstream, workdir, threads, maxconn, rounds, seconds, conns, path):
    """phasescope in front of `upstream` (a local Server, found by `auto`) with
    `--profile-upstream` and without, alternated, a fresh proxy per run: its CPU per request
    and the upstream's (the sampling interrupts are charged to the sampled threads). Each
    proxy gets a one-second warm-up first, so that the sampler has opened its events and
    loaded the symbol tables: the figure is the steady cost of a long-running watcher."""
    runs = []
    for rnd in range(rounds):
        order = SAMPLER_TARGETS if rnd % 2 == 0 else SAMPLER_TARGETS[::-1]
        for name in order:
            srv = start_target(name, upstream.port, workdir, threads, maxconn)
            try:
                # With call stacks, long enough for the collects that size the stack's copy.
                wrk(srv.port, path, conns, 5 if name == "phasescope-profile" else 1)
                time.sleep(1.2)  # past the watcher's first interval, which reads the process
                cpu0, up0 = srv.cpu_seconds(), upstream.cpu_seconds()
                watch0, wall0 = srv.thread_cpu_seconds(WATCHER_THREADS), time.time()
                r = wrk(srv.port, path, conns, seconds)
                cpu, up = srv.cpu_seconds() - cpu0, upstream.cpu_seconds() - up0
                watch = srv.thread_cpu_seconds(WATCHER_THREADS) - watch0
                r["watcher_cpu_ms_per_s"] = watch * 1e3 / (time.time() - wall0)
            finally:
                srv.stop()
            n = r["requests"]
            r["cpu_us_per_req"] = cpu * 1e6 / n if n else None
            r["upstream_cpu_us_per_req"] = up * 1e6 / n if n else None
            r.update(upstream=upstream.name, target=name, conns=conns, round=rnd)
            runs.append(r)
            log(f"  sampler round {rnd + 1}/{rounds} {name:20} {r['rps']:>9.0f} req/s  "
                f"phasescope {fmt(r['cpu_us_per_req'], 2)} us/req  "
                f"{upstream.name} {fmt(r['upstream_cpu_us_per_req'], 2)} us/req  "
                f"watcher {fmt(r['watcher_cpu_ms_per_s'], 2)} ms/s  errors {r['errors']}")
    return runs


# ---------------------------------------------------------------------------------------
# The full chain in front of Webdis
# ---------------------------------------------------------------------------------------

# wrk → [HTTP tap] → Webdis → [RESP tap] → Redis, the two taps correlated: the deployment
# of docs/webdis.md, in one phasescope process.
CHAIN_CFG = """[admin]
listen = "127.0.0.1:{admin}"

[[tap]]
name = "webdis"
protocol = "http"
listen = "127.0.0.1:{port}"
upstream = "127.0.0.1:{webdis}"
routes = "webdis"
{process}
[[tap]]
name = "redis"
protocol = "resp"
listen = "127.0.0.1:{resp}"
upstream = "127.0.0.1:{redis}"

[[correlate]]
kind = "webdis"
http = "webdis"
resp = "redis"
"""

# The same two places with HAProxy: mode http in front of Webdis, mode tcp in front of Redis.
HAPROXY_CHAIN_CFG = """global
  maxconn {maxconn}
  nbthread {threads}
defaults
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend webdis
  mode http
  bind 127.0.0.1:{port}
  default_backend webdis
backend webdis
  mode http
  server s1 127.0.0.1:{webdis}
frontend redis
  mode tcp
  bind 127.0.0.1:{resp}
  default_backend redis
backend redis
  mode tcp
  server s1 127.0.0.1:{redis}
"""

# direct: wrk → Webdis → Redis; the rest put proxies in both places. `phasescope-profile`
# adds `profile = true` to the `[tap.process]` of the HTTP tap, whose process is Webdis;
# both phasescope variants read Webdis from /proc (`find = "auto"`, the default).
CHAIN_TARGETS = ["direct", "haproxy-chain", "phasescope-chain", "phasescope-chain-profile"]


def chain_variant(spec):
    """`--chain-also SPEC`: a further profiled variant. SPEC is `key=value` pairs joined by
    `,`: keys of `[tap.process]` (`stack_bytes=0`, `frequency=199`), and `bin=PATH`, another
    phasescope binary (a build from before a change, measured in the same rounds)."""
    keys, binary = {}, None
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        if not value:
            sys.exit(f"--chain-also {spec!r}: expected key=value")
        if key == "bin":
            binary = value
        else:
            keys[key] = value
    return {"name": "phasescope-chain-profile+" + spec, "keys": keys, "bin": binary}


def start_chain(name, variants, redis_port, workdir, threads, maxconn):
    """The proxy of target `name` (None for direct) and the port Webdis must use for Redis."""
    d = Path(workdir)
    port, resp = free_port(), free_port()
    webdis_port = free_port()
    if name == "direct":
        return None, redis_port, webdis_port, None
    if name == "haproxy-chain":
        cfg = d / "haproxy-chain.cfg"
        cfg.write_text(HAPROXY_CHAIN_CFG.format(maxconn=maxconn, threads=threads, port=port,
                                                webdis=webdis_port, resp=resp, redis=redis_port))
        return Server(name, [tool("haproxy"), "-db", "-f", cfg], d, port=resp), resp, webdis_port, port
    variant = variants.get(name, {"keys": {}, "bin": None})
    process = ""
    if name.startswith("phasescope-chain-profile"):
        keys = {"profile": "true", **variant["keys"]}
        process = "\n[tap.process]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())
    cfg = d / f"chain-{len(list(d.glob('chain-*.toml')))}.toml"
    cfg.write_text(CHAIN_CFG.format(admin=free_port(), port=port, webdis=webdis_port,
                                    process=process, resp=resp, redis=redis_port))
    binary = variant["bin"] or PHASESCOPE
    # The name carries the variant's spec, a path perhaps: the log file's name may not.
    srv = Server(re.sub(r"[^\w.+=-]", "_", name), [binary, "--config", cfg, "run"], d,
                 env={"PHASESCOPE_WORKERS": str(threads)}, port=resp)
    return srv, resp, webdis_port, port


def start_redis(workdir):
    """A Redis of the benchmark's own on a free port, nothing saved."""
    d = Path(workdir)
    port = free_port()
    return Server("redis", [tool("redis-server"), "--port", port, "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--daemonize", "no",
                            "--dir", d, "--logfile", ""], d, port=port)


def start_webdis_process(workdir, redis_port, http_port, name="webdis"):
    """Webdis on `http_port` reaching Redis at `redis_port` (Redis itself or a proxy in
    front of it): 2 threads, a pool of 4 each. It opens its Redis pool at start, so what
    stands at `redis_port` must be up first."""
    d = Path(workdir)
    cfg = d / f"{name}.json"
    cfg.write_text(json.dumps({
        "redis_host": "127.0.0.1", "redis_port": redis_port,
        "http_host": "127.0.0.1", "http_port": http_port,
        "threads": 2, "pool_size": 4, "daemonize": False, "websockets": False,
        "database": 0, "verbosity": 3, "logfile": str(d / f"{name}-own.log"),
    }))
    return Server("webdis", [tool("webdis"), cfg], d, port=http_port)


def wait_for(check, what, seconds=30):
    deadline = time.time() + seconds
    while not check():
        if time.time() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.1)


def thread_names(pid):
    names = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            pass
    return names


def chain_run(name, variants, workdir, threads, maxconn, seconds, conns, path):
    """One run of the full chain with fresh processes: Redis, the proxy, Webdis; a warm-up
    (the sampler started and its symbol tables loaded), then `seconds` of wrk."""
    redis = start_redis(workdir)
    redis_port = redis.port
    proxy = webdis = None
    try:
        proxy, resp_port, webdis_port, front = start_chain(name, variants, redis_port, workdir,
                                                           threads, maxconn)
        webdis = start_webdis_process(workdir, resp_port, webdis_port, "webdis-chain")
        port = front or webdis_port
        if front:
            wait_for(lambda: accepts(front), f"{name} to listen in front of Webdis")
        wait_for(lambda: b"PONG" in http_get(port, "/PING"), f"/PING through {name}")
        if b"200 OK" not in http_get(port, "/SET/bench/hello"):
            sys.exit(f"{name}: Webdis did not store the benchmark key")
        wrk(port, path, conns, 2)
        if name.startswith("phasescope-chain-profile"):
            keys = variants.get(name, {"keys": {}})["keys"]
            if keys.get("stack_bytes", "1") != "0":
                # With call stacks the drainer thread runs once the watcher has found
                # Webdis and opened its events.
                wait_for(lambda: "ps-up-drain" in thread_names(proxy.proc.pid),
                         f"{name}: the sampler to start", 10)
            # Under load while the sampler settles: its first collect loads the symbol
            # tables, and the next ones size the copy of the stack to what the walks read.
            wrk(port, path, conns, 6)
        time.sleep(1.2)  # past the watcher's first interval, which reads the process
        servers = {"webdis": webdis, "redis": redis, "proxy": proxy}
        cpu0 = {k: s.cpu_seconds() for k, s in servers.items() if s}
        watch0 = proxy.thread_cpu_seconds(WATCHER_THREADS) if proxy and name.startswith("phasescope") else None
        wall0 = time.time()
        r = wrk(port, path, conns, seconds)
        wall = time.time() - wall0
        cpu = {k: s.cpu_seconds() - cpu0[k] for k, s in servers.items() if s}
        n = r["requests"]
        for k, v in cpu.items():
            r[f"{k}_cpu_us_per_req"] = v * 1e6 / n if n else None
        if watch0 is not None:
            r["watcher_cpu_ms_per_s"] = (proxy.thread_cpu_seconds(WATCHER_THREADS) - watch0) * 1e3 / wall
        r["target"] = name
        return r
    finally:
        for s in (webdis, proxy, redis):
            if s:
                s.stop()


def chain_cost(targets, variants, workdir, threads, maxconn, rounds, seconds, conns, path):
    """Rounds of the chain's targets, the order reversed every other round."""
    runs = []
    for rnd in range(rounds):
        order = targets if rnd % 2 == 0 else targets[::-1]
        for name in order:
            r = chain_run(name, variants, workdir, threads, maxconn, seconds, conns, path)
            r["round"] = rnd
            r["conns"] = conns
            runs.append(r)
            log(f"  chain round {rnd + 1}/{rounds} {name:34} {r['rps']:>9.0f} req/s  "
                f"webdis {fmt(r.get('webdis_cpu_us_per_req'), 2)} us/req  "
                f"proxy {fmt(r.get('proxy_cpu_us_per_req'), 2)} us/req  "
                f"redis {fmt(r.get('redis_cpu_us_per_req'), 2)} us/req  errors {r['errors']}")
    return runs


def run_chain(workdir, threads, maxconn, rounds, seconds, also=()):
    """The full-chain part; the results' `chain` object."""
    conns = 50
    extra = [chain_variant(spec) for spec in also]
    variants = {v["name"]: v for v in extra}
    targets = CHAIN_TARGETS + [v["name"] for v in extra]
    log(f"the full chain in front of Webdis: {rounds} rounds x {len(targets)} runs of {seconds} s at -c {conns}")
    start = loadavg()
    runs = chain_cost(targets, variants, workdir, threads, maxconn, rounds, seconds, conns, "/GET/bench")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "scripts/bench-proxies.sh " + " ".join(sys.argv[1:]),
        "rounds": rounds, "seconds": seconds, "connections": conns, "targets": targets,
        "variants": {n: {"keys": v["keys"], "bin": v["bin"]} for n, v in variants.items()},
        "loadavg_start": start, "loadavg_end": loadavg(), "runs": runs,
    }


# ---------------------------------------------------------------------------------------
# Memory per idle connection
# ---------------------------------------------------------------------------------------

def idle_memory(name, upstream_port, workdir, threads, count, maxconn):
    srv = start_target(name, upstream_port, workdir, threads, maxconn)
    try:
        subprocess.run([CLIENT, "--connect", f"127.0.0.1:{srv.port}", "--sequential", "100"],
                       check=True, capture_output=True, timeout=60)
        time.sleep(0.5)
        before = srv.rss_kib()
        client = subprocess.Popen([CLIENT, "--connect", f"127.0.0.1:{srv.port}", "--hold", str(count)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  preexec_fn=die_with_parent)
        line = client.stdout.readline()
        if not line.startswith("ready"):
            client.kill()
            raise RuntimeError(f"{name}: the idle clients did not all get an answer: {line!r}")
        # Longer than any buffer-release delay of the proxies measured.
        time.sleep(3)
        after = srv.rss_kib()
        client.stdin.close()
        client.wait(30)
        per_conn = (after - before) * 1024 / count
        log(f"  {name:26} rss {before} KiB -> {after} KiB with {count} idle: {per_conn:.0f} B per connection")
        return {"target": name, "connections": count, "rss_before_kib": before,
                "rss_after_kib": after, "bytes_per_connection": per_conn}
    finally:
        srv.stop()


def burst_memory(name, slow_port, workdir, threads, count, maxconn):
    """RSS per connection 5 s after `count` requests were in flight at once (in front of an
    upstream that holds every answer a second) and the connections went idle."""
    srv = start_target(name, slow_port, workdir, threads, maxconn)
    try:
        time.sleep(0.5)
        before = srv.rss_kib()
        client = subprocess.Popen([CLIENT, "--connect", f"127.0.0.1:{srv.port}", "--burst", str(count)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  preexec_fn=die_with_parent)
        if not client.stdout.readline().startswith("sent"):
            client.kill()
            raise RuntimeError(f"{name}: the burst's requests were not all sent")
        time.sleep(0.5)
        in_flight = srv.rss_kib()
        line = client.stdout.readline()
        if not line.startswith("ready"):
            client.kill()
            raise RuntimeError(f"{name}: the burst did not all get an answer: {line!r}")
        time.sleep(5)
        after = srv.rss_kib()
        client.stdin.close()
        client.wait(30)
        per_conn = (after - before) * 1024 / count
        log(f"  {name:26} rss {before} KiB -> {in_flight} KiB in flight -> {after} KiB 5 s after "
            f"a burst of {count}: {per_conn:.0f} B per connection")
        return {"target": name, "connections": count, "rss_before_kib": before,
                "rss_in_flight_kib": in_flight, "rss_after_kib": after,
                "bytes_per_connection": per_conn}
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------------
# Instructions per request
# ---------------------------------------------------------------------------------------

def instructions(name, upstream_port, workdir, threads, requests, maxconn):
    out = Path(workdir) / f"callgrind-{name}.out"
    # phasescope's threads are dumped apart, and only its workers' count: its other
    # threads do periodic work that is no request's (see callgrind_split.py).
    ours = name.startswith("phasescope")
    valgrind = [tool("valgrind"), "--tool=callgrind", f"--callgrind-out-file={out}"]
    if ours:
        valgrind.insert(2, "--separate-threads=yes")
    srv = start_target(name, upstream_port, workdir, threads, maxconn, valgrind=valgrind)
    try:
        run = [CLIENT, "--connect", f"127.0.0.1:{srv.port}", "--sequential"]
        subprocess.run(run + ["500"], check=True, capture_output=True, timeout=300)
        control = tool("callgrind_control")
        subprocess.run([control, "--zero", str(srv.proc.pid)], check=True, capture_output=True, timeout=60)
        subprocess.run(run + [str(requests)], check=True, capture_output=True, timeout=600)
        subprocess.run([control, "--dump", str(srv.proc.pid)], check=True, capture_output=True, timeout=60)
    finally:
        srv.stop()
    dumps = sorted(Path(workdir).glob(f"callgrind-{name}.out.*"), key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump for {name}")
    # The first dump (`.1`, with `-NN` per thread when they are apart).
    first = [str(p) for p in dumps if p.name.split(".out.")[1].split("-")[0] == "1"]
    split, _ = callgrind_split.split(first, requests, workers_only=ours)
    split["target"] = name
    log(f"  {name:26} {split['total']} instructions per request")
    return split


# ---------------------------------------------------------------------------------------
# Webdis and Redis
# ---------------------------------------------------------------------------------------

def start_webdis(workdir):
    redis = start_redis(workdir)
    http_port = free_port()
    webdis = start_webdis_process(workdir, redis.port, http_port)
    deadline = time.time() + 30
    while b"PONG" not in http_get(http_port, "/PING"):
        if time.time() > deadline:
            sys.exit("webdis does not answer /PING")
        time.sleep(0.1)
    if b"200 OK" not in http_get(http_port, "/SET/bench/hello"):
        sys.exit("webdis did not store the benchmark key")
    return redis, webdis


# ---------------------------------------------------------------------------------------

def machine():
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def version(argv, pattern):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            m = re.search(pattern, p.stdout + p.stderr)
            return m.group(1) if m else "?"
        except OSError:
            return "?"

    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "kernel": platform.release(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "haproxy": version([tool("haproxy"), "-v"], r"version (\S+)"),
        "nginx": version([tool("nginx"), "-v"], r"nginx/(\S+)"),
        "wrk": version([tool("wrk"), "--version"], r"wrk (\S+)"),
        "webdis": version(["dpkg-query", "-W", "-f=${Version}", "webdis"], r"(\S+)"),
        "redis": version([tool("redis-server"), "--version"], r"v=(\S+)"),
        "rustc": version(["rustc", "--version"], r"rustc (\S+)"),
    }


def loadavg():
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return ["?"] * 3


def run_sampler(workdir, threads, maxconn, rounds, seconds):
    """The sampler part in front of its own Webdis + Redis; the results' `sampler` object."""
    conns = 50
    redis, webdis = start_webdis(workdir)
    try:
        log(f"the upstream sampler's cost in front of Webdis: {rounds} rounds x {len(SAMPLER_TARGETS)} runs of {seconds} s at -c {conns}")
        start = loadavg()
        runs = sampler_cost(webdis, workdir, threads, maxconn, rounds, seconds, conns, "/GET/bench")
    finally:
        webdis.stop()
        redis.stop()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "scripts/bench-proxies.sh " + " ".join(sys.argv[1:]),
        "rounds": rounds, "seconds": seconds, "connections": conns,
        "loadavg_start": start, "loadavg_end": loadavg(), "runs": runs,
    }


def keep_tail(md, text):
    """`text`, a new BENCHMARKS.md, with the tail section of the one at `md` carried over:
    the tail is measured on its own (`--tail-only`, scripts/bench_tail.py), not by a full
    run."""
    section = bench_report.tail_section_of(md.read_text() if md.exists() else "")
    return bench_report.replace_tail_section(text, section) if section else text


def into_last_run(args, key, data, section, replace, extra=None):
    """Puts a section measured on its own into the documents of the last full run: its
    text between its markers in BENCHMARKS.md (`replace`), its data under `key` in that
    run's JSON, and `extra` (file name → text) beside them."""
    print(section)
    if args.no_write:
        return
    out = Path(args.out or ROOT / "docs")
    path = out / "benchmarks.json"
    md = out / "BENCHMARKS.md"
    if not path.exists() or not md.exists():
        sys.exit(f"{out} has no full run to add the {key} to: run scripts/bench-proxies.sh first")
    full = json.loads(path.read_text())
    full[key] = data
    path.write_text(json.dumps(full, indent=1) + "\n")
    for name, text in (extra or {}).items():
        (out / name).write_text(text)
    md.write_text(replace(md.read_text(), section))
    log(f"wrote the {key} section into {md} and its runs into {path}")


def sampler_only(args, results, workdir_rounds, threads, maxconn):
    """`--sampler-only`: measure the sampler, put its section into the documents of the
    last full run (between its markers), and its results into that run's JSON."""
    rounds, seconds = workdir_rounds
    with tempfile.TemporaryDirectory(prefix="bench-proxies-") as workdir:
        sampler = run_sampler(workdir, threads, maxconn, rounds, seconds)
    sampler["machine"] = results["machine"]
    into_last_run(args, "sampler", sampler, bench_report.sampler_section(sampler),
                  bench_report.replace_sampler_section)


def chain_only(args, results, threads, maxconn):
    """`--chain-only`: measure the full chain, put its section into the documents of the
    last full run (between its markers), its chart beside them, and its results into that
    run's JSON."""
    with tempfile.TemporaryDirectory(prefix="bench-proxies-") as workdir:
        chain = run_chain(workdir, threads, maxconn, args.rounds or 4, args.duration or 3,
                          args.chain_also)
    chain["machine"] = results["machine"]
    into_last_run(args, "chain", chain, bench_report.chain_section(chain),
                  bench_report.replace_chain_section,
                  {bench_report.CHAIN_CHART: bench_report.chain_chart(chain)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short round, fewer idle connections (~2 min)")
    ap.add_argument("--rounds", type=int, help="rounds of alternated runs [4; quick 1]")
    ap.add_argument("--duration", type=int, help="seconds per wrk run [3; quick 2]")
    ap.add_argument("--idle", type=int, help="idle connections for the memory test [10000 or what ulimit -n allows; quick 2000]")
    ap.add_argument("--requests", type=int, help="requests profiled with callgrind [5000; quick 1000]")
    ap.add_argument("--only", choices=["fixed", "webdis"], help="one upstream only")
    ap.add_argument("--skip", action="append", default=[],
                    choices=["throughput", "memory", "callgrind", "layout", "recorder", "sampler",
                             "chain"],
                    help="leave out a part (repeatable)")
    ap.add_argument("--tail-only", action="store_true",
                    help="only the latency tail at one connection, in alternated rounds "
                         "(scripts/bench_tail.py, to which bench-proxies.sh hands over)")
    ap.add_argument("--sampler-only", action="store_true",
                    help="only the upstream sampler's cost (in front of Webdis, ~1 min); its "
                         "results replace the sampler section of the existing BENCHMARKS.md "
                         "and benchmarks.json, the rest of that run is kept")
    ap.add_argument("--chain-only", action="store_true",
                    help="only the full chain in front of Webdis (HTTP tap, Webdis, RESP tap, Redis, "
                         "correlated; with and without profile = true, beside HAProxy in the same "
                         "places and direct; ~2 min at the defaults); its results replace the chain "
                         "section of the existing BENCHMARKS.md and benchmarks.json")
    ap.add_argument("--chain-also", action="append", default=[], metavar="SPEC",
                    help="a further profiled variant of the chain: [tap.process] keys and bin=PATH "
                         "(another phasescope binary), e.g. 'stack_bytes=0' or "
                         "'bin=/tmp/old/phasescope' (repeatable)")
    ap.add_argument("--out", help="where BENCHMARKS.md and the chart go [docs/; with --quick, "
                                    "nowhere unless given]")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    args = ap.parse_args()
    if args.tail_only:
        sys.exit("--tail-only is scripts/bench_tail.py's: run scripts/bench-proxies.sh --tail-only")
    rounds = args.rounds or (1 if args.quick else 4)
    seconds = args.duration or (2 if args.quick else 3)
    requests = args.requests or (1000 if args.quick else 5000)
    concs = [1, 50, 200]

    # Each idle client connection costs a proxy two descriptors: raise the limit as far
    # as allowed, and size the test to it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fit = (hard - 256) // 2
    idle = args.idle or (2000 if args.quick else min(10000, fit))
    idle = min(idle, fit)
    maxconn = max(idle + 64, 1024)
    threads = os.cpu_count() or 1

    started = time.time()
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "settings": {"rounds": rounds, "seconds": seconds, "connections": concs, "idle": idle,
                     "callgrind_requests": requests, "proxy_threads": threads, "quick": args.quick,
                     "nofile": hard},
        "loadavg_start": loadavg(),
        "command": "scripts/bench-proxies.sh " + " ".join(sys.argv[1:]),
        "runs": [], "memory": [], "instructions": [],
    }
    log(f"machine: {results['machine']}; load average {' '.join(results['loadavg_start'])}")

    if args.sampler_only:
        sampler_only(args, results, workdir_rounds=(args.rounds or 4, args.duration or 3),
                     threads=threads, maxconn=maxconn)
        return
    if args.chain_only:
        chain_only(args, results, threads=threads, maxconn=maxconn)
        return

    with tempfile.TemporaryDirectory(prefix="bench-proxies-") as workdir:
        up_port = free_port()
        fixed = Server("fixed-upstream", [FIXED_UPSTREAM, "--listen", f"127.0.0.1:{up_port}",
                                          "--threads", "1"], workdir, port=up_port)
        try:
            names = [t for t, _ in TARGETS]
            if "throughput" not in args.skip and args.only in (None, "fixed"):
                targets = names + ([LAYOUT_TARGET[0]] if "layout" not in args.skip else [])
                log(f"throughput in front of the fixed upstream: {rounds} rounds x {len(concs)} x {len(targets)} runs of {seconds} s")
                servers = {n: start_target(n, up_port, workdir, threads, maxconn) for n in targets if n != "direct"}
                try:
                    results["runs"] += throughput("fixed", up_port, "/", targets, servers, concs, rounds, seconds)
                finally:
                    for s in servers.values():
                        s.stop()
            if "throughput" not in args.skip and args.only in (None, "webdis"):
                redis, webdis = start_webdis(workdir)
                try:
                    log(f"throughput in front of Webdis: {rounds} rounds x {len(concs)} x {len(names)} runs of {seconds} s")
                    servers = {n: start_target(n, webdis.port, workdir, threads, maxconn) for n in names if n != "direct"}
                    try:
                        results["runs"] += throughput("webdis", webdis.port, "/GET/bench", names, servers,
                                                      concs, rounds, seconds)
                    finally:
                        for s in servers.values():
                            s.stop()
                finally:
                    webdis.stop()
                    redis.stop()
            if "recorder" not in args.skip and not args.quick and args.only in (None, "fixed"):
                # What recording costs with one worker thread and with several: the
                # difference is what sharing the recorder's state between cores costs.
                pair = ["phasescope", "phasescope-no-metrics", "phasescope-1w", "phasescope-1w-no-metrics"]
                log(f"recorder cost with 1 and {threads} workers: {rounds} rounds x {len(pair)} runs of {seconds} s at -c 50")
                servers = {n: start_target(n, up_port, workdir, threads, maxconn) for n in pair}
                results["settings"]["recorder_seconds"] = seconds
                try:
                    results["recorder_runs"] = throughput("fixed", up_port, "/", pair, servers, [50], rounds, seconds)
                finally:
                    for srv in servers.values():
                        srv.stop()
            if "sampler" not in args.skip and not args.quick and args.only in (None, "webdis"):
                results["sampler"] = run_sampler(workdir, threads, maxconn, rounds, seconds)
                results["sampler"]["machine"] = results["machine"]
            if "chain" not in args.skip and not args.quick and args.only in (None, "webdis"):
                results["chain"] = run_chain(workdir, threads, maxconn, rounds, seconds, args.chain_also)
                results["chain"]["machine"] = results["machine"]
            if "memory" not in args.skip:
                log(f"memory with {idle} idle keep-alive connections")
                for n in names[1:]:
                    results["memory"].append(idle_memory(n, up_port, workdir, threads, idle, maxconn))
                burst = min(idle, 5000)
                log(f"memory 5 s after a burst of {burst} requests in flight at once")
                slow_port = free_port()
                slow = Server("slow-upstream", [FIXED_UPSTREAM, "--listen", f"127.0.0.1:{slow_port}",
                                                "--threads", "1", "--delay-ms", "4000"], workdir, port=slow_port)
                try:
                    results["memory_burst"] = [burst_memory(n, slow_port, workdir, threads, burst, maxconn)
                                               for n in names[1:]]
                finally:
                    slow.stop()
            if "callgrind" not in args.skip:
                log(f"instructions per request, {requests} requests on one connection under callgrind")
                profiled = ["phasescope"] if args.quick else ["phasescope", "haproxy-http", "haproxy-tcp"]
                for n in profiled:
                    results["instructions"].append(instructions(n, up_port, workdir, threads, requests, maxconn))
        finally:
            fixed.stop()

    results["loadavg_end"] = loadavg()
    results["elapsed_s"] = round(time.time() - started)
    summary = bench_report.summarize(results)
    print(bench_report.table(results, summary))
    # A quick run is a check, not a result: it replaces the documents only when asked to.
    if args.quick and not args.out:
        args.no_write = True
        log("--quick: docs/ left alone (give --out DIR to write the documents)")
    if not args.no_write:
        out = Path(args.out or ROOT / "docs")
        out.mkdir(parents=True, exist_ok=True)
        (out / "benchmarks.json").write_text(json.dumps(results, indent=1) + "\n")
        (out / "benchmarks.svg").write_text(bench_report.chart(results, summary))
        if results.get("chain"):
            (out / bench_report.CHAIN_CHART).write_text(bench_report.chain_chart(results["chain"]))
        md = out / "BENCHMARKS.md"
        md.write_text(keep_tail(md, bench_report.markdown(results, summary)))
        log(f"wrote {out / 'BENCHMARKS.md'}, {out / 'benchmarks.svg'}, {out / 'benchmarks.json'}")
    log(f"done in {results['elapsed_s']} s; load average at the end {' '.join(results['loadavg_end'])}")


if __name__ == "__main__":
    main()

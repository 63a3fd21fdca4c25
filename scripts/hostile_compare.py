#!/usr/bin/env python3
"""The hostile-input cases of docs/security.md against HAProxy and nginx, side by side.

    cargo build --release && python3 scripts/hostile_compare.py [PHASESCOPE_BINARY]

Runs one scripted upstream and, in front of it, phasescope (target/release), HAProxy
(mode http) and nginx (proxy_pass, HTTP/1.1 upstream keep-alive), configured as
scripts/bench_proxies.py configures them but with 3 s timeouts so the stall cases end.
For each case prints what the client received and, where it matters, whether a request
hidden from the proxy reached the upstream. It measures behaviour, not speed.
"""

import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASESCOPE = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "release" / "phasescope"
TIMEOUT = 3

HAPROXY_CFG = """global
  maxconn 1000
defaults
  mode http
  timeout connect {t}s
  timeout client {t}s
  timeout server {t}s
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  server s1 127.0.0.1:{upstream}
"""

NGINX_CFG = """daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  client_header_timeout {t}s;
  client_body_timeout {t}s;
  send_timeout {t}s;
  upstream up {{ server 127.0.0.1:{upstream}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout {t}s;
      proxy_send_timeout {t}s;
    }}
  }}
}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the scripted upstream ---------------------------------------------------------------

class Upstream:
    """Runs `self.script(conn, received)` on each connection; `received` logs its bytes."""

    def __init__(self):
        self.port = free_port()
        self.script = None
        self.received = []
        self.conns = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(64)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            conn, _ = self.sock.accept()
            log = bytearray()
            self.received.append(log)
            self.conns.append(conn)
            threading.Thread(target=self.run, args=(conn, log, self.script), daemon=True).start()

    def run(self, conn, log, script):
        try:
            script(Conn(conn, log))
        except OSError:
            pass

    def reset(self, script):
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        self.conns, self.received, self.script = [], [], script


class Conn:
    def __init__(self, sock, log):
        self.sock, self.log, self.buf = sock, log, bytearray()
        sock.settimeout(10)

    def read_head(self):
        n = self.buf.count(b"\r\n\r\n")
        while self.buf.count(b"\r\n\r\n") <= n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
            self.log += chunk
        return True

    def drain(self):
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                return
            self.buf += chunk
            self.log += chunk

    def send(self, b):
        self.sock.sendall(b)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def answer(resp):
    def script(c):
        if c.read_head():
            c.send(resp)
        c.drain()
    return script


def serve_ok(c):
    while c.read_head():
        c.send(OK)


# --- the client side ---------------------------------------------------------------------

SHUT = "shut"


def client(port, steps, limit=TIMEOUT + 3):
    """Runs steps (bytes to send, a float to wait, or SHUT to shut the sending side down)
    then reads until close or `limit`. Returns (bytes received, seconds until the close or
    None)."""
    s = socket.create_connection(("127.0.0.1", port))
    got = bytearray()
    start = time.monotonic()
    for step in steps:
        if step == SHUT:
            s.shutdown(socket.SHUT_WR)
        elif isinstance(step, float):
            end = time.monotonic() + step
            while time.monotonic() < end:
                s.settimeout(max(0.01, end - time.monotonic()))
                try:
                    chunk = s.recv(65536)
                    if not chunk:
                        return bytes(got), time.monotonic() - start
                    got += chunk
                except socket.timeout:
                    pass
                except OSError:
                    return bytes(got), time.monotonic() - start
        else:
            try:
                s.sendall(step)
            except OSError:
                pass
    end = start + limit
    while True:
        left = end - time.monotonic()
        if left <= 0:
            s.close()
            return bytes(got), None
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return bytes(got), time.monotonic() - start
        if not chunk:
            return bytes(got), time.monotonic() - start
        got += chunk


def summary(got, closed):
    lines = []
    at = 0
    text = got
    while True:
        i = text.find(b"HTTP/1.", at)
        if i < 0:
            break
        lines.append(text[i:text.find(b"\r\n", i) if text.find(b"\r\n", i) > 0 else i + 20]
                     .decode("latin1"))
        at = i + 1
    status = " + ".join(l[9:12] for l in lines) if lines else "nothing"
    extra = ""
    for word in (b"evil", b"secret", b"smuggled"):
        if word in got:
            extra += f", got {word.decode()!r}"
    when = f"closed after {closed:.1f} s" if closed is not None else f"open after {TIMEOUT + 3} s"
    return f"{status}{extra}; {when}"


# --- the cases ---------------------------------------------------------------------------

HEAD_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
EVIL = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil"
GET = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
NEXT = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
HIDDEN = b"GET /admin HTTP/1.1\r\nHost: a\r\nX-Pad: 12\r\n\r\n"


def first_head_is_head(c):
    """Reads the connection's first head; True if it is a HEAD, else answers it `OK`
    (the connection a proxy opens for the request after the HEAD)."""
    if not c.read_head():
        return False
    if c.buf.startswith(b"HEAD "):
        return True
    c.send(OK)
    return False


def excess(c):
    if first_head_is_head(c):
        c.send(HEAD_ANSWER + EVIL)
    serve_ok(c)


def late_after_head(c):
    """Answers HEAD with a head announcing 5 bytes, then the next request on the same
    connection with a response nobody asked for (the late bytes) before the real one."""
    if first_head_is_head(c):
        c.send(HEAD_ANSWER)
        if c.read_head():
            c.send(EVIL + OK)
    serve_ok(c)


def early(c):
    c.read_head()
    c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
    while c.read_head():
        c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret" if b"/admin" in c.buf else OK)


def refuse_then_serve(status_line):
    """Answers the first head with `status_line` without reading a body, then reads what
    follows as requests: /admin gets the secret."""
    def script(c):
        c.read_head()
        c.send(status_line + b"\r\nContent-Length: 0\r\n\r\n")
        while c.read_head():
            last = c.buf[c.buf.rfind(b"\r\n\r\n", 0, len(c.buf) - 4) + 4:]
            c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret" if b"/admin" in last else OK)
    return script


def slow_ok(c):
    """Answers each request head 0.5 s after it came (the bodies here hold no blank line),
    pipelined ones too."""
    answered = 0
    while True:
        while c.buf.count(b"\r\n\r\n") <= answered:
            chunk = c.sock.recv(65536)
            if not chunk:
                return
            c.buf += chunk
            c.log += chunk
        answered += 1
        time.sleep(0.5)
        c.send(OK)


def stall(c):
    c.read_head()
    c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst ten.")
    c.drain()


CASES = [
    ("4 bare CR in response head", answer(b"HTTP/1.1 200 OK\rContent-Length: 2\r\rok"), [GET]),
    ("5 request Content-Length 2^63", serve_ok,
     [b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\nhello"]),
    ("5 request chunk size 2^63", serve_ok,
     [b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000005\r\nhello\r\n"]),
    ("5 response Content-Length 2^63",
     answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\nok"), [GET]),
    ("5 response chunk size 2^63",
     answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000005\r\nhello\r\n"), [GET]),
    ("6 absolute-form with userinfo", serve_ok,
     [b"GET http://a@evil.example/ HTTP/1.1\r\nHost: a\r\n\r\n"]),
    ("7 1xx to an HTTP/1.0 client",
     answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"),
     [b"POST /p HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi"]),
    ("1 unrequested 101",
     answer(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
     [GET, 0.3, b"DELETE /everything HTTP/1.1\r\nHost: a\r\n\r\n"]),
    ("2 excess after a HEAD answer (pipelined)", excess,
     [b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n" + NEXT]),
    ("3 early answer, body hides a request", early,
     [b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 43\r\n\r\n", 0.3, HIDDEN + NEXT]),
    ("8 upstream stalls after head + part of body", stall, [GET]),
    ("9 connection that never sends a byte", serve_ok, []),
    # The third round (docs/security.md): request framing.
    ("r3.1 CONNECT with a Content-Length body hiding a request",
     refuse_then_serve(b"HTTP/1.1 405 Method Not Allowed"),
     [b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nContent-Length: 43\r\n\r\n"
      + HIDDEN + NEXT]),
    ("r3.2 Expect: 100-continue, body (a hidden request) in the same write, answered 417",
     refuse_then_serve(b"HTTP/1.1 417 Expectation Failed"),
     [b"PUT /up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 43\r\n\r\n"
      + HIDDEN + NEXT]),
    ("r3.3 late bytes after a HEAD answer, next request pipelined", late_after_head,
     [b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n" + NEXT]),
    ("r3.4 Connection: transfer-encoding", serve_ok,
     [b"POST / HTTP/1.1\r\nHost: a\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"]),
    ("r3.4 a trailer section of 200 fields", serve_ok,
     [b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
      + b"".join(b"T-%d: v\r\n" % i for i in range(200)) + b"\r\n"]),
    # The fourth round (docs/security.md): half-closed clients, chunked to HTTP/1.0.
    ("r4.5 GET, then the client shuts its sending side", slow_ok, [GET, SHUT]),
    ("r4.5 POST, then shut", slow_ok,
     [b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", SHUT]),
    ("r4.5 HTTP/1.0 GET, then shut", slow_ok, [b"GET /old HTTP/1.0\r\n\r\n", SHUT]),
    ("r4.5 two pipelined GETs, then shut", slow_ok, [GET + NEXT, SHUT]),
    ("r4 chunked answer to an HTTP/1.0 request",
     answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
     [b"GET / HTTP/1.0\r\n\r\n"]),
]


def tool(name):
    """The path of an installed proxy, or None."""
    path = shutil.which(name) or f"/usr/sbin/{name}"
    return path if Path(path).exists() else None


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def start_proxies(procs, d, ports, up, tools):
    """Starts the three proxies into `procs` (so that the caller stops whichever started)
    and waits until each accepts."""
    cfg = d / "phasescope.toml"
    cfg.write_text(f"""[admin]
listen = "127.0.0.1:{free_port()}"
[[tap]]
name = "t"
listen = "127.0.0.1:{ports['phasescope']}"
upstream = "127.0.0.1:{up.port}"
[tap.timeouts]
head = "{TIMEOUT}s"
response = "{TIMEOUT}s"
transfer = "{TIMEOUT}s"
""")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs["phasescope"] = subprocess.Popen([PHASESCOPE, "--config", cfg, "run"], **quiet)
    hcfg = d / "haproxy.cfg"
    hcfg.write_text(HAPROXY_CFG.format(t=TIMEOUT, port=ports["haproxy"], upstream=up.port))
    procs["haproxy"] = subprocess.Popen([tools["haproxy"], "-db", "-f", hcfg], **quiet)
    nd = d / "nginx"
    nd.mkdir()
    ncfg = nd / "nginx.conf"
    ncfg.write_text(NGINX_CFG.format(t=TIMEOUT, dir=nd, port=ports["nginx"], upstream=up.port))
    procs["nginx"] = subprocess.Popen([tools["nginx"], "-p", nd, "-e", nd / "nginx-error.log",
                                       "-c", ncfg], **quiet)
    deadline = time.monotonic() + 20
    for name, port in ports.items():
        while not accepts(port):
            if procs[name].poll() is not None:
                sys.exit(f"{name} exited with {procs[name].returncode} before it listened")
            if time.monotonic() > deadline:
                sys.exit(f"{name} does not listen on {port}")
            time.sleep(0.05)


def stop(procs):
    for p in procs.values():
        p.terminate()
    for p in procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    if not PHASESCOPE.exists():
        sys.exit(f"{PHASESCOPE} is missing: cargo build --release")
    tools = {name: tool(name) for name in ("haproxy", "nginx")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        sys.exit(f"{' and '.join(missing)} not installed: apt-get install -y haproxy nginx")
    up = Upstream()
    d = Path(tempfile.mkdtemp(prefix="hostile-"))
    ports = {"phasescope": free_port(), "haproxy": free_port(), "nginx": free_port()}
    procs = {}
    try:
        start_proxies(procs, d, ports, up, tools)
        print(f"| case | phasescope | HAProxy {version('haproxy')} | nginx {version('nginx')} |")
        print("|---|---|---|---|")
        for name, script, steps in CASES:
            row = []
            for proxy in ("phasescope", "haproxy", "nginx"):
                up.reset(script)
                got, closed = client(ports[proxy], steps)
                time.sleep(0.2)
                hidden = [r for r in up.received if b"DELETE /everything" in r or b"GET /admin" in r]
                note = "; the hidden request reached the upstream" if hidden else ""
                row.append(summary(got, closed) + note)
            print(f"| {name} | " + " | ".join(row) + " |", flush=True)
    finally:
        stop(procs)
        shutil.rmtree(d, ignore_errors=True)


def version(tool):
    out = subprocess.run([shutil.which(tool) or tool, "-v"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    for word in text.split():
        if word[0].isdigit() or "/" in word and word.split("/")[-1][:1].isdigit():
            return word.split("/")[-1]
    return "?"


if __name__ == "__main__":
    main()

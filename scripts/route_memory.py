#!/usr/bin/env python3
"""What routes cost: RSS per route in use and /metrics bytes per route (docs/deploy.md,
"Memory"; src/config/ceiling.rs holds the figures it measured).

    scripts/route_memory.py target/release/phasescope 256 2000

For each count N: a proxy with `routes = "prefix"` and `max_routes = N` in front of a
small upstream of its own, two rounds of one request per route on each of 4 keep-alive
connections (the per-core workers each keep the series of the routes they served), then
three scrapes of /metrics and two snapshots. Prints the RSS idle, after the traffic,
after the scrapes and after the snapshots, /metrics' size and its slowest and fastest
scrape, the snapshot's size and time.
"""
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def upstream():
    """An upstream that answers every request head with `ok`."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)

    def serve(c):
        buf = b""
        while True:
            d = c.recv(65536)
            if not d:
                return
            buf += d
            while b"\r\n\r\n" in buf:
                _, buf = buf.split(b"\r\n\r\n", 1)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def accept():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


def measure(binary, n, up):
    listen, admin = free_port(), free_port()
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write(
        f'[admin]\nlisten = "127.0.0.1:{admin}"\n\n[[tap]]\nname = "web"\n'
        f'listen = "127.0.0.1:{listen}"\nupstream = "127.0.0.1:{up}"\n'
        f'routes = "prefix"\nmax_routes = {n}\n'
    )
    cfg.close()
    proc = subprocess.Popen([binary, "--config", cfg.name, "run"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def rss():
        with open(f"/proc/{proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) * 1024
        return 0

    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", listen)).close()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.5)
        idle = rss()
        conns = [socket.create_connection(("127.0.0.1", listen)) for _ in range(4)]
        for _ in range(2):
            for i in range(n):
                for c in conns:
                    c.sendall(f"GET /r{i} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
                for c in conns:
                    buf = b""
                    while not buf.endswith(b"ok"):
                        buf += c.recv(4096)
        time.sleep(0.5)
        traffic = rss()

        def get(path):
            t = time.monotonic()
            body = urllib.request.urlopen(f"http://127.0.0.1:{admin}{path}", timeout=120).read()
            return len(body), time.monotonic() - t

        scrapes = [get("/metrics") for _ in range(3)]
        scraped = rss()
        snaps = [get("/api/snapshot") for _ in range(2)]
        snapped = rss()
        mib = lambda b: b / 2**20
        size = scrapes[-1][0]
        print(
            f"routes {n}: RSS idle {mib(idle):.1f} MiB, after traffic {mib(traffic):.1f} MiB "
            f"({(traffic - idle) / n / 1024:.1f} KiB a route); /metrics {mib(size):.2f} MiB "
            f"({size / n / 1024:.1f} KiB a route) in {min(s[1] for s in scrapes):.3f}-"
            f"{max(s[1] for s in scrapes):.3f} s, RSS then {mib(scraped):.1f} MiB; "
            f"snapshot {mib(snaps[-1][0]):.2f} MiB in {min(s[1] for s in snaps):.3f}-"
            f"{max(s[1] for s in snaps):.3f} s, RSS then {mib(snapped):.1f} MiB "
            f"({(max(scraped, snapped) - idle) / n / 1024:.0f} KiB a route at the peak)"
        )
    finally:
        proc.terminate()
        proc.wait()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    up = upstream()
    for n in sys.argv[2:]:
        measure(sys.argv[1], int(n), up)


if __name__ == "__main__":
    main()

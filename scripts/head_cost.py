#!/usr/bin/env python3
"""What the request after a HEAD costs when its answer announced a length.

    python3 scripts/head_cost.py PROXY_PORT [PAIRS]

On one keep-alive connection to a proxy in front of an upstream that answers `HEAD /`
with `Content-Length: 17` and `HEAD /empty` with `Content-Length: 0` (as nginx does for
`return 200 "hello from nginx\\n"` and `return 200 ""`), sends PAIRS times HEAD then GET /,
one at a time, for each HEAD path in turn (interleaved in rounds, so that both see the
same load), and prints the GET's median and 90th percentile latency. After `HEAD /` the
GET goes on a new upstream connection (docs/security.md); after `HEAD /empty` it reuses
the pooled one. (wrk cannot drive this: it waits for the body a HEAD answer announces.)
"""

import socket
import statistics
import sys
import time

PORT = int(sys.argv[1])
PAIRS = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
ROUNDS = 4


def read_response(s, buf, head_only):
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    end = buf.index(b"\r\n\r\n") + 4
    length = 0
    for line in buf[:end].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if head_only:
        length = 0
    while len(buf) < end + length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    del buf[:end + length]


def run(path, pairs):
    s = socket.create_connection(("127.0.0.1", PORT))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = f"HEAD {path} HTTP/1.1\r\nHost: a\r\n\r\n".encode()
    get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    buf = bytearray()
    gets = []
    for _ in range(pairs):
        s.sendall(head)
        read_response(s, buf, True)
        t0 = time.perf_counter()
        s.sendall(get)
        read_response(s, buf, False)
        gets.append(time.perf_counter() - t0)
    s.close()
    return gets


def main():
    results = {"/empty": [], "/": []}
    for _ in range(ROUNDS):
        for path in results:
            results[path] += run(path, PAIRS // ROUNDS)
    for path, gets in results.items():
        gets.sort()
        p90 = gets[int(len(gets) * 0.9)]
        print(f"GET after HEAD {path}: median {statistics.median(gets) * 1e6:.0f} µs, "
              f"p90 {p90 * 1e6:.0f} µs ({len(gets)} GETs)")


if __name__ == "__main__":
    main()

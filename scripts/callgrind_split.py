#!/usr/bin/env python3
"""Splits a callgrind profile of phasescope into relay, framing, timeline and recording.

Usage: callgrind_split.py CALLGRIND_OUT... REQUESTS [--top N] [--workers]

Several files are the per-thread dumps of one run (valgrind --separate-threads=yes), and
are added up. With --workers, only the threads that ran connection tasks count: the
proxy's other threads do periodic work (the upstream watcher reads /proc once a second,
and scans every process's descriptors while the upstream is not found), which is no
request's cost and, landing inside the measured window or not, made the per-request
figure jump by thousands of instructions from one run to the next.

Prints JSON: instructions per request in total and per part, and (with --top) the
functions with the highest self cost. Each function belongs to the first part whose
pattern its name matches; what a function of a part calls that matches no part (memcpy,
an allocator, core helpers) counts for the calling part. Everything else is the relay:
the connection task, tokio's scheduler and I/O driver, and the system-call wrappers.
Code inlined into a function counts where it was inlined, so the parts' boundaries are
functions the compiler keeps out of line (the parsers, the recorder, the phase
conversion are).
"""

import json
import re
import sys
from collections import defaultdict

PARTS = [
    # Finding message boundaries: request and response heads, bodies, RESP.
    ("framing", re.compile(
        r"phasescope::http1::|phasescope::resp::|httparse::|"
        r"phasescope::relay::http::next::|ResponseProgress::frame|phasescope::relay::http::connection::HttpConnection::route")),
    # Taking instants and turning them into phases.
    ("timeline", re.compile(r"phasescope::clock::|quanta::|phasescope::relay::exchange::|phasescope::phase::")),
    # Handing the exchange to the recorders: metrics, HDR, access log.
    ("recording", re.compile(
        r"phasescope::metrics::|hdrhistogram::|phasescope::recorder::|phasescope::accesslog::|"
        r"HttpConnection::record|thread_local::")),
]
# Helpers that count for whoever calls them.
NEUTRAL = re.compile(
    r"^(__mem|mem(cpy|move|set|cmp)|_?_?libc_|malloc|free|calloc|realloc|_int_|"
    r"core::|alloc::|std::|<core::|<alloc::|<std::|memchr::)")


def part_of(name):
    for part, pattern in PARTS:
        if pattern.search(name):
            return part
    return None


def parse(path):
    """Self cost per function, and inclusive cost per (caller, callee) edge."""
    names = {}
    self_cost = defaultdict(int)
    edges = defaultdict(int)
    fn = None
    cfn = None
    pending_call = False
    total = 0

    def name(spec):
        # "(12) name" defines id 12, "(12)" refers to it, "name" stands alone.
        m = re.match(r"\((\d+)\)(?:\s+(.*))?$", spec)
        if not m:
            return spec
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), m.group(1))

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("fn="):
                fn = name(line[3:])
                continue
            if line.startswith("cfn="):
                cfn = name(line[4:])
                continue
            if line.startswith("calls="):
                pending_call = True
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                fields = line.split()
                cost = int(fields[-1]) if len(fields) > 1 else 0
                if pending_call:
                    edges[(fn, cfn)] += cost
                    pending_call = False
                else:
                    self_cost[fn] += cost
                    total += cost
    return total, self_cost, edges


# A thread that ran this served connections.
WORKER = re.compile(r"phasescope::relay::(http::connection|resp)::")


def parse_all(paths, workers_only):
    """`parse` of each per-thread dump, added up (only workers' with `workers_only`)."""
    total = 0
    self_cost = defaultdict(int)
    edges = defaultdict(int)
    for path in paths:
        t, s, e = parse(path)
        if workers_only and not any(WORKER.search(fn) for fn in s):
            continue
        total += t
        for k, v in s.items():
            self_cost[k] += v
        for k, v in e.items():
            edges[k] += v
    return total, self_cost, edges


def split(paths, requests, workers_only=False):
    if isinstance(paths, str):
        paths = [paths]
    total, self_cost, edges = parse_all(paths, workers_only)
    parts = defaultdict(int)
    for fn, cost in self_cost.items():
        p = part_of(fn)
        if p:
            parts[p] += cost
    for (caller, callee), cost in edges.items():
        p = part_of(caller)
        if p and part_of(callee) is None and NEUTRAL.search(callee):
            parts[p] += cost
    out = {"requests": requests, "total": round(total / requests)}
    for p, _ in PARTS:
        out[p] = round(parts[p] / requests)
    out["relay"] = out["total"] - sum(out[p] for p, _ in PARTS)
    return out, self_cost


def main():
    args = sys.argv[1:]
    top = 0
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    workers_only = "--workers" in args
    if workers_only:
        args.remove("--workers")
    paths, requests = args[:-1], int(args[-1])
    out, self_cost = split(paths, requests, workers_only)
    if top:
        out["top_self"] = [
            [fn, round(cost / requests)]
            for fn, cost in sorted(self_cost.items(), key=lambda kv: -kv[1])[:top]
        ]
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

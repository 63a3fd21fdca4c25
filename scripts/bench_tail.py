"""The latency tail one connection sees through each proxy, in enough alternated rounds to
give an interval: `scripts/bench-proxies.sh --tail-only`.

At -c1 every request waits for the one before, so the 99th percentile is where a proxy's
occasional stall shows: a periodic task on the data path's threads, a lock a worker waits
for, a thread of the proxy's own that takes the worker's core. One wrk run's p99 moves by
a factor of three from run to run on a shared machine, so a single figure decides nothing.
Here every round runs every target once for the same time, in an order rotated per round,
and each proxy's *added* p99 is its p99 less the direct connection's in the same round:
what the machine did in that round cancels. The interval of the median over rounds is
distribution-free (order statistics of the sign test), since a tail's rounds are not
normal.

The targets separate the proxy's parts: phasescope with metrics (the watcher of the
upstream process found by its port, the own-process accountant, the shards), without
its upstream watcher (`find = "none"`), and with `--no-metrics` (nothing recorded, no
watcher), beside HAProxy (tcp and http) and nginx.
"""

import math
import statistics
from pathlib import Path

import bench_proxies as bp

from bench_report import TAIL_BEGIN, TAIL_END, replace_tail_section

# The targets of the tail section, in the order of its table.
TAIL_TARGETS = [
    ("phasescope", "phasescope"),
    ("phasescope-no-watch", "phasescope, upstream not watched (`find = \"none\"`)"),
    ("phasescope-no-metrics", "phasescope --no-metrics"),
    ("haproxy-tcp", "HAProxy mode tcp"),
    ("haproxy-http", "HAProxy mode http"),
    ("nginx", "nginx proxy_pass"),
]

NO_WATCH_CONFIG = """# The tail benchmark's phasescope without its upstream watcher.
[[tap]]
name = "default"
listen = "127.0.0.1:1"
upstream = "127.0.0.1:2"

[tap.process]
find = "none"
"""


def start(name, upstream_port, workdir, threads, maxconn):
    if name != "phasescope-no-watch":
        return bp.start_target(name, upstream_port, workdir, threads, maxconn)
    cfg = Path(workdir) / "no-watch.toml"
    cfg.write_text(NO_WATCH_CONFIG)
    port = bp.free_port()
    argv = [bp.PHASESCOPE, "run", "--config", cfg, "--listen", f"127.0.0.1:{port}",
            "--upstream", f"127.0.0.1:{upstream_port}", "--admin", f"127.0.0.1:{bp.free_port()}"]
    return bp.Server(name, argv, Path(workdir), env={"PHASESCOPE_WORKERS": str(threads)}, port=port)


def median_interval(xs, confidence=0.95):
    """The median of `xs` and a distribution-free interval for it: the order statistics
    x(k) and x(n+1-k) with the largest k whose coverage, from the binomial(n, 1/2), is at
    least `confidence`; (min, max) when n is too small for it (under 6 rounds: the tail
    section needs at least that many to claim its 95 %)."""
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return None, None, None
    # With X ~ Binomial(n, 1/2), the order statistics (x(k), x(n+1-k)), counted from 1,
    # cover the median with probability 1 - 2 P(X <= k-1): the largest k that keeps it
    # at `confidence` or more.
    cdf, k = 0.0, 0
    for j in range(n):
        cdf += math.comb(n, j) / 2 ** n
        if 1 - 2 * cdf < confidence:
            break
        k = j + 1
    lo, hi = (xs[k - 1], xs[n - k]) if k >= 1 else (xs[0], xs[-1])
    return statistics.median(xs), lo, hi


def run_tail(workdir, upstream_port, threads, maxconn, rounds, seconds):
    """Every round runs direct and every target for `seconds` at one connection; returns
    the runs, each with its round and its p50/p99."""
    names = ["direct"] + [n for n, _ in TAIL_TARGETS]
    servers = {n: start(n, upstream_port, workdir, threads, maxconn) for n in names if n != "direct"}
    runs = []
    try:
        for srv in servers.values():
            bp.wrk(srv.port, "/", 1, 1)  # warm: connections, pools, the watcher's first pass
        for rnd in range(rounds):
            k = rnd % len(names)
            for name in names[k:] + names[:k]:
                port = servers[name].port if name in servers else upstream_port
                r = bp.wrk(port, "/", 1, seconds)
                r.update(target=name, round=rnd)
                runs.append(r)
                bp.log(f"  tail round {rnd + 1}/{rounds} {name:22} p50 {bp.fmt_ms(r['p50_ms'])}  "
                       f"p99 {bp.fmt_ms(r['p99_ms'])}  {r['rps']:>8.0f} req/s  errors {r['errors']}")
    finally:
        for srv in servers.values():
            srv.stop()
    return runs


def added(runs, target, key):
    """Per round, `target`'s `key` (ms) less the direct connection's, in µs."""
    by = {}
    for r in runs:
        by.setdefault(r["round"], {})[r["target"]] = r
    out = []
    for v in by.values():
        a, b = v.get("direct"), v.get(target)
        if a and b and a.get(key) is not None and b.get(key) is not None:
            out.append((b[key] - a[key]) * 1e3)
    return out


def values(runs, target, key):
    """`target`'s `key` (ms) in every round, in µs."""
    return [r[key] * 1e3 for r in runs if r["target"] == target and r.get(key) is not None]


def shift(xs, ys, confidence=0.95):
    """How much `xs` lie above `ys`: the Hodges–Lehmann estimate (the median of every
    difference x − y) and its distribution-free interval (Moses: order statistics of the
    differences, from the Mann–Whitney statistic's normal approximation). Unpaired on
    purpose: a run's p99 at one connection is set by the hiccups of its own seconds, which
    the other targets' runs of the same round do not share, so pairing them by round
    removes nothing and only halves the comparisons."""
    d = sorted(x - y for x in xs for y in ys)
    n, m = len(xs), len(ys)
    if not d:
        return None, None, None
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    k = int(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    if k < 1:
        return statistics.median(d), d[0], d[-1]
    return statistics.median(d), d[k - 1], d[len(d) - k]


def tail_section(tail):
    """The tail section of BENCHMARKS.md from `run_tail`'s runs and the run's facts."""
    runs = tail["runs"]
    m = tail["machine"]
    rounds = len({r["round"] for r in runs})

    def cell(v, digits=0):
        mid, lo, hi = v
        if mid is None:
            return "-"
        return f"{mid:,.{digits}f} ({lo:,.{digits}f} to {hi:,.{digits}f})"

    base = values(runs, "phasescope-no-metrics", "p99_ms")
    lines = [
        TAIL_BEGIN,
        "## The tail at one connection",
        "",
        f"`wrk -t1 -c1 --latency` for {tail['seconds']} s against each target in turn, {rounds} rounds, "
        "the order rotated every round, in front of the fixed-response upstream. Medians over the "
        "rounds with a 95 % distribution-free interval (order statistics); the added p50 is each "
        "round's p50 less the direct connection's in the same round. A run's p99 at one connection "
        "is set by the hiccups of its own seconds (the direct connection's own p99 is in the table), "
        "so each phasescope's p99 is compared with `--no-metrics`' over all rounds at once: the "
        "Hodges–Lehmann shift with its 95 % interval. "
        f"Measured {tail['date']} on {m['nproc']} CPUs ({m['cpu']}), HAProxy {m['haproxy']}, "
        f"nginx {m['nginx']}, wrk {m['wrk']} (load average {' '.join(tail['loadavg_start'])} "
        f"at the start, {' '.join(tail['loadavg_end'])} at the end), with `{tail['command']}`.",
        "",
        "| target | p50, µs | added p50, µs | p99, µs | p99 above `--no-metrics`', µs |",
        "|---|---|---|---|---|",
    ]
    for name, label in [("direct", "direct (no proxy)")] + TAIL_TARGETS:
        p99 = values(runs, name, "p99_ms")
        above = cell(shift(p99, base)) if name in ("phasescope", "phasescope-no-watch") else ""
        lines.append(f"| {label} | {cell(median_interval(values(runs, name, 'p50_ms')))} | "
                     f"{cell(median_interval(added(runs, name, 'p50_ms'))) if name != 'direct' else ''} | "
                     f"{cell(median_interval(p99))} | {above} |")
    mid, lo, hi = shift(values(runs, "phasescope", "p99_ms"), base)
    if mid is not None:
        # The goal: within 1.2× of `--no-metrics`' p99, or within +10 µs of it. The
        # shift's upper bound against the median of `--no-metrics`' rounds gives the ratio.
        typical = statistics.median(base)
        ratio = (typical + hi) / typical if typical > 0 else float("inf")
        verdict = ("met" if hi <= 10 or ratio <= 1.2 else
                   "missed" if lo > 10 and (typical + lo) / typical > 1.2 else
                   f"not shown: the interval reaches {hi:+.0f} µs ({ratio:.2f}×)")
        lines += [
            "",
            f"With metrics, phasescope's p99 lies {mid:+.0f} µs ({lo:+.0f} to {hi:+.0f}) from its "
            f"`--no-metrics` figure of {typical:.0f} µs, at most {ratio:.2f}× it; the goal, within "
            f"1.2× or +10 µs, is {verdict}.",
        ]
    lines.append(TAIL_END)
    return "\n".join(lines) + "\n"


def main():
    import argparse
    import datetime
    import json
    import os
    import sys
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tail-only", action="store_true", help="(how bench-proxies.sh hands over)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of alternated runs [10]")
    ap.add_argument("--duration", type=int, default=3, help="seconds per wrk run [3]")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    args = ap.parse_args()
    threads = os.cpu_count() or 1
    tail = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": bp.machine(),
        "loadavg_start": bp.loadavg(),
        "seconds": args.duration,
        "command": "scripts/bench-proxies.sh --tail-only " + " ".join(
            a for a in sys.argv[1:] if a != "--tail-only"),
    }
    bp.log(f"the tail at one connection: {args.rounds} rounds x {len(TAIL_TARGETS) + 1} runs "
           f"of {args.duration} s; load average {' '.join(tail['loadavg_start'])}")
    with tempfile.TemporaryDirectory(prefix="bench-tail-") as workdir:
        up_port = bp.free_port()
        fixed = bp.Server("fixed-upstream", [bp.FIXED_UPSTREAM, "--listen", f"127.0.0.1:{up_port}",
                                             "--threads", "1"], workdir, port=up_port)
        try:
            tail["runs"] = run_tail(workdir, up_port, threads, 1024, args.rounds, args.duration)
        finally:
            fixed.stop()
    tail["loadavg_end"] = bp.loadavg()
    section = tail_section(tail)
    print(section)
    if not args.no_write:
        docs = bp.ROOT / "docs"
        md = docs / "BENCHMARKS.md"
        md.write_text(replace_tail_section(md.read_text(), section))
        (docs / "benchmarks-tail.json").write_text(json.dumps(tail, indent=1) + "\n")
        bp.log(f"wrote the tail section into {md} and its runs into {docs / 'benchmarks-tail.json'}")


if __name__ == "__main__":
    main()

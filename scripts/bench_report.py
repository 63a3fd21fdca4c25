#!/usr/bin/env python3
"""Turns the results of bench_proxies.py into a table, docs/BENCHMARKS.md and an SVG chart.

Also usable alone, to rewrite the documents from a saved run:
    scripts/bench_report.py docs/benchmarks.json [OUT_DIR]
"""

import json
import statistics
import sys
from pathlib import Path

LABELS = {
    "direct": "direct (no proxy)",
    "phasescope": "phasescope",
    "phasescope-no-metrics": "phasescope --no-metrics",
    "phasescope-work-stealing": "phasescope, work-stealing runtime",
    "phasescope-1w": "phasescope, 1 worker",
    "phasescope-1w-no-metrics": "phasescope --no-metrics, 1 worker",
    "haproxy-http": "HAProxy mode http",
    "haproxy-tcp": "HAProxy mode tcp",
    "nginx": "nginx proxy_pass",
}
COLORS = {
    "direct": "#9e9e9e",
    "phasescope": "#1f6feb",
    "phasescope-no-metrics": "#79b8ff",
    "phasescope-work-stealing": "#b392f0",
    "phasescope-1w": "#0d47a1",
    "phasescope-1w-no-metrics": "#90caf9",
    "haproxy-http": "#d73a49",
    "haproxy-tcp": "#f9a3ad",
    "nginx": "#28a745",
}
UPSTREAMS = {"fixed": "fixed-response upstream", "webdis": "Webdis + Redis (GET of one key)"}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return (min(xs), max(xs)) if xs else (None, None)


def summarize(results):
    """Medians per (upstream, target, conns) and per-round ratios between targets."""
    runs = results["runs"]
    cells = {}
    for r in runs:
        cells.setdefault((r["upstream"], r["target"], r["conns"]), []).append(r)
    stats = {}
    for key, rs in cells.items():
        rps = [r["rps"] for r in rs]
        stats[key] = {
            "rps": med(rps), "rps_range": spread(rps),
            "p50_ms": med([r["p50_ms"] for r in rs]), "p99_ms": med([r["p99_ms"] for r in rs]),
            "cpu": med([r.get("cpu_us_per_req") for r in rs]),
            "cpu_range": spread([r.get("cpu_us_per_req") for r in rs]),
            "errors": sum(r["errors"] for r in rs), "n": len(rs),
        }
    by_round = {(r["upstream"], r["target"], r["conns"], r["round"]): r for r in runs}

    def ratio(upstream, a, b, conns, field="rps"):
        """Median and range over rounds of a/b, each round's pair run back to back."""
        vals = []
        for (u, t, c, rnd), r in by_round.items():
            if (u, t, c) != (upstream, a, conns):
                continue
            other = by_round.get((upstream, b, conns, rnd))
            if other and r.get(field) and other.get(field):
                vals.append(r[field] / other[field])
        return {"median": med(vals), "range": spread(vals), "n": len(vals)}

    def added(upstream, target, field):
        """Latency added over direct at -c 1, per round, in microseconds."""
        vals = []
        for (u, t, c, rnd), r in by_round.items():
            if (u, t, c) != (upstream, target, 1):
                continue
            d = by_round.get((upstream, "direct", 1, rnd))
            if d and r[field] is not None and d[field] is not None:
                vals.append((r[field] - d[field]) * 1000)
        return {"median": med(vals), "range": spread(vals), "n": len(vals)}

    upstreams = sorted({r["upstream"] for r in runs}, key=["fixed", "webdis"].index)
    targets = [t for t in LABELS if any(r["target"] == t for r in runs)]
    conns = sorted({r["conns"] for r in runs})
    ratios = {}
    for u in upstreams:
        for c in conns:
            for t in targets:
                for ref in ("direct", "haproxy-http", "haproxy-tcp", "nginx", "phasescope-no-metrics",
                            "phasescope-work-stealing"):
                    if t != ref:
                        ratios[(u, t, ref, c, "rps")] = ratio(u, t, ref, c)
                        ratios[(u, t, ref, c, "cpu")] = ratio(u, t, ref, c, "cpu_us_per_req")
    latency = {}
    for u in upstreams:
        for t in targets:
            if t != "direct":
                latency[(u, t)] = {"p50": added(u, t, "p50_ms"), "p99": added(u, t, "p99_ms")}

    checks = []

    def check(name, value, goal, ok, detail=""):
        checks.append({"name": name, "value": value, "goal": goal, "ok": ok, "detail": detail})

    def r_of(key):
        return ratios.get(key, {}).get("median")

    for u in upstreams:
        for c in (50, 200):
            v = r_of((u, "phasescope", "haproxy-http", c, "rps"))
            if v is not None:
                check(f"throughput ÷ HAProxy http, {u}, -c {c}", v, "≥ 1.00", v >= 1.0,
                      rng(ratios[(u, "phasescope", "haproxy-http", c, "rps")]))
    for u in upstreams:
        for c in (50, 200):
            v = r_of((u, "phasescope", "haproxy-tcp", c, "rps"))
            if v is not None:
                check(f"throughput ÷ HAProxy tcp, {u}, -c {c}", v, "≥ 1.00", v >= 1.0,
                      rng(ratios[(u, "phasescope", "haproxy-tcp", c, "rps")]))
    for u in upstreams:
        v = r_of((u, "phasescope", "haproxy-tcp", 50, "cpu"))
        if v is not None:
            check(f"CPU per request ÷ HAProxy tcp, {u}, -c 50", v, "≤ 0.90", v <= 0.9,
                  rng(ratios[(u, "phasescope", "haproxy-tcp", 50, "cpu")]))
    for u in upstreams:
        for c in (50, 200):
            v = r_of((u, "phasescope", "haproxy-http", c, "cpu"))
            if v is not None:
                check(f"CPU per request ÷ HAProxy http, {u}, -c {c}", v, "≤ 0.80", v <= 0.8,
                      rng(ratios[(u, "phasescope", "haproxy-http", c, "cpu")]))
    for u in upstreams:
        for c in (50, 200):
            v = r_of((u, "phasescope", "phasescope-no-metrics", c, "rps"))
            if v is not None:
                check(f"metrics on ÷ --no-metrics, {u}, -c {c}", v, "≥ 0.99", v >= 0.99,
                      rng(ratios[(u, "phasescope", "phasescope-no-metrics", c, "rps")]))
    lat = latency.get(("fixed", "phasescope"))
    if lat and lat["p50"]["median"] is not None:
        v = lat["p50"]["median"]
        check("added p50 latency at -c 1, fixed upstream (µs)", v, "≤ 20", v <= 20, rng(lat["p50"], 1))
    for m in results.get("memory", []):
        if m["target"] == "phasescope":
            v = m["bytes_per_connection"]
            check("memory per idle keep-alive connection (bytes)", v, "≤ 2048", v <= 2048,
                  f"{m['connections']} connections")
    for m in results.get("memory_burst", []):
        if m["target"] == "phasescope":
            v = m["bytes_per_connection"]
            check("the same, 5 s after a burst of requests all in flight (bytes)", v, "≤ 2048",
                  v <= 2048, f"{m['connections']} connections")
    for i in results.get("instructions", []):
        if i["target"] == "phasescope":
            check("callgrind instructions per request, fixed upstream", i["total"], "≤ 9,000",
                  i["total"] <= 9000)
    return {"stats": stats, "ratios": ratios, "latency": latency, "checks": checks,
            "upstreams": upstreams, "targets": targets, "conns": conns}


def show(check):
    """A check's value as the targets table shows it."""
    v = check["value"]
    text = f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 5 else f"{v:.3f}"
    return f"{text} ({check['detail']})" if check["detail"] else text


def rng(r, digits=3):
    lo, hi = r["range"]
    if lo is None:
        return ""
    return f"{lo:.{digits}f}–{hi:.{digits}f} over {r['n']} rounds"


def f(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def us(ms):
    return "–" if ms is None else f"{ms * 1000:.0f}"


def rps_cell(st):
    if not st or st["rps"] is None:
        return "–"
    lo, hi = st["rps_range"]
    if st["n"] > 1 and st["rps"]:
        return f"{st['rps']:,.0f} (±{(hi - lo) / 2 / st['rps'] * 100:.0f}%)"
    return f"{st['rps']:,.0f}"


def table(results, s):
    """The one table printed at the end of a run."""
    lines = []
    head = f"{'upstream':7} {'target':34}" + "".join(f"{'req/s -c ' + str(c):>20}" for c in s["conns"])
    head += f"{'÷direct c50':>12}{'cpu µs/req c50':>15}{'+p50 µs c1':>11}{'+p99 µs c1':>11}"
    lines.append(head)
    lines.append("-" * len(head))
    for u in s["upstreams"]:
        for t in s["targets"]:
            if (u, t, s["conns"][0]) not in s["stats"]:
                continue
            row = f"{u:7} {LABELS[t]:34}"
            for c in s["conns"]:
                row += f"{rps_cell(s['stats'].get((u, t, c))):>20}"
            rd = s["ratios"].get((u, t, "direct", 50, "rps"), {}).get("median")
            cpu = s["stats"].get((u, t, 50), {}).get("cpu")
            lat = s["latency"].get((u, t))
            row += f"{f(rd, 2):>12}{f(cpu, 2):>15}"
            row += f"{f(lat['p50']['median'] if lat else None):>11}{f(lat['p99']['median'] if lat else None):>11}"
            lines.append(row)
    if results.get("memory"):
        lines.append("")
        lines.append("memory per idle keep-alive connection: " + ", ".join(
            f"{LABELS[m['target']]} {m['bytes_per_connection']:,.0f} B" for m in results["memory"]))
    if results.get("instructions"):
        lines.append("instructions per proxied request (callgrind): " + ", ".join(
            f"{LABELS[i['target']]} {i['total']:,}" for i in results["instructions"]))
        ps = next((i for i in results["instructions"] if i["target"] == "phasescope"), None)
        if ps:
            lines.append("  phasescope: " + ", ".join(
                f"{k} {ps[k]:,}" for k in ("relay", "framing", "timeline", "recording")))
    lines.append("")
    for c in s["checks"]:
        lines.append(f"{'ok  ' if c['ok'] else 'MISS'} {c['name']}: {c['value']:.3f} (goal {c['goal']}) {c['detail']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The chart
# ---------------------------------------------------------------------------------------

def chart(results, s):
    """Grouped bars of median req/s with min–max whiskers, one panel per upstream."""
    panels = s["upstreams"]
    targets = s["targets"]
    conns = s["conns"]
    pw, ph, top, left, gap = 460, 300, 76, 70, 40
    width = left + len(panels) * (pw + gap)
    per_row = max(1, (width - left) // 250)
    height = top + ph + 50 + 22 * ((len(targets) + per_row - 1) // per_row)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15" font-weight="bold">Requests per second, median of '
           f'{results["settings"]["rounds"]} alternated rounds (whiskers: min–max)</text>',
           f'<text x="{left}" y="40" fill="#555">{results["machine"]["nproc"]} CPUs shared by wrk, the '
           f'upstream and the proxy; loopback; {results["date"]}</text>']
    for pi, u in enumerate(panels):
        x0 = left + pi * (pw + gap)
        peak = max((st["rps_range"][1] or 0) for (uu, _, _), st in s["stats"].items() if uu == u) or 1
        scale = ph / (peak * 1.08)
        out.append(f'<text x="{x0 + pw / 2}" y="{top - 10}" text-anchor="middle" font-weight="bold">'
                   f'{UPSTREAMS.get(u, u)}</text>')
        step = nice_step(peak * 1.08)
        v = 0
        while v <= peak * 1.08:
            y = top + ph - v * scale
            out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{v / 1000:.0f}k</text>')
            v += step
        shown = [t for t in targets if any((u, t, c) in s["stats"] for c in conns)]
        gw = pw / len(conns)
        bw = (gw - 16) / len(shown)
        for ci, c in enumerate(conns):
            gx = x0 + ci * gw + 8
            out.append(f'<text x="{gx + (gw - 16) / 2:.1f}" y="{top + ph + 18}" text-anchor="middle">-c {c}</text>')
            for ti, t in enumerate(shown):
                st = s["stats"].get((u, t, c))
                if not st or st["rps"] is None:
                    continue
                x = gx + ti * bw
                h = st["rps"] * scale
                out.append(f'<rect x="{x:.1f}" y="{top + ph - h:.1f}" width="{bw - 1:.1f}" height="{h:.1f}" '
                           f'fill="{COLORS[t]}"><title>{LABELS[t]} -c {c}: {st["rps"]:,.0f} req/s</title></rect>')
                lo, hi = st["rps_range"]
                if st["n"] > 1:
                    cx = x + (bw - 1) / 2
                    out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{top + ph - hi * scale:.1f}" '
                               f'y2="{top + ph - lo * scale:.1f}" stroke="#333"/>')
        out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{top + ph}" y2="{top + ph}" stroke="#333"/>')
    ly = top + ph + 40
    for ti, t in enumerate(targets):
        x = left + (ti % per_row) * 250
        y = ly + (ti // per_row) * 22
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{COLORS[t]}"/>')
        out.append(f'<text x="{x + 18}" y="{y}">{LABELS[t]}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def nice_step(span):
    raw = span / 5
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


# ---------------------------------------------------------------------------------------
# BENCHMARKS.md
# ---------------------------------------------------------------------------------------

def markdown(results, s):
    m = results["machine"]
    st = results["settings"]
    L = []
    a = L.append
    a("# Benchmarks: phasescope side by side with HAProxy and nginx\n")
    a("Every figure below comes from one run of `scripts/bench-proxies.sh`, which wrote this file "
      f"({results['date']}, {results['elapsed_s']} s). Re-run it to check them; numbers from "
      "another machine or another day are only comparable as ratios between the proxies of one run.\n")
    a("## The machine, and how to read the numbers\n")
    a(f"- {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}; "
      f"HAProxy {m['haproxy']}, nginx {m['nginx']}, wrk {m['wrk']}, Webdis {m['webdis']}, "
      f"Redis {m['redis']}, rustc {m['rustc']}.")
    a(f"- **The load generator (wrk), the upstream and the proxy share these {m['nproc']} CPUs**, "
      "all on loopback. A proxy that uses less CPU leaves more to wrk and the upstream, so "
      "throughput here mixes the proxy's own speed with its frugality; CPU per request and "
      "instructions per request isolate the proxy.")
    a(f"- The machine is shared with other work: load average {' '.join(results['loadavg_start'])} "
      f"at the start, {' '.join(results['loadavg_end'])} at the end (the benchmark itself keeps "
      "about 2–3 runnable). Each round runs every target once, back to back, in an order rotated "
      "every round; a ratio is computed within each round, then the median over rounds is "
      "reported with its range. When the whole machine speeds up or slows down between rounds "
      "(it does: at `-c 1` the wake-up latency of idle CPUs dominates, and it changes with what "
      "else runs), req/s show a wide range for every target alike while the ratios stay put.")
    a(f"- {st['rounds']} rounds of {st['seconds']} s per target and concurrency; wrk with 1 thread at "
      f"`-c 1` and 2 threads otherwise. Each proxy runs {st['proxy_threads']} worker threads "
      "(HAProxy `nbthread`, nginx `worker_processes`, phasescope `PHASESCOPE_WORKERS`).")
    a("- CPU per request: the proxy's utime + stime from `/proc/PID/stat` (all its processes) "
      "over the run, divided by the requests wrk completed.\n")

    a("## Targets\n")
    a("| target | measured | goal | met |")
    a("|---|---|---|---|")
    for c in s["checks"]:
        a(f"| {c['name']} | {show(c)} | {c['goal']} | {'yes' if c['ok'] else '**no**'} |")
    a("")

    for u in s["upstreams"]:
        a(f"## Throughput in front of the {UPSTREAMS[u]}\n")
        a("Requests per second, median (± half the min–max range, as % of the median); "
          "the proxy's CPU per request in µs; the ratio to direct and to HAProxy `mode http`, "
          "medians of per-round ratios.\n")
        a("| target | " + " | ".join(f"req/s -c {c}" for c in s["conns"]) + " | "
          + " | ".join(f"CPU µs/req -c {c}" for c in s["conns"]) + " | ÷ direct -c 50 | ÷ HAProxy http -c 50 | ÷ HAProxy http -c 200 |")
        a("|---|" + "---|" * (2 * len(s["conns"]) + 3))
        for t in s["targets"]:
            if (u, t, s["conns"][0]) not in s["stats"]:
                continue
            cells = [rps_cell(s["stats"].get((u, t, c))) for c in s["conns"]]
            cells += [f(s["stats"].get((u, t, c), {}).get("cpu"), 2) for c in s["conns"]]
            for ref, c in (("direct", 50), ("haproxy-http", 50), ("haproxy-http", 200)):
                cells.append(f(s["ratios"].get((u, t, ref, c, "rps"), {}).get("median"), 2))
            errors = sum(s["stats"].get((u, t, c), {}).get("errors", 0) for c in s["conns"])
            name = LABELS[t] + (f" ({errors} errors)" if errors else "")
            a(f"| {name} | " + " | ".join(cells) + " |")
        a("")
        a("Latency at `-c 1` (wrk `--latency`), µs: median over rounds, and what the proxy adds "
          "over direct (per-round differences). The p99 at `-c 1` is set by the shared machine's "
          "scheduling (a millisecond or more, direct included), so its differences of a few "
          "hundred µs either way are noise; the p50 is the figure to compare.\n")
        a("| target | p50 | p99 | added p50 | added p99 |")
        a("|---|---|---|---|---|")
        for t in s["targets"]:
            stt = s["stats"].get((u, t, 1))
            if not stt:
                continue
            lat = s["latency"].get((u, t))
            a(f"| {LABELS[t]} | {us(stt['p50_ms'])} | {us(stt['p99_ms'])} | "
              f"{f(lat['p50']['median']) if lat else '–'} | {f(lat['p99']['median']) if lat else '–'} |")
        a("")
    if s["upstreams"]:
        a("![Requests per second](benchmarks.svg)\n")

    if results.get("memory"):
        a("## Memory per idle keep-alive connection\n")
        n = results["memory"][0]["connections"]
        a(f"`bench-client --hold {n}` opens {n:,} connections through the proxy, makes one request on "
          "each, and holds them idle; the proxy's resident memory (VmRSS, all its processes) is read "
          "before and 3 s after, and the difference divided by the connections. The upstream side of "
          "each connection (a proxy opens one per client) is included; kernel socket memory is not "
          "(it is not in any process's RSS). "
          + ("" if n >= 10000 else f"The count is what `ulimit -n` ({st['nofile']}) allows: a proxy "
             "needs two descriptors per connection.") + "\n")
        a("| proxy | RSS before (KiB) | RSS with idle connections (KiB) | bytes per connection |")
        a("|---|---|---|---|")
        for mm in results["memory"]:
            a(f"| {LABELS[mm['target']]} | {mm['rss_before_kib']:,} | {mm['rss_after_kib']:,} | "
              f"{mm['bytes_per_connection']:,.0f} |")
        a("")
    if results.get("memory_burst"):
        n = results["memory_burst"][0]["connections"]
        a(f"After a burst: `bench-client --burst {n}` opens {n:,} connections through a fresh proxy in "
          "front of an upstream that holds every answer 1 s (`fixed-upstream --delay-ms 1000`), sends "
          "one request on each as fast as it can, so that all are in flight at once, reads every "
          "answer and holds the connections idle; RSS before, 0.5 s into the wait, and 5 s after the "
          "last answer.\n")
        a("| proxy | RSS before (KiB) | in flight (KiB) | 5 s after (KiB) | bytes per idle connection |")
        a("|---|---|---|---|---|")
        for mm in results["memory_burst"]:
            a(f"| {LABELS[mm['target']]} | {mm['rss_before_kib']:,} | {mm['rss_in_flight_kib']:,} | "
              f"{mm['rss_after_kib']:,} | {mm['bytes_per_connection']:,.0f} |")
        a("")

    if results.get("instructions"):
        a("## Instructions per proxied request\n")
        req = results["instructions"][0]["requests"]
        a(f"Valgrind's callgrind counts the instructions a proxy executes (user space only: system "
          f"calls count as the instructions that issue them). `bench-client --sequential` makes "
          f"500 requests to warm up, `callgrind_control --zero`, then {req:,} requests one after "
          "another on one keep-alive connection, then `callgrind_control --dump`; the count is "
          "divided by the requests. This figure does not depend on the machine's load. For "
          "phasescope only its worker threads count (`--separate-threads=yes`): its other threads "
          "do periodic work that is no request's (the upstream watcher reads `/proc` once a "
          "second), which, landing inside the window or not, moved the figure by thousands.\n")
        a("| proxy | instructions per request |")
        a("|---|---|")
        for i in results["instructions"]:
            a(f"| {LABELS[i['target']]} | {i['total']:,} |")
        a("")
        ps = next((i for i in results["instructions"] if i["target"] == "phasescope"), None)
        if ps:
            a("phasescope's share, by the functions each part is made of (`scripts/callgrind_split.py`):\n")
            a("| part | instructions per request | what it is |")
            a("|---|---|---|")
            what = {
                "relay": "the connection task's own code, tokio's scheduler, I/O driver and timers, "
                         "system-call wrappers",
                "framing": "request and response heads (scan, httparse, framing checks), body framing, "
                           "route resolution",
                "timeline": "clock reads and the conversion of instants to phases",
                "recording": "handing the exchange to the recorder: counters, histogram buckets, "
                             "HDR histograms; and resolving the route label (done with "
                             "`--no-metrics` too)",
            }
            for k in ("relay", "framing", "timeline", "recording"):
                a(f"| {k} | {ps[k]:,} | {what[k]} |")
            a("")

    a(metrics_cost(results, s))
    if results.get("sampler"):
        a(sampler_section(results["sampler"]))
    if results.get("chain"):
        a(chain_section(results["chain"]))
    a(LAYOUT_TEXT.format(layout=layout_figures(s)))
    a(CHANGES_TEXT)
    a(ROUND2_TEXT)
    a(round3_text(results))
    a(ROUND4_TEXT)
    a("## Reproducing\n")
    a("```sh")
    a(f"{results['command'].strip()}        # this run")
    a("scripts/bench-proxies.sh --quick     # ~2 minutes: one short round, 2,000 idle connections; prints only")
    a("scripts/bench-proxies.sh --help      # rounds, duration, parts to skip")
    a("```\n")
    a("The script installs what it needs from Debian when missing (wrk, haproxy, nginx, valgrind, "
      "redis-server, webdis), builds `phasescope` and the two helpers in `src/bin/` "
      "(`fixed-upstream`: a fixed 200 with a 13-byte body, keep-alive; `bench-client`), starts "
      "every server on free loopback ports with generated configs in a temporary directory, and "
      "writes this file, `docs/benchmarks.svg` and the raw results in `docs/benchmarks.json`. "
      "The commands it runs:\n")
    a("```sh")
    a("fixed-upstream --listen 127.0.0.1:UP --threads 1")
    a("phasescope run --listen 127.0.0.1:P --upstream 127.0.0.1:UP --admin 127.0.0.1:A [--no-metrics]")
    a("haproxy -db -f haproxy-{http,tcp}.cfg     # mode http | tcp, nbthread = CPUs")
    a("nginx -p DIR -c DIR/nginx.conf            # daemon off, worker_processes = CPUs, upstream keepalive")
    a(f"wrk -t1 -c1 -d{st['seconds']}s --latency http://127.0.0.1:PORT/PATH          # and -t2 -c50, -t2 -c200")
    a("bench-client --connect 127.0.0.1:PORT --hold N                 # memory")
    a("fixed-upstream --listen 127.0.0.1:SLOW --delay-ms 1000; bench-client --connect 127.0.0.1:PORT --burst N   # memory after a burst")
    a("valgrind --tool=callgrind phasescope run ...; bench-client --sequential K   # instructions")
    a("```\n")
    # The templates live with the driver; imported here, late, to keep the two files one-way.
    from proxy_configs import HAPROXY_CFG, NGINX_CFG
    a("The generated configurations (`{mode}` is `http` or `tcp`; ports, paths and limits are "
      "filled in per run; `maxconn` and `worker_connections` fit the idle-connection test):\n")
    a("```\n# haproxy-{mode}.cfg\n" + HAPROXY_CFG.strip() + "\n```\n")
    a("```\n# nginx.conf\n" + NGINX_CFG.replace("{{", "{").replace("}}", "}").strip() + "\n```\n")
    a("Criterion benches of the parts: `cargo bench --bench framing` (request head, response head, "
      "chunked body), `--bench resp` (RESP framing), `--bench recorder` (recording one exchange).\n")
    return "\n".join(L)


def metrics_cost(results, s):
    """What recording costs, from this run's CPU figures and the instruction split."""
    rows = []
    diffs = []
    budget = []
    nproc = results["machine"]["nproc"] or 1
    for u in s["upstreams"]:
        for c in (50, 200):
            on = s["stats"].get((u, "phasescope", c), {}).get("cpu")
            off = s["stats"].get((u, "phasescope-no-metrics", c), {}).get("cpu")
            thr = s["ratios"].get((u, "phasescope", "phasescope-no-metrics", c, "rps"), {})
            if on is None or off is None:
                continue
            diffs.append(on - off)
            rps = s["stats"].get((u, "phasescope", c), {}).get("rps")
            if rps:
                # Every CPU of the machine is busy at these concurrencies: this is what one
                # request costs in all (load generator, upstream, proxy, kernel).
                budget.append(nproc / rps * 1e6)
            rows.append(f"| {u}, -c {c} | {on:.2f} | {off:.2f} | {on - off:+.2f} | "
                        f"{f(thr.get('median'), 3)} ({rng(thr) if thr.get('n') else ''}) |")
    if not rows:
        return ""
    ps = next((i for i in results.get("instructions", []) if i["target"] == "phasescope"), None)
    lines = ["## What metrics cost\n",
             "The proxy's CPU per request with metrics and with `--no-metrics`, and the throughput "
             "ratio (medians of per-round ratios, with their range):\n",
             "| upstream | CPU µs/req, metrics | CPU µs/req, --no-metrics | difference | req/s ratio |",
             "|---|---|---|---|---|"] + rows + [""]
    if ps and budget:
        lo, hi = min(diffs), max(diffs)
        share_lo, share_hi = lo / max(budget) * 100, hi / min(budget) * 100
        lines.append(
            f"In instructions, recording is {ps['recording']:,} of {ps['total']:,} per request "
            "(route resolution included, which `--no-metrics` does too). With every CPU busy, a "
            f"request costs {min(budget):.0f}–{max(budget):.0f} µs of CPU in all here (wrk, "
            f"upstream, proxy, kernel: {nproc} CPUs ÷ req/s), so a recorder that costs "
            f"{lo:.2f}–{hi:.2f} µs more takes {share_lo:.1f}–{share_hi:.1f} % of the throughput; "
            "the 0.99 goal allows 1 %. Where the recorder's instructions go, by self cost: the "
            "per-phase bucket and sum updates (`TapMetrics::exchange`), the HDR histograms "
            "(`hdrhistogram::record_n_inner`, one per phase into the worker's own copy), and three shard locks per "
            "exchange (`bytes` twice, `exchange` once).\n")
    lines.append(sharing(results))
    return "\n".join(lines) + "\n"


TAIL_BEGIN = "<!-- tail -->"
TAIL_END = "<!-- /tail -->"


def tail_section_of(text):
    """The tail section (scripts/bench_tail.py's, measured on its own) of a BENCHMARKS.md,
    markers included, or None."""
    if TAIL_BEGIN not in text or TAIL_END not in text:
        return None
    return TAIL_BEGIN + text.split(TAIL_BEGIN, 1)[1].split(TAIL_END, 1)[0] + TAIL_END + "\n"


def replace_tail_section(text, section):
    """`text` (a BENCHMARKS.md) with its tail section replaced, or the section put before
    what metrics cost (or the reproducing notes) when it has none."""
    if TAIL_BEGIN in text and TAIL_END in text:
        head, rest = text.split(TAIL_BEGIN, 1)
        return head + section.rstrip("\n") + rest.split(TAIL_END, 1)[1]
    for anchor in ("## What metrics cost", "## Reproducing"):
        if anchor in text:
            head, tail = text.split(anchor, 1)
            return head + section + "\n" + anchor + tail
    return text.rstrip("\n") + "\n\n" + section


SAMPLER_BEGIN = "<!-- sampler: written by scripts/bench-proxies.sh --sampler-only -->"
SAMPLER_END = "<!-- /sampler -->"


def sampler_section(sm):
    """The upstream sampler's cost, from the `sampler` object of bench_proxies.run_sampler:
    without sampling, sampling the running function only, and sampling call stacks."""
    runs = sm["runs"]
    by = {}
    for r in runs:
        by.setdefault(r["round"], {})[r["target"]] = r
    modes = [(label, t) for label, t in (
        ("without sampling", "phasescope"),
        ("`--profile-upstream --stack-bytes 0` (running function only)", "phasescope-profile-leaf"),
        ("`--profile-upstream` (call stacks, up to 16 KiB per sample)", "phasescope-profile"))
        if any(r["target"] == t for r in runs)]

    def col(target, key):
        return [r[key] for r in runs if r["target"] == target and r.get(key) is not None]

    def cell(xs, digits=2):
        if not xs:
            return "-"
        return f"{med(xs):,.{digits}f} ({min(xs):,.{digits}f} to {max(xs):,.{digits}f})"

    def diffs(target, key):
        out = []
        for v in by.values():
            a, b = v.get("phasescope"), v.get(target)
            if a and b and a.get(key) is not None and b.get(key) is not None:
                out.append(b[key] - a[key])
        return out

    def ratio(target):
        return [v[target]["rps"] / v["phasescope"]["rps"] for v in by.values()
                if "phasescope" in v and target in v and v["phasescope"]["rps"]]

    keys = [("watcher_cpu_ms_per_s", 2), ("cpu_us_per_req", 2), ("upstream_cpu_us_per_req", 2)]
    machine = sm.get("machine", {})
    lines = [SAMPLER_BEGIN, "## The upstream sampler's cost\n",
             "phasescope in front of Webdis (Redis behind it, `GET` of one key) three ways: "
             "without sampling (the /proc accounting alone, which runs in all three), sampling "
             "the running function only (perf events at 997 Hz on every thread of Webdis, kernel "
             "callchains, symbolized and folded into components every second), and sampling call "
             "stacks (the same events with the user registers and up to 16 KiB of user stack "
             "per sample, cut to what the walks read after three collects, unwound with DWARF "
             "call frame information and drained every 10 ms). A fresh proxy for every run "
             "after a warm-up under load, one second, five with call stacks (so the figure is "
             "the steady cost, without the first symbol-table load, with the copy sized), "
             f"{sm['rounds']} rounds of {sm['seconds']} s at `wrk -c {sm['connections']}`, the "
             f"order reversed every other round. Measured {sm['date']} on a shared "
             f"{machine.get('nproc', '?')}-CPU machine (load average "
             f"{' '.join(sm['loadavg_start'])} at the start, {' '.join(sm['loadavg_end'])} at the "
             f"end: other work ran beside it), with `{sm['command'].strip()}`. Medians over the "
             "rounds, with their range; the differences are to the run without sampling in the "
             "same round:\n",
             "| | watcher threads, CPU ms/s | phasescope CPU µs/req | Webdis CPU µs/req | req/s |",
             "|---|---|---|---|---|"]
    for label, target in modes:
        lines.append(f"| {label} | " + " | ".join(cell(col(target, k), d) for k, d in keys)
                     + f" | {cell(col(target, 'rps'), 0)} |")
    for label, target in modes[1:]:
        lines.append(f"| difference, {label.split(' (')[0]} | "
                     + " | ".join(cell(diffs(target, k), d) for k, d in keys)
                     + f" | ratio {cell(ratio(target), 3)} |")
    lines.append("")
    for label, target in modes[1:]:
        watch = diffs(target, "watcher_cpu_ms_per_s")
        own = diffs(target, "cpu_us_per_req")
        ups = diffs(target, "upstream_cpu_us_per_req")
        rps = col(target, "rps")
        if not (watch and own and ups and rps):
            continue
        lines.append(
            f"{label}: the sampler's own work runs on the proxy's upstream-watcher threads, "
            "measured apart from the relay (their schedstat in /proc/PID/task): "
            f"**{med(watch):.1f} ms of CPU per second** more than the accounting alone, "
            f"{med(watch) / 10:.2f} % of one CPU (the goal: under 2 %), or "
            f"{med(watch) * 1e3 / med(rps):.2f} µs per request at {med(rps):,.0f} req/s. The whole "
            f"proxy used {med(own):.2f} µs more per request (per round {min(own):+.2f} to "
            f"{max(own):+.2f}), and Webdis {med(ups):.2f} µs more: the sampled threads pay the "
            "sampling interrupts, perf's bookkeeping at every context switch and, with call "
            "stacks, the kernel's copy of their stack into each sample.\n")
    lines.append(
        "The watcher figures follow the samples, taken only while Webdis's threads run, so they "
        "grow with the upstream's CPU use rather than with phasescope's traffic. The per-request "
        "figures move with the machine's load: on a shared machine read them as the order of "
        "magnitude of what sampling costs the whole path, the watcher figure as the sampler's "
        "own cost.\n")
    lines.append(SAMPLER_END)
    return "\n".join(lines) + "\n"


def replace_section(text, begin, end, section, anchors):
    """`text` (a BENCHMARKS.md) with the section between `begin` and `end` replaced by
    `section`, or, without one, `section` inserted before the first of `anchors` found
    (where `markdown` puts it)."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        return head + section.rstrip("\n") + tail
    for anchor in anchors:
        if anchor in text:
            head, tail = text.split(anchor, 1)
            return head + section + "\n" + anchor + tail
    return text.rstrip("\n") + "\n\n" + section


def replace_sampler_section(text, section):
    return replace_section(text, SAMPLER_BEGIN, SAMPLER_END, section,
                           ("## Runtime layout", "## Reproducing"))


def replace_chain_section(text, section):
    return replace_section(text, CHAIN_BEGIN, CHAIN_END, section,
                           ("## Runtime layout", "## Reproducing"))


# ---------------------------------------------------------------------------------------
# The full chain in front of Webdis
# ---------------------------------------------------------------------------------------

CHAIN_BEGIN = "<!-- chain: written by scripts/bench-proxies.sh --chain-only -->"
CHAIN_END = "<!-- /chain -->"
CHAIN_CHART = "benchmarks-chain.svg"
CHAIN_LABELS = {
    "direct": "direct (wrk → Webdis → Redis)",
    "haproxy-chain": "HAProxy (mode http before Webdis, mode tcp before Redis)",
    "phasescope-chain": "phasescope (HTTP tap, RESP tap, correlated)",
    "phasescope-chain-profile": "phasescope, `profile = true` on Webdis",
}
CHAIN_COLORS = {"direct": "#9e9e9e", "haproxy-chain": "#d73a49", "phasescope-chain": "#79b8ff",
                "phasescope-chain-profile": "#1f6feb"}


def chain_label(target, variants):
    if target in CHAIN_LABELS:
        return CHAIN_LABELS[target]
    v = variants.get(target, {})
    keys = ", ".join(f"{k} = {x}" for k, x in v.get("keys", {}).items())
    parts = [p for p in (keys, f"binary {v['bin']}" if v.get("bin") else "") if p]
    return "phasescope, `profile = true` on Webdis, " + "; ".join(parts)


def chain_figures(ch):
    """Per target: req/s, the share of direct and the ratio to phasescope without profiling
    (per round, then median and range), and each process's CPU per request."""
    runs = ch["runs"]
    by = {}
    for r in runs:
        by.setdefault(r["round"], {})[r["target"]] = r

    def per_round(target, ref):
        return [v[target]["rps"] / v[ref]["rps"] for v in by.values()
                if target in v and ref in v and v[ref]["rps"]]

    out = {}
    for t in ch["targets"]:
        col = lambda k: [r[k] for r in runs if r["target"] == t and r.get(k) is not None]  # noqa: E731
        out[t] = {
            "rps": col("rps"),
            "share": per_round(t, "direct") if t != "direct" else [],
            "vs_plain": per_round(t, "phasescope-chain") if t.startswith("phasescope-chain-profile") else [],
            "webdis": col("webdis_cpu_us_per_req"),
            "redis": col("redis_cpu_us_per_req"),
            "proxy": col("proxy_cpu_us_per_req"),
            "watcher": col("watcher_cpu_ms_per_s"),
            "errors": sum(r["errors"] for r in runs if r["target"] == t),
        }
    return out


def chain_section(ch):
    """The full chain in front of Webdis, from the `chain` object of bench_proxies.run_chain."""
    fig = chain_figures(ch)
    variants = ch.get("variants", {})
    machine = ch.get("machine", {})

    def cell(xs, digits=2):
        if not xs:
            return "–"
        if len(xs) == 1:
            return f"{xs[0]:,.{digits}f}"
        return f"{med(xs):,.{digits}f} ({min(xs):,.{digits}f}–{max(xs):,.{digits}f})"

    lines = [CHAIN_BEGIN, "## The full chain in front of Webdis\n",
             "The deployment of [webdis.md](webdis.md): wrk → phasescope's HTTP tap → Webdis → "
             "phasescope's RESP tap → Redis, one phasescope process with the two taps correlated "
             "(`[[correlate]] kind = \"webdis\"`) and reading Webdis from /proc (`[tap.process]`, "
             "found by `auto`); with `profile = true` on the HTTP tap it also samples Webdis's call "
             "stacks. Beside it, HAProxy in the same two places (one process: mode http in front of "
             "Webdis, mode tcp in front of Redis, Webdis reaching Redis through it) and direct "
             "(wrk → Webdis → Redis). Every run starts fresh processes (Redis, the proxy, then "
             "Webdis, which opens its Redis pool through the proxy at start), warms up with a "
             "2 s wrk run and, when sampling, waits until the sampler runs and loads it 6 s more "
             "(its first collect loads the symbol tables, the next ones size the copy of the "
             "stack); then, 1.2 s later, "
             f"`wrk -t2 -c{ch['connections']} -d{ch['seconds']}s` on `GET /GET/bench`. "
             f"{ch['rounds']} rounds, the variants in order and in reverse order every other "
             "round; a ratio is taken within each round, then its median and range over rounds "
             "are given. Webdis runs 2 threads, each proxy 2 (`PHASESCOPE_WORKERS`, `nbthread`). "
             f"Measured {ch['date']} on a shared {machine.get('nproc', '?')}-CPU machine, wrk, "
             "Webdis, Redis and the proxy all on it (load average "
             f"{' '.join(ch['loadavg_start'])} at the start, {' '.join(ch['loadavg_end'])} at "
             f"the end), with:\n",
             "```sh", ch["command"].strip(), "```\n",
             "CPU per request is each process's utime + stime (/proc/PID/stat) over the run "
             "divided by the requests wrk completed; Webdis's includes the sampling interrupts "
             "and the kernel's copies of its stack, which run on its threads. Medians over the "
             "rounds (range):\n",
             "| variant | req/s | ÷ direct | ÷ phasescope without profiling | Webdis CPU µs/req "
             "| Redis CPU µs/req | proxy CPU µs/req | watcher ms/s |",
             "|---|---|---|---|---|---|---|---|"]
    for t in ch["targets"]:
        f = fig[t]
        lines.append(f"| {chain_label(t, variants)} | {cell(f['rps'], 0)} | {cell(f['share'], 3)} | "
                     f"{cell(f['vs_plain'], 3)} | {cell(f['webdis'])} | {cell(f['redis'])} | "
                     f"{cell(f['proxy'])} | {cell(f['watcher'])} |")
    lines.append("")
    errors = {t: fig[t]["errors"] for t in ch["targets"] if fig[t]["errors"]}
    if errors:
        lines.append("wrk counted errors: " + ", ".join(f"{t} {n}" for t, n in errors.items()) + ".\n")
    prof = fig.get("phasescope-chain-profile")
    plain = fig.get("phasescope-chain")
    if prof and plain and prof["vs_plain"]:
        v = prof["vs_plain"]
        lines.append(
            f"What profiling costs the chain: **{(1 - med(v)) * 100:.1f} % of its throughput** "
            f"(per round {(1 - max(v)) * 100:+.1f} to {(1 - min(v)) * 100:+.1f} %; the goal is "
            f"≤ 2 %), and Webdis {med(prof['webdis']) - med(plain['webdis']):+.2f} µs of CPU "
            "per request (medians).\n")
    lines.append(f"![The full chain's throughput, as a share of direct]({CHAIN_CHART})\n")
    lines.append(CHAIN_END)
    return "\n".join(lines) + "\n"


def chain_chart(ch):
    """Horizontal bars: each variant's share of direct throughput, median with its range."""
    fig = chain_figures(ch)
    variants = ch.get("variants", {})
    shown = [t for t in ch["targets"] if t != "direct" and fig[t]["share"]]
    left, width, bar, top = 540, 980, 26, 60
    plot = width - left - 40
    height = top + len(shown) * (bar + 12) + 40
    peak = max([max(fig[t]["share"]) for t in shown] + [1.0]) * 1.05
    scale = plot / peak
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="22" font-size="15" font-weight="bold">The full chain in front of Webdis: '
           f'throughput ÷ direct, median of {ch["rounds"]} alternated rounds (whiskers: range)</text>',
           f'<text x="10" y="40" fill="#555">wrk -c{ch["connections"]}, {ch["seconds"]} s per run; '
           f'{ch.get("machine", {}).get("nproc", "?")} CPUs shared by all; {ch["date"]}; load average '
           f'{" ".join(ch["loadavg_start"])}</text>']
    for x in [i / 10 for i in range(0, int(peak * 10) + 1)]:
        px = left + x * scale
        out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top - 6}" y2="{height - 34}" stroke="#eee"/>')
        out.append(f'<text x="{px:.1f}" y="{height - 20}" text-anchor="middle" fill="#555">{x:.1f}</text>')
    for i, t in enumerate(shown):
        y = top + i * (bar + 12)
        xs = fig[t]["share"]
        color = CHAIN_COLORS.get(t, "#0d47a1")
        label = chain_label(t, variants).replace("`", "")
        if len(label) > 88:
            label = "…" + label[-87:]
        out.append(f'<text x="{left - 8}" y="{y + bar / 2 + 4}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{med(xs) * scale:.1f}" height="{bar}" fill="{color}">'
                   f'<title>{label}: {med(xs):.3f} of direct</title></rect>')
        if len(xs) > 1:
            cy = y + bar / 2
            out.append(f'<line x1="{left + min(xs) * scale:.1f}" x2="{left + max(xs) * scale:.1f}" '
                       f'y1="{cy}" y2="{cy}" stroke="#333"/>')
        out.append(f'<text x="{left + 4}" y="{y + bar / 2 + 4}" fill="#fff">{med(xs):.3f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def sharing(results):
    """The recorder's cost with one worker thread and with several, from `recorder_runs`."""
    runs = results.get("recorder_runs") or []
    if not runs:
        return ""
    cpu = {}
    rounds = {}
    for r in runs:
        cpu.setdefault(r["target"], []).append(r.get("cpu_us_per_req"))
        rounds.setdefault(r["round"], {})[r["target"]] = r.get("cpu_us_per_req")

    def diff(on, off):
        vals = [d[on] - d[off] for d in rounds.values() if d.get(on) is not None and d.get(off) is not None]
        return med(vals), spread(vals)

    many, many_rng = diff("phasescope", "phasescope-no-metrics")
    one, one_rng = diff("phasescope-1w", "phasescope-1w-no-metrics")
    if many is None or one is None:
        return ""
    workers = results["settings"]["proxy_threads"]
    secs = results["settings"].get("recorder_seconds", 2)
    out = [f"The same difference with one worker thread and with {workers}, in front of the fixed "
           f"upstream at `-c 50` ({len(rounds)} alternated rounds of {secs} s; CPU µs per request, "
           "medians):\n",
           "| workers | metrics | --no-metrics | difference (per round: median, range) |",
           "|---|---|---|---|",
           f"| {workers} | {f(med(cpu['phasescope']), 2)} | {f(med(cpu['phasescope-no-metrics']), 2)} | "
           f"{many:+.2f} ({many_rng[0]:+.2f} to {many_rng[1]:+.2f}) |",
           f"| 1 | {f(med(cpu['phasescope-1w']), 2)} | {f(med(cpu['phasescope-1w-no-metrics']), 2)} | "
           f"{one:+.2f} ({one_rng[0]:+.2f} to {one_rng[1]:+.2f}) |",
           ""]
    suspect = ("Every worker records into its own shard, HDR copies included (merged when a "
               "snapshot is taken), so no recorder state is written by two cores; what two "
               "cores still share is the machine's caches and memory bandwidth. The byte counts "
               "travel with the exchange record, under its one shard lock "
               "(`Recorder::exchange_relayed`).")
    if one_rng[1] < many_rng[0]:
        out.append("With one worker, recording costs less in every round than with several: much "
                   "of its CPU is not its instructions but cache lines moving between cores. "
                   + suspect + "\n")
    elif many_rng[1] < one_rng[0]:
        out.append("Recording costs no less with one worker than with several: its cost is its "
                   "instructions, not sharing between cores.\n")
    else:
        width = max(many_rng[1] - many_rng[0], one_rng[1] - one_rng[0])
        out.append(f"The per-round differences overlap: they spread over up to {width:.2f} µs "
                   "from round to round in this run, more than the effect, so this run does not "
                   "tell whether sharing between cores adds to the recorder's cost. "
                   + suspect + "\n")
    return "\n".join(out)


def round3_text(results):
    """Round 3's hand-measured text, with this run's instruction count where it has one."""
    ps = next((i for i in results.get("instructions", []) if i["target"] == "phasescope"), None)
    now = f"{ps['total']:,} (this run)" if ps else "10,791"
    return ROUND3_TEXT.replace("{instructions_now}", now)


def layout_figures(s):
    rows = []
    for c in s["conns"]:
        ws = s["stats"].get(("fixed", "phasescope-work-stealing", c))
        pc = s["stats"].get(("fixed", "phasescope", c))
        if not ws or not pc:
            continue
        ratio = s["ratios"].get(("fixed", "phasescope", "phasescope-work-stealing", c, "rps"), {})
        cpu = s["ratios"].get(("fixed", "phasescope", "phasescope-work-stealing", c, "cpu"), {})
        rows.append(f"| -c {c} | {pc['rps']:,.0f} | {f(pc['cpu'], 2)} | {ws['rps']:,.0f} | "
                    f"{f(ws['cpu'], 2)} | {f(ratio.get('median'), 2)} | {f(cpu.get('median'), 2)} |")
    if not rows:
        return "(This run left the layout comparison out.)\n"
    return ("| concurrency | per-core req/s | per-core CPU µs/req | work-stealing req/s | "
            "work-stealing CPU µs/req | req/s per-core ÷ work-stealing | CPU per-core ÷ work-stealing |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


LAYOUT_TEXT = """## Runtime layout: one runtime per core

phasescope runs each connection on one of N single-threaded tokio runtimes (N = CPUs, or
`PHASESCOPE_WORKERS`), one per thread. The listeners, the admin server and signal handling
run on the main thread, which hands each accepted connection to the worker with the fewest
open connections; the connection then stays on that worker. `PHASESCOPE_RUNTIME=work-stealing`
runs the previous layout, one tokio multi-thread runtime, for comparison; this run measured
both in front of the fixed upstream:

{layout}
Why per-core wins here:

- With work stealing, the thread that polls epoll is often not the one that runs the woken
  task: each readiness event costs an eventfd write or futex wake of another thread and moves
  the connection's state between caches. `strace` of one keep-alive request showed the epoll
  thread and the task thread handing every event over.
- The multi-thread scheduler keeps per-poll statistics (an exponential moving average with
  `pow`, two clock reads) that came to ~800 instructions per request in callgrind.
- Nothing is lost in balance for this workload: connections are long-lived and alike, and the
  least-loaded hand-off spreads them evenly. A connection that turns expensive (a large
  streamed body) cannot move to an idle core, which work stealing would allow; with one
  worker per core and no other work on them, there is rarely an idle core to move to.

Why not `SO_REUSEPORT` listeners, one per worker: the kernel spreads connections by a hash
of their addresses, so a few hundred connections land unevenly, and a second process could
bind the same port by mistake and silently take half the clients. One listener and an
explicit hand-off cost one `epoll_ctl` per connection, not per request.
"""

CHANGES_TEXT = """## What made phasescope fast (and what each change was worth)

Measured with callgrind (instructions per proxied request, keep-alive, fixed upstream) and
`perf stat -e raw_syscalls:sys_enter` (system calls per request), before → after:

| change | effect |
|---|---|
| httparse into an uninitialized header array instead of zeroing 128 slots (4 KiB) per parse, request and response | about −2,800 instructions |
| readiness polled directly (`poll_read_ready`/`poll_write_ready` in one `poll_fn`) instead of a `select!` over `readable()`/`writable()` futures, which added and removed a waiter under a lock on every branch of every wait | about −3,000 instructions |
| a short read clears read readiness, as tokio's own `poll_read` does (`try_read` does not): the next wait goes to epoll instead of a `recv` that returns `EAGAIN`, once per side per request | 6.2 → 4.2 system calls at `-c 50` (HAProxy http: 4.5) |
| one timer per connection, moved only earlier and armed from the ticks the timeline already takes, instead of a new `sleep_until` and two `Instant::now()` per wait | about −1,500 instructions; no timer-wheel insert and removal per request |
| the shutdown signal registered once per connection and checked with a load, instead of a new `changed()` waiter (a lock shared by all connections) per idle wait, and a read lock on the value per request | about −700 instructions; two cache lines no longer written by every core |
| one current-thread runtime per core instead of work stealing (see above) | about −1,000 instructions; no cross-thread wake-ups |
| buffers go back to a per-thread pool as soon as a connection is idle and empty (they used to go back to the allocator after 1 s, which kept them resident anyway); rare paths (connect, proxy-made answers, tunnels, the RESP protocol) boxed out of the connection task's state, which a test keeps under 2 KiB | 19.7 KB → 3.2 KB per idle connection |

The whole request cost 21,700 instructions and 6.2 system calls before these changes (same
measurement, same machine).
"""

# Measured by hand on 2026-12-01 (the commands are in the text); kept here so that a run of
# the script keeps them in docs/BENCHMARKS.md.
ROUND2_TEXT = """## Round 2: per-worker HDR copies, memory after a burst

Measured 2026-12-01 on the same machine while other builds and test suites ran on it
(load average 8–11): throughput and CPU time spread by ±20 % between alternated rounds
then (`scripts/bench-proxies.sh --only fixed --skip throughput --skip memory --skip
callgrind --no-write` gave metrics ÷ `--no-metrics` ratios of 0.81–1.19 over 4 rounds),
so only figures that do not depend on the load are given here.

**Recording.** Each worker now keeps its own HDR copy of every series in its shard,
recorded in place; a snapshot adds the copies up, and a reset subtracts a baseline
instead of emptying them (docs/metrics.md). Before, each series had one HDR histogram
shared by every worker, fed 32 values at a time under its lock, so its counts moved
between cores. Instructions per recorded exchange of nine phases, one thread
(`valgrind --tool=callgrind target/release/deps/recorder-… --bench --profile-time 2
record_exchange/1_thread`, inclusive cost of `TapMetrics::exchange` ÷ its calls):

| recorder | instructions per exchange |
|---|---|
| one shared HDR histogram per series, 32-value batches (before) | 1,520 |
| an HDR copy per worker, recorded in place (after) | 1,400 |

In the whole proxied request (`scripts/bench-proxies.sh --only fixed --skip throughput
--skip memory --skip recorder --skip layout --no-write`, callgrind, 5,000 keep-alive
requests): 12,634 → 12,472 instructions, recording 2,125 → 1,967 (relay 6,873, framing
3,240, timeline 392; HAProxy mode tcp 6,231, mode http 27,177 in the same run).
The instructions are not the point (40 % of what is left is `hdrhistogram::record_n_inner`,
about 60 per phase); the cache lines are: no recorder state is written by two cores any
more. `cargo bench --bench recorder` at this load did not separate the two (1 thread
183–284 ns, 2 threads 453–1,246 ns per exchange for either version).

**Native histograms** cost nothing per exchange: they are derived from the HDR copies
when a scraper asks for protobuf.

**Memory after a burst.** `bench-client --burst 5000` through a proxy (2 workers) in front
of `fixed-upstream --delay-ms 1000`: 5,000 connections, one request on each sent at
once, every answer held 1 s, then the connections stay idle. RSS of the proxy, KiB, and
the bytes per connection it keeps 5 s after the last answer; "one by one" is `bench-client
--hold 5000` in front of an upstream that answers at once, with the same binary:

| relay buffers | before | in flight | 5 s after | per connection after the burst | one by one |
|---|---|---|---|---|---|
| glibc heap, per-thread pool of 256 (before) | 7,172 | 63,924 | 64,688 | 11,779 B | 3,363 B |
| glibc heap, pool trimmed every second + `malloc_trim(0)` | 7,248 | 63,960 | 43,824 | 7,491 B | 3,363 B |
| mimalloc as global allocator, pool trimmed every second | 13,532 | 71,128 | 34,136 | 4,220 B | 3,779 B |
| **mapped pages of their own (`mmap`), pool trimmed every second (kept)** | 7,272 | 44,084 | 24,836 | 3,597 B | 3,356 B |

From the heap, the burst's 8 KiB buffers lie between the long-lived state of the
connections opened during it, and freeing them leaves holes the allocator keeps
resident; `malloc_trim` returns only the whole pages inside them. mimalloc segregates
sizes and returns memory on its own, but starts 6 MB higher and costs more per connection
opened one by one. Buffers mapped as two pages of their own go back to the system whole
when unmapped, and are resident only once touched (a request that fits in one page costs
one, hence the lower in-flight figure). The pool keeps up to 1,024 buffers per worker, so
a steady load does not map and unmap per request; each second, the buffers that went
unused for the whole second are unmapped. The CPU of the burst (proxy utime + stime over
the measurement) was 0.36–0.39 s for each variant except mimalloc (0.30 s), within this
load's noise.

What is left after a burst is the idle connection's own state, 3.4–3.6 KB: the task
(under 2 KiB, `relay::listener` test), its two sockets' registrations with the runtime,
its timer entry, and the allocator's overhead; round 3 below brings that under 2 KiB.
"""

# Measured by hand on 2026-12-01 (the commands are in the text); kept here so that a run of
# the script keeps them in docs/BENCHMARKS.md. `{instructions_now}` is this run's figure.
ROUND3_TEXT = """## Round 3: a blind relay's cost

**Instructions per request**, each change measured alone with callgrind as above (5,000
sequential keep-alive requests through one worker in front of `fixed-upstream`):

| change | before → after |
|---|---|
| deadlines kept as clock ticks (`clock::after`), converted to tokio's clock only when the connection's timer really moves, instead of an `Instant` computed and compared on every wait | 13,426 → 12,939 |
| a read is followed at once by the write it feeds (`try_write` answers from the readiness flag, with no system call, when the socket is not writable), instead of a turn of the loop to learn that the other socket is writable; the stale-upstream check before the first write is a read answered from the same flag | 12,939 → 12,517 |
| the idle wait runs from the previous response's last write, and a begun request reads no clock: two clock reads fewer | 12,517 → 12,483 |
| an exchange's byte counts travel with its record, under its one shard lock, instead of two more recorder calls | recording 1,576 → 1,441 |
| each thread remembers its last (method, target) and route per route table (a table's answer for a key never changes) | route resolution 487 → 169 |
| a head's end and its bare LFs found in one pass, 16 bytes at a time with SSE2 (8 elsewhere), instead of two `memmem` searches and a `memchr` per line | head scans 512 → 202 |
| framing field names compared 8 bytes at a time | `FramingFields::read` 345 → 231 |
| each worker's HDR copy is a bare counts array in hdrhistogram's layout, made a `Histogram` only when a scrape or snapshot reads it; the classic bucket comes from a table indexed by the HDR bucket | recording 1,441 → 743 |
| an exchange in flight runs in a pooled slot (below), so that idle connections hold none of its state | + 78 |
| **all of round 3** | **13,426 → {instructions_now}** |

Where the rest goes, by self cost: the runtime takes about 3,000. Each request is two
turns of tokio's loop (one waiting for the request, one for the response), and each turn
reads the clock several times (the time driver's `Instant::now` and `duration_since`, the
worker's busy-time metrics, which tokio keeps unconditionally), walks the timer wheel
(`next_expiration`, `process_at_time`) and wakes the task; each readiness poll that finds
nothing (`Registration::poll_ready`) registers the waker under a lock. httparse takes
about 1,200 (its SIMD code is chosen at run time, once per header value). HAProxy `mode
tcp` parses nothing and runs its own event loop.

**CPU per request, and why it stays above HAProxy `mode tcp`.** At `-c 50` the kernel's
TCP work is most of a relay's CPU. `perf record -g` of phasescope's process at `-c 50`
(wrk, fixed upstream, 2 workers) put 72 % of its samples in the kernel, in the socket
calls that any relay makes per request: `perf stat -e raw_syscalls:sys_enter` counted
4.3 (HAProxy `mode tcp`: 4.9) system calls per request (one `recv` and one `send` on each side, and an
`epoll_wait` shared by the requests of one turn). Utime and stime from `/proc/PID/stat`
over 3 s wrk runs, the three targets alternated in each of four rounds, µs per request:

| target | user | system | total | requests/s |
|---|---|---|---|---|
| phasescope before round 3 (commit 82284f4) | 4.5–5.4 | 12.0–13.1 | 16.5–18.5 | 53,900–60,200 |
| phasescope after round 3 | 4.0–4.6 | 10.9–12.6 | 15.2–16.9 | 53,300–67,500 |
| HAProxy `mode tcp` | 2.6–2.9 | 11.0–12.1 | 13.9–14.7 | 63,500–69,700 |

Round 3 cut the user part by about a tenth, and the system part followed (fewer turns
of the loop, so fewer wake-ups); the kernel part is otherwise the same calls HAProxy
makes, so 0.9 × HAProxy's total would need phasescope's user time to be about half of
HAProxy's, which parses nothing.

### Where an idle connection's bytes go

Measured by hand (`bench-client --hold 5000` and `--hold 9000` through `phasescope run` with
2 workers in front of `fixed-upstream`, VmRSS 3 s after, as `scripts/bench_proxies.py`
does; the heap by `valgrind --tool=massif` with a detailed snapshot while 1,000 connections
are held idle; the futures' layouts by `-Zprint-type-sizes`):

| part | before | task slot, glibc | task slot, jemalloc (kept) |
|---|---|---|---|
| task cell: tokio's header and trailer and the task's future, one allocation aligned to 128 B | 2,432 B (future 2,256 B) | 1,024 B (future 904 B) | 1,024 B |
| the two sockets' registrations (tokio `ScheduledIo`, aligned to 128 B, 256 B each) | 512 B | 512 B | 512 B |
| the timer (`Box<Sleep>`) | 112 B | 112 B | 112 B |
| the rest: allocator headers and alignment slack, the metrics' first use (720 KiB) spread over the connections | ≈ 550 B | ≈ 500 B | ≈ 150–220 B |
| **RSS per idle connection, 5,000 / 9,000 connections** | **3,612 / 3,542 B** | **2,205 / 2,142 B** | **1,879 / 1,791 B** |
| RSS before any connection | 7.7–8.7 MB | 7.6–8.0 MB | 9.1–9.7 MB |

The future was 2,256 B because a task is as large as the largest state any of its awaits
needs, and it holds that for the life of the connection: the relay's future (560 B:
`Sides` 192, the `Relay` references, the wait's locals) with the exchange's locals
(`Exchange` 96, `RequestHead` 56, `BodyFramer` 16) made the exchange loop 776 B, while its
idle wait (`await_head`) needs 88. And an `async fn` keeps a second copy of every argument
it takes by value: `HttpConnection::serve(self)` held the connection (408 B) twice, the
listener's `serve` its stream, address, context and shutdown receiver twice, and the
worker's wrapper held the `serve` closure (72 B) and the registration `Result` (32 B) for
the life of the task. Now an exchange in flight runs as a future of its own in a pooled,
page-sized slot (`src/relay/slot.rs`: taken when a head is complete, given back when the
exchange is over, per-worker pool, unmapped once unused for a second like the buffers),
the connection is served by reference, and the listener's task is an `async move` block
over the connection built before it runs. Building the connection on the accepting
thread instead of the worker (so that the wrapper held nothing) measured 3,155 B: what the
socket registration and the timer allocate then lands in another allocator arena.

**The allocator.** glibc's `memalign` serves tokio's 128-byte-aligned cells and
registrations by cutting an aligned chunk out of a larger one, and the fragment left in
front is rarely reused: ≈ 350 B per connection. jemalloc's size classes of 256 and
1,024 B are aligned to themselves, so they cost no slack; it starts 1.3 MB higher (its
arenas and thread caches), which 700 idle connections pay back. mimalloc, tried for the
burst in round 2, cost more per connection opened one by one than glibc. No request
allocates (buffers and exchange slots come from per-worker pools), so the allocator costs
no instructions per request either way (callgrind 13,352 with glibc, 13,430 with the slot
and jemalloc, the slot's 78 included). The tables above are with jemalloc
(`tikv-jemallocator`, the maintained binding that TiKV and rustc's own builds use).
"""


def main():
    path = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else path.parent
    results = json.loads(path.read_text())
    # JSON turns the tuple keys' parts into lists; summarize() rebuilds everything.
    s = summarize(results)
    print(table(results, s))
    (out / "benchmarks.svg").write_text(chart(results, s))
    (out / "BENCHMARKS.md").write_text(markdown(results, s))
    if results.get("chain"):
        (out / CHAIN_CHART).write_text(chain_chart(results["chain"]))


if __name__ == "__main__":
    main()


ROUND4_TEXT = """## Round 4: the timers off the workers, the tail, what sampling costs

**Instructions per request**, callgrind as above but by hand and with 2,000 requests:
`fixed-upstream --listen 127.0.0.1:UP`; `PHASESCOPE_WORKERS=2 valgrind --tool=callgrind
--separate-threads=yes phasescope run --listen 127.0.0.1:P --upstream 127.0.0.1:UP`;
`bench-client --connect 127.0.0.1:P --sequential 500`; `callgrind_control --zero`; the
same with 2,000; `callgrind_control --dump`; then `scripts/callgrind_split.py --workers
callgrind.out.1-0* 2000`:

| change | before → after |
|---|---|
| the round's start (the house's changes of the previous rounds included) | 11,303 |
| the timers live on a thread of their own (`relay::timer`, the time keeper) and the workers' runtimes have I/O only: a runtime with a timer reads the clock twice and walks its wheel at every park, timer due or not, and a worker parks twice a request | 11,303 → 10,188 |
| an armed timer is polled once for the task's waker, then only asked whether it fired (an atomic load), instead of a waker registration and a budget check at every wait | 10,188 → 9,963 |
| the snapshot, report and bench restructuring (no change on the data path) | 9,966 → 9,944 |
| **all of round 4** | **11,303 → 9,944** |

The goal of 9,000 is missed by about 950. What is left, by self cost per request: the
head parses 2,863 (the response's 1,590 with httparse's 810 and the framing fields' 251;
the request's 1,218 with its end scan's 202), recording 835 (the HDR copies and buckets
of about ten phases, 632; the phases from the instants, 296), and the runtime's loop:
two parks a request (the I/O driver's turn 172, its wake-ups 152, the scheduler about
450), six readiness polls (532), the system calls' cancellation points (186) and the
process driver's orphan reaping at every park (82, there because `bench --load` runs its
command through `tokio::process`, the crate's only use). None is large alone; the next
steps, each a few hundred at most: a head parser of our own that finds the end, checks
the fields and reads the framing ones in one pass (today the end scan, httparse and the
framing-field walk are three: 202 + about 1,000 + 251 on the two heads), no
`tokio::process` (82), fewer readiness polls per wait (a wait polls every socket it may
need; most find nothing).

**Throughput at `-c 200`**, `scripts/bench-proxies.sh --only fixed --skip memory --skip
callgrind --skip recorder --skip sampler --skip chain --skip layout --rounds 4
--no-write` (2026-12-05 11:27 UTC, load average 4 at the end, the benchmark's own):
phasescope 70,817 requests/s against HAProxy `mode tcp` 70,499, **1.010×** (per round
0.932 to 1.114; the previous round's run read 0.95×); at `-c 50` 1.059× (0.920 to 1.172),
CPU per request 13.58 µs against 14.36.

**The tail at one connection** (its section above, 20 rounds): a run's p99 at `-c 1` on
this 2-CPU virtual machine is mostly its own seconds' hiccups (the direct connection's p99
alone: 200 µs, 149 to 263 over the rounds). Against that, phasescope's p99 with metrics is
159 µs (151 to 180), the lowest of the proxies (HAProxy tcp 176, nginx 208, HAProxy http
240), and lies -12 µs (-44 to +13) from its `--no-metrics` figure of 172 µs: at most
1.08× it, so the goal (within 1.2× or +10 µs) is met. The previous round's 114 against
49 µs was one pair of runs and does not repeat; a first run of 10 rounds here, at a
noisier hour, gave +3 µs (-99 to +80). Without the upstream watcher the shift is -9 µs
(-36 to +19): no measurable part of the tail is the watcher's. No periodic task can
reach this p99 by construction: the workers run connection tasks and, once a second, the
buffer pools' trim; the slices' cut takes each worker's shard lock four times a second
for a few additions; a scrape copies a shard one route at a time; the timers fire on the
time keeper's thread. At about 12,000 requests a second, p99 is 120 requests a second,
and a task four times a second delays at most four of them: periodic work would show
at p99.9, which wrk does not print.

**What sampling costs the chain** (its section above, 6 alternated rounds on the quiet
machine): with `profile = true` on Webdis, 0.941 of the chain without profiling (per
round 0.826 to 1.035), Webdis +1.87 µs of CPU per request; 0.929 at 499 Hz and 0.943
at 199 Hz, the binary from before the stack copy was cut 0.921: all inside each other's
ranges. The goal (≤ 2 %) is missed; the rate is the lever (the split below), and
halving or fifthing it did not show within six rounds. The next step is a rate that
adapts to the load (the same samples per window whatever the request rate), which needs
the snapshot to carry each period's rate.
"""


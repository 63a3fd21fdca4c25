/* phasescope live page.
 *
 * Polls /api/snapshot (same origin, nothing else) once a second and shows, per tap, where
 * the time of a request goes. Two kinds of numbers appear and the page keeps them apart:
 *
 *  - "since the window started" (the last reset, or the proxy's start): the snapshot's own
 *    exact figures (count, mean, HDR percentiles). With several routes the page merges
 *    their HDR histograms the way docs/metrics.md describes, so percentiles stay exact to
 *    the HDR resolution rather than being averaged.
 *  - "per second": differences between two successive snapshots (request rate, the mean of
 *    each phase and the p50/p99 of `total` over just that interval), for the charts.
 *
 * "Where the time goes" divides each phase's summed time by the number of requests (the
 * count of `total`): that is what the phase adds to the mean request, so the sequential
 * phases stack up to the mean total. `parse` is taken out of the `client_recv` that
 * contains it, and the Webdis decomposition out of the `upstream_wait` it splits.
 */
"use strict";

(function () {
  const POLL_MS = 1000;
  const KEEP_POINTS = 600; // ten minutes of one-second points
  const RATE_WINDOW_S = 5; // the rate on the cards: steadier than one interval
  const TOP_FUNCTIONS = 5; // rows of the upstream's top functions, after the hot path

  /* Phases in timeline order, then the aggregate: the snapshot's `phase_order`, which the
   * proxy takes from its own list of phases (src/phase.rs), so the page keeps no copy. */
  let phaseOrder = [];

  /* How to draw and describe each phase: the snapshot's `phase_styles`, the one table of
   * src/phase.rs that the report's SVG and the dashboard use too (colours in Okabe–Ito
   * hues, checked apart under colour-vision deficiency; the phase each lies in; the
   * stacking order; a line on what it measures). Filled in from the first snapshot; a
   * phase without a style (an older proxy) falls into the grey of "unattributed". */
  let STYLES = {};
  const COLORS = {
    unattributed: "#c3c8d0",
  };
  const UNATTRIBUTED_ABOUT = "time in total that no sequential phase covers";

  /* The phases that add up to total, bottom to top of the stacked chart, and the same order
   * segments() returns: each style's `sum_stack`. "unattributed" tops them. */
  let SUM_STACK = [];
  let STACK_ORDER = ["unattributed"];

  /* The phase the Webdis decomposition splits, and its parts (the stacked phases that lie
   * in it), drawn in its place. */
  const SPLIT = "upstream_wait";
  let DECOMPOSITION = [];

  /* Error kinds that are the clients' doing (docs/metrics.md): what they sent, or that they
   * left with an exchange in flight (client_abort; client_reset in snapshots of older
   * builds, which also counted a load generator's end-of-run closes). They say nothing
   * about the server: the Errors card keeps them apart from the server's failures, and
   * the clients' closes between exchanges (client_closes) are no error at all. */
  const CLIENT_ERRORS = new Set(["bad_request", "header_too_large", "client_timeout", "client_abort", "client_reset"]);
  const CLIENT_ABORTS = new Set(["client_abort", "client_reset"]);

  /* Takes in the snapshot's table of phases. */
  function takeStyles(snap) {
    phaseOrder = snap.phase_order || [];
    STYLES = snap.phase_styles || {};
    for (const [name, style] of Object.entries(STYLES)) COLORS[name] = style.colour;
    SUM_STACK = Object.keys(STYLES)
      .filter((p) => STYLES[p].sum_stack !== null && STYLES[p].sum_stack !== undefined)
      .sort((a, b) => STYLES[a].sum_stack - STYLES[b].sum_stack);
    STACK_ORDER = [...SUM_STACK, "unattributed"];
    DECOMPOSITION = SUM_STACK.filter((p) => parentOf(p) === SPLIT);
  }

  function parentOf(phase) {
    return STYLES[phase] ? STYLES[phase].parent : null;
  }

  /* Shown as a tooltip on each phase; the short form of docs/phases.md. */
  function about(key) {
    if (key === "unattributed") return UNATTRIBUTED_ABOUT;
    return STYLES[key] ? STYLES[key].description || "" : "";
  }

  /* Beside a phase's name in the table, for those that lie inside or overlap others
   * (listed in the table, not stacked). */
  function note(phase) {
    return STYLES[phase] ? STYLES[phase].note : null;
  }

  /* The stacked phases drawn apart from the one they lie in, before its rest. */
  function drawnApart(phase) {
    return SUM_STACK.filter((p) => parentOf(p) === phase);
  }

  // ---------------------------------------------------------------------------------
  // Small helpers
  // ---------------------------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null) continue;
        if (k === "class") e.className = v;
        else if (k === "text") e.textContent = v;
        else if (k === "style") Object.assign(e.style, v);
        else e.setAttribute(k, v);
      }
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function swatch(key) {
    return h("span", { class: "swatch", style: { background: colour(key) } });
  }

  function num3(x) {
    const a = Math.abs(x);
    if (a >= 100) return x.toFixed(0);
    if (a >= 10) return x.toFixed(1);
    return x.toFixed(2);
  }

  /* Seconds → "312 ns", "41.2 µs", "1.20 ms", "2.50 s". */
  function fmtDur(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    const a = Math.abs(s);
    if (a === 0) return "0";
    if (a < 1e-6) return (s * 1e9).toFixed(0) + " ns";
    if (a < 1e-3) return num3(s * 1e6) + " µs";
    if (a < 1) return num3(s * 1e3) + " ms";
    return num3(s) + " s";
  }

  function fmtInt(n) {
    return Math.round(n).toLocaleString("en-US");
  }

  function fmtRate(r) {
    if (r === null || r === undefined || !isFinite(r)) return "–";
    if (r >= 1000) return fmtInt(r);
    return num3(r);
  }

  function fmtPct(f) {
    if (!isFinite(f)) return "–";
    const p = f * 100;
    if (p >= 10) return p.toFixed(0) + " %";
    if (p >= 1) return p.toFixed(1) + " %";
    return p.toFixed(2) + " %";
  }

  function fmtBytes(n) {
    if (!isFinite(n)) return "–";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
    return (i === 0 ? n.toFixed(0) : num3(n)) + " " + units[i];
  }

  function fmtAge(seconds) {
    if (!isFinite(seconds) || seconds < 0) return "–";
    if (seconds < 90) return seconds.toFixed(0) + " s";
    if (seconds < 5400) return (seconds / 60).toFixed(0) + " min";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
    return (seconds / 86400).toFixed(1) + " d";
  }

  function colour(phase) {
    return COLORS[phase] || COLORS.unattributed;
  }

  /* The report's what-if line (docs/report.md, "Inside the upstream"), for a parser 2×
   * faster: with p the parser's share of the CPU and c the CPU per request, it saves at
   * most c·p·(1 − 1/2) per request, and a CPU-bound server gains at most
   * 1 / ((1 − p) + p/2) − 1 in throughput (Amdahl). A stripped server's own code stands
   * in for its parser, an upper bound. Empty when nothing names a parser. */
  const WHAT_IF_FACTOR = 2;

  /* What the process runs, as the report names it (snapshot::summary::runs_as): its comm,
   * or the binary's file name when the kernel cut comm at 15 bytes and the name goes on
   * from it; not the file name alone (Debian's redis-server is a symlink to
   * redis-check-rdb). */
  function runsAs(u) {
    const file = u.exe ? u.exe.split("/").pop() : null;
    if (!u.comm) return file || "the upstream";
    return file && u.comm.length === 15 && file.length > 15 && file.startsWith(u.comm) ? file : u.comm;
  }
  /* The what-if the admin server computed as the report does (`what_if[tap]`,
   * snapshot::summary::WhatIf): the parser's own work, not all it calls back. */
  function whatIf(w) {
    if (!w) return "";
    const which = w.basis === "upper_bound"
      ? `its parser is inside ${w.component}, ${fmtPct(w.share)} of its CPU: an upper bound`
      : `${w.component} is ${fmtPct(w.share)} of its CPU${w.basis === "work" ? ": it and the helpers it calls, not its callbacks" : ""}`;
    const ofTotal = w.saved_of_total != null ? `, ${fmtPct(w.saved_of_total)} of mean total` : "";
    return `what if: a parser ${w.factor}× faster saves ≤ ${fmtDur(w.saved)} per request${ofTotal}; if the server is CPU-bound, at most ${fmtPct(w.throughput_gain)} more throughput (${which})`;
  }

  function fmtClock(unix) {
    const d = new Date(unix * 1000);
    return d.toLocaleTimeString("en-GB", { hour12: false });
  }

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // ---------------------------------------------------------------------------------
  // Series arithmetic
  // ---------------------------------------------------------------------------------

  /* The value at rank ⌈q·count⌉ of sorted [value_ns, count] pairs, in ns (as HDR does). */
  function quantileNs(pairs, count, q) {
    if (!count || !pairs.length) return 0;
    const rank = Math.max(1, Math.ceil(q * count - 1e-9));
    let seen = 0;
    for (const [v, c] of pairs) {
      seen += c;
      if (seen >= rank) return v;
    }
    return pairs[pairs.length - 1][0];
  }

  /* One series from all routes of a phase: counts and sums add, histograms merge. */
  function mergeRoutes(byRoute) {
    const list = Object.values(byRoute || {});
    if (list.length === 0) return null;
    if (list.length === 1) return list[0];
    let count = 0, sum = 0, min = Infinity, max = 0;
    const acc = new Map();
    for (const s of list) {
      count += s.count;
      sum += s.sum;
      min = Math.min(min, s.min);
      max = Math.max(max, s.max);
      for (const [v, c] of s.histogram) acc.set(v, (acc.get(v) || 0) + c);
    }
    const pairs = [...acc.entries()].sort((a, b) => a[0] - b[0]);
    const q = (x) => Math.min(max, Math.max(min, quantileNs(pairs, count, x) / 1e9));
    return {
      count, sum, mean: count ? sum / count : 0, min,
      p50: q(0.5), p90: q(0.9), p99: q(0.99), p999: q(0.999), max, histogram: pairs,
    };
  }

  function histMap(series) {
    const m = new Map();
    if (series) for (const [v, c] of series.histogram) m.set(v, c);
    return m;
  }

  /* Quantiles of what was recorded between two cumulative histograms. */
  function intervalQuantiles(cur, prev, qs) {
    const pairs = [];
    let count = 0;
    for (const [v, c] of cur) {
      const d = c - (prev.get(v) || 0);
      if (d > 0) { pairs.push([v, d]); count += d; }
    }
    pairs.sort((a, b) => a[0] - b[0]);
    return qs.map((q) => (count ? quantileNs(pairs, count, q) / 1e9 : null));
  }

  /* Sums per phase (seconds) → the stacked segments [key, seconds], timeline order. A phase
   * drawn apart from the one it lies in (parse in client_recv, the Webdis parts in
   * upstream_wait) comes first, then the rest of that one. */
  function segments(sums) {
    const totalSum = sums.total || 0;
    const out = [];
    const add = (key, v) => { if (v > 0) out.push([key, v]); };
    for (const key of SUM_STACK) {
      if (SUM_STACK.includes(parentOf(key))) {
        add(key, sums[key] || 0);
        continue;
      }
      const parts = drawnApart(key).filter((p) => sums[p] > 0);
      const rest = (sums[key] || 0) - parts.reduce((a, p) => a + sums[p], 0);
      if (!parts.length) add(key, sums[key] || 0);
      // Requests the correlator could not match keep their whole wait undivided.
      else if (key === SPLIT) { if (rest > 0.001 * totalSum) add(key, rest); }
      else add(key, Math.max(0, rest));
    }
    const covered = out.reduce((a, [, v]) => a + v, 0);
    if (totalSum - covered > 0.005 * totalSum) add("unattributed", totalSum - covered);
    return out;
  }

  function segLabel(key, hasDecomposition) {
    if (key === SPLIT) return hasDecomposition ? `${key} (unmatched)` : key;
    const parts = drawnApart(key);
    return parts.length ? [key, ...parts].join(" − ") : key;
  }

  /* The Webdis decomposition in the words of the report's headline (docs/report.md, "The
   * headline"): `upstream_wait 91 % (Redis queue 21 %, Redis 2 %, Webdis 68 %)`. "Redis
   * queue" is backend_queue (the command waiting behind earlier replies on Webdis's pooled
   * connection), "Redis" the rest of backend, Webdis backend_in + backend_out; what the
   * correlator could not pair is "unpaired". With Redis's process watched by the RESP tap
   * behind (`redis`: its CPU and run-queue wait per command), "Redis" reads in brackets as
   * its CPU, its wait for a CPU and the rest (report::render::backend_split). Null without the
   * split. */
  function webdisSplit(merged, totalSum, redisWork) {
    const share = (p) => (merged[p] && totalSum ? merged[p].sum / totalSum : null);
    const redis = share("backend");
    const into = share("backend_in"), out = share("backend_out");
    if (redis === null || !merged.upstream_wait || (into === null && out === null)) return null;
    const webdis = (into || 0) + (out || 0);
    const wait = share("upstream_wait");
    const queue = share("backend_queue");
    let own = "";
    if (redisWork && merged.backend.count > 0) {
      const paired = merged.backend.count;
      const per = Math.max(0, merged.backend.sum - (merged.backend_queue ? merged.backend_queue.sum : 0)) / paired;
      const cpu = Math.min(redisWork.cpu, per);
      const rq = Math.min(redisWork.runqueue, per - cpu);
      const of = (s) => fmtPct((s * paired) / totalSum);
      own = ` [its CPU ${of(cpu)}, waiting for a CPU ${of(rq)}, rest ${of(per - cpu - rq)}]`;
    }
    const parts = queue === null
      ? [`Redis ${fmtPct(redis)}${own}`]
      : [`Redis queue ${fmtPct(queue)}`, `Redis ${fmtPct(Math.max(0, redis - queue))}${own}`];
    parts.push(`Webdis ${fmtPct(webdis)}`);
    const unpaired = wait - redis - webdis;
    if (unpaired >= 0.005) parts.push(`unpaired ${fmtPct(unpaired)}`);
    return `upstream_wait ${fmtPct(wait)} (${parts.join(", ")})`;
  }

  /* Redis's CPU and wait for a CPU per command, from the RESP tap the snapshot names as
   * this tap's backend (or, in older snapshots, the one RESP tap watching a process). */
  function redisWork(tap, snap) {
    const taps = snap.taps || {};
    let resp = tap.backend ? taps[tap.backend] : null;
    if (!tap.backend) {
      const watched = Object.values(taps).filter((t) => t !== tap && t.protocol === "resp" && t.upstream);
      resp = watched.length === 1 ? watched[0] : null;
    }
    const u = resp && resp.upstream;
    if (!u || !u.watched_seconds) return null;
    let n = 0;
    for (const s of Object.values(resp.phases.total || {})) n += s.count;
    if (!n) return null;
    const w = atWork(u);
    return { cpu: (w.cpu_user_seconds + w.cpu_system_seconds) / n, runqueue: w.runqueue_seconds / n };
  }

  /* What per-request and per-core figures are read over (docs/metrics.md, `traffic`):
   * the reads that held traffic, not the idle seconds around them; the whole window in
   * snapshots without it. */
  function atWork(p) {
    if (p.traffic) return p.traffic;
    return {
      seconds: p.watched_seconds, cpu_user_seconds: p.cpu_user_seconds, cpu_system_seconds: p.cpu_system_seconds,
      runqueue_seconds: p.runqueue_seconds, machine_busy_seconds: p.machine_busy_seconds,
    };
  }

  /* How long a window held traffic: the longest of its processes' (the proxy's own is
   * every tap's); null when no snapshot part says. */
  function trafficSeconds(snap) {
    const all = [];
    if (snap.proxy && snap.proxy.traffic) all.push(snap.proxy.traffic.seconds);
    for (const t of Object.values(snap.taps || {})) if (t.upstream && t.upstream.traffic) all.push(t.upstream.traffic.seconds);
    return all.length ? Math.max(...all) : null;
  }

  function phaseSums(tap, route) {
    const sums = {};
    for (const [phase, byRoute] of Object.entries(tap.phases)) {
      if (route === undefined) {
        let s = 0;
        for (const series of Object.values(byRoute)) s += series.sum;
        sums[phase] = s;
      } else if (byRoute[route]) {
        sums[phase] = byRoute[route].sum;
      }
    }
    return sums;
  }

  function sumValues(obj) {
    return Object.values(obj || {}).reduce((a, b) => a + b, 0);
  }

  /* The server's own error answers of a tap's window (`server_errors`: an HTTP 5xx it sent,
   * kept apart from the successes' phases), by status over every route. */
  function serverErrors(tap) {
    const out = {};
    for (const [status, phases] of Object.entries(tap.server_errors || {})) {
      out[status] = sumValues(Object.fromEntries(Object.entries((phases || {}).total || {}).map(([r, s]) => [r, s.count])));
    }
    return out;
  }

  // ---------------------------------------------------------------------------------
  // Charts (uPlot)
  // ---------------------------------------------------------------------------------

  const haveCharts = typeof window.uPlot === "function";

  /* x-axis steps, seconds: whole seconds and round minutes and hours. */
  const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];

  /* A label equal to the one before it is left blank, so no two ticks read the same. */
  function distinctLabels(labels) {
    return labels.map((l, i) => (i > 0 && l === labels[i - 1] ? "" : l));
  }

  const AXIS_FONT = "11px system-ui, sans-serif";
  /* Room right of the plot for half the widest time label ("00:00:00" at AXIS_FONT is
   * about 44 px): the last tick sits at the right edge, and its label, centred on it,
   * was cut in half ("19:56:3"). */
  const RIGHT_PAD = 28;
  const measure = document.createElement("canvas").getContext("2d");

  /* After each draw: how many time labels reach past the canvas, from the ticks uPlot
   * drew and the labels' measured widths (data-x-ticks-clipped, for tests and for
   * anyone who wonders). */
  function markClipped(u) {
    const box = u.root && u.root.parentElement;
    const axis = u.axes[0];
    if (!box || !axis || !axis._splits) return;
    measure.font = AXIS_FONT;
    const left = u.bbox.left / window.uPlot.pxRatio;
    let clipped = 0;
    axis._splits.forEach((split, i) => {
      const label = axis._values && axis._values[i];
      if (!label) return;
      const x = left + u.valToPos(split, "x");
      const half = measure.measureText(label).width / 2;
      if (x - half < 0 || x + half > u.width) clipped += 1;
    });
    box.dataset.xTicksClipped = String(clipped);
  }

  function axes(valueFmt) {
    const stroke = cssVar("--muted");
    const grid = { stroke: cssVar("--grid"), width: 1 };
    const ticks = { stroke: cssVar("--border"), width: 1, size: 4 };
    return [
      {
        // Ticks on whole seconds only, at least 60 px apart: with sub-second steps (a
        // short history, a fast refresh) every label read the same HH:MM:SS.
        stroke, grid, ticks, font: AXIS_FONT,
        space: 60,
        incrs: TIME_INCRS,
        values: (u, splits) => {
          const labels = distinctLabels(splits.map(fmtClock));
          // The labels drawn on the canvas, readable by tests and assistive tools.
          if (u.root && u.root.parentElement) u.root.parentElement.dataset.xTicks = labels.join("|");
          return labels;
        },
      },
      {
        stroke, grid, ticks, size: 62, font: AXIS_FONT,
        values: (u, splits) => splits.map(valueFmt),
      },
    ];
  }

  class Chart {
    /* series: [{label, color, fill, raw: () => array}]; stacked: cumulative bands. */
    constructor(container, series, opts) {
      this.container = container;
      this.stacked = !!opts.stacked;
      this.height = opts.height || 150;
      const uSeries = [{ value: (u, v) => (v == null ? "–" : fmtClock(v)) }];
      const bands = [];
      series.forEach((s, i) => {
        uSeries.push({
          label: s.label,
          stroke: s.color,
          width: this.stacked ? 1 : 1.75,
          fill: s.fill,
          points: { show: false },
          spanGaps: false,
          value: (u, v, si, di) => {
            const raw = s.raw();
            return di == null || raw[di] == null ? "–" : opts.fmt(raw[di]);
          },
        });
        if (this.stacked && i > 0) bands.push({ series: [i + 1, i] });
      });
      const width = Math.max(200, container.clientWidth);
      this.u = new window.uPlot({
        width,
        height: this.height,
        series: uSeries,
        bands,
        axes: axes(opts.fmt),
        legend: { show: opts.legend !== false, live: false },
        cursor: { drag: { x: false, y: false }, points: { show: !this.stacked } },
        // At least the last minute, so that a short history still has whole-second ticks.
        scales: { x: { time: true, range: (u, lo, hi) => (hi == null ? [lo, hi] : [Math.min(lo, hi - 60), hi]) }, y: { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.08 : 1] } },
        padding: [8, RIGHT_PAD, 0, 0],
        hooks: { draw: [markClipped] },
      }, [[]], container);
      this.observer = new ResizeObserver(() => {
        const w = Math.max(200, this.container.clientWidth);
        if (w !== this.u.width) this.u.setSize({ width: w, height: this.height });
      });
      this.observer.observe(container);
    }

    setData(data) {
      this.u.setData(data);
    }

    destroy() {
      this.observer.disconnect();
      this.u.destroy();
    }
  }

  // ---------------------------------------------------------------------------------
  // One tap
  // ---------------------------------------------------------------------------------

  class TapView {
    constructor(name, parent) {
      this.name = name;
      this.prev = null;
      this.recent = []; // {t, requests, errors} over the last RATE_WINDOW_S
      this.history = { t: [], rate: [], errRate: [], p50: [], p99: [], seg: {} };
      this.segKeys = [];
      this.stackChart = null;
      this.build(parent);
    }

    build(parent) {
      const card = (key, label, hint) => {
        const value = h("div", { class: "value", "data-stat": key, text: "–" });
        const hintEl = h("div", { class: "hint", text: hint || "\u00a0" });
        this.cards[key] = { value, hint: hintEl };
        return h("div", { class: "panel card" }, h("div", { class: "label", text: label }), value, hintEl);
      };
      this.cards = {};
      this.protocol = h("span", { class: "badge" });
      this.headline = h("span", { class: "headline" });
      // phasescope's own cost, as the report's line under the headline (docs/report.md,
      // "The proxy's own cost").
      this.proxyLine = h("div", { class: "proxy-line note", hidden: true });
      this.stack = h("div", { class: "stack", role: "img" });
      this.legend = h("div", { class: "legend" });
      this.breakdownSub = h("span", { class: "sub" });
      this.breakdownNote = h("div", { class: "note" });
      this.insideSub = h("span", { class: "sub" });
      this.insideLine = h("div", { class: "inside-line" });
      this.insideWhatIf = h("div", { class: "inside-line what-if" });
      this.insideNote = h("div", { class: "note" });
      // The hot path (docs/report.md, "Call stacks"): where the CPU goes, first.
      this.hotBody = h("tbody");
      this.hot = h("table", { class: "functions hot", hidden: true },
        h("caption", { text: "hot path: where its CPU goes, each function with what it calls but the others listed" }),
        h("thead", null, h("tr", null,
          h("th", { text: "function" }),
          h("th", { text: "share", title: "its share of the CPU on the list: its samples with what it calls, less those of the functions listed inside it (the shares add up to at most 100 %)" }),
          h("th", { text: "per request", title: "CPU per request that share stands for" }),
          h("th", { text: "called from", title: "the callers with the most of its samples, each with its share of them" }),
          h("th", { text: `${WHAT_IF_FACTOR}× faster saves`, title: "CPU per request saved by the function (with all it calls) that many times faster, by Amdahl's law, and the throughput bound of a CPU-bound server" }))),
        this.hotBody);
      this.functionsBody = h("tbody");
      this.functions = h("table", { class: "functions", hidden: true },
        h("thead", null, h("tr", null,
          h("th", { text: "function" }), h("th", { text: "object" }),
          h("th", { text: "self", title: "share of the samples with the function as the leaf: its own code" }),
          h("th", { text: "inclusive", title: "share of the samples with the function anywhere on the stack: it and what it calls" }))),
        this.functionsBody);
      this.inside = h("div", { class: "panel inside-upstream", hidden: true },
        h("h3", null, "Inside the upstream", this.insideSub), this.insideLine, this.insideWhatIf, this.hot, this.functions, this.insideNote);
      this.phaseBody = h("tbody");
      this.phaseSub = h("span", { class: "sub" });
      this.routeBody = h("tbody");
      this.errors = h("div", { class: "errors" });
      this.traffic = h("dl", { class: "kv" });
      this.stackBox = h("div", { class: "chart" });
      this.rateBox = h("div", { class: "chart" });
      this.latencyBox = h("div", { class: "chart" });
      this.chartsNote = h("div", { class: "note charts-note", "data-charts-waiting": "" });

      const th = (...names) => h("tr", null, ...names.map((n) => h("th", { text: n })));

      this.root = h("section", { class: "tap", "data-tap": this.name },
        h("div", { class: "tap-head" }, h("h2", { text: this.name }), this.protocol, this.headline),
        this.proxyLine,
        h("div", { class: "cards" },
          card("rate", "Requests / s", `over the last ${RATE_WINDOW_S} s`),
          card("requests", "Requests", ""),
          card("mean", "Mean total", "what clients saw"),
          card("p99", "p99 total", ""),
          card("errors", "Errors", ""),
          card("connections", "Connections open", "")),
        h("div", { class: "panel breakdown" },
          h("h3", null, "Where the time goes", this.breakdownSub),
          this.stack, this.legend, this.breakdownNote),
        this.inside,
        this.chartsNote,
        h("div", { class: "charts" },
          h("div", { class: "panel" }, h("h3", null, "Mean per request by phase", h("span", { class: "sub", text: "each second, stacked" })), this.stackBox),
          h("div", { class: "panel" }, h("h3", null, "Throughput", h("span", { class: "sub", text: "per second" })), this.rateBox),
          h("div", { class: "panel" }, h("h3", null, "Total latency", h("span", { class: "sub", text: "p50 · p99, each second" })), this.latencyBox)),
        h("div", { class: "panel phases-panel" },
          h("h3", null, "Phases", this.phaseSub),
          h("table", { class: "phases" },
            h("thead", null, th("phase", "count", "mean", "p50", "p90", "p99", "p99.9", "max", "share of total")),
            this.phaseBody)),
        h("div", { class: "bottom" },
          h("div", { class: "panel" },
            h("h3", null, "Routes", h("span", { class: "sub", text: "total per route, since the window started" })),
            h("table", { class: "routes" },
              h("thead", null, th("route", "requests", "req/s", "mean", "p50", "p99", "CPU / req", "where the time goes")),
              this.routeBody)),
          h("div", { class: "side" },
            h("div", { class: "panel" }, h("h3", null, "Errors", h("span", { class: "sub", text: "in the window / since start, by kind" })), this.errors),
            h("div", { class: "panel" }, h("h3", null, "Traffic", h("span", { class: "sub", text: "since start" })), this.traffic))));
      parent.append(this.root);

      if (haveCharts) {
        const hist = this.history;
        this.rateChart = new Chart(this.rateBox, [
          { label: "requests/s", color: cssVar("--accent"), raw: () => hist.rate },
          { label: "errors/s", color: cssVar("--bad"), raw: () => hist.errRate },
        ], { fmt: fmtRate });
        this.latencyChart = new Chart(this.latencyBox, [
          { label: "p50", color: "#4e79a7", raw: () => hist.p50 },
          { label: "p99", color: "#f28e2b", raw: () => hist.p99 },
        ], { fmt: fmtDur });
      }
    }

    /* The stacked chart's series follow the segments seen so far; rebuilt when one appears. */
    ensureStackChart(keys) {
      const known = new Set(this.segKeys);
      const fresh = keys.filter((k) => !known.has(k));
      if (!fresh.length && this.stackChart) return;
      const all = new Set([...this.segKeys, ...fresh]);
      const order = STACK_ORDER.filter((k) => all.has(k));
      for (const k of order) {
        if (!this.history.seg[k]) this.history.seg[k] = this.history.t.map(() => null);
      }
      this.segKeys = order;
      if (!haveCharts) return;
      if (this.stackChart) this.stackChart.destroy();
      const hasDecomposition = order.some((k) => DECOMPOSITION.includes(k));
      this.stackChart = new Chart(this.stackBox, order.map((k) => ({
        label: segLabel(k, hasDecomposition),
        color: colour(k),
        fill: colour(k) + "d0",
        raw: () => this.history.seg[k],
      })), { fmt: fmtDur, stacked: true, legend: false, height: 189 });
    }

    /* The window's seconds before this page's first poll, from the server's history:
     * the same points the polls make, from the same differences (history.rs). */
    seed(snap) {
      for (const p of historyPoints) {
        const tp = p.taps[this.name];
        if (!tp || p.since !== snap.since_unix || p.t >= snap.taken_at_unix) continue;
        let interval = null;
        if (tp.answered > 0) {
          const segs = {};
          for (const [k, v] of segments(tp.sums)) segs[k] = v / tp.answered;
          interval = { segs, p50: tp.p50, p99: tp.p99 };
        }
        this.record(p.t, tp.requests / p.dt, tp.errors / p.dt, interval, interval ? Object.keys(interval.segs) : []);
      }
    }

    update(tap, snap) {
      if (!this.seeded) {
        this.seeded = true;
        this.seed(snap);
      }
      const t = snap.taken_at_unix;
      const merged = {};
      for (const [phase, byRoute] of Object.entries(tap.phases)) merged[phase] = mergeRoutes(byRoute);
      const total = merged.total || null;
      const n = total ? total.count : 0;
      // The server spent its CPU on its error answers too: per request is per exchange it
      // answered, as in the report (docs/report.md, "The server's errors").
      const answered = n + sumValues(serverErrors(tap));
      const sums = phaseSums(tap);
      const errors = sumValues(tap.totals.errors);
      const totalHist = histMap(total);
      const routeCounts = {};
      for (const [route, s] of Object.entries(tap.phases.total || {})) routeCounts[route] = s.count;

      // Differences from the previous snapshot.
      let rate = null, errRate = null, bytesRate = null;
      let interval = null; // per-segment mean per request, and p50/p99, for this interval
      let routeRates = {};
      const p = this.prev;
      if (p && t > p.t) {
        const dt = t - p.t;
        const dreq = tap.totals.requests - p.requests;
        if (dreq >= 0) rate = dreq / dt;
        const derr = errors - p.errors;
        if (derr >= 0) errRate = derr / dt;
        bytesRate = (sumValues(tap.totals.bytes) - p.bytes) / dt;
        if (p.since === snap.since_unix) {
          const dn = n - p.n;
          const dsums = {};
          for (const k of Object.keys(sums)) dsums[k] = sums[k] - (p.sums[k] || 0);
          if (dn > 0) {
            const segs = {};
            for (const [k, v] of segments(dsums)) segs[k] = v / dn;
            const [p50, p99] = intervalQuantiles(totalHist, p.totalHist, [0.5, 0.99]);
            interval = { segs, p50, p99 };
          }
          for (const [route, c] of Object.entries(routeCounts)) {
            routeRates[route] = (c - (p.routeCounts[route] || 0)) / dt;
          }
        } else {
          routeRates = null; // a reset happened in between: per-route counts restarted
        }
      }
      this.prev = {
        t, since: snap.since_unix, n, sums, requests: tap.totals.requests, errors,
        bytes: sumValues(tap.totals.bytes), totalHist, routeCounts,
      };

      this.recent.push({ t, requests: tap.totals.requests, errors });
      while (this.recent.length > 2 && t - this.recent[1].t >= RATE_WINDOW_S) this.recent.shift();
      let cardRate = null, cardErrRate = null;
      const first = this.recent[0];
      if (this.recent.length >= 2 && t > first.t && tap.totals.requests >= first.requests) {
        cardRate = (tap.totals.requests - first.requests) / (t - first.t);
        cardErrRate = Math.max(0, errors - first.errors) / (t - first.t);
      }

      const segs = segments(sums);
      this.record(t, rate, errRate, interval, segs.map(([k]) => k));
      this.renderHead(tap, snap, merged, segs, n);
      this.renderCards(tap, snap, total, n, cardRate, errors, cardErrRate);
      this.renderBreakdown(segs, n, sums.total || 0, snap);
      this.renderProxy(snap.proxy, tap.upstream, answered, Object.keys(snap.taps || {}).length);
      this.renderInside(tap.upstream, answered, snap);
      this.renderHot((snap.hot || {})[this.name] || []);
      this.renderPhases(merged, sums.total || 0, snap);
      this.renderRoutes(tap, routeRates, (snap.route_cpu || {})[this.name]);
      this.renderErrors(tap);
      this.renderTraffic(tap, bytesRate);
      this.renderCharts();
    }

    record(t, rate, errRate, interval, keys) {
      const hist = this.history;
      if (interval) keys = [...new Set([...keys, ...Object.keys(interval.segs)])];
      this.ensureStackChart(keys);
      if (rate === null) return; // the first snapshot only sets the baseline
      hist.t.push(t);
      hist.rate.push(rate);
      hist.errRate.push(errRate === null ? 0 : errRate);
      hist.p50.push(interval ? interval.p50 : null);
      hist.p99.push(interval ? interval.p99 : null);
      for (const k of this.segKeys) hist.seg[k].push(interval ? (interval.segs[k] || 0) : null);
      if (hist.t.length > KEEP_POINTS) {
        for (const a of [hist.t, hist.rate, hist.errRate, hist.p50, hist.p99, ...Object.values(hist.seg)]) a.shift();
      }
    }

    renderHead(tap, snap, merged, segs, n) {
      this.protocol.textContent = tap.protocol;
      const totalSum = merged.total ? merged.total.sum : 0;
      if (!n || !totalSum) {
        this.headline.textContent = "no requests in this window yet";
        return;
      }
      // The biggest shares, and parse always: it is the figure people come for.
      const hasDecomposition = segs.some(([k]) => DECOMPOSITION.includes(k));
      const split = webdisSplit(merged, totalSum, redisWork(tap, snap));
      // With the Webdis split, upstream_wait is one entry that names its parts, as the
      // report's headline does, instead of its segments competing for the four places.
      const listed = split
        ? [...segs.filter(([k]) => !DECOMPOSITION.includes(k) && k !== "upstream_wait"), ["upstream_wait", merged.upstream_wait.sum]]
        : segs;
      const top = listed.filter(([k]) => k !== "unattributed").sort((a, b) => b[1] - a[1]).slice(0, 4);
      if (!top.some(([k]) => k === "parse") && merged.parse) top.push(["parse", merged.parse.sum]);
      this.headline.textContent = top
        .map(([k, v]) => (split && k === "upstream_wait" ? split : `${segLabel(k, hasDecomposition)} ${fmtPct(v / totalSum)}`))
        .join(" · ");
    }

    renderCards(tap, snap, total, n, rate, errors, errRate) {
      const c = this.cards;
      c.rate.value.textContent = fmtRate(rate);
      c.requests.value.textContent = fmtInt(n);
      c.requests.hint.textContent = `since ${fmtClock(snap.since_unix)}`;
      c.mean.value.textContent = total ? fmtDur(total.mean) : "–";
      c.p99.value.textContent = total ? fmtDur(total.p99) : "–";
      c.p99.hint.textContent = total ? `p50 ${fmtDur(total.p50)} · max ${fmtDur(total.max)}` : "\u00a0";
      // The window's errors, as every other card covers the window; since start beside.
      const inWindow = tap.errors || tap.totals.errors || {};
      let byServer = 0, byClients = 0, aborts = 0;
      for (const [k, v] of Object.entries(inWindow)) {
        if (CLIENT_ABORTS.has(k)) aborts += v;
        else if (CLIENT_ERRORS.has(k)) byClients += v;
        else byServer += v;
      }
      c.errors.value.textContent = fmtInt(byServer + byClients + aborts);
      c.errors.value.classList.toggle("bad", byServer > 0);
      const parts = [];
      if (byServer > 0) parts.push(`${fmtInt(byServer)} by the server`);
      if (byClients > 0) parts.push(`${fmtInt(byClients)} by clients`);
      if (aborts > 0) parts.push(`${fmtInt(aborts)} aborted by clients`);
      const answeredWithErrors = sumValues(serverErrors(tap));
      if (answeredWithErrors > 0) parts.push(`the server answered ${fmtInt(answeredWithErrors)} with a 5xx`);
      if (tap.client_closes !== undefined) parts.push(`${fmtInt(tap.client_closes)} closes (no error)`);
      parts.push(`${fmtInt(errors)} since start`);
      if (errRate !== null) parts.push(`${fmtRate(errRate)} / s now`);
      c.errors.hint.textContent = parts.join(" · ");
      const open = tap.totals.connections_open || {};
      c.connections.value.textContent = fmtInt(open.client || 0);
      c.connections.hint.textContent = `client · ${fmtInt(open.upstream || 0)} upstream`;
    }

    // The upstream's process (docs/report.md, "Inside the upstream"): thread-time per
    // request over the window, and where its CPU goes when it is sampled.
    /* The proxy's own CPU per request of this tap, the cores it kept busy and its share
     * of what the machine's cores did; whether it shares them with the upstream. */
    renderProxy(p, u, n, taps) {
      this.proxyLine.hidden = !p;
      if (!p) return;
      if (!n) {
        this.proxyLine.textContent = "phasescope itself: no requests in this window yet";
        return;
      }
      const us = (s) => fmtDur(s / n);
      const w = atWork(p);
      const cpu = w.cpu_user_seconds + w.cpu_system_seconds;
      const cores = w.seconds > 0 ? cpu / w.seconds : 0;
      const over = p.traffic ? ` (${fmtAge(w.seconds)} with traffic)` : "";
      let line = `phasescope itself${over}: per request ${us(cpu)} on CPU (user ${us(w.cpu_user_seconds)}, system ${us(w.cpu_system_seconds)}), ${us(w.runqueue_seconds)} waiting for a CPU; ${num3(cores)} of the ${p.cpus} cores`;
      if (w.machine_busy_seconds > 0) line += `, ${fmtPct(Math.min(1, cpu / w.machine_busy_seconds))} of the CPU the machine did`;
      const theirs = u && u.cpus_allowed;
      const mine = p.cpus_allowed || [];
      if (theirs && mine.length) {
        line += theirs.some((c) => mine.includes(c)) ? "; it shares cores with the upstream" : "; on cores of its own";
      }
      if (taps > 1) line += ` (the whole proxy's CPU over this tap's requests: its workers serve all ${taps} taps)`;
      this.proxyLine.textContent = line;
    }

    renderInside(u, n, snap) {
      this.inside.hidden = !u;
      if (!u) return;
      const name = u.comm || "the upstream";
      const who = u.pid == null ? "no process found yet" : `pid ${u.pid}, ${u.threads} thread${u.threads === 1 ? "" : "s"}`;
      const busy = u.traffic ? `, ${fmtAge(u.traffic.seconds)} with traffic` : "";
      this.insideSub.textContent = `${name} (${who}), ${fmtAge(u.watched_seconds)} watched since ${fmtClock(snap.since_unix)}${busy}`;
      this.renderFunctions(u);
      if (!n) {
        this.insideLine.textContent = "no requests in this window yet";
        this.insideWhatIf.textContent = "";
        this.insideNote.textContent = "";
        return;
      }
      const us = (s) => fmtDur(s / n);
      const w = atWork(u);
      let line = `per request ${us(w.cpu_user_seconds + w.cpu_system_seconds)} on CPU (user ${us(w.cpu_user_seconds)}, system ${us(w.cpu_system_seconds)}), ${us(w.runqueue_seconds)} waiting for a CPU`;
      const samples = u.samples || {};
      const total = sumValues(samples);
      const own = u.exe ? u.exe.split("/").pop() : null;
      // With call stacks, a component's inclusive share (samples with any frame of it on
      // the stack) stands beside its self share: `event loop 8 % (88 % incl.)`.
      const inclusive = u.inclusive || null;
      if (total > 0) {
        const parts = Object.entries(samples).sort((a, b) => b[1] - a[1]).slice(0, 8)
          .map(([k, v]) => {
            const incl = inclusive && inclusive[k] !== undefined ? ` (${fmtPct(inclusive[k] / total)} incl.)` : "";
            return `${k === own ? `${runsAs(u)} (own code)` : k.replace(/_/g, " ")} ${fmtPct(v / total)}${incl}`;
          });
        line += `; its CPU${inclusive ? ", self (inclusive)" : ""}: ${parts.join(", ")}`;
      }
      this.insideLine.textContent = line;
      this.insideWhatIf.textContent = total > 0 ? whatIf((snap.what_if || {})[this.name]) : "";
      const notes = [`thread-time per request: the process's CPU and run-queue time${u.traffic ? " over the seconds with traffic" : ""} divided by this tap's requests`];
      if (u.restarts) notes.push(`${u.restarts} restart${u.restarts === 1 ? "" : "s"} in this window`);
      if (u.stripped) notes.push(`${name} is stripped: its parser is inside its own code`);
      if (!total) notes.push("not sampled: profile = true or --profile-upstream shows where its CPU goes");
      this.insideNote.textContent = notes.join(" · ");
    }

    // The hot path the admin server computes beside the findings (`hot[tap]`, most
    // listed first): each function, where its chain leads, its share, CPU per request,
    // callers and what-if. Without call stacks: hidden.
    renderHot(hot) {
      this.hot.hidden = !hot.length;
      if (this.hot.hidden) return;
      const name = (f) => {
        // A PHP function with its script and first line, as the report shows it.
        const script = f.object ? f.object.split("/").pop() : "";
        let s = f.line ? (script ? `${f.name} (${script}:${f.line})` : `${f.name}:${f.line}`) : f.name;
        if (f.through) s += ` → ${f.through}`;
        return s;
      };
      this.hotBody.replaceChildren(...hot.map((f) => h("tr", { "data-hot": f.name },
        h("td", { class: "name", "data-col": "name", text: name(f), title: `${f.object || "built in"} · component ${f.component}` }),
        h("td", { "data-col": "share", text: fmtPct(f.listed),
          title: `${fmtPct(f.inclusive)} with all it calls, ${fmtPct(f.self)} itself · ${fmtInt(f.samples)} samples` }),
        h("td", { "data-col": "cpu", text: fmtDur(f.cpu) }),
        h("td", { "data-col": "callers", text: f.callers.map((c) => `${c.name} ${fmtPct(c.share)}`).join(", ") || "–" }),
        f.waits
          ? h("td", { "data-col": "what-if", text: "a wait",
              title: "the kernel's putting threads to sleep and waking them: fewer hand-offs between threads save it, not a faster function" })
          : h("td", { "data-col": "what-if",
              text: fmtDur(f.what_if.saved),
              title: `${f.what_if.saved_of_total == null ? "" : `${fmtPct(f.what_if.saved_of_total)} of mean total; `}if CPU-bound, at most ${fmtPct(f.what_if.throughput_gain)} more throughput` }))));
    }

    // The top functions of the sampled call stacks (`upstream.functions`, most inclusive
    // samples first): self and inclusive shares of all samples. Without stacks: hidden.
    renderFunctions(u) {
      const functions = u.functions || [];
      const stacks = u.stacks && u.stacks.stacks ? u.stacks.stacks : [];
      const total = sumValues(u.samples || {}) || stacks.reduce((a, s) => a + s.samples, 0);
      this.functions.hidden = !functions.length || !total;
      if (this.functions.hidden) return;
      // A function that is never the leaf (main, an event loop) has no self share: "0"
      // reads better there than "0.00 %".
      const pct = (n) => (n ? fmtPct(n / total) : "0");
      this.functionsBody.replaceChildren(...functions.slice(0, TOP_FUNCTIONS).map((f) => h("tr", { "data-function": f.name },
        // PHP names every closure of a namespace alike: its first line tells them apart.
        h("td", { class: "name", "data-col": "name",
          text: f.line && f.name.endsWith("{closure}") ? `${f.name}:${f.line}` : f.name,
          title: `component ${f.component}` }),
        h("td", { class: "object", "data-col": "object", text: f.object || "–", title: f.object || null }),
        h("td", { "data-col": "self", text: pct(f.self_samples), title: `${fmtInt(f.self_samples)} samples` }),
        h("td", { "data-col": "inclusive", text: pct(f.inclusive_samples), title: `${fmtInt(f.inclusive_samples)} samples` }))));
    }

    renderBreakdown(segs, n, totalSum, snap) {
      this.breakdownSub.textContent = n
        ? `mean per request over ${fmtInt(n)} requests since ${fmtClock(snap.since_unix)}: ${fmtDur(totalSum / n)} in all`
        : "no requests yet";
      const hasDecomposition = segs.some(([k]) => DECOMPOSITION.includes(k));
      this.stack.replaceChildren(...segs.map(([k, v]) => {
        const share = totalSum ? v / totalSum : 0;
        const seg = h("div", {
          class: "seg",
          "data-segment": k,
          title: `${segLabel(k, hasDecomposition)}: ${fmtDur(v / n)} per request, ${fmtPct(share)} — ${about(k)}`,
          style: { background: colour(k), flexGrow: String(share), flexBasis: "0" },
        });
        // Name and share where they fit, the share alone in a narrower segment.
        if (share >= 0.14) seg.append(h("span", { text: `${segLabel(k, hasDecomposition)} ${fmtPct(share)}` }));
        else if (share >= 0.04) seg.append(h("span", { text: fmtPct(share) }));
        return seg;
      }));
      this.stack.setAttribute("aria-label", segs.map(([k, v]) => `${k} ${fmtPct(v / totalSum)}`).join(", "));
      this.legend.replaceChildren(...segs.map(([k, v]) => h("span", { class: "item", title: about(k) },
        swatch(k),
        h("span", { class: "name", text: segLabel(k, hasDecomposition) }),
        h("span", { class: "v", text: fmtDur(v / n) }),
        h("span", { class: "share", text: fmtPct(totalSum ? v / totalSum : 0) }))));
      const notes = [];
      if (segs.some(([k]) => k === "parse")) notes.push("parse is CPU time inside client_recv, drawn apart from the rest of it");
      if (hasDecomposition) notes.push("backend_in, backend and backend_out split upstream_wait (Webdis ↔ Redis correlation)");
      if (segs.some(([k]) => k === "unattributed")) notes.push("unattributed: time in total no sequential phase covers");
      this.breakdownNote.textContent = notes.join(" · ");
    }

    renderPhases(merged, totalSum, snap) {
      this.phaseSub.textContent = `exact (HDR) since ${fmtClock(snap.since_unix)}`;
      const names = phaseOrder.filter((p) => merged[p]).concat(Object.keys(merged).filter((p) => !phaseOrder.includes(p)).sort());
      if (!names.length) {
        this.phaseBody.replaceChildren(h("tr", { class: "empty-row" }, h("td", { colspan: "9", text: "no requests in this window yet" })));
        return;
      }
      this.phaseBody.replaceChildren(...names.map((p) => {
        const s = merged[p];
        const share = totalSum ? s.sum / totalSum : 0;
        const cell = (col, text) => h("td", { "data-col": col, text });
        return h("tr", { "data-phase": p, class: p === "total" ? "sum" : null, title: about(p) },
          h("td", { class: "name" }, swatch(p), p, note(p) ? h("span", { class: "inside", text: note(p) }) : null),
          cell("count", fmtInt(s.count)),
          cell("mean", fmtDur(s.mean)),
          cell("p50", fmtDur(s.p50)),
          cell("p90", fmtDur(s.p90)),
          cell("p99", fmtDur(s.p99)),
          cell("p999", fmtDur(s.p999)),
          cell("max", fmtDur(s.max)),
          h("td", { class: "sharecell", "data-col": "share" },
            h("div", { class: "sharebar" },
              h("div", { class: "bar" }, h("i", { style: { width: `${Math.min(100, share * 100)}%`, background: colour(p) } })),
              h("b", { text: fmtPct(share) }))));
      }));
    }

    /* routeCpu: the tap's CPU per route from `/api/snapshot`'s `route_cpu` (docs/report.md,
     * "CPU per route"): each route's CPU per request with its 95 % interval and its share
     * of the server's CPU in the cell's title, or "?" with the reason it cannot be told. */
    renderRoutes(tap, routeRates, routeCpu) {
      const totals = tap.phases.total || {};
      const routes = Object.keys(totals).sort((a, b) => totals[b].count - totals[a].count || a.localeCompare(b));
      if (!routes.length) {
        this.routeBody.replaceChildren(h("tr", { class: "empty-row" }, h("td", { colspan: "8", text: "no requests in this window yet" })));
        return;
      }
      const cpuOf = {};
      for (const r of (routeCpu && routeCpu.routes) || []) cpuOf[r.route] = r;
      const cpuCell = (route) => {
        const c = cpuOf[route];
        if (!c) return h("td", { "data-col": "cpu", text: "–", title: routeCpu ? "no exchange of the route in the slices" : "the upstream's process is not watched" });
        // The reason in the cell itself, not behind a `?` and a hover.
        if (!c.cpu_per_request) return h("td", { "data-col": "cpu", class: "unknown", text: `unknown: ${c.reason || "the slices cannot tell"}`, title: `unknown: ${c.reason || ""}` });
        const iv = c.cpu_per_request;
        const share = c.share === null || c.share === undefined ? "" : `, ${fmtPct(c.share)} of the server's CPU`;
        return h("td", { "data-col": "cpu", "data-estimate": String(iv.estimate), text: fmtDur(iv.estimate),
          title: `95 % interval ${fmtDur(iv.low)}–${fmtDur(iv.high)}${share}` });
      };
      this.routeBody.replaceChildren(...routes.map((r) => {
        const s = totals[r];
        const segs = segments(phaseSums(tap, r));
        const sum = s.sum || 1;
        const mini = h("div", { class: "mini", title: segs.map(([k, v]) => `${k} ${fmtPct(v / sum)}`).join(", ") },
          ...segs.map(([k, v]) => h("i", { style: { width: `${(100 * v) / sum}%`, background: colour(k) } })));
        const rate = routeRates && routeRates[r] !== undefined ? fmtRate(routeRates[r]) : "–";
        return h("tr", { "data-route": r },
          h("td", { class: "name", text: r }),
          h("td", { "data-col": "count", text: fmtInt(s.count) }),
          h("td", { "data-col": "rate", text: rate }),
          h("td", { "data-col": "mean", text: fmtDur(s.mean) }),
          h("td", { "data-col": "p50", text: fmtDur(s.p50) }),
          h("td", { "data-col": "p99", text: fmtDur(s.p99) }),
          cpuCell(r),
          h("td", null, mini));
      }));
    }

    renderErrors(tap) {
      const total = tap.totals.errors || {};
      const inWindow = tap.errors || total;
      const kinds = Object.keys(total).map((k) => [k, inWindow[k] || 0, total[k]]);
      kinds.sort((a, b) => b[1] - a[1] || b[2] - a[2] || a[0].localeCompare(b[0]));
      const chips = kinds.map(([k, v, all]) => {
        const client = CLIENT_ERRORS.has(k);
        const abort = CLIENT_ABORTS.has(k);
        const cls = ["err", v > 0 ? "nonzero" : null, client ? "client" : null].filter(Boolean).join(" ");
        const whose = abort ? " — a client left with an exchange in flight" : client ? " — the client's doing" : " — the server's failure";
        return h("span", {
          class: cls, "data-error": k, "data-window": String(v), "data-since-start": String(all),
          title: `${k}: ${fmtInt(v)} in this window, ${fmtInt(all)} since start${whose}`,
        }, k, client ? h("i", { text: abort ? "client left" : "client" }) : h("i", { text: "server" }),
        h("b", { text: fmtInt(v) }), h("small", { text: `/ ${fmtInt(all)}` }));
      });
      // The server's own error answers, by status: its failures, apart from the proxy's.
      for (const [status, v] of Object.entries(serverErrors(tap))) {
        chips.unshift(h("span", {
          class: "err nonzero", "data-server-status": status, "data-window": String(v),
          title: `the server answered ${status} to ${fmtInt(v)} in this window — its own error answers, kept apart from the successes' times`,
        }, `answered ${status}`, h("i", { text: "server" }), h("b", { text: fmtInt(v) })));
      }
      // Clients ending their connections between exchanges: counted, and no error.
      if (tap.client_closes !== undefined) {
        const all = (tap.totals || {}).client_closes || 0;
        chips.push(h("span", {
          class: "err client close", "data-error": "client_closes", "data-window": String(tap.client_closes),
          "data-since-start": String(all),
          title: `client closes: ${fmtInt(tap.client_closes)} in this window, ${fmtInt(all)} since start — clients ending their connections between exchanges, as load generators do at the end of a run: no error`,
        }, "client closes", h("i", { text: "no error" }), h("b", { text: fmtInt(tap.client_closes) }),
        h("small", { text: `/ ${fmtInt(all)}` })));
      }
      this.errors.replaceChildren(...chips);
    }

    renderTraffic(tap, bytesRate) {
      const t = tap.totals;
      const rows = [
        ["bytes in (requests)", fmtBytes((t.bytes || {}).request || 0)],
        ["bytes out (responses)", fmtBytes((t.bytes || {}).response || 0)],
        ["throughput now", bytesRate === null ? "–" : fmtBytes(bytesRate) + "/s"],
        ["connections opened", `${fmtInt((t.connections || {}).client || 0)} client · ${fmtInt((t.connections || {}).upstream || 0)} upstream`],
      ];
      this.traffic.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })]));
    }

    /* Until a chart has something to draw, a line says why it is empty: a point needs
     * two snapshots (a difference), a line two points; latency needs requests. */
    renderChartsNote() {
      const hist = this.history;
      let text = "";
      if (!haveCharts) text = "charts unavailable: the chart library did not load";
      else if (hist.t.length < 2) text = `waiting for data: the charts draw a point per poll (every ${POLL_MS / 1000} s) from the second one, a line from two points (${hist.t.length} of 2 so far)`;
      else if (!hist.p50.some((v) => v !== null)) text = "no requests since the page opened: the latency and phase charts wait for some";
      this.chartsNote.textContent = text;
      this.chartsNote.hidden = !text;
      this.chartsNote.dataset.chartsWaiting = text ? "yes" : "no";
    }

    renderCharts() {
      this.renderChartsNote();
      const hist = this.history;
      // What the charts hold, for a reader of the page's DOM (its test): the points and
      // those with errors, the server's history first.
      this.root.dataset.chartPoints = String(hist.t.length);
      this.root.dataset.chartErrorPoints = String(hist.errRate.filter((v) => v > 0).length);
      if (!haveCharts) return;
      this.rateChart.setData([hist.t, hist.rate, hist.errRate]);
      this.latencyChart.setData([hist.t, hist.p50, hist.p99]);
      if (this.stackChart) {
        // uPlot draws stacks as cumulative series with bands between neighbours.
        const cum = [];
        let below = hist.t.map(() => 0);
        for (const k of this.segKeys) {
          const col = hist.seg[k].map((v, i) => (v === null ? null : below[i] + v));
          below = col.map((v, i) => (v === null ? below[i] : v));
          cum.push(col);
        }
        this.stackChart.setData([hist.t, ...cum]);
      }
    }

    remove() {
      for (const c of [this.rateChart, this.latencyChart, this.stackChart]) if (c) c.destroy();
      this.root.remove();
    }
  }

  // ---------------------------------------------------------------------------------
  // The page
  // ---------------------------------------------------------------------------------

  const views = new Map();
  const main = document.getElementById("taps");
  const placeholder = document.getElementById("placeholder");
  const meta = document.getElementById("meta");
  const status = document.getElementById("status");
  const statusText = document.getElementById("status-text");
  const pauseButton = document.getElementById("pause");
  const resetButton = document.getElementById("reset");
  const profileButton = document.getElementById("profile");
  let paused = false;
  let timer = null;

  function setStatus(state, text) {
    status.dataset.state = state;
    statusText.textContent = text;
  }

  /* A figure of a finding's evidence in its unit (docs/metrics.md, `findings`). */
  function fmtEvidence(e) {
    const v = e.unit === "seconds" ? fmtDur(e.value)
      : e.unit === "ratio" ? fmtPct(e.value)
      : e.unit === "count" ? fmtInt(e.value)
      : e.unit === "per_second" ? fmtRate(e.value) + "/s"
      : num3(e.value);
    return `${e.name} ${v}` + (e.threshold ? ` (${e.threshold})` : "");
  }

  /* Whether a finding explains none of a request's time: a failure (`upstream_errors`,
   * `server_errors`), whose impact is 0 with no share of total. */
  function explainsNone(f) {
    const share = f.impact.share_of_total;
    return !f.impact.seconds_per_request && (share === null || share === undefined);
  }

  /* The findings card: what the rules of docs/findings.md find in the snapshot's window,
   * most severe first, each with its evidence, what it explains and its fix. */
  function renderFindings(findings) {
    const card = document.getElementById("findings");
    const list = document.getElementById("findings-list");
    card.hidden = !findings.length;
    list.replaceChildren(...findings.map((f) => {
      const share = f.impact.share_of_total;
      return h("li", { "data-finding": f.id, "data-finding-tap": f.tap },
        h("span", { class: `severity ${f.severity}`, text: f.severity }),
        h("span", { class: "id", text: f.id }),
        h("span", { class: "where", text: `tap ${f.tap}` + (f.route ? ` · route ${f.route}` : "") }),
        h("div", { class: "summary", text: f.summary }),
        // A failure explains no share of the answered requests' time: it says so by
        // leaving the line out, as the report does (never `explains 0 per request`).
        explainsNone(f) ? null : h("div", { class: "impact" }, h("b", { text: "explains " }),
          `${fmtDur(f.impact.seconds_per_request)} per request` + (share === null || share === undefined ? "" : `, ${fmtPct(share)} of total`)),
        h("div", { class: "fix" }, h("b", { text: "fix " }), f.fix),
        h("details", null, h("summary", { text: "evidence" }),
          h("ul", null, ...f.evidence.map((e) => h("li", { text: fmtEvidence(e) })))));
    }));
  }

  function render(snap) {
    takeStyles(snap);
    renderFindings(snap.findings || []);
    const span = snap.taken_at_unix - snap.since_unix;
    const busy = trafficSeconds(snap);
    const held = busy === null ? "" : `, ${fmtAge(busy)} with traffic`;
    meta.textContent = `v${snap.version} · clock ${snap.clock} · window ${fmtAge(span)}${held}, since ${fmtClock(snap.since_unix)}`;
    // Front to back (the snapshot's `position`): the tap clients reach first on top.
    const taps = snap.taps || {};
    const pos = (n) => (taps[n].position === undefined ? Infinity : taps[n].position);
    const names = Object.keys(taps).sort((a, b) => pos(a) - pos(b)
      || (taps[a].protocol === "resp") - (taps[b].protocol === "resp") || a.localeCompare(b));
    if (!snap.metrics_enabled) {
      placeholder.textContent = "Metrics are disabled (--no-metrics): nothing is recorded.";
    } else if (!names.length) {
      placeholder.textContent = "No taps are configured.";
    }
    placeholder.hidden = snap.metrics_enabled && names.length > 0;
    for (const [name, view] of views) {
      if (!names.includes(name)) { view.remove(); views.delete(name); }
    }
    for (const name of names) {
      let view = views.get(name);
      if (!view) { view = new TapView(name, main); views.set(name, view); }
      view.update(snap.taps[name], snap);
    }
    // A tap that appeared later was appended last: put the sections back in order.
    const shown = [...main.querySelectorAll(":scope > section.tap")].map((e) => e.dataset.tap);
    if (shown.join("\n") !== names.join("\n")) for (const name of names) main.append(views.get(name).root);
    markWideTables();
  }

  /* Every table must be readable in the window: one wider than its box is marked
   * (`data-clipped`), which the page's test looks for at 1280 px. */
  function markWideTables() {
    for (const table of main.querySelectorAll("table")) {
      const box = table.parentElement;
      if (!box || table.offsetParent === null) continue;
      if (table.scrollWidth > box.clientWidth + 1) table.dataset.clipped = String(table.scrollWidth - box.clientWidth);
      else delete table.dataset.clipped;
    }
  }

  // With an admin token configured, the API wants it as a bearer token. It comes from
  // the page's fragment (http://host:9464/#token=SECRET: a fragment never leaves the
  // browser), or is asked for once on a 401, and is kept for this tab only.
  function authHeaders() {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) sessionStorage.setItem("phasescope-token", decodeURIComponent(m[1]));
    const token = sessionStorage.getItem("phasescope-token");
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  async function api(path, init = {}) {
    const r = await fetch(path, { ...init, headers: { ...(init.headers || {}), ...authHeaders() } });
    if (r.status === 401) {
      const token = window.prompt("This phasescope's admin API needs its token:");
      if (token) {
        sessionStorage.setItem("phasescope-token", token);
        return fetch(path, { ...init, headers: { ...(init.headers || {}), ...authHeaders() } });
      }
    }
    return r;
  }

  async function poll() {
    let snap;
    try {
      const r = await api("/api/snapshot", { cache: "no-store", headers: { Accept: "application/json" } });
      // 503: other readers hold every snapshot turn (docs/security.md); the figures
      // shown stay, and the next poll asks again.
      if (r.status === 503) {
        setStatus("connecting", "admin server busy: retrying");
        return;
      }
      if (!r.ok) throw new Error(`/api/snapshot answered ${r.status}`);
      snap = await r.json();
    } catch (e) {
      setStatus("error", e instanceof TypeError ? "proxy unreachable" : e.message);
      return;
    }
    if (snap.format !== "phasescope-snapshot" || snap.format_version > 1) {
      setStatus("error", `unknown snapshot format ${snap.format} v${snap.format_version}`);
      return;
    }
    setStatus("live", `live · ${fmtClock(snap.taken_at_unix)}`);
    render(snap);
  }

  let historyPoints = [];

  async function loop() {
    timer = null;
    if (paused) return;
    const started = performance.now();
    await poll();
    if (!paused) timer = setTimeout(loop, Math.max(100, POLL_MS - (performance.now() - started)));
  }

  pauseButton.addEventListener("click", () => {
    paused = !paused;
    pauseButton.textContent = paused ? "Resume" : "Pause";
    pauseButton.setAttribute("aria-pressed", String(paused));
    if (paused) {
      if (timer) clearTimeout(timer);
      timer = null;
      setStatus("connecting", "paused");
    } else {
      loop();
    }
  });

  resetButton.addEventListener("click", async () => {
    if (!window.confirm("Empty the percentile histograms and start a new window? (Prometheus counters are not touched.)")) return;
    try {
      // JSON, so that no page elsewhere can send the same request (docs/security.md).
      const r = await api("/api/reset", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
      if (!r.ok) throw new Error(`/api/reset answered ${r.status}`);
    } catch (e) {
      setStatus("error", e.message);
      return;
    }
    for (const view of views.values()) view.remove();
    views.clear();
    if (!paused) { if (timer) clearTimeout(timer); loop(); }
  });

  // On-demand sampling (docs/deploy.md): the taps with profile = "on-demand" sample for
  // 30 s; the button says until when, and the next polls show the samples.
  profileButton.addEventListener("click", async () => {
    try {
      const r = await api("/api/profile?seconds=30", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
      if (r.status === 409) throw new Error("no tap samples on demand: set profile = \"on-demand\" in its [tap.process]");
      if (!r.ok) throw new Error(`/api/profile answered ${r.status}`);
      const until = new Date(Date.now() + 30000);
      profileButton.textContent = `Profiling until ${until.toLocaleTimeString()}`;
      setTimeout(() => { profileButton.textContent = "Profile 30 s"; }, 30000);
    } catch (e) {
      setStatus("error", e.message);
    }
  });

  // What the window held before this page opened (`/api/history`, docs/metrics.md): the
  // charts draw it first, so an outage before the page was opened is in them.
  async function loadHistory() {
    try {
      const r = await api("/api/history", { cache: "no-store", headers: { Accept: "application/json" } });
      if (r.ok) historyPoints = (await r.json()).points || [];
    } catch (e) {
      historyPoints = []; // an older proxy, or none reachable: the charts start with the polls
    }
  }

  loadHistory().then(loop);
})();

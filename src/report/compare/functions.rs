//! What changed inside the server: per function and per component, CPU per request on
//! each side, compared with an interval and a verdict (docs/compare.md, "What changed in
//! the server's CPU").
//!
//! In each snapshot (a bench's window, or a run) with sampled call stacks, a function's
//! CPU per request is its share of the samples times the server's CPU over the window's
//! exchanges: self (the function itself running, the leaf of the stack) and with callees
//! (anywhere on the stack, once per sample). A component's are the snapshot's `samples`
//! (self) and `inclusive` maps. CPU per request, not the share of the samples: a side
//! that got cheaper overall must not make every other function look dearer.
//!
//! Each is a ratio of totals over the same exchanges as the `cpu` row, and is compared as
//! that row is ([`super::cpu::per_request`]: paired windows, or Welch's t over
//! several runs a side). The rows are a family of their own — "which functions cost B's
//! server more or less CPU a request?" — and a row is `different` only if it is also a
//! discovery under Benjamini–Hochberg at q = α over the family: with every function
//! unchanged (an A/A bench), the chance of any `different` is then at most α.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::builds::{renamed, Builds};
use super::cpu;
use super::one_sided::{self, Only};
use super::options::Options;
use super::row::{decide, Draft, Row, ROUTE};
use crate::snapshot::Snapshot;
use crate::snapshot::{UpstreamSnapshot, OTHER_STACKS, TRUNCATED};
use crate::stats::multiplicity::benjamini_hochberg;
use crate::stats::paired::Cell;
use crate::stats::{Direction, Method, Outcome};

/// A function (or component) is a row when both sides together hold at least this many
/// of its samples: fewer cannot say anything of a change of a few percent.
const MIN_SAMPLES: u64 = 30;
/// ... and when it is at least this share of one side's CPU.
const MIN_SHARE: f64 = 0.005;
/// At most this many rows per kind and view, the largest on either side.
const MAX_ROWS: usize = 30;

/// A function, or a component (a library, a layer: the profiler's rules name it,
/// [`crate::snapshot::components`] labels it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Function,
    Component,
}

/// Which samples count: those where it runs itself, or those where it is anywhere on
/// the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    #[serde(rename = "self")]
    Own,
    WithCallees,
}

impl View {
    pub fn as_str(self) -> &'static str {
        match self {
            View::Own => "self",
            View::WithCallees => "with callees",
        }
    }
}

/// One function's (or component's) CPU per request on each side, and its verdict.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionRow {
    /// The tap whose server it is (with `--vs-tap`, A's tap name).
    pub tap: String,
    pub kind: Kind,
    pub view: View,
    /// The function (its symbol, or PHP's name), or the component.
    pub name: String,
    /// The object it lies in (binary, library, `[kernel]`, PHP script); empty for a
    /// component.
    pub object: String,
    /// Its component (a function's), or itself.
    pub component: String,
    /// CPU seconds per request on each side, over all the windows or runs.
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// Samples of it on each side.
    pub samples_a: u64,
    pub samples_b: u64,
    /// B/A − 1.
    pub change: Option<f64>,
    pub interval: Option<[f64; 2]>,
    pub confidence: Option<f64>,
    pub mde: Option<f64>,
    /// Windows (paired) or runs a side to detect the comparison's `detect`.
    pub runs_needed: Option<u64>,
    pub p: Option<f64>,
    pub method: Method,
    /// Windows (paired) or runs compared on each side.
    pub runs_a: usize,
    pub runs_b: usize,
    pub verdict: Outcome,
    /// `slower` (dearer) or `faster` (cheaper) when `different`.
    pub direction: Option<Direction>,
    pub note: Option<String>,
    /// The side that alone has it (`a`, `b`), or null: then `note` gives its CPU per
    /// request there, with that side's interval, and there is no change to measure.
    pub only: Option<Only>,
    /// A component's `self` row whose functions include some only one side has: the
    /// swap in words (`HTTP parser: http_parser_execute 261 ns → llhttp__internal__run
    /// 188 ns; the component itself 261 ns → 265 ns, +1.7 % [−26.5, +40.7]`).
    pub swap: Option<String>,
    /// A function named by `--function`: kept and printed whatever the cut.
    #[serde(skip)]
    pub asked: bool,
}

impl FunctionRow {
    /// `dearer` / `cheaper` for a `different` row.
    pub fn direction_word(&self) -> Option<&'static str> {
        self.direction.map(|d| match d {
            Direction::Slower => "dearer",
            Direction::Faster => "cheaper",
        })
    }
}

/// What a row is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Subject {
    kind: Kind,
    view: View,
    name: String,
    object: String,
    line: Option<u32>,
    component: String,
}

/// One snapshot's samples of one tap, counted per subject.
struct Window {
    /// Exchanges (`total`, every route), and the server's CPU seconds.
    requests: f64,
    cpu: f64,
    total: u64,
    samples: HashMap<Subject, u64>,
}

impl Window {
    /// `own`: the file of the side's binary when the two sides run different builds
    /// ([`Builds`]): its functions and component are counted as [`super::builds::OWN_CODE`].
    fn of(snap: &Snapshot, tap: &str, own: Option<&str>) -> Option<Window> {
        let t = snap.taps.get(tap)?;
        let u = t.upstream.as_ref()?;
        let stacks = u.stacks()?;
        let requests: u64 = t.phases.get("total")?.values().map(|s| s.count).sum();
        let total = stacks.total();
        if requests == 0 || total == 0 || u.watched_seconds <= 0.0 {
            return None;
        }
        let mut samples: HashMap<Subject, u64> = HashMap::new();
        let mut seen: Vec<u32> = Vec::new();
        let special = |name: &str| name == TRUNCATED || name == OTHER_STACKS;
        for stack in stacks.stacks.iter().filter(|s| s.samples > 0) {
            seen.clear();
            let n = stack.samples;
            let last = stack.frames.len().saturating_sub(1);
            for (depth, &i) in stack.frames.iter().enumerate() {
                let Some(f) = stacks.frames.get(i as usize) else {
                    continue;
                };
                if special(&f.name) || (f.object.is_empty() && f.component.is_empty()) {
                    continue;
                }
                let subject = |view| Subject {
                    kind: Kind::Function,
                    view,
                    name: f.name.clone(),
                    object: renamed(&f.object, own).to_owned(),
                    line: f.line,
                    component: renamed(&f.component, own).to_owned(),
                };
                if depth == last {
                    *samples.entry(subject(View::Own)).or_default() += n;
                }
                // Once per sample however often it recurs.
                if !seen.contains(&i) {
                    seen.push(i);
                    *samples.entry(subject(View::WithCallees)).or_default() += n;
                }
            }
        }
        let components = [(View::Own, u.samples()), (View::WithCallees, u.inclusive())];
        for (view, map) in components {
            for (name, &n) in map.into_iter().flatten() {
                let name = renamed(name, own);
                samples.insert(
                    Subject {
                        kind: Kind::Component,
                        view,
                        name: name.to_owned(),
                        object: String::new(),
                        line: None,
                        component: name.to_owned(),
                    },
                    n,
                );
            }
        }
        Some(Window {
            requests: requests as f64,
            cpu: on_cpu(u),
            total,
            samples,
        })
    }

    /// The subject's cell: its CPU seconds in this window over the window's exchanges.
    fn cell(&self, s: &Subject) -> Cell {
        let n = self.samples.get(s).copied().unwrap_or(0);
        let sum = self.cpu * n as f64 / self.total as f64;
        Cell {
            count: self.requests,
            sum,
            log: (sum / self.requests).ln(),
        }
    }
}

/// The server's time on a CPU, as the `cpu` row reads it.
fn on_cpu(u: &UpstreamSnapshot) -> f64 {
    u.cpu_seconds
        .unwrap_or(u.cpu_user_seconds + u.cpu_system_seconds)
}

/// A row before the family's control: what it is about, its samples on each side, its
/// draft, and the side that alone has it.
type Drafted = (Subject, u64, u64, Draft, Option<Only>);

/// Every tap with sampled stacks on both sides: its functions' and components' rows,
/// those that changed most first, and the taps whose sides run different builds (their
/// own code matched across them). `opts` as for the phases' rows (paired or not, α, the
/// threshold, the seed).
pub(super) fn rows(
    a: &[Snapshot],
    b: &[Snapshot],
    opts: &Options,
) -> (Vec<FunctionRow>, Vec<Builds>) {
    let taps: BTreeSet<&String> = a.iter().flat_map(|s| s.taps.keys()).collect();
    let mut drafts: Vec<Drafted> = Vec::new();
    let mut builds = Vec::new();
    for tap in taps {
        if super::one_process::of(a, b, tap).is_some() {
            // Both sides' samples are one process's (the notes say so).
            continue;
        }
        let two = Builds::of(a, b, tap);
        let own = |side_b: bool| two.as_ref().map(|x| x.file(side_b));
        let wa: Vec<Option<Window>> = a.iter().map(|s| Window::of(s, tap, own(false))).collect();
        let wb: Vec<Option<Window>> = b.iter().map(|s| Window::of(s, tap, own(true))).collect();
        if wa.iter().all(Option::is_none) || wb.iter().all(Option::is_none) {
            continue;
        }
        builds.extend(two.clone());
        drafts.extend(tap_drafts(tap, &wa, &wb, opts));
    }
    let mut out = decided(drafts, opts);
    one_sided::swaps(&mut out);
    (out, builds)
}

/// The drafts of one tap's subjects.
fn tap_drafts(
    tap: &str,
    wa: &[Option<Window>],
    wb: &[Option<Window>],
    opts: &Options,
) -> Vec<Drafted> {
    let mut out = Vec::new();
    for subject in subjects(wa, wb, &opts.asked_functions) {
        let cells = |ws: &[Option<Window>]| -> Vec<Option<Cell>> {
            ws.iter()
                .map(|w| w.as_ref().map(|w| w.cell(&subject)))
                .collect()
        };
        let samples = |ws: &[Option<Window>]| -> u64 {
            ws.iter()
                .flatten()
                .map(|w| w.samples.get(&subject).copied().unwrap_or(0))
                .sum()
        };
        let (sa, sb) = (samples(wa), samples(wb));
        let only = Only::of(sa, sb);
        let key = (tap.to_owned(), key_of(&subject), ROUTE.to_owned());
        let d = match only {
            Some(side) => one_sided::draft(key, side, &cells(wa), &cells(wb), opts),
            None => cpu::per_request(key, &cells(wa), &cells(wb), opts),
        };
        if let Some(d) = d {
            out.push((subject, sa, sb, d, only));
        }
    }
    out
}

/// The rows of the drafts, each decided under the family's control, in their order.
fn decided(drafts: Vec<Drafted>, opts: &Options) -> Vec<FunctionRow> {
    // The family: every row with a spread, Benjamini–Hochberg at q = α.
    let tested: Vec<usize> = (0..drafts.len())
        .filter(|&i| {
            drafts[i]
                .3
                .measured
                .as_ref()
                .is_some_and(|m| m.change.se > 0.0)
        })
        .collect();
    let p: Vec<f64> = tested
        .iter()
        .filter_map(|&i| drafts[i].3.measured.as_ref())
        .map(|m| m.change.p_beyond(opts.threshold))
        .collect();
    let mut discovered = vec![false; drafts.len()];
    for (&i, r) in tested.iter().zip(benjamini_hochberg(&p, opts.alpha)) {
        discovered[i] = r;
    }
    let mut out: Vec<FunctionRow> = drafts
        .into_iter()
        .zip(discovered)
        .map(|((subject, sa, sb, d, only), found)| {
            let row = decide(d, found, 1.0 - opts.alpha, opts);
            let asked =
                subject.kind == Kind::Function && opts.asked_functions.contains(&subject.name);
            FunctionRow {
                asked,
                ..function_row(subject, [sa, sb], only, row)
            }
        })
        .collect();
    out.sort_by(|x, y| {
        let changed = |r: &FunctionRow| r.verdict != Outcome::Different;
        // A row one side alone has moved by all of its CPU per request.
        let moved = |r: &FunctionRow| match (r.a, r.b) {
            (Some(a), Some(b)) => -(b - a).abs(),
            (Some(x), None) | (None, Some(x)) => -x.abs(),
            (None, None) => 0.0,
        };
        (x.kind, x.view, changed(x))
            .cmp(&(y.kind, y.view, changed(y)))
            .then(moved(x).total_cmp(&moved(y)))
            .then_with(|| x.name.cmp(&y.name))
    });
    out
}

/// The row's phase in its key: unique per subject, so that its bootstrap has a seed of
/// its own, and never a phase's name.
fn key_of(s: &Subject) -> String {
    let kind = match s.kind {
        Kind::Function => "function",
        Kind::Component => "component",
    };
    format!(
        "{kind}:{}:{}:{}:{}",
        s.view.as_str(),
        s.name,
        s.object,
        s.line.map_or(String::new(), |l| l.to_string())
    )
}

/// The subjects worth a row: enough samples on both sides together and a share of one
/// side's CPU worth reading, the [`MAX_ROWS`] largest per kind and view; and each
/// function `asked` for by name with any sample, whatever its size.
fn subjects(wa: &[Option<Window>], wb: &[Option<Window>], asked: &[String]) -> Vec<Subject> {
    fn totals(ws: &[Option<Window>]) -> (HashMap<&Subject, u64>, u64) {
        let mut by: HashMap<&Subject, u64> = HashMap::new();
        let mut all = 0;
        for w in ws.iter().flatten() {
            all += w.total;
            for (s, &n) in &w.samples {
                *by.entry(s).or_default() += n;
            }
        }
        (by, all.max(1))
    }
    let (ta, all_a) = totals(wa);
    let (tb, all_b) = totals(wb);
    // Per kind and view: (its larger share, whether it is kept whatever the cut: one
    // side alone has it, or it was asked for; the subject).
    type Ranked<'s> = Vec<(f64, bool, &'s Subject)>;
    let mut ranked: BTreeMap<(Kind, View), Ranked<'_>> = BTreeMap::new();
    let every: BTreeSet<&Subject> = ta.keys().chain(tb.keys()).copied().collect();
    for s in every {
        let (na, nb) = (
            ta.get(s).copied().unwrap_or(0),
            tb.get(s).copied().unwrap_or(0),
        );
        let share = (na as f64 / all_a as f64).max(nb as f64 / all_b as f64);
        let is_asked = s.kind == Kind::Function && asked.contains(&s.name);
        if (na + nb >= MIN_SAMPLES && share >= MIN_SHARE) || (is_asked && na + nb > 0) {
            let kept = Only::of(na, nb).is_some() || is_asked;
            ranked
                .entry((s.kind, s.view))
                .or_default()
                .push((share, kept, s));
        }
    }
    let mut out = Vec::new();
    for (_, mut list) in ranked {
        list.sort_by(|x, y| y.0.total_cmp(&x.0).then_with(|| x.2.cmp(y.2)));
        // What only one side has is kept whatever the cut: a function a build replaced
        // (its parser) is the answer to its A/B, and was once below the 30th row. So is
        // a function asked for by name.
        out.extend(
            list.into_iter()
                .enumerate()
                .filter(|(i, (_, kept, _))| *i < MAX_ROWS || *kept)
                .map(|(_, (_, _, s))| s.clone()),
        );
    }
    out
}

/// How the function rows were made, in words.
pub(super) fn note(rows: &[FunctionRow], opts: &Options) -> String {
    let tested = rows.iter().filter(|r| r.p.is_some()).count();
    format!(
        "functions and components: CPU per request on each side, a window's (or run's) \
         share of the samples times the server's CPU over its exchanges, compared as the \
         cpu row is; self counts the samples where it runs itself, with callees those \
         where it is anywhere on the stack; each interval at {:.0} %, different only under \
         Benjamini–Hochberg at q = {} over these {tested} rows",
        (1.0 - opts.alpha) * 100.0,
        opts.alpha
    )
}

fn function_row(
    s: Subject,
    [samples_a, samples_b]: [u64; 2],
    only: Option<Only>,
    r: Row,
) -> FunctionRow {
    FunctionRow {
        tap: r.tap,
        kind: s.kind,
        view: s.view,
        name: s.name,
        object: s.object,
        component: s.component,
        a: r.a,
        b: r.b,
        samples_a,
        samples_b,
        change: r.change,
        interval: r.interval,
        confidence: r.confidence,
        mde: r.mde,
        runs_needed: r.runs_needed,
        p: r.p,
        method: r.method,
        runs_a: r.runs_a,
        runs_b: r.runs_b,
        verdict: r.verdict,
        direction: r.direction,
        note: r.note,
        only,
        swap: None,
        asked: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Frame, Stack, Stacks};

    fn frame(name: &str, build: &str) -> Frame {
        Frame {
            name: name.to_owned(),
            object: build.to_owned(),
            component: build.to_owned(),
            line: None,
            at_line: None,
        }
    }

    /// One window of a tap `t` of process `pid`: `requests` exchanges, `cpu` seconds,
    /// and samples of main→parse and main→backend.
    fn window(pid: u32, requests: u64, cpu: f64, parse: u64, backend: u64) -> Snapshot {
        build_window((pid, "server"), "parse", [requests, parse, backend], cpu)
    }

    /// [`window`] of the binary `build` (its file name, its own code's component) whose
    /// parser is the function `parser`; `n`: requests, parser and backend samples.
    fn build_window((pid, build): (u32, &str), parser: &str, n: [u64; 3], cpu: f64) -> Snapshot {
        let [requests, parse, backend] = n;
        let mean = 1e-3;
        let series = serde_json::json!({
            "count": requests, "sum": mean * requests as f64, "mean": mean, "min": mean,
            "p50": mean, "p90": mean, "p99": mean, "p999": mean, "max": mean,
            "histogram": [[1_000_000u64, requests]]
        });
        serde_json::from_value(serde_json::json!({
            "format": "phasescope-snapshot", "format_version": 1, "version": "test",
            "clock": "os", "taken_at": "", "taken_at_unix": 1.0, "since": "",
            "since_unix": 0.0, "metrics_enabled": true,
            "hdr": { "significant_figures": 2, "lowest_ns": 1, "highest_ns": 3_600_000_000_000u64 },
            "taps": { "t": {
                "protocol": "http", "phases": { "total": { "GET": series } },
                "totals": { "requests": requests, "errors": {}, "connections_open": {},
                            "connections": { "client": 1 }, "bytes": {} },
                "upstream": {
                    "pid": pid, "comm": build, "exe": format!("/usr/bin/{build}"), "threads": 4,
                    "interval_seconds": 1.0, "watched_seconds": 1.0,
                    "cpu_user_seconds": cpu, "cpu_system_seconds": 0.0, "cpu_seconds": cpu,
                    "runqueue_seconds": 0.0, "busiest_thread_seconds": 1.0,
                    "context_switches_voluntary": 0, "context_switches_involuntary": 0,
                    "restarts": 0,
                    "samples": { build: parse + backend },
                    "inclusive": { build: parse + backend },
                    "stacks": Stacks {
                        frames: vec![
                            frame("main", build),
                            frame(parser, build),
                            frame("backend", build),
                        ],
                        stacks: vec![
                            Stack { frames: vec![0, 1], samples: parse },
                            Stack { frames: vec![0, 2], samples: backend },
                        ],
                        truncated_samples: 0,
                        unmapped_samples: 0,
                    }
                }
            } }
        }))
        .unwrap_or_else(|e| panic!("a snapshot: {e}"))
    }

    fn find<'r>(rows: &'r [FunctionRow], name: &str, view: View) -> &'r FunctionRow {
        rows.iter()
            .find(|r| r.kind == Kind::Function && r.name == name && r.view == view)
            .unwrap_or_else(|| panic!("no row {name} {view:?}: {rows:#?}"))
    }

    /// A function too small for a row (2 samples of 1,002 a window, 20 in all) is one when
    /// asked for by name (`--function`), with its CPU per request, and printed whatever
    /// the cut.
    #[test]
    fn a_function_asked_for_is_a_row_whatever_its_size() {
        let side = |pid| {
            (0..10)
                .map(|_| window(pid, 1000, 1.0, 1000, 2))
                .collect::<Vec<_>>()
        };
        let (a, b) = (side(1), side(2));
        let plain = rows(&a, &b, &Options::default()).0;
        assert!(!plain.iter().any(|r| r.name == "backend"), "{plain:#?}");
        let opts = Options {
            asked_functions: vec!["backend".to_owned()],
            ..Options::default()
        };
        let asked = rows(&a, &b, &opts).0;
        let r = find(&asked, "backend", View::Own);
        assert!(r.asked, "{r:#?}");
        // 1 s of CPU over 1,000 requests, 2 samples of 1,002.
        let truth = 1.0 / 1000.0 * 2.0 / 1002.0;
        for v in [r.a, r.b] {
            let v = v.unwrap_or_else(|| panic!("{r:#?}"));
            assert!((v - truth).abs() < 1e-3 * truth, "{v} against {truth}");
        }
    }

    /// B's parse costs a third more CPU a request and its backend the same, over 40 paired
    /// windows whose load swings together: parse is `different` (dearer), with the change
    /// in its interval; backend is not; the shares alone would have called backend
    /// cheaper.
    #[test]
    fn a_dearer_function_is_different_and_an_unchanged_one_is_not() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..40u64 {
            let requests = 1000 + 37 * (i % 7);
            let jitter = |k: u64| ((i * k) % 5) as f64 - 2.0;
            // 300 µs of parse and 300 of backend a request on A, 400 and 300 on B.
            let (pa, ba) = (300.0 + jitter(3), 300.0 + jitter(7));
            let (pb, bb) = (400.0 + jitter(11), 300.0 + jitter(13));
            let r = requests as f64;
            a.push(window(
                1,
                requests,
                (pa + ba) * 1e-6 * r,
                (pa * 10.0) as u64,
                (ba * 10.0) as u64,
            ));
            b.push(window(
                2,
                requests,
                (pb + bb) * 1e-6 * r,
                (pb * 10.0) as u64,
                (bb * 10.0) as u64,
            ));
        }
        let opts = Options {
            paired: true,
            ..Options::default()
        };
        let (rows, _) = rows(&a, &b, &opts);
        let parse = find(&rows, "parse", View::Own);
        assert_eq!(parse.verdict, Outcome::Different, "{parse:#?}");
        assert_eq!(parse.direction_word(), Some("dearer"));
        let [low, high] = parse.interval.unwrap_or_default();
        let truth = 400.0 / 300.0 - 1.0;
        assert!(low <= truth && truth <= high, "{parse:#?}");
        let backend = find(&rows, "backend", View::Own);
        assert_ne!(backend.verdict, Outcome::Different, "{backend:#?}");
        assert!(
            (backend.a.unwrap_or(0.0) - 300e-6).abs() < 5e-6,
            "{backend:#?}"
        );
        // main, with what it calls, is dearer: parse is in it.
        assert_eq!(
            find(&rows, "main", View::WithCallees).direction_word(),
            Some("dearer")
        );
        assert_eq!(rows[0].name, "parse", "the changed first: {rows:#?}");
    }

    /// Two builds of different file names, B's parser renamed (`parse_a` → `parse_b`) and
    /// a third dearer: `main` and `backend` are one row each, not split by binary; the
    /// parsers are a row each, only on their side, with their CPU per request and no
    /// "run without a sample"; the own code's component is one row, and says the swap.
    #[test]
    fn two_builds_match_by_function_and_say_the_swap() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..20u64 {
            let requests = 1000 + 37 * (i % 7);
            let r = requests as f64;
            let w = i % 3;
            a.push(build_window(
                (1, "burn-a"),
                "parse_a",
                [requests, 3000 + w, 3000],
                600e-6 * r,
            ));
            b.push(build_window(
                (2, "burn-b"),
                "parse_b",
                [requests, 4000 + w, 3000],
                700e-6 * r,
            ));
        }
        let opts = Options {
            paired: true,
            ..Options::default()
        };
        let (rows, builds) = rows(&a, &b, &opts);
        assert_eq!(builds.len(), 1, "{builds:?}");
        assert_eq!(
            (builds[0].a.as_str(), builds[0].b.as_str()),
            ("burn-a", "burn-b")
        );
        // One row a view (main never runs itself: with callees only).
        for (name, views) in [("main", 1), ("backend", 2)] {
            let n = rows.iter().filter(|r| r.name == name).count();
            assert_eq!(n, views, "{name}: one row a view: {rows:#?}");
            let r = find(&rows, name, View::WithCallees);
            assert!(r.a.is_some() && r.b.is_some() && r.only.is_none(), "{r:#?}");
        }
        let pa = find(&rows, "parse_a", View::Own);
        assert_eq!(pa.only, Some(Only::A), "{pa:#?}");
        assert!((pa.a.unwrap_or(0.0) - 300e-6).abs() < 5e-6, "{pa:#?}");
        let note = pa.note.clone().unwrap_or_default();
        assert!(note.starts_with("only in A: 300 µs a request ["), "{note}");
        let pb = find(&rows, "parse_b", View::Own);
        assert_eq!(pb.only, Some(Only::B), "{pb:#?}");
        assert!((pb.b.unwrap_or(0.0) - 400e-6).abs() < 5e-6, "{pb:#?}");
        let own: Vec<&FunctionRow> = rows
            .iter()
            .filter(|r| r.kind == Kind::Component && r.view == View::Own)
            .collect();
        assert_eq!(own.len(), 1, "{own:#?}");
        assert_eq!(own[0].name, super::super::builds::OWN_CODE);
        let swap = own[0].swap.clone().unwrap_or_default();
        assert!(
            swap.starts_with(
                "own code: parse_a 300 µs → parse_b 400 µs; the component itself 600 µs → 700 µs, +16.7 %"
            ),
            "{swap}"
        );
    }

    /// The same two builds with the same code: no row split, none one-sided, none
    /// `different`.
    #[test]
    fn two_builds_of_the_same_code_split_no_row() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..20u64 {
            let requests = 1000 + 37 * (i % 7);
            let r = requests as f64;
            let w = i % 3;
            a.push(build_window(
                (1, "burn-a"),
                "parse",
                [requests, 3000 + w, 3000],
                600e-6 * r,
            ));
            b.push(build_window(
                (2, "burn-b"),
                "parse",
                [requests, 3000 + 2 - w, 3000],
                600e-6 * r,
            ));
        }
        let opts = Options {
            paired: true,
            ..Options::default()
        };
        let (rows, _) = rows(&a, &b, &opts);
        assert!(
            rows.iter()
                .all(|r| r.only.is_none() && r.verdict != Outcome::Different && r.swap.is_none()),
            "{rows:#?}"
        );
        // main with callees, parse and backend in two views, the own code in two.
        assert_eq!(rows.len(), 7, "{rows:#?}");
    }
}

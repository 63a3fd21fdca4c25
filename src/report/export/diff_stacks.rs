//! Two sides' call stacks out of `bench` and `compare`: a differential flame graph
//! (`--diff-flamegraph`), and each side's folded stacks (`--folded`) and pprof profile
//! (`--pprof`, which `go tool pprof -diff_base` reads) (docs/compare.md, "The
//! differential flame graph").
//!
//! The flame graphs are two, as Brendan Gregg's differential flame graphs are: B's stacks
//! and A's (where what vanished in B was), each frame as wide as its CPU per request on
//! its side, both coloured by the comparison's rows ([`diff_colours`]): red or blue only
//! where the function's `self` row is `different` or one-sided, neutral elsewhere. CPU
//! per request and not the samples' share: when B is cheaper overall, every function it
//! did not change takes a larger share of its samples, and a graph of shares paints them
//! all red.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::Context;
use inferno::flamegraph;

use super::diff_colours;
use super::pprof;
use super::pprof_proto as pb;
use super::stacks::{self, FrameKind, TapStacks};
use crate::report::compare::builds::{file_of, renamed};
use crate::report::compare::functions::FunctionRow;
use crate::snapshot::Snapshot;
use crate::snapshot::{Frame, Stacks};

/// One side's stacks of a tap, merged over its windows or runs, with what they are per
/// request.
pub struct Side<'a> {
    /// `a` or `b`: the files' suffix.
    pub name: &'static str,
    pub stacks: TapStacks<'a>,
    /// Exchanges of the tap (`total`, every route) over the same windows.
    pub requests: u64,
    /// The server's CPU seconds over them.
    pub cpu: f64,
    /// The earliest window's start, for the pprof profile's time.
    pub since_unix: f64,
}

impl Side<'_> {
    /// Seconds of CPU per request that one sample stands for.
    fn per_sample(&self) -> f64 {
        self.cpu / self.stacks.stacks.total().max(1) as f64 / self.requests.max(1) as f64
    }
}

/// The merged snapshot of one side, for [`side`] to borrow from.
pub fn merged(snaps: &[Snapshot]) -> Option<Snapshot> {
    Snapshot::merged(snaps)
}

/// `tap`'s stacks in a side's merged snapshot, or why there are none.
pub fn side<'a>(
    name: &'static str,
    merged: &'a Snapshot,
    tap: &'a str,
) -> anyhow::Result<Side<'a>> {
    let t = merged
        .taps
        .get(tap)
        .with_context(|| format!("side {name} has no tap {tap}"))?;
    let upstream = t
        .upstream
        .as_ref()
        .with_context(|| format!("side {name}: tap {tap} watched no server process"))?;
    let stacks = upstream
        .stacks()
        .filter(|s| s.total() > 0)
        .with_context(|| {
            format!(
                "side {name}: tap {tap}'s server has no sampled call stacks \
             (sample it: bench --profile-upstream, or profile = true in its [tap.process])"
            )
        })?;
    let requests: u64 = t
        .phases
        .get("total")
        .map_or(0, |routes| routes.values().map(|s| s.count).sum());
    anyhow::ensure!(requests > 0, "side {name}: tap {tap} recorded no exchange");
    Ok(Side {
        name,
        stacks: TapStacks {
            tap,
            upstream,
            stacks,
        },
        requests,
        cpu: upstream
            .cpu_seconds
            .unwrap_or(upstream.cpu_user_seconds + upstream.cpu_system_seconds),
        since_unix: merged.since_unix,
    })
}

/// The label of every frame of both sides, from one table of both, so that a function
/// is named alike on each side (`name [object]` where two objects share a name).
fn labels<'f>(a: &'f Stacks, b: &'f Stacks, kind: FrameKind) -> HashMap<&'f Frame, String> {
    let mut both = a.clone();
    both.merge(b);
    let names = stacks::frame_labels(&both, kind);
    let by_value: HashMap<&Frame, &String> = both.frames.iter().zip(&names).collect();
    a.frames
        .iter()
        .chain(&b.frames)
        .filter_map(|f| Some((f, (*by_value.get(f)?).clone())))
        .collect()
}

/// Folded stack → samples of one side, with the shared labels.
fn folded(s: &Stacks, labels: &HashMap<&Frame, String>) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for stack in s.stacks.iter().filter(|x| x.samples > 0) {
        let parts: Vec<&str> = s
            .frames_of(stack)
            .filter_map(|f| labels.get(f).map(String::as_str))
            .collect();
        let key = if parts.is_empty() {
            "[unknown]".to_owned()
        } else {
            parts.join(";")
        };
        *out.entry(key).or_default() += stack.samples;
    }
    out
}

/// Picoseconds per request in the graph's counts: inferno counts in integers, and a
/// stack of one sample over 10,000 requests is 100 ns a request.
const PER_SECOND: f64 = 1e12;

/// Each side's stacks with its own code named alike (`own code`) when the two sides run
/// builds of different file names, so that `json_reply` of one build is one frame with
/// `json_reply` of the other, as the rows match them ([`crate::report::compare::builds`]).
fn named_alike(a: &Side<'_>, b: &Side<'_>) -> (Stacks, Stacks) {
    let (fa, fb) = (file_of(a.stacks.upstream), file_of(b.stacks.upstream));
    let differ = fa.is_some() && fb.is_some() && fa != fb;
    let rename = |s: &Stacks, own: Option<&str>| {
        let mut s = s.clone();
        if differ {
            for f in &mut s.frames {
                f.object = renamed(&f.object, own).to_owned();
                f.component = renamed(&f.component, own).to_owned();
            }
        }
        s
    };
    (
        rename(a.stacks.stacks, fa.as_deref()),
        rename(b.stacks.stacks, fb.as_deref()),
    )
}

/// The differential flame graphs of B against A, as SVG: B's stacks (what B costs,
/// coloured by the change from A) and A's (where what B made cheaper or removed was).
/// Each frame is as wide as its CPU per request on its side and coloured by its
/// function's `self` row in `rows` (of A's tap `tap`): red or blue only where that row is
/// `different` or one-sided, neutral elsewhere ([`diff_colours`]).
pub fn flamegraphs(
    a: &Side<'_>,
    b: &Side<'_>,
    rows: &[FunctionRow],
    tap: &str,
) -> anyhow::Result<[Vec<u8>; 2]> {
    let kind = b.stacks.kind();
    let (sa, sb) = named_alike(a, b);
    let labels = labels(&sa, &sb, kind);
    let changes = diff_colours::Changes::of(rows, tap);
    let us = |s: &Side<'_>| crate::units::duration(s.cpu / s.requests.max(1) as f64);
    // Short enough for the default width (a longer title or legend ran off the
    // picture): each side's CPU per request in its title, the legend alone below.
    let title_b = format!(
        "B, {}: {} of CPU a request (A {}), coloured by the change from A",
        b.stacks.describe(),
        us(b),
        us(a)
    );
    let title_a = format!(
        "A, {}: {} of CPU a request; blue: cheaper in B, or not in B",
        a.stacks.describe(),
        us(a)
    );
    let subtitle = diff_colours::LEGEND.to_owned();
    Ok([
        graph(b, &sb, &labels, &changes, (title_b, subtitle.clone()))?,
        graph(a, &sa, &labels, &changes, (title_a, subtitle))?,
    ])
}

/// One side's graph: its stacks as wide as their CPU per request, each label in its
/// function's colour, each tooltip with its row in words.
fn graph(
    side: &Side<'_>,
    stacks: &Stacks,
    labels: &HashMap<&Frame, String>,
    changes: &diff_colours::Changes,
    (title, subtitle): (String, String),
) -> anyhow::Result<Vec<u8>> {
    let k = side.per_sample() * PER_SECOND;
    let lines: Vec<String> = folded(stacks, labels)
        .into_iter()
        .map(|(stack, n)| format!("{stack} {}", (n as f64 * k).round() as u64))
        .collect();
    let mut palette = diff_colours::palette(
        labels
            .iter()
            .map(|(f, l)| (l.as_str(), f.name.as_str(), f.object.as_str())),
        changes,
    );
    let words: HashMap<&str, &str> = labels
        .iter()
        .filter_map(|(f, l)| Some((l.as_str(), changes.words(&f.name, &f.object)?)))
        .collect();
    let mut opts = flamegraph::Options::default();
    opts.title = title;
    opts.subtitle = Some(subtitle);
    opts.count_name = "ns per request".to_owned();
    opts.factor = 1e9 / PER_SECOND;
    opts.deterministic = true;
    // A long name keeps its start, the function's name, where it does not fit.
    opts.text_truncate_direction = flamegraph::TextTruncateDirection::Right;
    opts.palette_map = Some(&mut palette);
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .context("drawing the differential flame graph")?;
    Ok(rows_in_titles(&svg, &words))
}

/// Each frame's tooltip, `json_reply (6,070 ns per request, 22.1%)`, with its `self`
/// row in words after it: `; itself 6.03 µs → 6.07 µs a request, +0.7 % [−2.1, +3.4],
/// unknown`.
fn rows_in_titles(svg: &[u8], words: &HashMap<&str, &str>) -> Vec<u8> {
    let text = String::from_utf8_lossy(svg);
    let Ok(re) =
        regex::Regex::new(r"<title>([^<]*) \(([0-9,]+ ns per request, [0-9.]+%)\)</title>")
    else {
        return svg.to_vec();
    };
    let out = re.replace_all(&text, |c: &regex::Captures<'_>| {
        let label = unescape(&c[1]);
        match words.get(label.as_str()) {
            Some(w) => format!("<title>{} ({}; {})</title>", &c[1], &c[2], escape(w)),
            None => c[0].to_owned(),
        }
    });
    out.into_owned().into_bytes()
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&#34;", "\"")
        .replace("&amp;", "&")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A side's pprof profile: the samples and CPU of `report --pprof`, plus
/// `cpu_per_1000_requests` (nanoseconds of CPU per thousand requests, each stack's share
/// of the side's CPU), the default sample type, so that `go tool pprof -diff_base a.pb.gz
/// b.pb.gz` subtracts CPU per request and not CPU over however long each side ran.
pub fn pprof_per_request(s: &Side<'_>) -> pb::Profile {
    let mut p = pprof::profile(&s.stacks, Some(s.since_unix));
    let mut string = |text: &str| -> i64 {
        if let Some(i) = p.string_table.iter().position(|t| t == text) {
            return i as i64;
        }
        p.string_table.push(text.to_owned());
        (p.string_table.len() - 1) as i64
    };
    let (kind, unit) = (string("cpu_per_1000_requests"), string("nanoseconds"));
    p.sample_type.push(pb::ValueType { r#type: kind, unit });
    p.default_sample_type = kind;
    let per_sample = s.per_sample() * 1e9 * 1000.0;
    for sample in &mut p.sample {
        let n = sample.value.first().copied().unwrap_or(0);
        sample.value.push((n as f64 * per_sample).round() as i64);
    }
    p
}

/// `--diff-flamegraph`, `--folded`, `--pprof` of `bench` and `compare`: for each tap
/// (`(A's tap, B's tap)`) with sampled stacks on both sides, the differential flame
/// graph, each side's folded stacks and each side's pprof profile, each file named on
/// standard error. A side's file is the path with `.a` or `.b` before its extension;
/// with several taps, the tap's name before that.
pub struct Exports<'p> {
    pub diff_flamegraph: Option<&'p Path>,
    pub folded: Option<&'p Path>,
    pub pprof: Option<&'p Path>,
}

impl Exports<'_> {
    pub fn wanted(&self) -> bool {
        self.diff_flamegraph.is_some() || self.folded.is_some() || self.pprof.is_some()
    }

    /// `rows`: the comparison's function rows, which colour the differential graphs.
    pub fn write(
        &self,
        a: &[Snapshot],
        b: &[Snapshot],
        taps: &[(String, String)],
        rows: &[FunctionRow],
    ) -> anyhow::Result<()> {
        if !self.wanted() {
            return Ok(());
        }
        let (ma, mb) = (
            merged(a).context("no snapshot on side A")?,
            merged(b).context("no snapshot on side B")?,
        );
        anyhow::ensure!(!taps.is_empty(), "no tap to export the stacks of");
        let several = taps.len() > 1;
        for (ta, tb) in taps {
            let (sa, sb) = (side("a", &ma, ta)?, side("b", &mb, tb)?);
            let named = |path: &Path, which: &str| {
                stacks::path_for(&stacks::path_for(path, ta, several), which, true)
            };
            if let Some(path) = self.diff_flamegraph {
                let out = stacks::path_for(path, ta, several);
                let [of_b, of_a] = flamegraphs(&sa, &sb, rows, ta)?;
                crate::report::file::write_output(&out, &of_b)?;
                let out_a = named(path, "a");
                crate::report::file::write_output(&out_a, &of_a)?;
                eprintln!(
                    "wrote the differential flame graphs of B ({}) against A ({}) to {} (B's \
                     stacks) and {} (A's: what B made cheaper or removed)",
                    sb.stacks.describe(),
                    sa.stacks.describe(),
                    out.display(),
                    out_a.display()
                );
            }
            for s in [&sa, &sb] {
                if let Some(path) = self.folded {
                    let out = named(path, s.name);
                    let text = stacks::folded(s.stacks.stacks, s.stacks.kind());
                    crate::report::file::write_output(&out, text.as_bytes())?;
                    eprintln!(
                        "wrote the folded stacks of side {} ({}) to {}",
                        s.name,
                        s.stacks.describe(),
                        out.display()
                    );
                }
                if let Some(path) = self.pprof {
                    let out = named(path, s.name);
                    crate::report::file::write_output(
                        &out,
                        &pprof::encode(&pprof_per_request(s))?,
                    )?;
                    eprintln!(
                        "wrote the pprof profile of side {} ({}) to {}",
                        s.name,
                        s.stacks.describe(),
                        out.display()
                    );
                }
            }
        }
        Ok(())
    }
}

//! Two sides' call stacks out of `bench` and `compare`: a differential flame graph
//! (`--diff-flamegraph`), and each side's folded stacks (`--folded`) and pprof profile
//! (`--pprof`, which `go tool pprof -diff_base` reads) (docs/compare.md, "The
//! differential flame graph").
//!
//! The flame graph is B's stacks, each frame as wide as its CPU per request in B and
//! coloured by how its own CPU per request (where it runs itself, as Brendan Gregg's
//! `difffolded.pl` and inferno's differential colour it) changed from A: red dearer, blue
//! cheaper, white the same. CPU per request and not the samples' share: when B is cheaper
//! overall, every function it did not change takes a larger share of its samples, and a
//! graph of shares paints them all red.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::Context;
use inferno::flamegraph;

use super::pprof;
use super::pprof_proto as pb;
use super::stacks::{self, FrameKind, TapStacks};
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

/// The differential flame graph of B against A, as SVG.
pub fn flamegraph(a: &Side<'_>, b: &Side<'_>) -> anyhow::Result<Vec<u8>> {
    let kind = b.stacks.kind();
    let labels = labels(a.stacks.stacks, b.stacks.stacks, kind);
    let (fa, fb) = (
        folded(a.stacks.stacks, &labels),
        folded(b.stacks.stacks, &labels),
    );
    let (ka, kb) = (a.per_sample() * PER_SECOND, b.per_sample() * PER_SECOND);
    let mut lines: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (stack, &n) in &fa {
        lines.entry(stack).or_default().0 = (n as f64 * ka).round() as u64;
    }
    for (stack, &n) in &fb {
        lines.entry(stack).or_default().1 = (n as f64 * kb).round() as u64;
    }
    let lines: Vec<String> = lines
        .into_iter()
        .map(|(stack, (x, y))| format!("{stack} {x} {y}"))
        .collect();
    let us = |s: &Side<'_>| crate::units::duration(s.cpu / s.requests.max(1) as f64);
    let mut opts = flamegraph::Options::default();
    opts.title = format!(
        "CPU per request: B ({}) against A ({})",
        b.stacks.describe(),
        a.stacks.describe()
    );
    opts.subtitle = Some(format!(
        "B's stacks, as wide as their CPU per request; red: dearer in B, blue: cheaper (each \
         frame by its own CPU per request); A {} a request, B {}",
        us(a),
        us(b)
    ));
    opts.count_name = "ns per request".to_owned();
    opts.factor = 1e9 / PER_SECOND;
    opts.deterministic = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .context("drawing the differential flame graph")?;
    let width: u64 = fb.values().map(|&n| (n as f64 * kb).round() as u64).sum();
    Ok(own_change_in_titles(&svg, width as f64, opts.factor))
}

/// inferno's tooltip gives a frame's own change as a percentage of the graph's width,
/// but divides the unscaled count by the scaled width (off by 1/`factor`): each tooltip's
/// `; +X%)` is rewritten as the change in CPU per request it stands for, `; +97.1 µs
/// itself)`. `width` is the sum of the graph's (B's) counts.
fn own_change_in_titles(svg: &[u8], width: f64, factor: f64) -> Vec<u8> {
    let text = String::from_utf8_lossy(svg);
    let Ok(re) = regex::Regex::new(r"; ([+-]?[0-9.]+)%\)</title>") else {
        return svg.to_vec();
    };
    let out = re.replace_all(&text, |c: &regex::Captures<'_>| {
        let pct: f64 = c[1].parse().unwrap_or(0.0);
        // pct = 100 · delta / (width · factor); delta in the counts' unit (ps).
        let seconds = pct / 100.0 * width * factor / PER_SECOND;
        let sign = if seconds > 0.0 {
            "+"
        } else if seconds < 0.0 {
            "−"
        } else {
            "±"
        };
        format!(
            "; {sign}{} a request itself)</title>",
            crate::units::duration(seconds.abs())
        )
    });
    out.into_owned().into_bytes()
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

    pub fn write(
        &self,
        a: &[Snapshot],
        b: &[Snapshot],
        taps: &[(String, String)],
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
                crate::report::file::write_output(&out, &flamegraph(&sa, &sb)?)?;
                eprintln!(
                    "wrote the differential flame graph of B ({}) against A ({}) to {}",
                    sb.stacks.describe(),
                    sa.stacks.describe(),
                    out.display()
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

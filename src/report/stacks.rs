//! The upstream's sampled call stacks out of a report: folded stacks, a flame graph SVG
//! and a pprof profile (`report --folded`, `--flamegraph`, `--pprof`; docs/report.md,
//! "Flame graphs, folded stacks and pprof").
//!
//! Each tap's stacks are those of the merged snapshots ([`crate::upstream::snapshot::merge`]),
//! so a report over several runs draws one graph of all of them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Context;
use inferno::flamegraph::{self, color};

use super::dataset::Dataset;
use crate::upstream::snapshot::{Stacks, OTHER_STACKS, TRUNCATED};
use crate::upstream::UpstreamSnapshot;

/// Where a stack's frames come from, which decides how a frame is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Machine code: symbols in objects (the binary, its libraries, the kernel).
    Native,
    /// The PHP interpreter's own call stack: `Class::method` as PHP names it.
    Php,
}

impl FrameKind {
    /// From the snapshot's `frames`; native when it does not say.
    pub fn of(u: &UpstreamSnapshot) -> FrameKind {
        match u.frames.as_deref() {
            Some("php") => FrameKind::Php,
            _ => FrameKind::Native,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Native => "native",
            FrameKind::Php => "php",
        }
    }
}

/// One tap whose stacks are exported.
#[derive(Debug, Clone, Copy)]
pub struct TapStacks<'a> {
    pub tap: &'a str,
    pub upstream: &'a UpstreamSnapshot,
    pub stacks: &'a Stacks,
}

impl TapStacks<'_> {
    pub fn kind(&self) -> FrameKind {
        FrameKind::of(self.upstream)
    }

    /// `webdis (pid 4242), tap webdis`: the process and where it was watched.
    pub fn describe(&self) -> String {
        let comm = self.upstream.comm.as_deref().unwrap_or("the upstream");
        match self.upstream.pid {
            Some(pid) => format!("{comm} (pid {pid}), tap {}", self.tap),
            None => format!("{comm}, tap {}", self.tap),
        }
    }
}

/// The taps to export: `only` alone when given, else every tap with stacks. Taps that
/// watch a process but have no stacks are returned apart (with why), for a note; a tap
/// with no process at all is not a tap anyone expects stacks of.
pub fn select<'a>(
    ds: &'a Dataset,
    only: Option<&'a str>,
) -> anyhow::Result<(Vec<TapStacks<'a>>, Vec<String>)> {
    if let Some(name) = only {
        let tap = ds.taps.get(name).with_context(|| {
            format!(
                "no tap {name:?} in the report (its taps: {})",
                ds.taps.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?;
        return match with_stacks(name, tap.upstream.as_ref()) {
            Ok(t) => Ok((vec![t], Vec::new())),
            Err(why) => Err(anyhow::anyhow!("{why}")),
        };
    }
    let mut chosen = Vec::new();
    let mut skipped = Vec::new();
    let mut reasons = Vec::new();
    for (name, tap) in &ds.taps {
        match with_stacks(name, tap.upstream.as_ref()) {
            Ok(t) => chosen.push(t),
            Err(why) => {
                if tap.upstream.is_some() {
                    skipped.push(why.clone());
                }
                reasons.push(why);
            }
        }
    }
    anyhow::ensure!(
        !chosen.is_empty(),
        "no call stacks to export: {}",
        reasons.join("; ")
    );
    Ok((chosen, skipped))
}

/// The tap's stacks, or a sentence naming the tap, why it has none and how to get them.
fn with_stacks<'a>(tap: &'a str, u: Option<&'a UpstreamSnapshot>) -> Result<TapStacks<'a>, String> {
    const HOW: &str =
        "set profile = true in its [tap.process] (or run the proxy with --profile-upstream)";
    let Some(upstream) = u else {
        return Err(format!(
            "tap {tap} watches no upstream process, so it has no call stacks: give it a [tap.process] with profile = true"
        ));
    };
    match &upstream.stacks {
        Some(stacks) if stacks.total() > 0 => Ok(TapStacks {
            tap,
            upstream,
            stacks,
        }),
        Some(_) => Err(format!(
            "tap {tap} has no sampled stacks in this window (its upstream used no CPU while watched)"
        )),
        None if upstream.samples.is_some() => Err(format!(
            "tap {tap} has CPU samples but no call stacks: its [tap.process] sets stack_bytes = 0 (the sampled function only; leave it at its default for stacks), or the snapshot comes from a phasescope that recorded none"
        )),
        None => Err(format!(
            "tap {tap}'s upstream was not sampled, so it has no call stacks: {HOW}"
        )),
    }
}

/// The file for `tap`: `path` itself when it is the only tap exported, else the tap's
/// name before the extension (`out.svg` → `out.webdis.svg`, `out.pb.gz` →
/// `out.webdis.pb.gz`, `out` → `out.webdis`).
pub fn path_for(path: &Path, tap: &str, several: bool) -> PathBuf {
    if !several {
        return path.to_owned();
    }
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return path.to_owned();
    };
    // A tap name is a config name; keep it one path component whatever it holds.
    let tap: String = tap
        .chars()
        .map(|c| if c == '/' || c == '\\' { '_' } else { c })
        .collect();
    // The extension is the last one, or the last two for a compressed file (`.pb.gz`),
    // so that the tap's name does not split `.pb.gz`. A leading dot is not an extension.
    let dots: Vec<usize> = name
        .char_indices()
        .filter(|&(i, c)| c == '.' && i > 0)
        .map(|(i, _)| i)
        .collect();
    let at = match dots.as_slice() {
        [] => name.len(),
        [.., before, last] if name[*last..].eq_ignore_ascii_case(".gz") => *before,
        [.., last] => *last,
    };
    path.with_file_name(format!("{}.{tap}{}", &name[..at], &name[at..]))
}

/// How each frame of the table is written in folded stacks and the flame graph, by index.
///
/// Native frames: the symbol alone when no other object has a symbol of that name, else
/// `name [object]`, so that two functions of one name in different objects stay two; a
/// symbol that was not found is `[object]`, as the Linux perf collapsers write it. PHP
/// frames: the name as PHP prints it. `[truncated]` and `[other stacks]` stay as they are.
/// A `;` in a name (the separator of the format) becomes `:`; line breaks and other
/// control characters become spaces.
pub fn frame_labels(stacks: &Stacks, kind: FrameKind) -> Vec<String> {
    let special = |name: &str| name == TRUNCATED || name == OTHER_STACKS;
    let mut objects: HashMap<&str, Vec<&str>> = HashMap::new();
    if kind == FrameKind::Native {
        for f in stacks.frames.iter().filter(|f| !special(&f.name)) {
            let seen = objects.entry(f.name.as_str()).or_default();
            if !seen.contains(&f.object.as_str()) {
                seen.push(f.object.as_str());
            }
        }
    }
    stacks
        .frames
        .iter()
        .map(|f| {
            let name = clean(&f.name);
            if kind == FrameKind::Php || special(&f.name) {
                return name;
            }
            let object = clean(&f.object);
            if (f.name == "[unknown]" || f.name.is_empty()) && !object.is_empty() {
                format!("[{object}]")
            } else if objects.get(f.name.as_str()).is_some_and(|o| o.len() > 1) {
                format!("{name} [{object}]")
            } else {
                name
            }
        })
        .collect()
}

fn clean(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    let s = s.trim();
    if s.is_empty() {
        "[unknown]".to_owned()
    } else {
        s.to_owned()
    }
}

/// Folded stack → samples, the stacks root first and sorted (as a flame graph wants
/// them). Stacks that read the same once named (PHP closures of different files) are
/// one line; a stack with no frame is `[unknown]`.
fn folded_map(stacks: &Stacks, kind: FrameKind) -> BTreeMap<String, u64> {
    let labels = frame_labels(stacks, kind);
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for stack in stacks.stacks.iter().filter(|s| s.samples > 0) {
        let parts: Vec<&str> = stack
            .frames
            .iter()
            .filter_map(|&i| labels.get(i as usize).map(String::as_str))
            .collect();
        let key = if parts.is_empty() {
            "[unknown]".to_owned()
        } else {
            parts.join(";")
        };
        *lines.entry(key).or_default() += stack.samples;
    }
    lines
}

/// The collapsed stacks, one `root;caller;leaf COUNT` line per distinct stack, sorted.
pub fn folded(stacks: &Stacks, kind: FrameKind) -> String {
    let mut out = String::new();
    for (stack, samples) in folded_map(stacks, kind) {
        out.push_str(&stack);
        out.push(' ');
        out.push_str(&samples.to_string());
        out.push('\n');
    }
    out
}

/// Colours of components, largest first (Tableau 10 without its grey), each with the name
/// the legends call it by; the rest and the `[truncated]`/`[other stacks]` frames are
/// grey. The one table of both flame graphs: this export's and the SVG's
/// (`report::svg_inside`), so that a component has the same colour in each.
pub(super) const COMPONENT_COLOURS: [(&str, (u8, u8, u8)); 9] = [
    ("blue", (0x4e, 0x79, 0xa7)),
    ("orange", (0xf2, 0x8e, 0x2b)),
    ("green", (0x59, 0xa1, 0x4f)),
    ("red", (0xe1, 0x57, 0x59)),
    ("teal", (0x76, 0xb7, 0xb2)),
    ("yellow", (0xed, 0xc9, 0x48)),
    ("purple", (0xb0, 0x7a, 0xa1)),
    ("pink", (0xff, 0x9d, 0xa7)),
    ("brown", (0x9c, 0x75, 0x5f)),
];
pub(super) const GREY: (u8, u8, u8) = (0xba, 0xb0, 0xac);

const fn rgb((r, g, b): (u8, u8, u8)) -> color::Color {
    color::Color { r, g, b }
}

/// The flame graph of a tap's stacks, as SVG: root at the bottom, each frame as wide as
/// its inclusive samples, coloured by its component.
pub fn flamegraph(t: &TapStacks<'_>) -> anyhow::Result<Vec<u8>> {
    let kind = t.kind();
    let labels = frame_labels(t.stacks, kind);
    let lines = folded_map(t.stacks, kind);
    let lines: Vec<String> = lines.into_iter().map(|(s, n)| format!("{s} {n}")).collect();

    // Components by their inclusive samples in these stacks (each stack counts a component
    // once), so the colours go to what the graph shows most of. The marker frames are grey
    // whatever component they carry.
    let special = |name: &str| name == TRUNCATED || name == OTHER_STACKS;
    let mut weight: BTreeMap<&str, u64> = BTreeMap::new();
    for stack in &t.stacks.stacks {
        let mut seen: Vec<&str> = Vec::new();
        for f in t.stacks.frames_of(stack).filter(|f| !special(&f.name)) {
            if !seen.contains(&f.component.as_str()) {
                seen.push(f.component.as_str());
                *weight.entry(f.component.as_str()).or_default() += stack.samples;
            }
        }
    }
    let mut ranked: Vec<(&str, u64)> = weight.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let colour_of: HashMap<&str, (&str, color::Color)> = ranked
        .iter()
        .zip(COMPONENT_COLOURS)
        .map(|((c, _), (name, colour))| (*c, (name, rgb(colour))))
        .collect();
    // inferno colours by frame text: one entry per label, the first frame of a label
    // deciding (a label shared by two components is rare: a PHP name in two scripts).
    let mut palette = color::PaletteMap::default();
    for (f, label) in t.stacks.frames.iter().zip(&labels) {
        if palette.get(label).is_some() {
            continue;
        }
        let c = match colour_of.get(f.component.as_str()) {
            Some((_, c)) if !special(&f.name) => *c,
            _ => rgb(GREY),
        };
        palette.insert(label, c);
    }
    palette.insert("[unknown]", rgb(GREY));

    let total = t.stacks.total();
    // The subtitle is one centred line: the sample count and which colour is which.
    // `[truncated]` and `[other stacks]` are frames of their own, their samples in
    // their tooltips.
    let mut legend: Vec<String> = ranked
        .iter()
        .filter_map(|(c, _)| colour_of.get(c).map(|(name, _)| format!("{c} {name}")))
        .collect();
    if ranked.len() > COMPONENT_COLOURS.len() {
        legend.push("others grey".to_owned());
    }
    let subtitle = format!(
        "{total} samples ({} frames) · {}",
        kind.name(),
        legend.join(" · ")
    );

    let mut opts = flamegraph::Options::default();
    opts.title = format!("CPU of {}", t.describe());
    opts.subtitle = Some(subtitle);
    opts.count_name = "samples".to_owned();
    opts.colors = color::Palette::Basic(color::BasicPalette::Hot);
    // Every label is in the map; deterministic keeps any other frame's colour (none
    // expected) from being drawn at random, so the same input gives the same file.
    opts.deterministic = true;
    opts.palette_map = Some(&mut palette);
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .with_context(|| format!("drawing the flame graph of tap {}", t.tap))?;
    Ok(svg)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::upstream::snapshot::{Frame, Stack};

    pub(crate) fn frame(name: &str, object: &str, component: &str) -> Frame {
        Frame {
            name: name.to_owned(),
            object: object.to_owned(),
            component: component.to_owned(),
            line: None,
        }
    }

    /// main → handle → parse (leaf, twice as often as write), main → handle → write,
    /// main → `memcpy` of libc and of webdis, a stack whose callers were lost, and the
    /// stacks beyond the cap.
    pub(crate) fn small() -> Stacks {
        Stacks {
            frames: vec![
                frame("main", "webdis", "webdis"),                     // 0
                frame("handle;request", "webdis", "webdis"),           // 1
                frame("http_parser_execute", "webdis", "http_parser"), // 2
                frame("write", "libc.so.6", "libc"),                   // 3
                frame("memcpy", "libc.so.6", "libc"),                  // 4
                frame("memcpy", "webdis", "webdis"),                   // 5
                frame(TRUNCATED, "", "unknown"),                       // 6
                frame("[unknown]", "libevent-2.1.so.7", "event_loop"), // 7
                frame(OTHER_STACKS, "", "unknown"),                    // 8
                frame("tcp_sendmsg", "[kernel]", "kernel_network"),    // 9
            ],
            stacks: vec![
                Stack {
                    frames: vec![0, 1, 2],
                    samples: 40,
                },
                Stack {
                    frames: vec![0, 1, 3, 9],
                    samples: 20,
                },
                Stack {
                    frames: vec![0, 4],
                    samples: 10,
                },
                Stack {
                    frames: vec![0, 5],
                    samples: 5,
                },
                Stack {
                    frames: vec![6, 7],
                    samples: 3,
                },
                Stack {
                    frames: vec![8],
                    samples: 2,
                },
                Stack {
                    frames: vec![0, 1],
                    samples: 0,
                },
            ],
            truncated_samples: 3,
            unmapped_samples: 0,
        }
    }

    #[test]
    fn folded_is_one_sorted_line_per_stack_with_names_kept_apart() {
        assert_eq!(
            folded(&small(), FrameKind::Native),
            "[other stacks] 2\n\
             [truncated];[libevent-2.1.so.7] 3\n\
             main;handle:request;http_parser_execute 40\n\
             main;handle:request;write;tcp_sendmsg 20\n\
             main;memcpy [libc.so.6] 10\n\
             main;memcpy [webdis] 5\n"
        );
    }

    #[test]
    fn php_frames_keep_their_names_and_equal_stacks_merge() {
        let stacks = Stacks {
            frames: vec![
                frame("{main}", "/srv/app.php", "php"),
                frame("{closure}", "/srv/a.php", "php"),
                frame("{closure}", "/srv/b.php", "php"),
                frame(
                    "Amp\\Http\\Http1\\Rfc7230::parseHeaders",
                    "/srv/vendor/x.php",
                    "http_parser",
                ),
            ],
            stacks: vec![
                Stack {
                    frames: vec![0, 1, 3],
                    samples: 4,
                },
                Stack {
                    frames: vec![0, 2, 3],
                    samples: 6,
                },
            ],
            truncated_samples: 0,
            unmapped_samples: 0,
        };
        assert_eq!(
            folded(&stacks, FrameKind::Php),
            "{main};{closure};Amp\\Http\\Http1\\Rfc7230::parseHeaders 10\n"
        );
    }

    #[test]
    fn a_tap_name_goes_before_the_extension_when_several_taps_are_written() {
        let p = |s: &str, several| path_for(Path::new(s), "webdis", several);
        assert_eq!(p("out.svg", false), PathBuf::from("out.svg"));
        assert_eq!(p("out.svg", true), PathBuf::from("out.webdis.svg"));
        assert_eq!(
            p("dir/cpu.pb.gz", true),
            PathBuf::from("dir/cpu.webdis.pb.gz")
        );
        assert_eq!(
            p("my.run.folded", true),
            PathBuf::from("my.run.webdis.folded")
        );
        assert_eq!(p("out", true), PathBuf::from("out.webdis"));
        assert_eq!(p(".hidden", true), PathBuf::from(".hidden.webdis"));
        assert_eq!(
            path_for(Path::new("o.svg"), "a/b", true),
            PathBuf::from("o.a_b.svg")
        );
    }

    fn upstream(stacks: Option<Stacks>) -> UpstreamSnapshot {
        let mut u: UpstreamSnapshot = serde_json::from_str(
            r#"{"pid":4242,"comm":"webdis","exe":"/usr/bin/webdis","threads":3,
                "interval_seconds":1.0,"cpu_user_seconds":0.08,"cpu_system_seconds":0.0,
                "runqueue_seconds":0.0,"context_switches_voluntary":0,
                "context_switches_involuntary":0,"restarts":0}"#,
        )
        .unwrap();
        u.stacks = stacks;
        u
    }

    /// Parses the SVG as XML (every element closed, names matched) and returns the text
    /// of its `<title>` elements (inferno gives each frame one: `name (N samples, P%)`).
    pub(crate) fn svg_titles(svg: &[u8]) -> Vec<String> {
        use quick_xml::events::Event;
        let mut reader = quick_xml::Reader::from_reader(svg);
        let mut buf = Vec::new();
        let mut depth = 0usize;
        let mut in_title = false;
        let mut titles = Vec::new();
        let mut root = None;
        loop {
            match reader.read_event_into(&mut buf) {
                Ok(Event::Start(e)) => {
                    if depth == 0 {
                        root = Some(String::from_utf8_lossy(e.name().as_ref()).into_owned());
                    }
                    depth += 1;
                    in_title = e.name().as_ref() == b"title";
                    if in_title {
                        titles.push(String::new());
                    }
                }
                Ok(Event::End(_)) => {
                    depth = depth.checked_sub(1).expect("an end tag with nothing open");
                    in_title = false;
                }
                Ok(Event::Text(t)) if in_title => {
                    let text = t.decode().unwrap();
                    let text = quick_xml::escape::unescape(&text).unwrap();
                    titles.last_mut().unwrap().push_str(&text);
                }
                Ok(Event::GeneralRef(r)) if in_title => {
                    let name = r.decode().unwrap();
                    let ch = quick_xml::escape::resolve_predefined_entity(&name).unwrap();
                    titles.last_mut().unwrap().push_str(ch);
                }
                Ok(Event::Eof) => break,
                Ok(_) => {}
                Err(e) => panic!("not XML at {}: {e}", reader.buffer_position()),
            }
            buf.clear();
        }
        assert_eq!(depth, 0, "elements left open");
        assert_eq!(root.as_deref(), Some("svg"));
        titles
    }

    #[test]
    fn the_flame_graph_is_svg_naming_every_frame_with_its_samples() {
        let u = upstream(Some(small()));
        let t = TapStacks {
            tap: "webdis",
            upstream: &u,
            stacks: u.stacks.as_ref().unwrap(),
        };
        let svg = flamegraph(&t).unwrap();
        let titles = svg_titles(&svg);
        let text = String::from_utf8(svg.clone()).unwrap();
        assert!(
            text.contains("CPU of webdis (pid 4242), tap webdis"),
            "title"
        );
        assert!(text.contains("80 samples (native frames)"), "subtitle");
        // A frame's samples are inclusive: handle;request holds 40 + 20.
        for (label, samples) in [
            ("main", 75),
            ("handle:request", 60),
            ("http_parser_execute", 40),
            ("tcp_sendmsg", 20),
            ("memcpy [libc.so.6]", 10),
            ("memcpy [webdis]", 5),
            ("[truncated]", 3),
            ("[other stacks]", 2),
        ] {
            let want = format!("{label} ({samples} samples, ");
            assert!(
                titles.iter().any(|t| t.starts_with(&want)),
                "no frame titled {want:?} in {titles:?}"
            );
        }
        // Frames are coloured by component: the one in the most samples (webdis: main is
        // in 75) takes the first colour.
        assert!(text.contains("webdis blue"), "legend in the subtitle");
        assert!(
            !text.contains("· unknown"),
            "the marker frames' component is not in the legend"
        );
        assert_eq!(
            flamegraph(&t).unwrap(),
            svg,
            "the same stacks draw the same file"
        );
    }

    #[test]
    fn a_tap_without_stacks_is_refused_saying_how_to_get_them() {
        let none = with_stacks("webdis", None).unwrap_err();
        assert!(
            none.contains("tap webdis") && none.contains("profile = true"),
            "{none}"
        );
        let mut u = upstream(None);
        let unsampled = with_stacks("webdis", Some(&u)).unwrap_err();
        assert!(
            unsampled.contains("not sampled") && unsampled.contains("profile = true"),
            "{unsampled}"
        );
        u.samples = Some(BTreeMap::from([("webdis".to_owned(), 5)]));
        let old = with_stacks("webdis", Some(&u)).unwrap_err();
        assert!(old.contains("no call stacks"), "{old}");
        u.stacks = Some(Stacks::default());
        let empty = with_stacks("webdis", Some(&u)).unwrap_err();
        assert!(empty.contains("no sampled stacks"), "{empty}");
        u.stacks = Some(small());
        assert!(with_stacks("webdis", Some(&u)).is_ok());
    }
}

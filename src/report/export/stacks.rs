//! The upstream's sampled call stacks out of a report: folded stacks, a flame graph SVG
//! and a pprof profile (`report --folded`, `--flamegraph`, `--pprof`; docs/report.md,
//! "Flame graphs, folded stacks and pprof").
//!
//! Each tap's stacks are those of the merged snapshots ([`crate::snapshot::upstream::merge`]),
//! so a report over several runs draws one graph of all of them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Context;
use inferno::flamegraph::{self, color};

use super::flame_colours::{Colours, Swatch, GREY};
use crate::report::source::dataset::Dataset;
pub use crate::snapshot::FrameKind;
use crate::snapshot::UpstreamSnapshot;
use crate::snapshot::{Stacks, OTHER_STACKS, TRUNCATED};

/// One tap whose stacks are exported.
#[derive(Debug, Clone, Copy)]
pub struct TapStacks<'a> {
    pub tap: &'a str,
    pub upstream: &'a UpstreamSnapshot,
    pub stacks: &'a Stacks,
}

impl TapStacks<'_> {
    /// Native when the snapshot does not say.
    pub fn kind(&self) -> FrameKind {
        self.upstream.frames().unwrap_or(FrameKind::Native)
    }

    /// `webdis (pid 4242), tap webdis`: the process and where it was watched.
    pub fn describe(&self) -> String {
        let comm = self.upstream.comm.as_deref().unwrap_or("the upstream");
        // The kernel keeps 15 bytes of a process's name: `webdis-http_par` for the binary
        // `webdis-http_parser`. Its file's name where that is what was cut.
        let file = self
            .upstream
            .exe
            .as_deref()
            .and_then(|e| std::path::Path::new(e).file_name()?.to_str());
        let comm = match file {
            Some(f) if comm.len() == 15 && f.len() > 15 && f.starts_with(comm) => f,
            _ => comm,
        };
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
    match upstream.stacks() {
        Some(stacks) if stacks.total() > 0 => Ok(TapStacks {
            tap,
            upstream,
            stacks,
        }),
        Some(_) => Err(format!(
            "tap {tap} has no sampled stacks in this window (its upstream used no CPU while watched)"
        )),
        None if upstream.samples().is_some() => Err(format!(
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

const fn rgb(s: Swatch) -> color::Color {
    let (r, g, b) = s.rgb;
    color::Color { r, g, b }
}

/// Characters a line of the flame graph's legend may hold: inferno's default width (1200
/// px) less its padding (10 px a side), at its 12 px monospace font, whose characters are
/// 0.6 em wide in the usual monospace fonts (inferno reckons 0.59): 163; a little less.
pub const LEGEND_CHARS: usize = 160;
/// The distance between two lines of the legend, at inferno's 12 px font.
const LEGEND_LINE: usize = 16;

/// `head` then the entries, ` · ` between them, in lines of at most `width` characters;
/// an entry longer than a line alone is cut with `…`.
fn legend_lines(head: &str, entries: &[String], width: usize) -> Vec<String> {
    let mut lines = vec![head.to_owned()];
    for entry in entries {
        let entry: String = if entry.chars().count() > width {
            entry.chars().take(width - 1).chain(['…']).collect()
        } else {
            entry.clone()
        };
        let Some(line) = lines.last_mut() else {
            continue;
        };
        if line.chars().count() + 3 + entry.chars().count() <= width {
            line.push_str(" · ");
            line.push_str(&entry);
        } else {
            lines.push(entry);
        }
    }
    lines
}

/// The flame graph of a tap's stacks, as SVG: root at the bottom, each frame as wide as
/// its inclusive samples, coloured by its component.
pub fn flamegraph(t: &TapStacks<'_>) -> anyhow::Result<Vec<u8>> {
    let kind = t.kind();
    let labels = frame_labels(t.stacks, kind);
    let lines = folded_map(t.stacks, kind);
    let lines: Vec<String> = lines.into_iter().map(|(s, n)| format!("{s} {n}")).collect();

    // Components by their inclusive samples in these stacks (each stack counts a component
    // once), for the legend's order and so that the colours past those a graph has go
    // to what it shows least. The marker frames are grey whatever component they carry.
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
    let own = t
        .upstream
        .exe
        .as_deref()
        .and_then(|exe| Path::new(exe).file_name())
        .map(|f| f.to_string_lossy());
    let colours = Colours::new(ranked.iter().map(|(c, _)| *c), own.as_deref());
    // inferno colours by frame text: one entry per label, the first frame of a label
    // deciding (a label shared by two components is rare: a PHP name in two scripts).
    let mut palette = color::PaletteMap::default();
    for (f, label) in t.stacks.frames.iter().zip(&labels) {
        if palette.get(label).is_some() {
            continue;
        }
        let c = if special(&f.name) {
            GREY
        } else {
            colours.of(&f.component)
        };
        palette.insert(label, rgb(c));
    }
    palette.insert("[unknown]", rgb(GREY));

    let total = t.stacks.total();
    // The subtitle: the sample count and which colour is which, in as many lines as the
    // default width needs. `[truncated]` and `[other stacks]` are frames of their own,
    // their samples in their tooltips.
    let legend = legend_lines(
        &format!("{total} samples ({} frames)", kind.name()),
        &colours.entries(),
        LEGEND_CHARS,
    );

    let mut opts = flamegraph::Options::default();
    opts.title = format!("CPU of {}", t.describe());
    opts.subtitle = legend.first().cloned();
    opts.count_name = "samples".to_owned();
    opts.colors = color::Palette::Basic(color::BasicPalette::Hot);
    // Every label is in the map; deterministic keeps any other frame's colour (none
    // expected) from being drawn at random, so the same input gives the same file.
    opts.deterministic = true;
    opts.palette_map = Some(&mut palette);
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .with_context(|| format!("drawing the flame graph of tap {}", t.tap))?;
    match legend.get(1..) {
        Some(more) if !more.is_empty() => with_more_subtitle_lines(&svg, more, opts.font_size)
            .with_context(|| format!("adding the legend to the flame graph of tap {}", t.tap)),
        _ => Ok(svg),
    }
}

/// inferno's SVG with `lines` below its one-line subtitle: each a text centred as the
/// subtitle is, the graph, the background and the lines at the bottom moved down by as
/// much, the image as much taller. inferno has no option for a second subtitle line;
/// its frames are a nested `<svg id="frames">` whose script reads their positions
/// inside it, so moving that element moves the graph without touching a frame.
fn with_more_subtitle_lines(
    svg: &[u8],
    lines: &[String],
    font_size: usize,
) -> anyhow::Result<Vec<u8>> {
    use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};
    let extra = (lines.len() * LEGEND_LINE) as f64;
    let subtitle_y = (font_size * 4) as f64;
    let mut reader = quick_xml::Reader::from_reader(svg);
    let mut writer = quick_xml::Writer::new(Vec::with_capacity(svg.len() + 256 * lines.len()));
    let mut buf = Vec::new();
    let (mut root, mut background, mut in_subtitle, mut moved) = (true, true, false, 0);
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .context("reading inferno's SVG")?;
        let event = match event {
            Event::Eof => break,
            Event::Start(e) if root && e.name().as_ref() == b"svg" => {
                root = false;
                Event::Start(shifted(&e, &[("height", extra), ("viewBox", extra)])?)
            }
            Event::Empty(e) if background && e.name().as_ref() == b"rect" => {
                background = false;
                Event::Empty(shifted(&e, &[("height", extra)])?)
            }
            Event::Start(e) if e.name().as_ref() == b"text" => match id(&e)?.as_deref() {
                Some("subtitle") => {
                    in_subtitle = true;
                    Event::Start(e)
                }
                Some("details" | "matched") => {
                    moved += 1;
                    Event::Start(shifted(&e, &[("y", extra)])?)
                }
                _ => Event::Start(e),
            },
            Event::Start(e)
                if e.name().as_ref() == b"svg" && id(&e)?.as_deref() == Some("frames") =>
            {
                moved += 1;
                let mut e = e.into_owned();
                e.push_attribute(("y", format!("{extra}").as_str()));
                Event::Start(e)
            }
            Event::End(e) if in_subtitle && e.name().as_ref() == b"text" => {
                in_subtitle = false;
                writer.write_event(Event::End(e))?;
                for (i, line) in lines.iter().enumerate() {
                    let y = subtitle_y + ((i + 1) * LEGEND_LINE) as f64;
                    let mut start = BytesStart::new("text");
                    start.push_attribute(("class", "legend"));
                    start.push_attribute(("x", "50.0000%"));
                    start.push_attribute(("y", format!("{y:.2}").as_str()));
                    start.push_attribute(("text-anchor", "middle"));
                    writer.write_event(Event::Start(start))?;
                    writer.write_event(Event::Text(BytesText::new(line)))?;
                    writer.write_event(Event::End(BytesEnd::new("text")))?;
                }
                moved += 1;
                buf.clear();
                continue;
            }
            e => e,
        };
        writer.write_event(event)?;
        buf.clear();
    }
    // The subtitle, the two bottom lines and the frames: had inferno changed its layout,
    // the legend would overlap the graph; better an error than a wrong picture.
    anyhow::ensure!(
        !root && !background && moved == 4,
        "inferno's SVG is not laid out as expected ({moved} of 4 elements found)"
    );
    Ok(writer.into_inner())
}

/// The element's `id`, if any.
fn id(e: &quick_xml::events::BytesStart<'_>) -> anyhow::Result<Option<String>> {
    for a in e.attributes() {
        let a = a.context("an attribute of inferno's SVG")?;
        if a.key.as_ref() == b"id" {
            return Ok(Some(String::from_utf8_lossy(&a.value).into_owned()));
        }
    }
    Ok(None)
}

/// `e` with the number in each named attribute grown by its amount (the last number of
/// a list: a `viewBox`'s height).
fn shifted(
    e: &quick_xml::events::BytesStart<'_>,
    by: &[(&str, f64)],
) -> anyhow::Result<quick_xml::events::BytesStart<'static>> {
    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
    let mut out = quick_xml::events::BytesStart::new(name);
    for a in e.attributes() {
        let a = a.context("an attribute of inferno's SVG")?;
        let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
        match by.iter().find(|(k, _)| *k == key) {
            Some(&(_, amount)) => {
                let value = String::from_utf8_lossy(&a.value).into_owned();
                let (before, last) = value.rsplit_once(' ').unwrap_or(("", &value));
                let n: f64 = last
                    .parse()
                    .with_context(|| format!("{key}={value:?} is not a number"))?;
                let grown = format!("{}", n + amount);
                let value = if before.is_empty() {
                    grown
                } else {
                    format!("{before} {grown}")
                };
                out.push_attribute((key.as_str(), value.as_str()));
            }
            // As written: the value stays escaped as inferno escaped it.
            None => out.push_attribute(a),
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::export::flame_colours::{FIXED, HASHED, OWN};
    use crate::snapshot::{Frame, Stack};

    pub(crate) fn frame(name: &str, object: &str, component: &str) -> Frame {
        Frame {
            name: name.to_owned(),
            object: object.to_owned(),
            component: component.to_owned(),
            line: None,
            at_line: None,
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
        if let Some(stacks) = stacks {
            u.profile_mut().stacks = Some(stacks);
        }
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
            stacks: u.stacks().unwrap(),
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
        // Frames are coloured by component, the legend in the subtitle: a built-in by its
        // own colour, first the one in the most samples (webdis: main is in 75).
        let subtitle = text
            .split("<text id=\"subtitle\"")
            .nth(1)
            .and_then(|t| t.split("</text>").next())
            .unwrap();
        assert!(
            subtitle.contains("80 samples (native frames) · webdis pink · "),
            "{subtitle}"
        );
        assert!(subtitle.contains("http_parser green"), "{subtitle}");
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

    /// Each frame's title (`name (N samples, P%)`, its name before ` (`) → its fill.
    fn fills(svg: &[u8]) -> HashMap<String, String> {
        let text = String::from_utf8(svg.to_vec()).unwrap();
        let mut out = HashMap::new();
        for g in text.split("<g><title>").skip(1) {
            let name = g.split(" (").next().unwrap().to_owned();
            let fill = g
                .split("fill=\"")
                .nth(1)
                .and_then(|f| f.split('"').next())
                .unwrap()
                .to_owned();
            out.insert(name, fill);
        }
        out
    }

    /// Twelve components under `main`, component i in `samples(i)` samples.
    fn many(samples: impl Fn(usize) -> u64) -> Stacks {
        let names = [
            "http_parser",
            "kernel_network",
            "event_loop",
            "alloc",
            "webdis",
            "libc.so.6",
            "libjansson.so.4",
            "libhiredis-with-a-long-vendor-suffix.so.1.1.0",
            "league/uri",
            "league/uri-interfaces",
            "amphp/http-server",
            "a-component-with-a-name-long-enough-to-fill-much-of-a-line-on-its-own-and-then-some-more-characters",
            "libssl.so.3",
            "libcrypto.so.3",
        ];
        let mut frames = vec![frame("main", "app", "app")];
        let mut stacks = Vec::new();
        for (i, c) in names.iter().enumerate() {
            frames.push(frame(&format!("f{i}"), "app", c));
            stacks.push(Stack {
                frames: vec![0, i as u32 + 1],
                samples: samples(i),
            });
        }
        Stacks {
            frames,
            stacks,
            truncated_samples: 0,
            unmapped_samples: 0,
        }
    }

    /// Ranked one way, then the other way round: each component keeps its colour.
    #[test]
    fn a_component_has_the_same_colour_in_two_graphs_ranked_differently() {
        let hex = |(r, g, b): (u8, u8, u8)| format!("rgb({r},{g},{b})");
        let svg = |stacks: Stacks| {
            let u = upstream(Some(stacks));
            let t = TapStacks {
                tap: "w",
                upstream: &u,
                stacks: u.stacks().unwrap(),
            };
            fills(&flamegraph(&t).unwrap())
        };
        // Ranked one way and the other way round; every colour taken (the hashed
        // colours run out, and where two components hash to one colour the one with
        // more samples keeps it: the frames of those may change colour, and only those).
        let one = svg(many(|i| 100 + 10 * i as u64));
        let two = svg(many(|i| 300 - 10 * i as u64));
        assert_eq!(one.len(), 16, "{one:?}");
        let hashed: Vec<String> = HASHED.iter().map(|s| hex(s.rgb)).collect();
        let grey = hex(GREY.rgb);
        for (frame, fill) in &one {
            if !hashed.contains(fill) && *fill != grey && frame != "all" {
                assert_eq!(two.get(frame), Some(fill), "{frame}");
            }
        }
        // Fewer hashed components, none sharing a hash: every frame keeps its colour.
        let few = |samples: &dyn Fn(usize) -> u64| {
            let mut s = many(samples);
            s.stacks
                .retain(|st| [1, 2, 5, 7, 13].contains(&st.frames[1]));
            svg(s)
        };
        let (one, two) = (few(&|i| 100 + 10 * i as u64), few(&|i| 300 - 10 * i as u64));
        let slots: Vec<u64> = ["app", "libjansson.so.4", "openssl"]
            .iter()
            .map(|n| super::super::flame_colours::tests::slot(n))
            .collect();
        for (i, a) in slots.iter().enumerate() {
            assert!(!slots[i + 1..].contains(a), "{slots:?}");
        }
        for (frame, fill) in &one {
            if frame != "all" {
                assert_eq!(two.get(frame), Some(fill), "{frame}");
            }
        }
        assert_eq!(one["f0"], hex(FIXED[3].1.rgb), "http_parser is green");
        assert_eq!(one["f4"], hex(OWN.rgb), "webdis, the own code, is pink");
        let all = svg(many(|i| 100 + 10 * i as u64));
        assert_eq!(all["f8"], all["f9"], "the League packages alike");
        assert_eq!(all["f12"], all["f13"], "libssl and libcrypto alike");
    }

    /// Twelve components, some with long names: every entry of the legend is in the
    /// SVG, each line fits inferno's default width at its font, and the graph moved
    /// down below the legend.
    #[test]
    fn the_legend_stays_whole_at_the_default_width() {
        let u = upstream(Some(many(|i| 10 + i as u64)));
        let t = TapStacks {
            tap: "w",
            upstream: &u,
            stacks: u.stacks().unwrap(),
        };
        let svg = flamegraph(&t).unwrap();
        svg_titles(&svg);
        let text = String::from_utf8(svg.clone()).unwrap();
        let lines: Vec<String> = text
            .split("<text id=\"subtitle\"")
            .chain(text.split("<text class=\"legend\"").skip(1))
            .skip(1)
            .map(|t| {
                let inner = t.split_once('>').unwrap().1;
                quick_xml::escape::unescape(inner.split("</text>").next().unwrap())
                    .unwrap()
                    .into_owned()
            })
            .collect();
        assert!(lines.len() >= 3, "{lines:?}");
        // inferno's own measure of its font: 0.59 em at 12 px, in 1200 px less 2 × 10.
        let fits = (1180.0 / (12.0 * 0.59)) as usize;
        for line in &lines {
            assert!(
                line.chars().count() <= LEGEND_CHARS && LEGEND_CHARS <= fits,
                "{} characters: {line}",
                line.chars().count()
            );
        }
        let legend = lines.join(" · ");
        assert!(legend.contains("webdis pink"), "{legend}");
        assert!(legend.contains("http_parser green"), "{legend}");
        assert!(legend.contains("league/uri* "), "{legend}");
        assert!(legend.contains("libhiredis-with-a-long-vendor-suffix.so.1.1.0 "));
        assert!(
            legend.contains("a-component-with-a-name-long-enough"),
            "{legend}"
        );
        assert!(legend.contains("others grey"), "{legend}");
        // The head, the four built-ins, the own code, the hashed colours all taken, and
        // "others grey".
        let entries = legend.split(" · ").count();
        assert_eq!(entries, 1 + 4 + 1 + HASHED.len() + 1, "{legend}");
        // The frames sit below the last legend line, the image taller by as much.
        let extra = (lines.len() - 1) * LEGEND_LINE;
        assert!(
            text.contains(&format!(
                "<svg id=\"frames\" x=\"10\" width=\"1180\" total_samples=\"{}\" y=\"{extra}\">",
                t.stacks.total()
            )),
            "{}",
            &text[..text.find("<g>").unwrap()]
        );
        let last_y = 48 + extra;
        assert!(text.contains(&format!("y=\"{last_y}.00\" text-anchor=\"middle\">")));
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
        u.profile_mut().samples = BTreeMap::from([("webdis".to_owned(), 5)]);
        let old = with_stacks("webdis", Some(&u)).unwrap_err();
        assert!(old.contains("no call stacks"), "{old}");
        u.profile_mut().stacks = Some(Stacks::default());
        let empty = with_stacks("webdis", Some(&u)).unwrap_err();
        assert!(empty.contains("no sampled stacks"), "{empty}");
        u.profile_mut().stacks = Some(small());
        assert!(with_stacks("webdis", Some(&u)).is_ok());
    }
}

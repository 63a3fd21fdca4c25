//! The SVG's "inside the upstream" band, below a tap's charts when its snapshot watched
//! the upstream's process: the report's lines (CPU per request, where the CPU goes, the
//! what-if) and, when call stacks were sampled, a flame graph of them (root at the
//! bottom, each frame as wide as its samples, coloured by component).

use std::collections::BTreeMap;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::inside::{Inside, DEFAULT_WHAT_IF};
use crate::phase::Phase;
use crate::report::export::flame_colours::Colours;
use crate::report::export::stacks::{frame_labels, FrameKind};
use crate::report::source::dataset::TapData;
use crate::snapshot::{Stacks, UpstreamSnapshot};

/// Height of the text part: a title and up to [`MAX_LINES`] lines.
const TEXT_HEIGHT: u32 = 40 + 17 * MAX_LINES as u32;
const MAX_LINES: usize = 13;
/// Hot functions the band lists.
const SVG_HOT: usize = 3;
/// Characters per line at 12 px (a sans-serif averages about 5 px a character).
const WRAP: usize = 220;
/// Rows of the flame graph, and each row's height.
const FLAME_ROWS: usize = 14;
const ROW: i32 = 17;
const FLAME_HEIGHT: u32 = 30 + FLAME_ROWS as u32 * ROW as u32;
const MARGIN: i32 = 20;

/// A component's colour: the flame graph export's (`report::flame_colours`), so that a
/// component has the same colour in both graphs and in every report.
fn component_colour(colours: &Colours, component: &str) -> RGBColor {
    let (r, g, b) = colours.of(component).rgb;
    RGBColor(r, g, b)
}

/// The band's height for `tap`: 0 without an upstream.
pub fn height(tap: &TapData) -> u32 {
    match &tap.upstream {
        None => 0,
        Some(u) if sampled_stacks(u).is_some() => TEXT_HEIGHT + FLAME_HEIGHT,
        Some(_) => TEXT_HEIGHT,
    }
}

fn sampled_stacks(u: &UpstreamSnapshot) -> Option<&Stacks> {
    u.stacks().filter(|s| !s.stacks.is_empty())
}

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the SVG: {e}")
}

/// Draws the band of `tap` (which has an upstream) into `area`.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    name: &str,
    tap: &TapData,
) -> anyhow::Result<()> {
    let Some(u) = &tap.upstream else {
        return Ok(());
    };
    let total = tap.series(Phase::Total.name(), None)?;
    let requests = total.as_ref().map_or(0, |s| s.count);
    let mean = total
        .as_ref()
        .filter(|s| s.count > 0)
        .map(|s| s.sum / s.count as f64);
    let mut inside = Inside::new(u, requests, mean, DEFAULT_WHAT_IF);
    // The picture's band holds the first three of the hot path; the text report has
    // its `--top`.
    inside.hot.truncate(SVG_HOT);
    let title = TextStyle::from(("sans-serif", 18)).pos(Pos::new(HPos::Left, VPos::Top));
    area.draw(&Text::new(
        format!("{name}: inside the upstream"),
        (MARGIN, 8),
        title,
    ))
    .map_err(draw_error)?;
    let style = TextStyle::from(("sans-serif", 12)).pos(Pos::new(HPos::Left, VPos::Top));
    let mut lines: Vec<String> = inside.lines().iter().flat_map(|l| wrap(l, WRAP)).collect();
    if lines.len() > MAX_LINES {
        lines.truncate(MAX_LINES);
        lines[MAX_LINES - 1].push_str(" … (the text report has the rest)");
    }
    for (i, line) in lines.into_iter().enumerate() {
        area.draw(&Text::new(
            line,
            (MARGIN, 36 + 17 * i as i32),
            style.clone(),
        ))
        .map_err(draw_error)?;
    }
    if let Some(stacks) = sampled_stacks(u) {
        let (_, below) = area.split_vertically(TEXT_HEIGHT);
        let own = u
            .exe
            .as_deref()
            .and_then(|exe| std::path::Path::new(exe).file_name())
            .map(|f| f.to_string_lossy());
        flame(
            &below,
            stacks,
            u.frames().unwrap_or(FrameKind::Native),
            own.as_deref(),
        )?;
    }
    Ok(())
}

/// `line` cut at spaces into pieces of at most `width` characters (a longer word stays
/// whole).
fn wrap(line: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for word in line.split(' ') {
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::take(&mut current));
            current.push_str("    ");
        }
        if !current.trim().is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

/// One frame of the merged call tree: its samples with all it calls.
#[derive(Default)]
struct Node {
    component: String,
    samples: u64,
    children: BTreeMap<String, Node>,
}

fn tree(stacks: &Stacks, kind: FrameKind) -> Node {
    let labels = frame_labels(stacks, kind);
    let mut root = Node::default();
    for stack in &stacks.stacks {
        root.samples += stack.samples;
        let mut node = &mut root;
        for &i in &stack.frames {
            let Some(frame) = stacks.frames.get(i as usize) else {
                continue;
            };
            let label = labels.get(i as usize).cloned().unwrap_or_default();
            node = node.children.entry(label).or_default();
            node.component.clone_from(&frame.component);
            node.samples += stack.samples;
        }
    }
    root
}

/// Components by their samples over the tree's first level and below, most first.
fn component_ranks(root: &Node) -> Vec<String> {
    let mut weight: BTreeMap<&str, u64> = BTreeMap::new();
    fn walk<'a>(n: &'a Node, weight: &mut BTreeMap<&'a str, u64>) {
        for c in n.children.values() {
            *weight.entry(c.component.as_str()).or_default() += c.samples;
            walk(c, weight);
        }
    }
    walk(root, &mut weight);
    let mut ranked: Vec<(&str, u64)> = weight.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked.into_iter().map(|(c, _)| c.to_owned()).collect()
}

/// The flame graph of `stacks` in `area`: a caption, then rows from the bottom up.
fn flame<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    stacks: &Stacks,
    kind: FrameKind,
    own: Option<&str>,
) -> anyhow::Result<()> {
    let root = tree(stacks, kind);
    if root.samples == 0 {
        return Ok(());
    }
    let colours = Colours::new(component_ranks(&root).iter().map(String::as_str), own);
    let (w, h) = area.dim_in_pixel();
    let caption = TextStyle::from(("sans-serif", 13)).pos(Pos::new(HPos::Left, VPos::Top));
    area.draw(&Text::new(
        format!(
            "call stacks ({} samples, root at the bottom, each frame as wide as its samples with all it calls; colour: component, {})",
            root.samples,
            colours
                .entries()
                .into_iter()
                .take(6)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (MARGIN, 4),
        caption,
    ))
    .map_err(draw_error)?;
    let flame = Flame {
        area,
        colours: &colours,
        scale: f64::from(w - 2 * MARGIN as u32) / root.samples as f64,
        bottom: h as i32 - 4,
    };
    let mut x = f64::from(MARGIN);
    for child in root.children.iter() {
        x = flame.node(child, x, 0)?;
    }
    Ok(())
}

struct Flame<'a, DB: DrawingBackend> {
    area: &'a DrawingArea<DB, plotters::coord::Shift>,
    colours: &'a Colours,
    /// Pixels per sample.
    scale: f64,
    /// The bottom of the lowest row.
    bottom: i32,
}

impl<DB: DrawingBackend> Flame<'_, DB> {
    /// Draws `node` from `x` at `depth` and its callees above it; returns where it ends.
    fn node(&self, (label, node): (&String, &Node), x: f64, depth: usize) -> anyhow::Result<f64> {
        let width = node.samples as f64 * self.scale;
        let end = x + width;
        if depth >= FLAME_ROWS || width < 1.0 {
            return Ok(end);
        }
        let colour = component_colour(self.colours, &node.component);
        let y1 = self.bottom - ROW * depth as i32;
        let y0 = y1 - ROW + 1;
        let (x0, x1) = (
            x.round() as i32,
            (end.round() as i32 - 1).max(x.round() as i32),
        );
        self.area
            .draw(&Rectangle::new([(x0, y0), (x1, y1)], colour.filled()))
            .map_err(draw_error)?;
        // As much of the name as fits (about 6.5 px a character at 11 px).
        let fits = ((width - 6.0) / 6.5).floor().max(0.0) as usize;
        if fits >= 3 {
            let shown: String = if label.chars().count() > fits {
                label.chars().take(fits - 1).chain(['…']).collect()
            } else {
                label.clone()
            };
            let style = TextStyle::from(("sans-serif", 11)).pos(Pos::new(HPos::Left, VPos::Center));
            self.area
                .draw(&Text::new(shown, (x0 + 3, y0 + ROW / 2), style))
                .map_err(draw_error)?;
        }
        let mut cx = x;
        for child in node.children.iter() {
            cx = self.node(child, cx, depth + 1)?;
        }
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_at_spaces_and_continue_indented() {
        let lines = wrap("aaa bbb ccc ddd", 8);
        assert_eq!(lines, vec!["aaa bbb", "    ccc", "    ddd"]);
        assert_eq!(wrap("short", 80), vec!["short"]);
        assert_eq!(
            wrap("averyveryverylongword x", 5),
            vec!["averyveryverylongword", "    x"]
        );
    }

    #[test]
    fn the_tree_adds_each_stacks_samples_to_every_frame_on_it() {
        let stacks = crate::report::export::stacks::tests::small();
        let root = tree(&stacks, FrameKind::Native);
        let total: u64 = stacks.stacks.iter().map(|s| s.samples).sum();
        assert_eq!(root.samples, total);
        let below: u64 = root.children.values().map(|c| c.samples).sum();
        assert_eq!(below, total, "every sample has a root frame");
        assert!(!component_ranks(&root).is_empty());
    }
}

//! `--svg FILE`: per tap, a stacked bar per route of the mean time per request spent in
//! each phase, and the latency distribution (cumulative) of each phase; below them, for a
//! tap whose snapshot watched its upstream, what happened inside it (`svg_inside`).
//!
//! Drawn with plotters' SVG backend and no font support of its own: the text is left as
//! SVG `<text>` for the viewer to render, so nothing depends on system fonts.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::rows::ALL_ROUTES;
use super::svg_inside;
use crate::phase::Phase;
use crate::report::source::dataset::{Dataset, Distribution, Series, TapData};

const WIDTH: u32 = 1280;
const HEIGHT_PER_TAP: u32 = 460;

/// The phases laid end to end along an exchange, in timeline order: those that lie inside
/// no other (parse lies inside client_recv, response_parse inside upstream_recv, so those
/// are not stacked), `total` aside. The Webdis decomposition is drawn in place of the
/// `upstream_wait` it splits (see `segments`).
fn stacked() -> impl Iterator<Item = Phase> {
    Phase::ALL
        .into_iter()
        .filter(|&p| p.style().stack.is_some())
}

/// The picture for `ds`, as an SVG document.
pub fn render(ds: &Dataset) -> anyhow::Result<String> {
    let mut buf = String::new();
    let taps: Vec<(&String, &TapData)> = ds.taps_front_to_back();
    let heights: Vec<u32> = taps
        .iter()
        .map(|(_, t)| HEIGHT_PER_TAP + svg_inside::height(t))
        .collect();
    let height = heights.iter().sum::<u32>().max(HEIGHT_PER_TAP);
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        if taps.is_empty() {
            root.draw_text(
                "no tap has recorded anything yet",
                &TextStyle::from(("sans-serif", 20)),
                (20, 20),
            )
            .map_err(draw_error)?;
        }
        let mut rest = root.clone();
        for ((name, tap), h) in taps.into_iter().zip(heights) {
            let (area, below) = rest.split_vertically(h);
            rest = below;
            let (charts, inside) = area.split_vertically(HEIGHT_PER_TAP);
            let (left, right) = charts.split_horizontally(WIDTH / 2);
            stacked_bars(&left, name, tap)?;
            distributions(&right, name, tap)?;
            if tap.upstream.is_some() {
                svg_inside::draw(&inside, name, tap)?;
            }
        }
        root.present().map_err(draw_error)?;
    }
    Ok(buf)
}

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the SVG: {e}")
}

/// Every phase's colour comes from the one table in `phase::Phase::style` (Okabe–Ito
/// hues, each at least 4.5:1 against the white background, apart under colour-vision
/// deficiency), which the live page and the dashboard's test use too.
fn phase_colour(p: Phase) -> RGBColor {
    let (r, g, b) = p.rgb();
    RGBColor(r, g, b)
}
/// A phase this build does not know.
const OTHER: RGBColor = RGBColor(0x59, 0x59, 0x59);
/// The grid: light, so that it does not compete with the data.
const GRID: RGBAColor = RGBAColor(0, 0, 0, 0.06);
const GRID_BOLD: RGBAColor = RGBAColor(0, 0, 0, 0.14);
/// Width of the legend column right of each plot.
const LEGEND_WIDTH: u32 = 150;

fn colour(phase: &str) -> RGBColor {
    Phase::from_name(phase).map_or(OTHER, phase_colour)
}

/// The legend in its own column beside the plot, so that it never covers what it names.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, RGBColor)],
    line: bool,
) -> anyhow::Result<()> {
    let style = TextStyle::from(("sans-serif", 13)).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, c)) in entries.iter().enumerate() {
        let y = 48 + 20 * i as i32;
        if line {
            area.draw(&PathElement::new(vec![(4, y), (20, y)], c.stroke_width(2)))
        } else {
            area.draw(&Rectangle::new([(6, y - 5), (18, y + 5)], c.filled()))
        }
        .map_err(draw_error)?;
        area.draw(&Text::new(name.clone(), (26, y), style.clone()))
            .map_err(draw_error)?;
    }
    Ok(())
}

/// A time unit that keeps the axis numbers between 1 and 1000.
fn unit_for(max_seconds: f64) -> (f64, &'static str) {
    if max_seconds < 1e-6 {
        (1e9, "ns")
    } else if max_seconds < 1e-3 {
        (1e6, "µs")
    } else if max_seconds < 1.0 {
        (1e3, "ms")
    } else {
        (1.0, "s")
    }
}

/// Mean time per request of each stacked phase, for one route or all: the phase's sum
/// divided by the number of exchanges (the `total` count).
fn segments(tap: &TapData, route: Option<&str>) -> anyhow::Result<Vec<(String, f64)>> {
    let Some(total) = tap.series(Phase::Total.name(), route)? else {
        return Ok(Vec::new());
    };
    let n = total.count.max(1) as f64;
    let sum = |p: Phase| -> anyhow::Result<Option<f64>> {
        Ok(tap.series(p.name(), route)?.map(|s: Series| s.sum))
    };
    // The parts of the wait, laid end to end inside it.
    let backend = Phase::ALL
        .into_iter()
        .filter(|p| p.within() == Some(Phase::UpstreamWait));
    let mut out = Vec::new();
    for phase in stacked() {
        let Some(s) = sum(phase)? else { continue };
        if phase == Phase::UpstreamWait && sum(Phase::Backend)?.is_some() {
            // The Webdis decomposition replaces the wait it splits; what the correlator
            // could not pair stays as upstream_wait.
            let mut split = 0.0;
            for b in backend.clone() {
                if let Some(v) = sum(b)? {
                    split += v;
                    out.push((b.name().to_owned(), v / n));
                }
            }
            if s > split {
                out.push((phase.name().to_owned(), (s - split) / n));
            }
            continue;
        }
        out.push((phase.name().to_owned(), s / n));
    }
    Ok(out)
}

fn stacked_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    tap: &str,
    data: &TapData,
) -> anyhow::Result<()> {
    let mut bars: Vec<(String, Vec<(String, f64)>)> =
        vec![(format!("{ALL_ROUTES} all"), segments(data, None)?)];
    let routes = data.routes();
    if routes.len() > 1 {
        for r in routes {
            bars.push((r.to_owned(), segments(data, Some(r))?));
        }
    }
    let widest = bars
        .iter()
        .map(|(_, s)| s.iter().map(|(_, v)| v).sum::<f64>())
        .fold(0.0, f64::max);
    let (scale, unit) = unit_for(widest);
    let n = bars.len();
    let (plot, key) = area.split_horizontally(area.dim_in_pixel().0 - LEGEND_WIDTH);
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("{tap}: where the time goes (mean per request)"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(110)
        .build_cartesian_2d(0.0..(widest * scale * 1.05).max(1e-9), 0.0..n as f64)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(6)
        .max_light_lines(1)
        .light_line_style(GRID)
        .bold_line_style(GRID_BOLD)
        .x_desc(format!("time ({unit})"))
        .draw()
        .map_err(draw_error)?;
    // Bar i from the top; the first is every route together.
    let band = |i: usize| (n - 1 - i) as f64;
    // One series per phase across all bars, so that the legend names each colour once.
    let mut phases: Vec<String> = Vec::new();
    for (_, segs) in &bars {
        // A phase that is 0 in every bar (write of one-write answers) draws nothing and
        // gets no legend entry.
        for (p, _) in segs.iter().filter(|(_, v)| *v > 0.0) {
            if !phases.contains(p) {
                phases.push(p.clone());
            }
        }
    }
    let entries: Vec<(String, RGBColor)> = phases.iter().map(|p| (p.clone(), colour(p))).collect();
    for phase in phases {
        let c = colour(&phase);
        let mut rects = Vec::new();
        for (i, (_, segs)) in bars.iter().enumerate() {
            let start: f64 = segs
                .iter()
                .take_while(|(p, _)| *p != phase)
                .map(|(_, v)| v)
                .sum();
            if let Some((_, v)) = segs.iter().find(|(p, _)| *p == phase) {
                rects.push(Rectangle::new(
                    [
                        (start * scale, band(i) + 0.15),
                        ((start + v) * scale, band(i) + 0.85),
                    ],
                    c.filled(),
                ));
            }
        }
        chart.draw_series(rects).map_err(draw_error)?;
    }
    // Route names beside their bars, placed by hand: a numeric axis would put its ticks
    // where round numbers fall, not at the bars.
    let base = plot.get_base_pixel();
    let style = TextStyle::from(("sans-serif", 13)).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, (label, _)) in bars.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, band(i) + 0.5));
        plot.draw(&Text::new(
            label.clone(),
            (x - base.0 - 6, y - base.1),
            style.clone(),
        ))
        .map_err(draw_error)?;
    }
    legend(&key, &entries, false)
}

/// (seconds, cumulative fraction) points of a series' distribution.
fn cdf(series: &Series) -> Vec<(f64, f64)> {
    match &series.dist {
        Distribution::Hdr(h) => {
            let total = h.len().max(1) as f64;
            let mut seen = 0u64;
            h.iter_recorded()
                .map(|v| {
                    seen += v.count_at_value();
                    (v.value_iterated_to() as f64 / 1e9, seen as f64 / total)
                })
                .collect()
        }
        Distribution::Buckets(b) => {
            let total = b.last().map_or(1.0, |l| l.1.max(1e-12));
            b.iter()
                .filter(|(le, _)| le.is_finite())
                .map(|&(le, c)| (le, c / total))
                .collect()
        }
    }
}

fn distributions<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    tap: &str,
    data: &TapData,
) -> anyhow::Result<()> {
    let mut curves = Vec::new();
    for phase in data.phase_names() {
        if let Some(s) = data.series(phase, None)? {
            let points: Vec<(f64, f64)> = cdf(&s).into_iter().filter(|(x, _)| *x > 0.0).collect();
            if !points.is_empty() {
                curves.push((phase.to_owned(), points));
            }
        }
    }
    let xs = curves.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x));
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (1e-7, 1.0)
    };
    let (plot, key) = area.split_horizontally(area.dim_in_pixel().0 - LEGEND_WIDTH);
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("{tap}: latency distribution per phase"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(50)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .max_light_lines(1)
        .light_line_style(GRID)
        .bold_line_style(GRID_BOLD)
        .x_labels(8)
        .y_labels(6)
        .x_desc("latency (log scale)")
        .y_desc("fraction of exchanges ≤ latency")
        .x_label_formatter(&|v| crate::units::duration(*v))
        .draw()
        .map_err(draw_error)?;
    let entries: Vec<(String, RGBColor)> =
        curves.iter().map(|(p, _)| (p.clone(), colour(p))).collect();
    for (phase, points) in curves {
        let c = colour(&phase);
        // A step curve: a bucket's fraction holds up to its top value.
        // Steps smaller than a pixel are dropped: a run of a million requests has
        // thousands of HDR buckets, which would only make the file large.
        let mut steps = Vec::with_capacity(points.len() * 2 + 1);
        let mut previous = 0.0;
        let last = points.len().saturating_sub(1);
        for (i, (x, y)) in points.into_iter().enumerate() {
            if y - previous < 0.002 && i != last {
                continue;
            }
            steps.push((x, previous));
            steps.push((x, y));
            previous = y;
        }
        chart
            .draw_series(LineSeries::new(steps, c.stroke_width(2)))
            .map_err(draw_error)?;
    }
    legend(&key, &entries, true)
}

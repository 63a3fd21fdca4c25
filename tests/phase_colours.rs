//! The one colour table (`Phase::style`, src/phase.rs) that the live page, the report's
//! SVG and the dashboard share: every colour readable against white, and the colours
//! shown together far enough apart for normal vision and under simulated colour-vision
//! deficiency (Machado, Oliveira & Fernandes 2009, severity 1), in CIELAB ΔE (1976).

//!
//! The flame graphs' component colours (`report::flame_colours`) are held to their own
//! rules below: black frame text readable on each, all of them apart for normal vision,
//! and the built-ins' and the own code's apart under the simulated deficiencies too.

use phasescope::phase::Phase;
use phasescope::report::flame_colours::{self, Swatch, FIXED, GREY, OWN};

/// WCAG's contrast for text, more than the 3:1 it asks of graphics: thin curves.
const MIN_CONTRAST: f64 = 4.5;
/// Two colours shown together differ by at least this much in every vision simulated.
const MIN_DELTA_E: f64 = 8.0;

fn linear(c: u8) -> f64 {
    let c = f64::from(c) / 255.0;
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn luminance([r, g, b]: [f64; 3]) -> f64 {
    0.2126 * r + 0.7152 * g + 0.0722 * b
}

fn rgb(p: Phase) -> [f64; 3] {
    let (r, g, b) = p.rgb();
    [linear(r), linear(g), linear(b)]
}

/// Linear RGB seen with a deficiency: Machado et al.'s matrices at full severity.
fn simulate(v: [f64; 3], m: &[[f64; 3]; 3]) -> [f64; 3] {
    let mut out = [0.0; 3];
    for (i, row) in m.iter().enumerate() {
        out[i] = (row[0] * v[0] + row[1] * v[1] + row[2] * v[2]).clamp(0.0, 1.0);
    }
    out
}

const NORMAL: [[f64; 3]; 3] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
const PROTANOPIA: [[f64; 3]; 3] = [
    [0.152286, 1.052583, -0.204868],
    [0.114503, 0.786281, 0.099216],
    [-0.003882, -0.048116, 1.051998],
];
const DEUTERANOPIA: [[f64; 3]; 3] = [
    [0.367322, 0.860646, -0.227968],
    [0.280085, 0.672501, 0.047413],
    [-0.011820, 0.042940, 0.968881],
];
const TRITANOPIA: [[f64; 3]; 3] = [
    [1.255528, -0.076749, -0.178779],
    [-0.078411, 0.930809, 0.147602],
    [0.004733, 0.691367, 0.303900],
];

fn lab([r, g, b]: [f64; 3]) -> [f64; 3] {
    let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
    let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
    let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
    let f = |t: f64| {
        if t > 0.008856 {
            t.cbrt()
        } else {
            7.787 * t + 16.0 / 116.0
        }
    };
    [
        116.0 * f(y) - 16.0,
        500.0 * (f(x) - f(y)),
        200.0 * (f(y) - f(z)),
    ]
}

fn delta_e(a: [f64; 3], b: [f64; 3]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn every_phase_colour_is_readable_on_white() {
    for p in Phase::ALL {
        let contrast = 1.05 / (luminance(rgb(p)) + 0.05);
        assert!(
            contrast >= MIN_CONTRAST,
            "{p} {}: {contrast:.2}:1",
            p.style().colour
        );
    }
}

#[test]
fn colours_shown_together_stay_apart_under_colour_vision_deficiency() {
    use Phase::*;
    let stacked: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|p| p.style().stack.is_some())
        .collect();
    // The stacked bar of a Webdis tap: upstream_wait drawn as its parts.
    let webdis: Vec<Phase> = stacked
        .iter()
        .copied()
        .filter(|&p| p != UpstreamWait)
        .chain([BackendIn, BackendQueue, Backend, BackendOut])
        .collect();
    let inside: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|p| p.within().is_some())
        .collect();
    let mut pairs: Vec<(Phase, Phase)> = Vec::new();
    for group in [&stacked, &webdis, &inside] {
        for (i, &a) in group.iter().enumerate() {
            pairs.extend(group[i + 1..].iter().map(|&b| (a, b)));
        }
    }
    pairs.extend(
        Phase::ALL
            .into_iter()
            .filter(|&p| p != Total)
            .map(|p| (p, Total)),
    );
    let visions = [
        ("normal", NORMAL),
        ("protanopia", PROTANOPIA),
        ("deuteranopia", DEUTERANOPIA),
        ("tritanopia", TRITANOPIA),
    ];
    for (vision, m) in &visions {
        for &(a, b) in &pairs {
            let d = delta_e(lab(simulate(rgb(a), m)), lab(simulate(rgb(b), m)));
            assert!(
                d >= MIN_DELTA_E,
                "{vision}: {a} {} and {b} {} are ΔE {d:.1} apart",
                a.style().colour,
                b.style().colour
            );
        }
    }
}

/// The phase a dashboard override names: `byName` a series called after the phase (or
/// `PHASE (mean)`), `byRegexp` `^.* PHASE$` (the Webdis panels prefix the tap).
fn overridden_phase(matcher: &serde_json::Value) -> Option<Phase> {
    let options = matcher["options"].as_str()?;
    let name = match matcher["id"].as_str()? {
        "byName" => options.trim_end_matches(" (mean)"),
        "byRegexp" => options
            .strip_prefix("^.* ")?
            .trim_end_matches('$')
            .trim_end_matches(r" \(mean\)"),
        _ => return None,
    };
    Phase::from_name(name)
}

fn panels(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    for p in v["panels"].as_array().into_iter().flatten() {
        out.push(p.clone());
        panels(p, out);
    }
}

fn dashboard_panels() -> Vec<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards/phasescope.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut all = Vec::new();
    panels(&dashboard, &mut all);
    all
}

/// The dashboard draws each phase in the colour of `Phase::style`, the table the SVG
/// and the live page use: every colour override of a series named after a phase.
#[test]
fn the_dashboard_draws_every_phase_in_its_style_colour() {
    let all = dashboard_panels();
    let mut checked = 0;
    let mut phases = std::collections::BTreeSet::new();
    for panel in &all {
        let title = panel["title"].as_str().unwrap_or("");
        for o in panel["fieldConfig"]["overrides"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(phase) = overridden_phase(&o["matcher"]) else {
                continue;
            };
            for p in o["properties"].as_array().into_iter().flatten() {
                if p["id"] != "color" {
                    continue;
                }
                let colour = p["value"]["fixedColor"].as_str().unwrap_or("");
                assert_eq!(
                    colour.to_ascii_lowercase(),
                    phase.style().colour,
                    "panel {title:?}: {} is drawn in {colour}",
                    phase.name()
                );
                checked += 1;
                phases.insert(phase.name());
            }
        }
    }
    // The panels by phase name most phases: the check is not empty.
    assert!(
        checked >= 40 && phases.len() >= 12,
        "{checked} overrides of {phases:?}"
    );
}

/// The phases whose series a target names after them (its legend says `{{phase}}`): those
/// the first phase matcher of its query selects (`phase=~"a|b"`, `phase!="total"`,
/// `phase="a"`), or every phase when it has none.
fn phases_shown(target: &serde_json::Value) -> Vec<Phase> {
    let legend = target["legendFormat"].as_str().unwrap_or("");
    if !legend.contains("{{phase}}") {
        return Vec::new();
    }
    let expr = target["expr"].as_str().unwrap_or("");
    let matcher = regex::Regex::new(r#"phase(=~|!=|=)"([^"]*)""#).unwrap();
    let Some(m) = matcher.captures(expr) else {
        return Phase::ALL.to_vec();
    };
    let names: Vec<&str> = m[2].split('|').collect();
    let named = |p: &Phase| names.contains(&p.name());
    Phase::ALL
        .into_iter()
        .filter(|p| if &m[1] == "!=" { !named(p) } else { named(p) })
        .collect()
}

/// No series of a phase is left to Grafana's palette: every panel that names series
/// after their phase overrides the colour of each phase its queries can return, so that
/// a phase added to `Phase::ALL` (as `backend_queue` was) fails here until the
/// dashboard draws it in its style colour.
#[test]
fn the_dashboard_colours_every_phase_it_shows() {
    let mut checked = 0;
    for panel in dashboard_panels() {
        let title = panel["title"].as_str().unwrap_or("");
        let coloured: Vec<Phase> = panel["fieldConfig"]["overrides"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| {
                o["properties"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["id"] == "color")
            })
            .filter_map(|o| overridden_phase(&o["matcher"]))
            .collect();
        let targets = panel["targets"].as_array().into_iter().flatten();
        for phase in targets.flat_map(phases_shown) {
            assert!(
                coloured.contains(&phase),
                "panel {title:?} shows {phase} without a colour override"
            );
            checked += 1;
        }
    }
    assert!(checked >= 40, "{checked} phases shown by name");
}

fn swatch_rgb(s: &Swatch) -> [f64; 3] {
    let (r, g, b) = s.rgb;
    [linear(r), linear(g), linear(b)]
}

/// Frame names are drawn in black on the frame's colour.
#[test]
fn flame_graph_frame_text_is_readable_on_every_component_colour() {
    for s in flame_colours::palette() {
        let contrast = (luminance(swatch_rgb(&s)) + 0.05) / 0.05;
        assert!(
            contrast >= MIN_CONTRAST,
            "{} {:?}: {contrast:.2}:1",
            s.name,
            s.rgb
        );
    }
}

/// Any two component colours are at least 10 ΔE apart for normal vision; the built-ins',
/// the own code's and grey at least [`MIN_DELTA_E`] under each simulated deficiency as
/// well (the hashed colours cannot all be: 18 hues are more than those visions tell apart).
#[test]
fn flame_graph_component_colours_stay_apart() {
    let palette = flame_colours::palette();
    for (i, a) in palette.iter().enumerate() {
        for b in &palette[i + 1..] {
            let d = delta_e(lab(swatch_rgb(a)), lab(swatch_rgb(b)));
            assert!(d >= 10.0, "{} and {} are ΔE {d:.1} apart", a.name, b.name);
        }
    }
    let fixed: Vec<Swatch> = FIXED.iter().map(|&(_, s)| s).chain([OWN, GREY]).collect();
    for (vision, m) in [
        ("normal", NORMAL),
        ("protanopia", PROTANOPIA),
        ("deuteranopia", DEUTERANOPIA),
        ("tritanopia", TRITANOPIA),
    ] {
        for (i, a) in fixed.iter().enumerate() {
            for b in &fixed[i + 1..] {
                let d = delta_e(
                    lab(simulate(swatch_rgb(a), &m)),
                    lab(simulate(swatch_rgb(b), &m)),
                );
                assert!(
                    d >= MIN_DELTA_E,
                    "{vision}: {} and {} are ΔE {d:.1} apart",
                    a.name,
                    b.name
                );
            }
        }
    }
}

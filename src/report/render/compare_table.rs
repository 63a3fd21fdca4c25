//! Printing a [`Comparison`] in the report formats.

use std::fmt::Write as _;

use super::table::{csv_field, Format};
use crate::report::compare::{Comparison, Row};
use crate::stats::{Direction, Method, Outcome, Statistic};
use crate::units;

/// The comparison in `format`; `colour` applies to [`Format::Table`] only.
pub fn render(c: &Comparison, format: Format, colour: bool) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => text(c, colour),
        Format::Markdown => markdown(c),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(c)?;
            s.push('\n');
            s
        }
        Format::Csv => csv(c),
    })
}

const HEADERS: [&str; 11] = [
    "tap",
    "route",
    "phase",
    "stat",
    "runs",
    "A → B",
    "change [interval]",
    "cv A / B",
    "mde",
    "runs to detect",
    "verdict",
];

/// A percentage bound; past ±999 % it says "anything", not digits.
fn bound(v: f64) -> String {
    if v * 100.0 > 999.0 {
        ">+999".to_owned()
    } else {
        format!("{:+.1}", v * 100.0)
    }
}

fn value(stat: Statistic, v: Option<f64>) -> String {
    match (stat, v) {
        (_, None) => "-".to_owned(),
        (Statistic::Rate, Some(v)) => format!("{}/s", units::three_digits(v)),
        (_, Some(v)) => units::duration(v),
    }
}

fn verdict_cell(r: &Row) -> String {
    let mut v = match r.direction {
        Some(d) => format!("{} ({})", r.verdict, d.as_str()),
        None => r.verdict.to_string(),
    };
    if let Some(n) = &r.note {
        v.push_str(&format!(" — {n}"));
    }
    v
}

fn cells(r: &Row) -> Vec<String> {
    let pct = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.1} %", v * 100.0));
    let change = match (r.change, r.interval) {
        (Some(c), Some([lo, hi])) => {
            format!("{} [{}, {}]", units::change(c), bound(lo), bound(hi))
        }
        _ => "-".to_owned(),
    };
    let cv = match (r.cv_a, r.cv_b) {
        (Some(a), Some(b)) if r.cv_assumed => format!(
            "{:.1} / {:.1} %{}",
            a * 100.0,
            b * 100.0,
            if r.runs_a < 2 || r.runs_b < 2 {
                " (assumed)"
            } else {
                ""
            }
        ),
        (Some(a), Some(b)) => format!("{:.1} / {:.1} %", a * 100.0, b * 100.0),
        _ => "-".to_owned(),
    };
    let needed = match (r.runs_needed, r.change) {
        (Some(n), _) => n.to_string(),
        (None, Some(_)) => ">10000".to_owned(),
        (None, None) => "-".to_owned(),
    };
    vec![
        r.tap.clone(),
        r.route.clone(),
        r.phase.clone(),
        r.statistic.as_str().to_owned(),
        format!("{} / {}", r.runs_a, r.runs_b),
        format!("{} → {}", value(r.statistic, r.a), value(r.statistic, r.b)),
        change,
        cv,
        pct(r.mde),
        needed,
        verdict_cell(r),
    ]
}

fn header_lines(c: &Comparison) -> Vec<String> {
    let paired = c.rows.iter().any(|r| r.method == Method::Paired);
    let unit = if paired { "window" } else { "run" };
    let side = |names: &[String]| {
        // A duet's windows are many: the first and the last stand for them.
        let shown = match names {
            [first, _, .., last] if paired => format!("{first} … {last}"),
            _ => names.join(", "),
        };
        format!(
            "{shown} ({} {unit}{})",
            names.len(),
            if names.len() == 1 { "" } else { "s" }
        )
    };
    let runs = c.rows.iter().any(|r| r.method == Method::Runs);
    let resampling = c.rows.iter().any(|r| r.method == Method::Resampling);
    let method = match (runs, resampling) {
        _ if paired => {
            "method: paired windows of A and B measured at the same time, a bootstrap of windows"
        }
        (true, false) => "method: several runs a side, intervals from the variation between runs",
        (false, true) => {
            "method: one run on a side: resampling plus an ASSUMED run-to-run drift (see the notes)"
        }
        (true, true) => "method: between runs where each side has several, resampling elsewhere",
        (false, false) => "method: nothing to compare",
    };
    vec![
        format!("A: {}", side(&c.a)),
        format!("B: {}", side(&c.b)),
        method.to_owned(),
        format!(
            "same: inside ±{:.1} %; different: beyond it; change = B/A − 1; runs to detect: \
             {} to detect {:.1} % (80 % power)",
            c.threshold * 100.0,
            if paired {
                "windows (each both sides)"
            } else {
                "runs a side"
            },
            c.detect * 100.0
        ),
    ]
}

fn text(c: &Comparison, colour: bool) -> String {
    let mut out = String::new();
    for l in header_lines(c) {
        let _ = writeln!(out, "{l}");
    }
    let table: Vec<Vec<String>> = c.rows.iter().map(cells).collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for r in &table {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let pad = " ".repeat(w.saturating_sub(cell.chars().count()));
            // Text columns left-aligned, numbers right-aligned, the verdict last and free.
            if i == cells.len() - 1 {
                let _ = write!(l, "  {cell}");
            } else if i < 4 {
                let _ = write!(l, "{}{cell}{pad}", if i == 0 { "" } else { "  " });
            } else {
                let _ = write!(l, "  {pad}{cell}");
            }
        }
        l
    };
    let headers: Vec<String> = HEADERS.iter().map(|s| (*s).to_owned()).collect();
    let paint = |r: &Row, l: String| match (colour, r.verdict, r.direction) {
        (true, Outcome::Different, Some(Direction::Slower)) => {
            format!("\x1b[31m{l}\x1b[0m")
        }
        (true, Outcome::Different, _) => format!("\x1b[32m{l}\x1b[0m"),
        (true, Outcome::Unknown, _) => format!("\x1b[33m{l}\x1b[0m"),
        _ => l,
    };
    for (primary, title) in [
        (
            true,
            format!(
                "\nprimary: the question, α = {} over {} rows",
                c.alpha, c.primary_rows
            ),
        ),
        (
            false,
            format!(
                "\nexplanation: where the time went (Benjamini–Hochberg, q = {})",
                c.alpha
            ),
        ),
    ] {
        if !c.rows.iter().any(|r| r.primary == primary) {
            continue;
        }
        let _ = writeln!(out, "{title}");
        let h = line(&headers);
        let _ = writeln!(
            out,
            "{}",
            if colour {
                format!("\x1b[1m{h}\x1b[0m")
            } else {
                h
            }
        );
        for (r, cells) in c.rows.iter().zip(&table) {
            if r.primary == primary {
                let _ = writeln!(out, "{}", paint(r, line(cells)));
            }
        }
    }
    if !c.summary.is_empty() {
        let _ = writeln!(out);
        for s in &c.summary {
            let _ = writeln!(out, "{s}");
        }
    }
    let functions = function_lines(c, SHOWN_FUNCTIONS);
    if !functions.is_empty() {
        let _ = writeln!(out);
        for l in functions {
            let _ = writeln!(out, "{l}");
        }
    }
    let findings = c.findings.lines();
    if !findings.is_empty() {
        let _ = writeln!(out);
        for l in findings {
            let _ = writeln!(out, "{l}");
        }
    }
    for n in &c.notes {
        let _ = writeln!(out, "\nnote: {n}");
    }
    for f in &c.failures {
        let _ = writeln!(out, "\nFAIL: {f}");
    }
    out
}

fn markdown(c: &Comparison) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("## phasescope compare\n\n");
    for l in header_lines(c) {
        let _ = writeln!(out, "{}  ", esc(&l));
    }
    let _ = writeln!(out, "\n| primary | {} |", HEADERS.join(" | "));
    let _ = writeln!(
        out,
        "|---|---|---|---|---|{}---|",
        "---:|".repeat(HEADERS.len() - 5)
    );
    for r in &c.rows {
        let cells: Vec<String> = cells(r).iter().map(|s| esc(s)).collect();
        let _ = writeln!(
            out,
            "| {} | {} |",
            if r.primary { "yes" } else { "" },
            cells.join(" | ")
        );
    }
    for s in &c.summary {
        let _ = writeln!(out, "\n- {}", esc(s));
    }
    let functions = function_lines(c, SHOWN_FUNCTIONS);
    if !functions.is_empty() {
        let _ = writeln!(out, "\n```");
        for l in functions {
            let _ = writeln!(out, "{l}");
        }
        let _ = writeln!(out, "```");
    }
    for l in c.findings.lines() {
        let _ = writeln!(out, "\n- {}", esc(&l));
    }
    for n in &c.notes {
        let _ = writeln!(out, "\n> note: {}", esc(n));
    }
    for f in &c.failures {
        let _ = writeln!(out, "\n**FAIL**: {}", esc(f));
    }
    out
}

/// Rows of each kind and view the text and markdown show (the JSON has them all): the
/// ones that changed most, after every `different` one.
const SHOWN_FUNCTIONS: usize = 8;

/// The functions' and components' rows as an aligned table, at most `shown` of each kind
/// and view besides the `different` ones; none without sampled stacks on both sides.
fn function_lines(c: &Comparison, shown: usize) -> Vec<String> {
    use crate::report::compare::functions::{FunctionRow, Kind, View};
    if c.functions.is_empty() {
        return Vec::new();
    }
    // A name that two objects share gets its object.
    let mut objects: std::collections::HashMap<&str, std::collections::BTreeSet<&str>> =
        std::collections::HashMap::new();
    for r in &c.functions {
        objects.entry(&r.name).or_default().insert(&r.object);
    }
    let name = |r: &FunctionRow| {
        if r.kind == Kind::Function && objects.get(r.name.as_str()).is_some_and(|o| o.len() > 1) {
            format!("{} [{}]", r.name, r.object)
        } else {
            r.name.clone()
        }
    };
    let us = |v: Option<f64>| v.map_or("-".to_owned(), units::duration);
    let mut table = vec![[
        "kind".to_owned(),
        "view".to_owned(),
        "name".to_owned(),
        "A → B per request".to_owned(),
        "change [interval]".to_owned(),
        "verdict".to_owned(),
    ]];
    let mut left_out = 0;
    let mut group: Option<(Kind, View)> = None;
    let mut in_group = 0;
    for r in &c.functions {
        if group != Some((r.kind, r.view)) {
            group = Some((r.kind, r.view));
            in_group = 0;
        }
        in_group += 1;
        // What one side alone has is shown whatever the cut: a build's replaced function;
        // and a function asked for by name.
        if in_group > shown && r.verdict != Outcome::Different && r.only.is_none() && !r.asked {
            left_out += 1;
            continue;
        }
        let change = match (r.change, r.interval) {
            (Some(x), Some([lo, hi])) => {
                format!("{} [{}, {}]", units::change(x), bound(lo), bound(hi))
            }
            _ => "-".to_owned(),
        };
        let mut verdict = match r.direction_word() {
            Some(d) => format!("{} ({d})", r.verdict),
            None => r.verdict.to_string(),
        };
        match (&r.note, r.only) {
            // `only in A: 307 ns a request [...]` says it all: no verdict to give.
            (Some(n), Some(_)) => verdict = n.clone(),
            (Some(n), None) => verdict.push_str(&format!(" — {n}")),
            (None, _) => {}
        }
        table.push([
            match r.kind {
                Kind::Function => "function".to_owned(),
                Kind::Component => "component".to_owned(),
            },
            r.view.as_str().to_owned(),
            name(r),
            format!("{} → {}", us(r.a), us(r.b)),
            change,
            verdict,
        ]);
    }
    let taps: std::collections::BTreeSet<&str> =
        c.functions.iter().map(|r| r.tap.as_str()).collect();
    let mut out = vec![format!(
        "what changed in the server's CPU (tap {}): per function and component, CPU per request, \
         the most changed first (Benjamini–Hochberg, q = {})",
        taps.into_iter().collect::<Vec<_>>().join(", "),
        c.alpha
    )];
    out.extend(c.builds.iter().map(|b| format!("  {}", b.sentence())));
    out.extend(aligned(&table));
    if left_out > 0 {
        out.push(format!(
            "  ({left_out} more rows, none different, in the JSON's functions[])"
        ));
    }
    out.extend(
        c.functions
            .iter()
            .filter_map(|r| r.swap.as_ref())
            .map(|s| format!("  swapped: {s}")),
    );
    out
}

/// The function rows' cells as aligned lines: names left, figures right, the verdict last.
fn aligned(table: &[[String; 6]]) -> Vec<String> {
    let mut widths = [0usize; 6];
    for row in table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = Vec::new();
    for row in table {
        let mut l = String::from(" ");
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            let pad = " ".repeat(w.saturating_sub(cell.chars().count()));
            match i {
                5 => l.push_str(&format!("  {cell}")),
                3 | 4 => l.push_str(&format!("  {pad}{cell}")),
                _ => l.push_str(&format!(" {cell}{pad}")),
            }
        }
        out.push(l.trim_end().to_owned());
    }
    out
}

/// The CSV header of a comparison.
pub const CSV_HEADER: &str = "tap,route,phase,statistic,primary,count_a,count_b,runs_a,runs_b,\
method,a,b,change,low,high,confidence,cv_a,cv_b,cv_assumed,mde,runs_needed,p,verdict,direction";

fn csv(c: &Comparison) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    let num = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for r in &c.rows {
        let fields = vec![
            csv_field(&r.tap),
            csv_field(&r.route),
            csv_field(&r.phase),
            name(&r.statistic),
            r.primary.to_string(),
            r.count_a.to_string(),
            r.count_b.to_string(),
            r.runs_a.to_string(),
            r.runs_b.to_string(),
            name(&r.method),
            num(r.a),
            num(r.b),
            num(r.change),
            num(r.interval.map(|i| i[0])),
            num(r.interval.map(|i| i[1])),
            num(r.confidence),
            num(r.cv_a),
            num(r.cv_b),
            r.cv_assumed.to_string(),
            num(r.mde),
            r.runs_needed.map_or(String::new(), |n| n.to_string()),
            num(r.p),
            r.verdict.to_string(),
            r.direction.map_or(String::new(), |d| d.as_str().to_owned()),
        ];
        let _ = writeln!(out, "{}", fields.join(","));
    }
    out
}

/// An enum's name as the JSON output spells it.
fn name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

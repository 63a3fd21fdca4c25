//! Printing a [`Comparison`] in the report formats.

use std::fmt::Write as _;

use super::compare::{Change, Comparison, Method, Row, Verdict};
use super::table::{csv_field, Format};
use super::units;

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

const HEADERS: [&str; 9] = [
    "tap",
    "route",
    "phase",
    "n A",
    "n B",
    "mean A → B",
    "Δ mean [interval]",
    "Δ p50 [interval]",
    "Δ p99 [interval]",
];

fn delta(c: Option<Change>) -> String {
    // An interval bound past +999 % says "anything": print it as such, not as digits.
    let bound = |v: f64| {
        if v * 100.0 > 999.0 {
            ">+999".to_owned()
        } else {
            format!("{:+.1}", v * 100.0)
        }
    };
    match c {
        None => "-".to_owned(),
        Some(c) => format!(
            "{} [{}, {}]",
            units::change(c.change),
            bound(c.low),
            bound(c.high)
        ),
    }
}

/// One line on how the intervals were made, for the header.
fn method_line(c: &Comparison) -> &'static str {
    let runs = c.rows.iter().any(|r| r.method == Method::Runs);
    let resampling = c.rows.iter().any(|r| r.method == Method::Resampling);
    match (runs, resampling) {
        (true, false) => "method: several runs per side, intervals from the variation between runs",
        (false, true) => {
            "method: one run per side, intervals from resampling the histograms: \
                          run-to-run variation is NOT included (see the notes)"
        }
        (true, true) => "method: between runs where each side has several, resampling elsewhere",
        (false, false) => "method: nothing to compare",
    }
}

fn cells(r: &Row) -> Vec<String> {
    let means = match r.mean {
        Some(m) => format!("{} → {}", units::duration(m.a), units::duration(m.b)),
        None => "-".to_owned(),
    };
    let mut v = vec![
        r.tap.clone(),
        r.route.clone(),
        r.phase.clone(),
        r.count_a.to_string(),
        r.count_b.to_string(),
        means,
        delta(r.mean),
        delta(r.p50),
        delta(r.p99),
    ];
    let mut verdict = r.verdict.to_string();
    if let Some(n) = &r.note {
        verdict.push_str(&format!(" ({n})"));
    }
    v.push(verdict);
    v
}

fn header_lines(c: &Comparison) -> Vec<String> {
    let side = |names: &[String]| {
        format!(
            "{} ({} run{})",
            names.join(", "),
            names.len(),
            if names.len() == 1 { "" } else { "s" }
        )
    };
    vec![
        format!("A: {}", side(&c.a)),
        format!("B: {}", side(&c.b)),
        method_line(c).to_owned(),
    ]
}

fn text(c: &Comparison, colour: bool) -> String {
    let mut out = String::new();
    for l in header_lines(c) {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(out, "Δ = B relative to A; intervals in %\n");
    let mut headers: Vec<String> = HEADERS.iter().map(|s| (*s).to_owned()).collect();
    headers.push("verdict".to_owned());
    let table: Vec<Vec<String>> = c.rows.iter().map(cells).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &table {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let pad = " ".repeat(w - cell.chars().count());
            // Text columns left-aligned, numbers right-aligned, the verdict last and free.
            if i == cells.len() - 1 {
                let _ = write!(l, "  {cell}");
            } else if i < 3 {
                let _ = write!(l, "{}{cell}{pad}", if i == 0 { "" } else { "  " });
            } else {
                let _ = write!(l, "  {pad}{cell}");
            }
        }
        l
    };
    let bold = |s: String| {
        if colour {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s
        }
    };
    let _ = writeln!(out, "{}", bold(line(&headers)));
    for (r, cells) in c.rows.iter().zip(&table) {
        let l = line(cells);
        let l = match (colour, r.verdict) {
            (true, Verdict::Slower) => format!("\x1b[31m{l}\x1b[0m"),
            (true, Verdict::Faster) => format!("\x1b[32m{l}\x1b[0m"),
            (true, Verdict::Mixed) => format!("\x1b[33m{l}\x1b[0m"),
            _ => l,
        };
        let _ = writeln!(out, "{l}");
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
    let _ = writeln!(out, "Δ = B relative to A; intervals in %\n");
    let _ = writeln!(out, "| {} | verdict |", HEADERS.join(" | "));
    let _ = writeln!(
        out,
        "|---|---|---|{}---|",
        "---:|".repeat(HEADERS.len() - 3)
    );
    for r in &c.rows {
        let cells: Vec<String> = cells(r).iter().map(|s| esc(s)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    for n in &c.notes {
        let _ = writeln!(out, "\n> note: {}", esc(n));
    }
    for f in &c.failures {
        let _ = writeln!(out, "\n**FAIL**: {}", esc(f));
    }
    out
}

/// The CSV header of a comparison.
pub const CSV_HEADER: &str = "tap,route,phase,count_a,count_b,runs_a,runs_b,method,\
mean_a_s,mean_b_s,mean_change,mean_low,mean_high,\
p50_a_s,p50_b_s,p50_change,p50_low,p50_high,\
p99_a_s,p99_b_s,p99_change,p99_low,p99_high,verdict";

fn csv(c: &Comparison) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for r in &c.rows {
        let method = serde_json::to_value(r.method)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut fields = vec![
            csv_field(&r.tap),
            csv_field(&r.route),
            csv_field(&r.phase),
            r.count_a.to_string(),
            r.count_b.to_string(),
            r.runs_a.to_string(),
            r.runs_b.to_string(),
            method,
        ];
        for ch in [r.mean, r.p50, r.p99] {
            match ch {
                Some(ch) => {
                    fields.extend([ch.a, ch.b, ch.change, ch.low, ch.high].map(|v| v.to_string()))
                }
                None => fields.extend(std::iter::repeat_n(String::new(), 5)),
            }
        }
        fields.push(csv_field(&r.verdict.to_string()));
        let _ = writeln!(out, "{}", fields.join(","));
    }
    out
}

//! Printing a [`Report`]: aligned text for terminals, markdown, JSON and CSV.
//!
//! Text and markdown are for people, so durations get a readable unit each; JSON and CSV
//! are for programs, so they keep seconds as plain numbers (the snapshot's unit) and
//! shares as fractions.

use std::fmt::Write as _;

use super::inside::{Component, Inside};
use super::row::Row;
use super::rows::{Report, Section, ALL_ROUTES};
use crate::units;

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns (coloured on a terminal).
    Table,
    Markdown,
    Json,
    Csv,
}

/// Whether the text output may use ANSI colour: only on a terminal, and not under
/// `NO_COLOR`.
pub fn colour_for_stdout() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The report in `format`; `colour` applies to [`Format::Table`] only.
pub fn render(report: &Report, format: Format, colour: bool) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => text(report, colour),
        Format::Markdown => markdown(report),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(report)?;
            s.push('\n');
            s
        }
        Format::Csv => csv(report),
    })
}

const HEADERS: [&str; 9] = [
    "phase", "count", "mean", "p50", "p90", "p99", "p99.9", "max", "share",
];

fn cells(row: &Row) -> [String; 9] {
    [
        row.phase.clone(),
        row.count.to_string(),
        units::duration(row.mean),
        units::duration(row.p50),
        units::duration(row.p90),
        units::duration(row.p99),
        units::duration(row.p999),
        units::duration(row.max),
        row.share.map_or_else(|| "-".to_owned(), units::share),
    ]
}

fn sections(report: &Report) -> impl Iterator<Item = (&str, Option<&str>, &Section)> {
    report.taps.iter().flat_map(|t| {
        std::iter::once(&t.all)
            .chain(&t.routes)
            .map(move |s| (t.tap.as_str(), t.protocol.as_deref(), s))
    })
}

/// The inside-the-upstream lines of `tap`, printed under its all-routes headline.
fn inside_lines(report: &Report, tap: &str, s: &Section) -> Vec<String> {
    if s.route != ALL_ROUTES {
        return s.cpu.iter().map(|c| c.line()).collect();
    }
    let Some(t) = report.taps.iter().find(|t| t.tap == tap) else {
        return Vec::new();
    };
    if let Some(why) = &t.no_process {
        return vec![format!("inside the upstream: {why}")];
    }
    t.inside.as_ref().map_or_else(Vec::new, |i| i.lines())
}

/// The proxy's own cost per request of `tap`, under its all-routes headline.
fn proxy_lines(report: &Report, tap: &str, s: &Section) -> Vec<String> {
    if s.route != ALL_ROUTES {
        return Vec::new();
    }
    report
        .taps
        .iter()
        .find(|t| t.tap == tap)
        .and_then(|t| t.proxy.as_ref())
        .map_or_else(Vec::new, |p| vec![p.line()])
}

/// The findings of `tap`, printed under its all-routes headline.
fn finding_lines(report: &Report, tap: &str, s: &Section) -> Vec<String> {
    if s.route != ALL_ROUTES {
        return Vec::new();
    }
    let mut out = Vec::new();
    for f in super::findings::of_tap(&report.findings, tap) {
        if out.is_empty() {
            out.push("findings:".to_owned());
        }
        out.extend(
            super::findings::lines(f)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    out
}

fn title(tap: &str, protocol: Option<&str>, s: &Section) -> String {
    let proto = protocol.map(|p| format!(" ({p})")).unwrap_or_default();
    if s.route == ALL_ROUTES {
        format!("tap {tap}{proto}, all routes")
    } else {
        format!("tap {tap}{proto}, route {}", s.route)
    }
}

fn precision_line(report: &Report) -> &'static str {
    if report.percentiles == "exact" {
        "percentiles: HDR histograms, at most 0.8 % above the exact value; count, mean, max exact"
    } else {
        "percentiles: interpolated within Prometheus buckets (approximate)"
    }
}

/// The phase with the largest share, total aside: the one colour points at.
fn dominant(s: &Section) -> Option<usize> {
    s.rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.phase != "total" && !r.phase.starts_with("backend"))
        .filter_map(|(i, r)| r.share.map(|sh| (i, sh)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

fn text(report: &Report, colour: bool) -> String {
    let paint = |code: &str, s: &str| {
        if colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sources: {}",
        super::rows::sources_line(&report.sources)
    );
    let _ = writeln!(out, "{}", precision_line(report));
    if report.taps.is_empty() {
        let _ = writeln!(out, "\nno tap has recorded anything yet");
    }
    for (tap, protocol, s) in sections(report) {
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", paint("1", &title(tap, protocol, s)));
        let _ = writeln!(out, "  {}", s.headline);
        if let Some(l) = s.failures.server_line() {
            let _ = writeln!(out, "  {l}");
        }
        for l in proxy_lines(report, tap, s) {
            let _ = writeln!(out, "  {l}");
        }
        for l in inside_lines(report, tap, s) {
            let _ = writeln!(out, "  {l}");
        }
        for l in finding_lines(report, tap, s) {
            let _ = writeln!(out, "  {l}");
        }
        if !s.rows.is_empty() {
            let _ = writeln!(out);
            text_table(&mut out, &s.rows, dominant(s), &paint);
            if let Some(n) = zero_rows_note(&s.rows) {
                let _ = writeln!(out, "  {n}");
            }
        }
        if !s.failures.rows.is_empty() {
            let _ = writeln!(out, "\n  {FAILED_TITLE}\n");
            text_table(&mut out, &s.failures.rows, None, &paint);
        }
        if !s.failures.server_rows.is_empty() {
            let _ = writeln!(out, "\n  {SERVER_ERRORS_TITLE}\n");
            text_table(&mut out, &s.failures.server_rows, None, &paint);
        }
    }
    for n in &report.notes {
        let _ = writeln!(out, "\nnote: {n}");
    }
    out
}

/// Why a phase's row reads 0 in every column, when some do: a row of `0 ns` reads as a
/// broken timer, and it is a real zero. A response that arrives in one read has its first
/// and last byte at one instant (`upstream_recv`), and one written to the client in one
/// write likewise (`write`): docs/phases.md.
fn zero_rows_note(rows: &[Row]) -> Option<String> {
    let zero: Vec<&str> = rows
        .iter()
        .filter(|r| r.count > 0 && r.max == 0.0 && r.sum == 0.0 && r.phase != "total")
        .map(|r| r.phase.as_str())
        .collect();
    if zero.is_empty() {
        return None;
    }
    let why: Vec<&str> = zero
        .iter()
        .map(|p| match *p {
            "upstream_recv" => "came from the server in one read",
            "write" => "went to the client in one write",
            _ => "took no measurable time",
        })
        .collect();
    Some(format!(
        "{}: 0 in every exchange, as every answer {} (docs/phases.md)",
        zero.join(" and "),
        why.join(" and ")
    ))
}

/// The title of the table of the server's error answers' phases.
pub const SERVER_ERRORS_TITLE: &str =
    "the server's error answers (HTTP 5xx it sent; apart from the successes above):";

/// The title of a section's second table, the failed exchanges' phases.
pub const FAILED_TITLE: &str =
    "failed exchanges (the proxy's own answers and the exchanges cut short: not the server's latency):";

/// Aligned rows under their header; `top` is painted as the dominant phase.
fn text_table(
    out: &mut String,
    rows: &[Row],
    top: Option<usize>,
    paint: &dyn Fn(&str, &str) -> String,
) {
    let table: Vec<[String; 9]> = rows.iter().map(cells).collect();
    let mut widths = HEADERS.map(str::len);
    for r in &table {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String; 9]| {
        let mut l = String::from(" ");
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            let pad = w - c.chars().count();
            if i == 0 {
                let _ = write!(l, " {c}{}", " ".repeat(pad));
            } else {
                let _ = write!(l, "  {}{c}", " ".repeat(pad));
            }
        }
        l
    };
    let _ = writeln!(out, "{}", paint("1", &line(&HEADERS.map(str::to_owned))));
    for (i, r) in table.iter().enumerate() {
        let l = line(r);
        let l = if Some(i) == top { paint("33", &l) } else { l };
        let _ = writeln!(out, "{l}");
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## phasescope report\n");
    let _ = writeln!(
        out,
        "Sources: {}.\n",
        md_escape(&super::rows::sources_line(&report.sources))
    );
    let _ = writeln!(out, "{}.", precision_line(report));
    for (tap, protocol, s) in sections(report) {
        let _ = writeln!(out, "\n### {}\n", md_escape(&title(tap, protocol, s)));
        let _ = writeln!(out, "{}\n", md_escape(&s.headline));
        if let Some(l) = s.failures.server_line() {
            let _ = writeln!(out, "{}\n", md_escape(&upper_first(&l)));
        }
        for l in proxy_lines(report, tap, s) {
            let _ = writeln!(out, "{}\n", md_escape(&l));
        }
        for l in inside_lines(report, tap, s) {
            let _ = writeln!(out, "{}\n", md_escape(&l));
        }
        let findings: Vec<&crate::snapshot::Finding> = if s.route == ALL_ROUTES {
            super::findings::of_tap(&report.findings, tap).collect()
        } else {
            Vec::new()
        };
        if !findings.is_empty() {
            let _ = writeln!(out, "**Findings**\n");
            for f in findings {
                let mut l = super::findings::lines(f).into_iter();
                if let Some(head) = l.next() {
                    let _ = writeln!(out, "- **{}**", md_escape(&head));
                }
                for rest in l {
                    let _ = writeln!(out, "  - {}", md_escape(rest.trim_start()));
                }
            }
            let _ = writeln!(out);
        }
        if !s.rows.is_empty() {
            md_table(&mut out, &s.rows);
            if let Some(n) = zero_rows_note(&s.rows) {
                let _ = writeln!(out, "\n{}", md_escape(&upper_first(&n)));
            }
        }
        if !s.failures.rows.is_empty() {
            let _ = writeln!(out, "\n{}\n", md_escape(&upper_first(FAILED_TITLE)));
            md_table(&mut out, &s.failures.rows);
        }
        if !s.failures.server_rows.is_empty() {
            let _ = writeln!(out, "\n{}\n", md_escape(&upper_first(SERVER_ERRORS_TITLE)));
            md_table(&mut out, &s.failures.server_rows);
        }
    }
    for n in &report.notes {
        let _ = writeln!(out, "\n> note: {}", md_escape(n));
    }
    out
}

fn md_table(out: &mut String, rows: &[Row]) {
    let _ = writeln!(out, "| {} |", HEADERS.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(HEADERS.len() - 1));
    for r in rows {
        let c = cells(r).map(|c| md_escape(&c));
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// One field of a CSV record, quoted when it must be (RFC 4180).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The CSV header of [`Format::Csv`].
pub const CSV_HEADER: &str =
    "tap,route,phase,count,sum_s,mean_s,p50_s,p90_s,p99_s,p999_s,max_s,share";

/// The `phase` of the CSV records that carry a tap's inside-the-upstream section. The
/// dot keeps them apart from every phase name (phases are `snake_case`).
pub const CSV_UPSTREAM_PREFIX: &str = "upstream.";

/// The `phase` prefix of the CSV records of the failed exchanges' phases
/// (`failed.total`), after the answered exchanges' rows of the same section.
pub const CSV_FAILED_PREFIX: &str = "failed.";

/// The `phase` prefix of the CSV records of the server's error answers' phases
/// (`server_error.total`), after the failed exchanges' rows.
pub const CSV_SERVER_PREFIX: &str = "server_error.";

/// The inside-the-upstream section as records of the same table, so that one CSV stays
/// one table: `upstream.cpu_user`, `upstream.cpu_system` and `upstream.runqueue` with the
/// tap's requests as `count`, the thread-time of the window as `sum_s` and the per-request
/// figure as `mean_s`; then `upstream.component.NAME` per sampled component with its
/// samples as `count` and its fraction of them as `share`; with call stacks also
/// `upstream.inclusive.NAME`, the fraction of samples with a frame of it as `share`, and
/// `upstream.hot.NAME` per function of the hot path, in its order, with its samples as
/// `count`, its CPU per request as `mean_s` and its listed share as `share`.
/// Columns that do not apply are empty.
fn csv_inside(out: &mut String, tap: &str, i: &Inside) {
    for (what, per_request) in [
        ("cpu_user", i.cpu_user),
        ("cpu_system", i.cpu_system),
        ("runqueue", i.runqueue),
    ] {
        let _ = writeln!(
            out,
            "{},{ALL_ROUTES},{CSV_UPSTREAM_PREFIX}{what},{},{},{per_request},,,,,,",
            csv_field(tap),
            i.requests,
            per_request * i.requests as f64,
        );
    }
    // One row per component as the snapshot counts them (Prometheus's label values): a
    // group's parts, not the group, so that the rows still add up to 1.
    let components: Vec<&Component> = i
        .components
        .iter()
        .flat_map(|c| {
            if c.parts.is_empty() {
                std::slice::from_ref(c)
            } else {
                &c.parts[..]
            }
        })
        .collect();
    for c in &components {
        let _ = writeln!(
            out,
            "{},{ALL_ROUTES},{},{},,,,,,,,{}",
            csv_field(tap),
            csv_field(&format!("{CSV_UPSTREAM_PREFIX}component.{}", c.name)),
            c.samples,
            c.share
        );
    }
    for c in &components {
        if let Some(inclusive) = c.inclusive {
            let _ = writeln!(
                out,
                "{},{ALL_ROUTES},{},,,,,,,,,{inclusive}",
                csv_field(tap),
                csv_field(&format!("{CSV_UPSTREAM_PREFIX}inclusive.{}", c.name)),
            );
        }
    }
    for h in &i.hot {
        let _ = writeln!(
            out,
            "{},{ALL_ROUTES},{},{},,{},,,,,,{}",
            csv_field(tap),
            csv_field(&format!("{CSV_UPSTREAM_PREFIX}hot.{}", h.shown())),
            h.samples,
            h.cpu,
            h.listed
        );
    }
}

/// The `phase` of the CSV records that carry the proxy's own cost per request of a tap.
pub const CSV_PROXY_PREFIX: &str = "proxy.";

/// The proxy's own cost as records: `proxy.cpu_user`, `proxy.cpu_system` and
/// `proxy.runqueue` with the tap's requests as `count`, the proxy's thread-time of the
/// window as `sum_s` and the per-request figure as `mean_s`, as the upstream's rows.
fn csv_proxy(out: &mut String, tap: &str, p: &super::own::ProxyCost) {
    for (what, per_request) in [
        ("cpu_user", p.cpu_user),
        ("cpu_system", p.cpu_system),
        ("runqueue", p.runqueue),
    ] {
        let _ = writeln!(
            out,
            "{},{ALL_ROUTES},{CSV_PROXY_PREFIX}{what},{},{},{per_request},,,,,,",
            csv_field(tap),
            p.requests,
            per_request * p.requests as f64,
        );
    }
}

fn csv(report: &Report) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for t in &report.taps {
        let tap = t.tap.as_str();
        for s in std::iter::once(&t.all).chain(&t.routes) {
            let answered = s.rows.iter().map(|r| (r, r.phase.clone()));
            let failed = s
                .failures
                .rows
                .iter()
                .map(|r| (r, format!("{CSV_FAILED_PREFIX}{}", r.phase)));
            let server = s
                .failures
                .server_rows
                .iter()
                .map(|r| (r, format!("{CSV_SERVER_PREFIX}{}", r.phase)));
            for (r, phase) in answered.chain(failed).chain(server) {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{}",
                    csv_field(tap),
                    csv_field(&s.route),
                    csv_field(&phase),
                    r.count,
                    r.sum,
                    r.mean,
                    r.p50,
                    r.p90,
                    r.p99,
                    r.p999,
                    r.max,
                    r.share.map(|v| v.to_string()).unwrap_or_default()
                );
            }
            // After the tap's own rows, before its routes: where the text report puts it.
            if s.route == ALL_ROUTES {
                if let Some(p) = &t.proxy {
                    csv_proxy(&mut out, tap, p);
                }
                if let Some(i) = &t.inside {
                    csv_inside(&mut out, tap, i);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_row_of_zeros_says_why() {
        let rows = [
            Row::of_sum("upstream_wait", 3, 0.3, 0.5),
            Row::of_sum("upstream_recv", 3, 0.0, 0.5),
            Row::of_sum("write", 3, 0.0, 0.5),
        ];
        assert_eq!(
            super::zero_rows_note(&rows).as_deref(),
            Some(
                "upstream_recv and write: 0 in every exchange, as every answer came from the \
                 server in one read and went to the client in one write (docs/phases.md)"
            )
        );
        assert_eq!(super::zero_rows_note(&rows[..1]), None);
    }

    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("GET"), "GET");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }
}

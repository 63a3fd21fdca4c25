//! What the probe found, as a serializable record and as text for a person.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::fit::Estimate;
use super::grid::Shape;

/// The probe's result. Times are in nanoseconds (the field names say so), shares are
/// fractions of one.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub format: &'static str,
    pub format_version: u32,
    pub version: &'static str,
    pub target: String,
    pub seed: u64,
    pub grid: String,
    pub samples_per_cell: usize,
    /// Cells of the grid whose heads cannot be built (too many fields for the size).
    pub skipped_cells: Vec<Shape>,
    /// Timed exchanges, the minimal ones included.
    pub requests: usize,
    /// Exchanges that failed even after a reconnect (left out of the fit).
    pub failed: usize,
    /// New connections opened after the first (the server closed, or failed a request).
    pub reconnects: usize,
    /// Responses by status code.
    pub statuses: BTreeMap<u16, usize>,
    pub elapsed_s: f64,
    pub model: Model,
    /// With `--repeat N`: each pass over the grid fitted on its own (empty otherwise).
    pub passes: Vec<Pass>,
    pub floor: Floor,
    pub typical: Typical,
    pub cells: Vec<CellSummary>,
}

/// `ttfb = a + b·bytes + c·headers`.
#[derive(Debug, Clone, Serialize)]
pub struct Model {
    pub a_ns: Estimate,
    /// Absent when the grid had a single size.
    pub b_ns_per_byte: Option<Estimate>,
    /// Absent when the grid had a single field count.
    pub c_ns_per_header: Option<Estimate>,
    pub residual_ns: f64,
    pub confidence: f64,
    pub bootstrap_replicates: usize,
}

/// One pass of `--repeat`, fitted on its own (point estimates).
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    pub a_ns: f64,
    pub b_ns_per_byte: Option<f64>,
    pub c_ns_per_header: Option<f64>,
}

/// What a request costs before any server work: the network and the kernel.
#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    /// Fastest TCP handshake seen: one round trip, answered by the kernel.
    pub connect_rtt_min_ns: f64,
    pub connects: usize,
    /// The smallest possible request: request line and `Host`.
    pub minimal_head_bytes: usize,
    pub minimal_ttfb_min_ns: f64,
    pub minimal_ttfb_median_ns: f64,
    /// The median write of the minimal request.
    pub minimal_write_median_ns: f64,
}

/// The model applied to one request shape.
#[derive(Debug, Clone, Serialize)]
pub struct Typical {
    pub bytes: usize,
    pub headers: usize,
    /// Where `bytes` and `headers` came from: a tap's mean, the flags, or the defaults.
    pub source: String,
    /// `b·bytes + c·headers`: the part of time to first byte that grows with the request.
    pub size_cost_ns: Estimate,
    /// `a + b·bytes + c·headers`.
    pub ttfb_ns: Estimate,
    /// `size_cost / ttfb`.
    pub share: Estimate,
}

#[derive(Debug, Clone, Serialize)]
pub struct CellSummary {
    pub bytes: usize,
    pub headers: usize,
    pub samples: usize,
    pub median_ns: f64,
    pub min_ns: f64,
    /// The median write of this request: the client's cost of sending it, which is taken
    /// out of the samples' time to first byte.
    pub write_median_ns: f64,
}

impl ProbeReport {
    /// The report for a person: the run, the fitted model, the spread of `--repeat`'s
    /// passes, the floor, the cell medians, and what it means for a typical request.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.write_run(&mut out);
        self.write_model(&mut out);
        self.write_passes(&mut out);
        self.write_floor(&mut out);
        let _ = writeln!(out, "\ncell medians of time to first byte");
        out.push_str(&self.cell_table());
        self.write_typical(&mut out);
        out
    }

    /// What was sent and what came back: cells, samples, statuses, skipped cells.
    fn write_run(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "phasescope probe: {}\n  {} cells x {} samples + {} minimal requests, in random order (seed {}), {:.1} s",
            self.target,
            self.cells.len(),
            self.samples_per_cell,
            self.samples_per_cell,
            self.seed,
            self.elapsed_s
        );
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(status, n)| format!("{status} x {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  responses: {}; failed {}, reconnects {}",
            statuses.join(", "),
            self.failed,
            self.reconnects
        );
        if !self.skipped_cells.is_empty() {
            let cells: Vec<String> = self
                .skipped_cells
                .iter()
                .map(|s| format!("{} B/{} fields", s.bytes, s.headers))
                .collect();
            let _ = writeln!(
                out,
                "  skipped (too small for their fields): {}",
                cells.join(", ")
            );
        }
        if self.statuses.keys().any(|s| !(200..300).contains(s)) {
            let _ = writeln!(
                out,
                "  note: not every answer was 2xx; the timing still holds for what the server did, \
                 but pick a URL it serves normally to probe its usual path"
            );
        }
    }

    /// The fitted plane, each coefficient with its interval.
    fn write_model(&self, out: &mut String) {
        let m = &self.model;
        let _ = writeln!(
            out,
            "\ntime to first byte = a + b*bytes + c*headers  (cell medians, least squares, {:.0} % bootstrap intervals)",
            m.confidence * 100.0
        );
        if let Some(b) = m.b_ns_per_byte {
            let _ = writeln!(
                out,
                "  b  per header byte   {:>10}   [{}, {}]",
                ns_small(b.value),
                ns_small(b.low),
                ns_small(b.high)
            );
        }
        if let Some(c) = m.c_ns_per_header {
            let _ = writeln!(
                out,
                "  c  per header field  {:>10}   [{}, {}]",
                ns_small(c.value),
                ns_small(c.low),
                ns_small(c.high)
            );
        }
        let _ = writeln!(
            out,
            "  a  fixed             {:>10}   [{}, {}]",
            duration(m.a_ns.value),
            duration(m.a_ns.low),
            duration(m.a_ns.high)
        );
        let _ = writeln!(
            out,
            "  residual of the cell medians around the plane: {} (RMS)",
            duration(m.residual_ns)
        );
        let _ = writeln!(
            out,
            "  the intervals are within this run: they hold the noise of these samples, not what\n  \
             changes between runs minutes apart (load, clock speed); --repeat N shows that spread"
        );
    }

    /// With `--repeat`: the lowest and highest value of each coefficient over the passes.
    fn write_passes(&self, out: &mut String) {
        if self.passes.is_empty() {
            return;
        }
        let spread = |values: Vec<f64>, fmt: fn(f64) -> String| {
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{} to {}", fmt(lo), fmt(hi))
        };
        let _ = writeln!(
            out,
            "\n{} passes, one after another, each fitted on its own: spread between passes",
            self.passes.len()
        );
        let b: Vec<f64> = self.passes.iter().filter_map(|p| p.b_ns_per_byte).collect();
        if !b.is_empty() {
            let _ = writeln!(out, "  b  per header byte   {}", spread(b, ns_small));
        }
        let c: Vec<f64> = self
            .passes
            .iter()
            .filter_map(|p| p.c_ns_per_header)
            .collect();
        if !c.is_empty() {
            let _ = writeln!(out, "  c  per header field  {}", spread(c, ns_small));
        }
        let a: Vec<f64> = self.passes.iter().map(|p| p.a_ns).collect();
        let _ = writeln!(out, "  a  fixed             {}", spread(a, duration));
    }

    /// What any request costs: the handshake, the minimal request, the client's write.
    fn write_floor(&self, out: &mut String) {
        let f = &self.floor;
        let _ = writeln!(out, "\nfloor");
        let _ = writeln!(
            out,
            "  TCP handshake (one round trip, kernel only), min of {}: {}",
            f.connects,
            duration(f.connect_rtt_min_ns)
        );
        let _ = writeln!(
            out,
            "  minimal request ({} bytes), time to first byte: min {}, median {}",
            f.minimal_head_bytes,
            duration(f.minimal_ttfb_min_ns),
            duration(f.minimal_ttfb_median_ns)
        );
        if let Some(largest) = self.cells.iter().max_by_key(|c| (c.bytes, c.headers)) {
            let _ = writeln!(
                out,
                "  the client's own write (median), taken out of the samples: {} ({} bytes) to {} ({} bytes)",
                duration(f.minimal_write_median_ns),
                f.minimal_head_bytes,
                duration(largest.write_median_ns),
                largest.bytes
            );
        }
    }

    /// The model applied to the typical request, and the verdict.
    fn write_typical(&self, out: &mut String) {
        let m = &self.model;
        let t = &self.typical;
        let _ = writeln!(
            out,
            "\ntypical request ({} bytes, {} header fields): {}",
            t.bytes, t.headers, t.source
        );
        let no_trend = [m.b_ns_per_byte, m.c_ns_per_header]
            .iter()
            .flatten()
            .all(Estimate::includes_zero);
        let _ = writeln!(
            out,
            "  size-dependent part {} [{}, {}] of a predicted {} time to first byte: {} [{}, {}]",
            duration(t.size_cost_ns.value),
            duration(t.size_cost_ns.low),
            duration(t.size_cost_ns.high),
            duration(t.ttfb_ns.value),
            percent(t.share.value),
            percent(t.share.low),
            percent(t.share.high)
        );
        if no_trend {
            let _ = writeln!(
                out,
                "\n=> no growth with request size could be told from the noise (every interval includes zero):\n   parsing a typical request costs less than about {} here.",
                duration(t.size_cost_ns.high.max(0.0))
            );
        } else {
            let _ = writeln!(
                out,
                "\n=> a typical {}-byte request costs ~{} of parsing, {} of time to first byte",
                t.bytes,
                duration(t.size_cost_ns.value),
                percent(t.share.value)
            );
        }
        let _ = writeln!(
            out,
            "   (b and c hold everything that grows with the request: the kernel copying it, any proxy\n   in between, and the server's parser; see docs/probe.md)"
        );
    }

    /// Rows: head size; columns: field count.
    fn cell_table(&self) -> String {
        let mut headers: Vec<usize> = self.cells.iter().map(|c| c.headers).collect();
        headers.sort_unstable();
        headers.dedup();
        let mut bytes: Vec<usize> = self.cells.iter().map(|c| c.bytes).collect();
        bytes.sort_unstable();
        bytes.dedup();
        let mut out = String::new();
        let _ = write!(out, "  {:>8}", "bytes");
        for h in &headers {
            let _ = write!(out, " {:>11}", format!("{h} fields"));
        }
        out.push('\n');
        for b in &bytes {
            let _ = write!(out, "  {b:>8}");
            for h in &headers {
                match self.cells.iter().find(|c| c.bytes == *b && c.headers == *h) {
                    Some(c) => {
                        let _ = write!(out, " {:>11}", duration(c.median_ns));
                    }
                    None => {
                        let _ = write!(out, " {:>11}", "-");
                    }
                }
            }
            out.push('\n');
        }
        out
    }
}

/// A duration in the unit that suits it: `850 ns`, `41.2 µs`, `1.23 ms`.
pub fn duration(ns: f64) -> String {
    if !ns.is_finite() {
        return "n/a".to_owned();
    }
    let abs = ns.abs();
    if abs < 1_000.0 {
        format!("{ns:.0} ns")
    } else if abs < 1_000_000.0 {
        format!("{:.2} µs", ns / 1e3)
    } else if abs < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// A per-unit cost, which can be a fraction of a nanosecond: three significant digits.
fn ns_small(ns: f64) -> String {
    if !ns.is_finite() {
        return "n/a".to_owned();
    }
    let abs = ns.abs();
    if abs >= 1_000.0 {
        duration(ns)
    } else if abs >= 100.0 {
        format!("{ns:.0} ns")
    } else if abs >= 10.0 {
        format!("{ns:.1} ns")
    } else if abs >= 1.0 {
        format!("{ns:.2} ns")
    } else {
        format!("{ns:.3} ns")
    }
}

fn percent(fraction: f64) -> String {
    if !fraction.is_finite() {
        return "n/a".to_owned();
    }
    let p = fraction * 100.0;
    if p.abs() < 10.0 {
        format!("{p:.1} %")
    } else {
        format!("{p:.0} %")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(value: f64, low: f64, high: f64) -> Estimate {
        Estimate { value, low, high }
    }

    /// A report with every optional part: `b` and `c`, skipped cells, a non-2xx status,
    /// passes of `--repeat`, a trend; `bare` leaves them all out.
    fn sample(bare: bool) -> ProbeReport {
        let cell = |bytes, headers, median_ns| CellSummary {
            bytes,
            headers,
            samples: 30,
            median_ns,
            min_ns: median_ns - 900.0,
            write_median_ns: 2_100.0 + bytes as f64,
        };
        let mut statuses = BTreeMap::from([(200, 180)]);
        if !bare {
            statuses.insert(404, 3);
        }
        ProbeReport {
            format: "phasescope-probe",
            format_version: 1,
            version: "0.1.0",
            target: "http://127.0.0.1:3000/".into(),
            seed: 7,
            grid: "bytes=256,4096 headers=2,32".into(),
            samples_per_cell: 30,
            skipped_cells: if bare {
                vec![]
            } else {
                vec![Shape {
                    bytes: 256,
                    headers: 32,
                }]
            },
            requests: 183,
            failed: 1,
            reconnects: 2,
            statuses,
            elapsed_s: 4.26,
            model: Model {
                a_ns: estimate(41_230.0, 39_000.0, 43_500.5),
                b_ns_per_byte: (!bare).then(|| estimate(0.4123, 0.21, 0.63)),
                c_ns_per_header: (!bare).then(|| estimate(95.12, -12.0, 180.0)),
                residual_ns: 812.0,
                confidence: 0.95,
                bootstrap_replicates: 1000,
            },
            passes: if bare {
                vec![]
            } else {
                vec![
                    Pass {
                        a_ns: 40_100.0,
                        b_ns_per_byte: Some(0.35),
                        c_ns_per_header: Some(80.0),
                    },
                    Pass {
                        a_ns: 42_900.0,
                        b_ns_per_byte: Some(0.52),
                        c_ns_per_header: None,
                    },
                ]
            },
            floor: Floor {
                connect_rtt_min_ns: 18_400.0,
                connects: 8,
                minimal_head_bytes: 38,
                minimal_ttfb_min_ns: 39_800.0,
                minimal_ttfb_median_ns: 41_000.0,
                minimal_write_median_ns: 2_050.0,
            },
            typical: Typical {
                bytes: 380,
                headers: 8,
                source: "the defaults".into(),
                size_cost_ns: estimate(917.0, if bare { -300.0 } else { 400.0 }, 1_500.0),
                ttfb_ns: estimate(42_147.0, 40_000.0, 44_000.0),
                share: estimate(0.0218, -0.01, 0.04),
            },
            cells: if bare {
                vec![cell(256, 2, 41_100.0)]
            } else {
                vec![
                    cell(256, 2, 41_100.0),
                    cell(4096, 2, 42_900.0),
                    cell(4096, 32, 1_245_000.0),
                ]
            },
        }
    }

    /// The text, byte for byte, as it was before `to_text` was split into its sections
    /// (tests/fixtures/probe/: regenerate them only for a change meant to show).
    #[test]
    fn the_text_is_the_same_byte_for_byte() {
        let full = include_str!("../../tests/fixtures/probe/text-full.txt");
        let bare = include_str!("../../tests/fixtures/probe/text-bare.txt");
        assert_eq!(sample(false).to_text(), full);
        assert_eq!(sample(true).to_text(), bare);
    }

    #[test]
    fn units() {
        assert_eq!(duration(850.0), "850 ns");
        assert_eq!(duration(41_234.0), "41.23 µs");
        assert_eq!(duration(1_234_567.0), "1.23 ms");
        assert_eq!(duration(f64::NAN), "n/a");
        assert_eq!(ns_small(0.4123), "0.412 ns");
        assert_eq!(ns_small(95.12), "95.1 ns");
        assert_eq!(percent(0.112), "11 %");
        assert_eq!(percent(0.0215), "2.1 %");
    }
}

//! The request shapes the probe sends: a grid of head sizes × header-field counts, and the
//! heads built to match each shape exactly.
//!
//! Size and count are varied together on a full grid so that the fit can tell them apart:
//! along a row the count is fixed and only bytes change, along a column the reverse.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Every request head carries at least `Host` and one padding field.
pub const MIN_HEADERS: usize = 2;
/// Padding field names all have this length, so that the count does not change the size.
const PAD_NAME_LEN: usize = "X-Probe-000".len();
/// `name: ` + at least one value byte + CRLF.
const PAD_FIELD_MIN: usize = PAD_NAME_LEN + 2 + 1 + 2;
const MAX_HEADERS: usize = 999;
/// No server accepts heads anywhere near this; past it a typo (`16m` for `16k`) would
/// only allocate.
const MAX_BYTES: usize = 1024 * 1024;

/// The head sizes (bytes, request line to the blank line included) and field counts
/// (`Host` included) to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    pub bytes: Vec<usize>,
    pub headers: Vec<usize>,
}

impl Default for Grid {
    /// Up to 16 KiB: under the head limits of the servers phasescope fronts (Amphp's
    /// 32 KiB, phasescope's own 64 KiB), and large enough that a parse cost of a fraction
    /// of a nanosecond per byte adds up to microseconds.
    fn default() -> Self {
        Grid {
            bytes: vec![512, 1024, 2048, 4096, 8192, 16384],
            headers: vec![2, 6, 12, 24],
        }
    }
}

/// One cell of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Shape {
    pub bytes: usize,
    pub headers: usize,
}

impl Grid {
    /// The cells whose heads can be built for this request line and `Host` (a cell asking
    /// for many fields in few bytes cannot), in grid order; and the ones that cannot.
    pub fn cells(&self, path: &str, authority: &str) -> (Vec<Shape>, Vec<Shape>) {
        let mut feasible = Vec::new();
        let mut skipped = Vec::new();
        for &bytes in &self.bytes {
            for &headers in &self.headers {
                let shape = Shape { bytes, headers };
                if build_head(path, authority, shape).is_some() {
                    feasible.push(shape);
                } else {
                    skipped.push(shape);
                }
            }
        }
        (feasible, skipped)
    }
}

/// The smallest head a client could send: request line and `Host`. Its time to first byte
/// is the floor that every other request stands on.
pub fn minimal_head(path: &str, authority: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n{PROBE_HEADER}: 1\r\n\r\n").into_bytes()
}

/// The marker a phasescope tap recognises the probe's requests by: the first padding
/// field is named so (its value is padding like the others').
pub use crate::http1::request::PROBE_HEADER;

/// A `GET` head of exactly `shape.bytes` bytes with exactly `shape.headers` fields: `Host`
/// and `headers - 1` padding fields whose values share the padding, the first named
/// [`PROBE_HEADER`] (the marker a tap keeps the probe's requests apart by), the others
/// `X-Probe-NNN`. `None` when the
/// shape is too small for its fields (or has fewer than [`MIN_HEADERS`]).
pub fn build_head(path: &str, authority: &str, shape: Shape) -> Option<Vec<u8>> {
    if shape.headers < MIN_HEADERS || shape.headers > MAX_HEADERS {
        return None;
    }
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n").into_bytes();
    let pads = shape.headers - 1;
    let fixed = head.len() + 2 + pads * (PAD_FIELD_MIN - 1) + PROBE_HEADER.len() - PAD_NAME_LEN;
    let value_bytes = shape.bytes.checked_sub(fixed)?;
    if value_bytes < pads {
        return None;
    }
    let (each, extra) = (value_bytes / pads, value_bytes % pads);
    for i in 0..pads {
        let len = each + usize::from(i < extra);
        if i == 0 {
            head.extend_from_slice(format!("{PROBE_HEADER}: ").as_bytes());
        } else {
            head.extend_from_slice(format!("X-Probe-{i:03}: ").as_bytes());
        }
        // Varied letters rather than one repeated byte: nothing downstream gets a free ride
        // from a run of identical bytes.
        head.extend((0..len).map(|k| b'a' + ((k + i) % 26) as u8));
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    debug_assert_eq!(head.len(), shape.bytes);
    Some(head)
}

impl FromStr for Grid {
    type Err = String;

    /// `bytes=512,2048,8192;headers=2,10,40`; either part may be left out (its default is
    /// kept). Whitespace may stand for `;`.
    fn from_str(spec: &str) -> Result<Grid, String> {
        let mut grid = Grid::default();
        let mut any = false;
        for part in spec
            .split([';', ' ', '\t'])
            .filter(|p| !p.trim().is_empty())
        {
            let (key, values) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected bytes=N,N,… or headers=N,N,…"))?;
            let list = parse_list(values).map_err(|e| format!("{key}: {e}"))?;
            match key.trim() {
                "bytes" => {
                    if let Some(&high) = list.iter().find(|&&n| n > MAX_BYTES) {
                        return Err(format!("bytes: {high} is more than {MAX_BYTES}"));
                    }
                    grid.bytes = list
                }
                "headers" => {
                    if let Some(&low) = list.iter().find(|&&n| n < MIN_HEADERS) {
                        return Err(format!(
                            "headers: {low} is too few; every request has Host and at least one padding field ({MIN_HEADERS})"
                        ));
                    }
                    if let Some(&high) = list.iter().find(|&&n| n > MAX_HEADERS) {
                        return Err(format!("headers: {high} is more than {MAX_HEADERS}"));
                    }
                    grid.headers = list
                }
                other => return Err(format!("{other:?}: the grid has \"bytes\" and \"headers\"")),
            }
            any = true;
        }
        if !any {
            return Err("empty grid; e.g. bytes=512,2048,8192;headers=2,10,40".to_owned());
        }
        Ok(grid)
    }
}

fn parse_list(values: &str) -> Result<Vec<usize>, String> {
    let mut list = Vec::new();
    for v in values.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let n = parse_size(v)?;
        if n == 0 {
            return Err("0 is not a size".to_owned());
        }
        list.push(n);
    }
    if list.is_empty() {
        return Err("no values".to_owned());
    }
    list.sort_unstable();
    list.dedup();
    Ok(list)
}

/// `4096`, `4k`, `4KiB`.
fn parse_size(v: &str) -> Result<usize, String> {
    let lower = v.to_ascii_lowercase();
    let (digits, scale) = if let Some(d) = lower.strip_suffix("kib").or(lower.strip_suffix('k')) {
        (d, 1024)
    } else {
        (lower.as_str(), 1)
    };
    digits
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{v:?} is not a number"))
}

impl fmt::Display for Grid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        write!(
            f,
            "bytes={};headers={}",
            list(&self.bytes),
            list(&self.headers)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(head: &[u8]) -> usize {
        let mut headers = [httparse::EMPTY_HEADER; 1000];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(head).unwrap() {
            httparse::Status::Complete(n) => assert_eq!(n, head.len()),
            httparse::Status::Partial => panic!("partial"),
        }
        req.headers.len()
    }

    #[test]
    fn heads_have_exactly_the_asked_size_and_count() {
        for bytes in [200, 512, 1000, 4097, 16384] {
            for headers in [2, 3, 8, 17, 32] {
                let shape = Shape { bytes, headers };
                let Some(head) = build_head("/PING", "127.0.0.1:7379", shape) else {
                    assert!(bytes < 700, "{shape:?} should be feasible");
                    continue;
                };
                assert_eq!(head.len(), bytes, "{shape:?}");
                assert_eq!(fields(&head), headers, "{shape:?}");
                assert!(head.starts_with(b"GET /PING HTTP/1.1\r\nHost: 127.0.0.1:7379\r\n"));
            }
        }
    }

    #[test]
    fn too_small_shapes_are_skipped_not_bent() {
        let grid = Grid {
            bytes: vec![100, 4096],
            headers: vec![2, 64],
        };
        let (ok, skipped) = grid.cells("/", "h");
        assert_eq!(
            skipped,
            vec![Shape {
                bytes: 100,
                headers: 64
            },]
        );
        assert_eq!(ok.len(), 3);
        assert!(build_head(
            "/",
            "h",
            Shape {
                bytes: 10,
                headers: 2
            }
        )
        .is_none());
        assert!(build_head(
            "/",
            "h",
            Shape {
                bytes: 1000,
                headers: 1
            }
        )
        .is_none());
        // Host and the probe's marker.
        let minimal = minimal_head("/", "h");
        assert_eq!(fields(&minimal), 2);
    }

    #[test]
    fn every_head_carries_the_marker() {
        let marked = |head: &[u8]| {
            let text = String::from_utf8_lossy(head).to_ascii_lowercase();
            text.contains(&format!("\r\n{}: ", PROBE_HEADER.to_ascii_lowercase()))
        };
        assert!(marked(&minimal_head("/", "h")));
        for (bytes, headers) in [(512, 2), (512, 6), (16384, 24)] {
            let head = build_head("/PING", "127.0.0.1:1", Shape { bytes, headers }).unwrap();
            assert_eq!(head.len(), bytes);
            assert_eq!(fields(&head), headers);
            assert!(marked(&head));
        }
    }

    #[test]
    fn grid_specs_parse() {
        let g: Grid = "bytes=512,2k,8KiB;headers=2,10".parse().unwrap();
        assert_eq!(g.bytes, vec![512, 2048, 8192]);
        assert_eq!(g.headers, vec![2, 10]);
        let g: Grid = "headers=4,2,4".parse().unwrap();
        assert_eq!(g.headers, vec![2, 4]);
        assert_eq!(g.bytes, Grid::default().bytes);
        assert_eq!(g.to_string().parse::<Grid>().unwrap(), g);
        for (bad, says) in [
            ("", "empty"),
            ("bytes", "expected"),
            ("bytes=", "no values"),
            ("bytes=a", "not a number"),
            ("bytes=0", "not a size"),
            ("headers=1", "too few"),
            ("bytes=2048k", "more than"),
            ("rows=3", "\"bytes\""),
        ] {
            let e = bad.parse::<Grid>().unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}

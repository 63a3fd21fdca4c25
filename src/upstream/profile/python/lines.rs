//! The line a Python frame is running: CPython 3.11's location table (`co_linetable`)
//! decoded at the frame's instruction.
//!
//! A frame's `prev_instr` points at the code unit (two bytes) of the instruction it
//! started last, inside its code object's `co_code_adaptive`; for a caller that is its
//! call, for the leaf the instruction it runs. The location table maps code units to
//! source positions (PEP 626 and 657; the format is written up in CPython 3.11's
//! Objects/locations.md). It is a sequence of entries; each starts with a byte whose top
//! bit is set, its bits 3–6 a code and bits 0–2 the number of code units it covers minus
//! one, and continues with bytes whose top bit is clear:
//!
//! - code 15: no location (an artificial instruction): no line;
//! - code 14: the long form: the line's delta as a signed varint, then the end line's
//!   delta and the two columns as varints;
//! - code 13: no columns: the line's delta as a signed varint;
//! - codes 10–12: one line, its delta `code - 10`, then the two columns, a byte each;
//! - codes 0–9: the short form: the same line as before, one byte of columns.
//!
//! Varints are six bits a byte, least significant first, bit 6 set when another byte
//! follows; a signed varint is an unsigned one whose bit 0 is the sign. Each delta is
//! added to the line before it, starting at `co_firstlineno`; an entry without a location
//! changes nothing.

/// The line of the instruction at code unit `unit` in a code object whose table is
/// `table` and first line `first_line`; `None` when the instruction has no location (an
/// artificial one) or lies past the table (a torn read).
pub fn line_at(table: &[u8], first_line: u32, unit: u64) -> Option<u32> {
    let mut line = i64::from(first_line);
    let mut start = 0u64;
    let mut at = 0;
    while let Some(&head) = table.get(at) {
        if head & 0x80 == 0 {
            return None;
        }
        at += 1;
        let code = (head >> 3) & 0x0f;
        let length = u64::from(head & 0x07) + 1;
        let (delta, located) = match code {
            15 => (0, false),
            13 | 14 => (signed(table, &mut at)?, true),
            10..=12 => (i64::from(code) - 10, true),
            _ => (0, true),
        };
        line += delta;
        // Skip the entry's remaining bytes (columns): they carry no top bit.
        while table.get(at).is_some_and(|b| b & 0x80 == 0) {
            at += 1;
        }
        if unit < start + length {
            return (located && line > 0).then(|| u32::try_from(line).ok())?;
        }
        start += length;
    }
    None
}

/// A varint at `at`, six bits a byte; `at` moves past it.
fn unsigned(table: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = *table.get(*at)?;
        if byte & 0x80 != 0 || shift > 56 {
            return None;
        }
        *at += 1;
        value |= u64::from(byte & 0x3f) << shift;
        shift += 6;
        if byte & 0x40 == 0 {
            return Some(value);
        }
    }
}

/// A signed varint: bit 0 the sign, the rest the magnitude.
fn signed(table: &[u8], at: &mut usize) -> Option<i64> {
    let value = unsigned(table, at)?;
    let magnitude = i64::try_from(value >> 1).ok()?;
    Some(if value & 1 == 1 {
        -magnitude
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Each (start byte, end byte, line) against the table: what CPython's own
    /// `co_lines()` gave for the same code object.
    fn check(table: &[u8], first: u32, lines: &[(u64, u64, Option<u32>)]) {
        for &(start, end, line) in lines {
            for byte in (start..end).step_by(2) {
                assert_eq!(line_at(table, first, byte / 2), line, "byte {byte}");
            }
        }
        let past = lines.last().unwrap().1 / 2;
        assert_eq!(line_at(table, first, past), None, "past the table");
    }

    /// A loop, a list over three lines and a continued return: Debian's python3.11,
    /// `f.__code__.co_linetable` and `list(f.__code__.co_lines())` of
    /// `def f(n):\n x = 0\n for i in range(n):\n  x += i\n y = [\n 1,\n 2]\n return x + \\\n len(y)`.
    #[test]
    fn lines_of_a_function_as_cpython_gives_them() {
        let table = hex(
            "8000d808098041dd0d12903189588c58f00001050ff00001050f8801d8080988518906880188\
             01e00607d80607f0050209098041f006000c0ddd070a883181768476f103010c0ef00001050e",
        );
        check(
            &table,
            1,
            &[
                (0, 2, Some(1)),
                (2, 6, Some(2)),
                (6, 40, Some(3)),
                (40, 52, Some(4)),
                (52, 54, Some(6)),
                (54, 56, Some(7)),
                (56, 60, Some(5)),
                (60, 62, Some(8)),
                (62, 90, Some(9)),
                (90, 96, Some(8)),
            ],
        );
    }

    /// A try/except: artificial instructions have no line, and the line goes back up.
    #[test]
    fn instructions_without_a_location() {
        let table = hex("8000f002030511d80f108871f8dd0b15f000010511f000010511f000\
             010511d80f1088718871887188718871f8f8f8f8f003010511f8f8f8");
        check(
            &table,
            10,
            &[
                (0, 2, Some(10)),
                (2, 4, Some(11)),
                (4, 8, Some(12)),
                (8, 10, None),
                (10, 28, Some(13)),
                (28, 40, Some(14)),
                (40, 48, None),
                (48, 50, Some(13)),
                (50, 56, None),
            ],
        );
    }

    #[test]
    fn a_torn_table_reads_as_no_line() {
        assert_eq!(line_at(&[0x05, 0x80], 1, 0), None, "no entry head");
        assert_eq!(line_at(&[0xf0], 1, 0), None, "a varint cut off");
        assert_eq!(line_at(&[], 1, 0), None);
    }
}

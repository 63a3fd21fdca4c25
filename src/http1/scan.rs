//! Finding the end of a message head without re-reading what was already read.
//!
//! A head ends at the first empty line. Clients deliver heads in pieces (slowloris sends a
//! byte a second), so the scan remembers how far it got and resumes there: each byte of a
//! head is examined once by the scan and once by the parser, however many reads it took.

use memchr::memchr_iter;

/// Resumable end-of-head scanner.
#[derive(Debug, Default, Clone, Copy)]
pub struct HeadScanner {
    /// Bytes already known not to contain the end of the head.
    scanned: usize,
}

impl HeadScanner {
    pub const fn new() -> Self {
        Self { scanned: 0 }
    }

    /// Returns the length of the head (up to and including the empty line) once `buf`
    /// holds all of it. `buf` must start at the head's first byte and only ever grow
    /// between calls; call [`reset`](Self::reset) before the next head.
    ///
    /// Both `\r\n\r\n` and a bare `\n\n` end a head here, as they do for httparse (and for
    /// the upstreams we front), so that the scanner never waits for bytes that the parser
    /// would not need.
    pub fn find_end(&mut self, buf: &[u8]) -> Option<usize> {
        // Step back three bytes so that a terminator split across reads is seen whole.
        let from = self.scanned.saturating_sub(3);
        for nl in memchr_iter(b'\n', &buf[from..]) {
            let i = from + nl;
            match buf.get(i + 1) {
                Some(b'\n') => return Some(i + 2),
                Some(b'\r') => match buf.get(i + 2) {
                    Some(b'\n') => return Some(i + 3),
                    Some(_) => {}
                    None => break,
                },
                Some(_) => {}
                None => break,
            }
        }
        self.scanned = buf.len();
        None
    }

    pub fn reset(&mut self) {
        self.scanned = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_pieces(msg: &[u8], piece: usize) -> Option<usize> {
        let mut s = HeadScanner::new();
        let mut end = piece.min(msg.len());
        loop {
            if let Some(n) = s.find_end(&msg[..end]) {
                return Some(n);
            }
            if end == msg.len() {
                return None;
            }
            end = (end + piece).min(msg.len());
        }
    }

    #[test]
    fn finds_the_end_whatever_the_split() {
        let msg = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
        for piece in 1..msg.len() {
            assert_eq!(scan_in_pieces(msg, piece), Some(27), "piece {piece}");
        }
    }

    #[test]
    fn bare_lf_heads_end_too() {
        assert_eq!(scan_in_pieces(b"GET / HTTP/1.1\nHost: a\n\nX", 1), Some(24));
    }

    #[test]
    fn incomplete_heads_need_more() {
        assert_eq!(scan_in_pieces(b"GET / HTTP/1.1\r\nHost: a\r\n", 3), None);
        assert_eq!(scan_in_pieces(b"GET / HTTP/1.1\r\nHost: a\r\n\r", 3), None);
    }
}

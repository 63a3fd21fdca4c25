//! Finding the end of a message head without re-reading what was already read.
//!
//! A head ends at the first empty line. Clients deliver heads in pieces (slowloris sends a
//! byte a second), so the scan remembers how far it got and resumes there: each byte of a
//! head is examined once by the scan and once by the parser, however many reads it took.

use memchr::memchr_iter;

use super::block;
use super::headers::is_tchar;
use super::request::RequestError;

/// Where the head ends if the line feed at `lf` starts its empty line: `\n\n` or
/// `\n\r\n`. `None` also when the bytes that would tell have not arrived yet.
#[inline]
fn end_after(buf: &[u8], lf: usize) -> Option<usize> {
    match (buf.get(lf + 1), buf.get(lf + 2)) {
        (Some(b'\n'), _) => Some(lf + 2),
        (Some(b'\r'), Some(b'\n')) => Some(lf + 3),
        _ => None,
    }
}

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
        // Step back two bytes so that a terminator split across reads is seen whole.
        let mut at = self.scanned.saturating_sub(2);
        // A head ends after the first line feed followed by `\n` or `\r\n`: every line
        // feed is a candidate, found a block of bytes at a time. Heads are short (40–70
        // bytes from load generators, a few hundred from browsers), and at that size a
        // library substring search spends more on setting up and dispatching than on
        // searching; this examines each byte once, in one pass for both terminators.
        if buf.len() < block::LEN {
            for (lf, &b) in buf.iter().enumerate().skip(at) {
                if b == b'\n' {
                    if let Some(end) = end_after(buf, lf) {
                        return Some(end);
                    }
                }
            }
        } else {
            while at < buf.len() {
                // The last block ends with the buffer, overlapping the one before: a line
                // feed seen twice gives the same answer twice.
                let start = at.min(buf.len() - block::LEN);
                let Some(mut lfs) = block::equal(buf, start, b'\n') else {
                    break;
                };
                while lfs != 0 {
                    let lf = start + (lfs.trailing_zeros() / block::BITS) as usize;
                    if let Some(end) = end_after(buf, lf) {
                        return Some(end);
                    }
                    lfs &= lfs - 1;
                }
                at = start + block::LEN;
            }
        }
        self.scanned = buf.len();
        None
    }

    pub fn reset(&mut self) {
        self.scanned = 0;
    }
}

/// The request side's scanner: finds the end of the head like [`HeadScanner`], and also
/// refuses a head as soon as its first bytes cannot begin a valid request.
///
/// Without this, input that never contains an empty line waits for the head timeout: an
/// HTTP/0.9 request (`GET /\r\n`, RFC 9112 §2.3 dropped it; its client waits for an
/// answer without sending more), a TLS ClientHello on the plain port, binary noise. Now
/// these get their 400 at once. The early check only refuses what the full parse would
/// refuse too (a property test holds it to that); the full parse still decides the rest.
#[derive(Debug, Default, Clone, Copy)]
pub struct RequestScanner {
    head: HeadScanner,
    /// Bytes of the request line already checked.
    line_checked: usize,
    /// The request line was complete and valid.
    line_ok: bool,
}

impl RequestScanner {
    pub const fn new() -> Self {
        Self {
            head: HeadScanner::new(),
            line_checked: 0,
            line_ok: false,
        }
    }

    /// The head's length once `buf` holds all of it (same contract as
    /// [`HeadScanner::find_end`]), or an error as soon as the request line is hopeless.
    pub fn find_end(&mut self, buf: &[u8]) -> Result<Option<usize>, RequestError> {
        if let Some(n) = self.head.find_end(buf) {
            return Ok(Some(n));
        }
        if !self.line_ok {
            self.check_line(buf)?;
        }
        Ok(None)
    }

    /// Checks each byte of the request line once. One CRLF before the request line is
    /// skipped, as RFC 9112 §2.2 asks a server to (and as httparse does).
    fn check_line(&mut self, buf: &[u8]) -> Result<(), RequestError> {
        if buf == b"\r" {
            return Ok(());
        }
        let skip = if buf.starts_with(b"\r\n") { 2 } else { 0 };
        let from = self.line_checked.max(skip);
        for (i, &b) in buf.iter().enumerate().skip(from) {
            let prev_cr = i > skip && buf[i - 1] == b'\r';
            if b == b'\n' {
                if !prev_cr {
                    return Err(RequestError::BareLf);
                }
                // The line is complete: httparse decides it. With no room for fields it
                // answers Partial for a valid line (the fields are still to come).
                let mut no_fields: [httparse::Header<'_>; 0] = [];
                let mut req = httparse::Request::new(&mut no_fields);
                return match req.parse(&buf[..=i]) {
                    Err(e) => Err(RequestError::Malformed(e)),
                    Ok(_) => {
                        self.line_ok = true;
                        Ok(())
                    }
                };
            }
            // A method is a token (RFC 9110 §9.1); no control byte but the final CR, and
            // that CR only right before the LF, belongs in a request line (§3).
            let bad =
                (i == skip && !is_tchar(b)) || prev_cr || (b < 0x20 && b != b'\r') || b == 0x7f;
            if bad {
                return Err(RequestError::Malformed(httparse::Error::Token));
            }
        }
        self.line_checked = buf.len();
        Ok(())
    }

    pub fn reset(&mut self) {
        *self = Self::new();
    }
}

/// The response side's scanner: finds the end of the head like [`HeadScanner`], and
/// refuses at once a response that does not begin with `HTTP/` (RFC 9112 §4: the
/// status line starts with the HTTP-version), or whose head holds a CR that is not
/// followed by LF (§2.2: a bare CR is invalid). Without it an upstream that speaks
/// something else (a Redis server behind an HTTP tap answers `-ERR ...\r\n`), or ends
/// its lines in bare CRs, would leave the client waiting for the response timeout
/// instead of getting its 502.
#[derive(Debug, Default, Clone, Copy)]
pub struct ResponseScanner {
    head: HeadScanner,
    /// Bytes of the head already checked for bare CRs.
    cr_checked: usize,
}

/// Why a response head is refused before it is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotHttp {
    #[error("the upstream's answer does not start with HTTP/")]
    Start,
    #[error("a bare CR in the upstream's response head")]
    BareCr,
}

impl ResponseScanner {
    pub const fn new() -> Self {
        Self {
            head: HeadScanner::new(),
            cr_checked: 0,
        }
    }

    /// Same contract as [`HeadScanner::find_end`], failing early on a wrong start or a
    /// bare CR. Only the head's own bytes are checked: what follows it is body.
    pub fn find_end(&mut self, buf: &[u8]) -> Result<Option<usize>, NotHttp> {
        const START: &[u8] = b"HTTP/";
        let n = buf.len().min(START.len());
        if buf[..n] != START[..n] {
            return Err(NotHttp::Start);
        }
        let end = self.head.find_end(buf);
        // A whole head goes to the parser, which refuses a bare CR anywhere in it (a test
        // below holds it to that): the check here is for heads that are not whole yet.
        if end.is_some() {
            return Ok(end);
        }
        let upto = buf.len();
        let from = self.cr_checked.min(upto);
        for i in memchr_iter(b'\r', &buf[from..upto]).map(|i| from + i) {
            match buf.get(i + 1) {
                Some(b'\n') => {}
                Some(_) => return Err(NotHttp::BareCr),
                // The LF may come with the next read: check this CR again then.
                None => {
                    self.cr_checked = i;
                    return Ok(end);
                }
            }
        }
        self.cr_checked = upto;
        Ok(end)
    }

    pub fn reset(&mut self) {
        self.head.reset();
        self.cr_checked = 0;
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

    fn early(input: &[u8]) -> Result<Option<usize>, RequestError> {
        let mut s = RequestScanner::new();
        let mut last = Ok(None);
        for end in 1..=input.len() {
            last = s.find_end(&input[..end]);
            if !matches!(last, Ok(None)) {
                return last;
            }
        }
        last
    }

    #[test]
    fn hopeless_request_lines_fail_before_the_head_ends() {
        assert!(early(b"GET /\r\n").is_err(), "HTTP/0.9");
        assert!(early(b"\x16\x03\x01\x02\x00").is_err(), "TLS ClientHello");
        assert_eq!(early(b"GET / HTTP/1.1\n"), Err(RequestError::BareLf));
        assert!(early(b"GET /\0 HTTP/1.1").is_err());
        assert!(early(b"GET / HTTP/1.1\rX").is_err());
        assert!(early(b"PRI * HTTP/2.0\r\n").is_err());
    }

    #[test]
    fn valid_request_lines_wait_for_the_head() {
        assert_eq!(early(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        assert_eq!(early(b"\r\nGET / HTTP/1.1\r\nHost: a"), Ok(None));
        assert_eq!(early(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Ok(Some(27)));
    }

    #[test]
    fn responses_must_start_with_http() {
        let mut s = ResponseScanner::new();
        assert_eq!(s.find_end(b"HT"), Ok(None));
        assert_eq!(s.find_end(b"HTTP/1.1 200 OK\r\n\r\n"), Ok(Some(19)));
        assert_eq!(
            ResponseScanner::new().find_end(b"-ERR"),
            Err(NotHttp::Start)
        );
        assert_eq!(
            ResponseScanner::new().find_end(b"HTTX/"),
            Err(NotHttp::Start)
        );
    }

    #[test]
    fn bare_cr_in_a_response_head_fails_at_once() {
        let mut s = ResponseScanner::new();
        assert_eq!(s.find_end(b"HTTP/1.1 200 OK\r"), Ok(None));
        assert_eq!(s.find_end(b"HTTP/1.1 200 OK\rX"), Err(NotHttp::BareCr));
        let mut s = ResponseScanner::new();
        assert_eq!(
            s.find_end(b"HTTP/1.1 200 OK\r\nA: b\rc\r\n"),
            Err(NotHttp::BareCr)
        );
        // A whole head with a bare CR is left to the parser, which refuses it.
        let mut s = ResponseScanner::new();
        assert_eq!(
            s.find_end(b"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n"),
            Ok(Some(27))
        );
        // A CR in the body after the head is not the head's business.
        let mut s = ResponseScanner::new();
        assert_eq!(s.find_end(b"HTTP/1.1 200 OK\r\n\r\n\rX"), Ok(Some(19)));
    }

    /// The scanner leaves bare CRs in a whole head to the parser: it must refuse every
    /// one of them, wherever it is.
    #[test]
    fn the_parser_refuses_a_bare_cr_anywhere_in_a_whole_head() {
        let head: &[u8] =
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n";
        for at in 0..head.len() - 1 {
            for follower in [b'X', b' ', b':', b'\t'] {
                let mut bad = head[..at].to_vec();
                bad.extend_from_slice(&[b'\r', follower]);
                bad.extend_from_slice(&head[at..]);
                let mut scanner = ResponseScanner::new();
                let Ok(Some(len)) = scanner.find_end(&bad) else {
                    continue; // refused early, or no longer a whole head
                };
                let parsed = super::super::response::parse(&bad[..len], super::super::Method::Get);
                assert!(
                    parsed.is_err(),
                    "a bare CR at {at} before {follower:?} was accepted: {:?}",
                    String::from_utf8_lossy(&bad)
                );
            }
        }
    }

    #[test]
    fn terminators_are_found_in_any_mix_and_the_first_wins() {
        let mut s = HeadScanner::new();
        assert_eq!(s.find_end(b"A\r\n\r\nB\n\n"), Some(5));
        let mut s = HeadScanner::new();
        assert_eq!(s.find_end(b"A\n\nB\r\n\r\n"), Some(3));
        let mut s = HeadScanner::new();
        assert_eq!(s.find_end(b"A\r\nB\n\r\nC"), Some(7));
        let mut s = HeadScanner::new();
        assert_eq!(s.find_end(b"A\r\nB\r\n\nC"), Some(7));
        for piece in 1..12 {
            assert_eq!(
                scan_in_pieces(b"A\r\nB\r\n\nC", piece),
                Some(7),
                "piece {piece}"
            );
            assert_eq!(
                scan_in_pieces(b"AB\n\r\nC", piece),
                Some(5),
                "piece {piece}"
            );
        }
    }

    /// The first `\n\n` or `\n\r\n`, the plain way.
    fn naive_end(msg: &[u8]) -> Option<usize> {
        (0..msg.len()).find_map(|i| {
            if msg[i..].starts_with(b"\n\n") {
                Some(i + 2)
            } else if msg[i..].starts_with(b"\n\r\n") {
                Some(i + 3)
            } else {
                None
            }
        })
    }

    /// Every message of up to 8 bytes of `a`, CR and LF, shifted across word boundaries by
    /// a prefix, read whole and in pieces: the word-at-a-time scan finds what a byte-by-byte
    /// search finds.
    #[test]
    fn the_word_scan_finds_the_first_terminator_like_a_plain_search() {
        for mut msg in crate::http1::cr_lf_strings(8, &[0, 1, 5, 7, 8, 13, 15, 16, 17, 24]) {
            msg.extend_from_slice(b"yz");
            let want = naive_end(&msg);
            for piece in [1, 2, 7, msg.len()] {
                assert_eq!(scan_in_pieces(&msg, piece), want, "{msg:?} in {piece}s");
            }
        }
    }

    #[test]
    fn incomplete_heads_need_more() {
        assert_eq!(scan_in_pieces(b"GET / HTTP/1.1\r\nHost: a\r\n", 3), None);
        assert_eq!(scan_in_pieces(b"GET / HTTP/1.1\r\nHost: a\r\n\r", 3), None);
    }
}

//! Property tests of the framing decisions.
//!
//! - Request heads: ours against httparse's. Where httparse says complete, we find the
//!   same end; where httparse refuses, we refuse; where we accept, httparse accepts the
//!   same length. Where we refuse what httparse accepts, the reason is one of the
//!   deliberate strictness decisions listed in [`STRICTER_ON_PURPOSE`] (docs/security.md
//!   explains each), never a parse error of our own making.
//! - Response heads: the same against httparse in its strict configuration.
//! - Chunked bodies: our resumable framer against a plain recursive-descent decoder
//!   written here, on whole inputs.
//! - Resumability: every input is also fed split at every byte position (two pieces) and
//!   byte by byte, and must give the same outcome as whole.

use phasescope::http1::{
    request, response, BodyError, BodyFramer, BodyKind, Method, RequestError, RequestScanner,
    ResponseScanner,
};
use proptest::prelude::*;

const MAX_HEADERS: usize = 16;

/// Refusals of heads that httparse accepts, all on purpose.
fn stricter_on_purpose(e: &RequestError) -> bool {
    matches!(
        e,
        RequestError::BareLf            // RFC 9112 §2.2: upstreams may not split on LF
            | RequestError::TabInFraming      // HTAB OWS around CL/TE: classic obfuscation
            | RequestError::FramingLookalike  // Transfer_Encoding read as TE by CGI-style servers
            | RequestError::BadTarget         // §3.2: target form does not fit the method
            | RequestError::LengthAndEncoding // §6.1: CL with TE
            | RequestError::NotChunked        // §6.3: final coding not chunked
            | RequestError::ChunkedRepeated   // §7: chunked twice
            | RequestError::UnsupportedCoding // §6.1: 501 for codings but chunked
            | RequestError::EncodingOnHttp10  // §6.1: TE in HTTP/1.0
            | RequestError::ConnectWithBody   // RFC 9110 §9.3.6: CONNECT has no content
            | RequestError::FramingHopByHop   // RFC 9110 §7.6.1: Connection: content-length
            | RequestError::Framing(_) // RFC 9110 §8.6 / §6.3: bad or conflicting CL, bad TE
    )
}

// --- generators ----------------------------------------------------------------------------

fn request_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => Just(b"GET / HTTP/1.1".to_vec()),
        2 => Just(b"POST /p?q=1 HTTP/1.1".to_vec()),
        1 => Just(b"GET / HTTP/1.0".to_vec()),
        1 => Just(b"OPTIONS * HTTP/1.1".to_vec()),
        1 => Just(b"GET * HTTP/1.1".to_vec()),
        1 => Just(b"GET http://a/x HTTP/1.1".to_vec()),
        1 => Just(b"GET a:80 HTTP/1.1".to_vec()),
        1 => Just(b"get / HTTP/1.1".to_vec()),
        1 => Just(b"GET  / HTTP/1.1".to_vec()),
        1 => Just(b"GET /".to_vec()),
        1 => Just(b"PRI * HTTP/2.0".to_vec()),
        1 => Just(b"G@T / HTTP/1.1".to_vec()),
        1 => Just(b"GET /\0 HTTP/1.1".to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..20),
    ]
}

fn field_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => Just(b"Host: a".to_vec()),
        2 => Just(b"Content-Length: 5".to_vec()),
        1 => Just(b"Content-Length: 6".to_vec()),
        1 => Just(b"Content-Length:\t5".to_vec()),
        1 => Just(b"Content-Length: +5".to_vec()),
        1 => Just(b"Content_Length: 5".to_vec()),
        2 => Just(b"Transfer-Encoding: chunked".to_vec()),
        1 => Just(b"Transfer-Encoding: Chunked ".to_vec()),
        1 => Just(b"Transfer-Encoding: chunked, identity".to_vec()),
        1 => Just(b"Transfer-Encoding: gzip, chunked".to_vec()),
        1 => Just(b"Transfer-Encoding:\tchunked".to_vec()),
        1 => Just(b"Transfer_Encoding: chunked".to_vec()),
        1 => Just(b"Connection: close".to_vec()),
        1 => Just(b"Connection: keep-alive, Upgrade".to_vec()),
        1 => Just(b"Upgrade: websocket".to_vec()),
        1 => Just(b"Expect: 100-continue".to_vec()),
        1 => Just(b"Host : a".to_vec()),
        1 => Just(b" folded".to_vec()),
        1 => Just(b"X-A: a\rb".to_vec()),
        1 => Just(b"X-A: caf\xc3\xa9".to_vec()),
        1 => Just(b"NoColon".to_vec()),
        2 => ("[A-Za-z-]{1,8}", "[ -~\t]{0,12}").prop_map(|(n, v)| format!("{n}:{v}").into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..12),
    ]
}

fn line_end() -> impl Strategy<Value = &'static [u8]> {
    prop_oneof![8 => Just(&b"\r\n"[..]), 1 => Just(&b"\n"[..]), 1 => Just(&b"\r"[..])]
}

/// A request head from lines of the pools above, with mostly CRLF line ends, and a few
/// bytes after it.
fn request_head() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::option::weighted(0.1, Just(b"\r\n".to_vec())),
        request_line(),
        line_end(),
        prop::collection::vec((field_line(), line_end()), 0..8),
        line_end(),
        prop::collection::vec(any::<u8>(), 0..6),
    )
        .prop_map(|(lead, line, end, fields, last, tail)| {
            let mut v = lead.unwrap_or_default();
            v.extend_from_slice(&line);
            v.extend_from_slice(end);
            for (f, e) in fields {
                v.extend_from_slice(&f);
                v.extend_from_slice(e);
            }
            v.extend_from_slice(last);
            v.extend_from_slice(&tail);
            v
        })
}

fn status_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => Just(b"HTTP/1.1 200 OK".to_vec()),
        1 => Just(b"HTTP/1.0 200 OK".to_vec()),
        1 => Just(b"HTTP/1.1 204 No Content".to_vec()),
        1 => Just(b"HTTP/1.1 101 Switching Protocols".to_vec()),
        1 => Just(b"HTTP/1.1 100 Continue".to_vec()),
        1 => Just(b"HTTP/1.1 2000 OK".to_vec()),
        1 => Just(b"HTTX/1.1 200 OK".to_vec()),
        1 => Just(b"-ERR nope".to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..20),
    ]
}

fn response_head() -> impl Strategy<Value = Vec<u8>> {
    (
        status_line(),
        line_end(),
        prop::collection::vec((field_line(), line_end()), 0..8),
        line_end(),
    )
        .prop_map(|(line, end, fields, last)| {
            let mut v = line;
            v.extend_from_slice(end);
            for (f, e) in fields {
                v.extend_from_slice(&f);
                v.extend_from_slice(e);
            }
            v.extend_from_slice(last);
            v
        })
}

// --- request heads -------------------------------------------------------------------------

/// The proxy's decision on `data` arriving as the given growing prefixes.
fn scan_request(data: &[u8], cuts: &[usize]) -> Result<Option<usize>, RequestError> {
    let mut s = RequestScanner::new();
    for &c in cuts {
        match s.find_end(&data[..c])? {
            Some(n) => return Ok(Some(n)),
            None => continue,
        }
    }
    s.find_end(data)
}

/// The whole decision: scan, then parse the head if one was found.
fn decide_request(
    data: &[u8],
    cuts: &[usize],
) -> Result<Option<(usize, request::RequestHead)>, RequestError> {
    match scan_request(data, cuts)? {
        Some(n) => request::parse(&data[..n], MAX_HEADERS).map(|h| Some((n, h))),
        None => Ok(None),
    }
}

fn check_request(data: &[u8]) -> Result<(), TestCaseError> {
    let whole = decide_request(data, &[]);
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let theirs = httparse::Request::new(&mut headers).parse(data);
    match (&whole, &theirs) {
        // We accept: httparse accepts the same head.
        (Ok(Some((n, h))), t) => {
            prop_assert_eq!(t, &Ok(httparse::Status::Complete(*n)));
            prop_assert_eq!(h.len, *n);
        }
        // We wait: httparse does not have a complete head either.
        (Ok(None), t) => prop_assert!(
            !matches!(t, Ok(httparse::Status::Complete(_))),
            "we wait where httparse has a head: {:?}",
            t
        ),
        // We refuse what httparse accepts: only on purpose.
        (Err(e), Ok(httparse::Status::Complete(_))) => {
            prop_assert!(
                stricter_on_purpose(e),
                "refused {:?} for no listed reason",
                e
            )
        }
        // Both refuse, or httparse needs more and we know better already (an early
        // refusal, or a head whose empty line httparse cannot reach).
        (Err(_), _) => {}
    }
    // Whatever the split, the same decision: the same head, or a refusal with the same
    // answer (an early refusal may name another reason than the full parse, e.g. a bare
    // LF in the request line before an invalid field that httparse stumbles on).
    let outcome = |r: &Result<Option<(usize, request::RequestHead)>, RequestError>| {
        r.as_ref().map(|h| *h).map_err(|e| e.answer())
    };
    let whole_outcome = outcome(&whole);
    for cut in 0..=data.len() {
        prop_assert_eq!(
            outcome(&decide_request(data, &[cut])),
            whole_outcome,
            "split at {} of {:?}",
            cut,
            String::from_utf8_lossy(data)
        );
    }
    let bytewise: Vec<usize> = (0..=data.len()).collect();
    let early = decide_request(data, &bytewise);
    // Byte by byte, the early check may refuse a head that whole input would have
    // refused a moment later; it must never refuse one whole input accepts.
    match (&whole, &early) {
        (Err(_), Err(_)) => {}
        _ => prop_assert_eq!(&early, &whole),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn request_heads_agree_with_httparse(data in request_head()) {
        check_request(&data)?;
    }

    #[test]
    fn random_bytes_as_request_heads(data in prop::collection::vec(any::<u8>(), 0..64)) {
        check_request(&data)?;
    }
}

// --- response heads ------------------------------------------------------------------------

fn scan_response(data: &[u8], cut: usize) -> Result<Option<usize>, ()> {
    let mut s = ResponseScanner::new();
    if let Some(n) = s.find_end(&data[..cut]).map_err(|_| ())? {
        return Ok(Some(n));
    }
    s.find_end(data).map_err(|_| ())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn response_heads_agree_with_httparse(data in response_head(), head_req in any::<bool>()) {
        let method = if head_req { Method::Head } else { Method::Get };
        let whole = scan_response(&data, 0);
        for cut in 0..=data.len() {
            let split = scan_response(&data, cut);
            // A bare CR is refused early while the head is incomplete and left to the
            // parser once it is whole: either way the head is refused.
            if split != whole {
                let refused_whole = match whole {
                    Ok(Some(n)) => response::parse(&data[..n], method).is_err(),
                    _ => false,
                };
                prop_assert!(split == Err(()) && refused_whole, "cut {}: {:?} against {:?}", cut, split, whole);
            }
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut res = httparse::Response::new(&mut headers);
        let theirs = res.parse(&data);
        match whole {
            Ok(Some(n)) => {
                if let Ok(ours) = response::parse(&data[..n], method) {
                    prop_assert_eq!(theirs, Ok(httparse::Status::Complete(n)));
                    prop_assert_eq!(Some(ours.status), res.code);
                    if head_req {
                        prop_assert_eq!(ours.body, BodyKind::None);
                    }
                }
            }
            Ok(None) => prop_assert!(!matches!(theirs, Ok(httparse::Status::Complete(_)))),
            // Refused at once: httparse cannot accept it either (no HTTP/ start).
            Err(()) => prop_assert!(theirs.is_err() || !data.starts_with(b"HTTP/")),
        }
    }
}

// --- chunked bodies ------------------------------------------------------------------------

/// What the reference decoder makes of a whole buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoded {
    /// The body ends after this many bytes.
    Done(usize),
    /// Valid so far, more is needed.
    Incomplete,
    Invalid,
}

/// A plain decoder of RFC 9112 §7.1 with this project's decisions (no BWS after the
/// size or around `;` and `=`, at most 16 size digits and below 2^63, trailers must be field lines).
/// The length limits are not modelled: the generators stay well below them.
struct Reference<'a> {
    b: &'a [u8],
    i: usize,
}

/// Why decoding stopped early.
enum Stop {
    Incomplete,
    Invalid,
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Reference<'_> {
    fn next(&mut self) -> Result<u8, Stop> {
        let b = *self.b.get(self.i).ok_or(Stop::Incomplete)?;
        self.i += 1;
        Ok(b)
    }

    fn peek(&self) -> Result<u8, Stop> {
        self.b.get(self.i).copied().ok_or(Stop::Incomplete)
    }

    fn expect(&mut self, want: u8) -> Result<(), Stop> {
        if self.next()? == want {
            Ok(())
        } else {
            Err(Stop::Invalid)
        }
    }

    fn token(&mut self) -> Result<(), Stop> {
        if !tchar(self.next()?) {
            return Err(Stop::Invalid);
        }
        while tchar(self.peek()?) {
            self.i += 1;
        }
        Ok(())
    }

    fn quoted(&mut self) -> Result<(), Stop> {
        loop {
            match self.next()? {
                b'"' => return Ok(()),
                b'\\' => match self.next()? {
                    b'\t' | b' '..=b'~' | 0x80..=0xff => {}
                    _ => return Err(Stop::Invalid),
                },
                b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => {}
                _ => return Err(Stop::Invalid),
            }
        }
    }

    /// `chunk-size [ chunk-ext ] CRLF`
    fn size_line(&mut self) -> Result<u64, Stop> {
        let mut size = 0u64;
        let mut digits = 0;
        while let Some(d) = (self.peek()? as char).to_digit(16) {
            digits += 1;
            if digits > 16 {
                return Err(Stop::Invalid);
            }
            size = size << 4 | u64::from(d);
            if size > i64::MAX as u64 {
                return Err(Stop::Invalid);
            }
            self.i += 1;
        }
        if digits == 0 {
            return Err(Stop::Invalid);
        }
        loop {
            match self.next()? {
                b'\r' => {
                    self.expect(b'\n')?;
                    return Ok(size);
                }
                b';' => {
                    self.token()?;
                    if self.peek()? == b'=' {
                        self.i += 1;
                        if self.peek()? == b'"' {
                            self.i += 1;
                            self.quoted()?;
                        } else {
                            self.token()?;
                        }
                    }
                }
                _ => return Err(Stop::Invalid),
            }
        }
    }

    fn trailers(&mut self) -> Result<(), Stop> {
        loop {
            if self.peek()? == b'\r' {
                self.i += 1;
                return self.expect(b'\n');
            }
            self.token()?;
            self.expect(b':')?;
            loop {
                match self.next()? {
                    b'\r' => break,
                    b'\t' | b' '..=b'~' | 0x80..=0xff => {}
                    _ => return Err(Stop::Invalid),
                }
            }
            self.expect(b'\n')?;
        }
    }

    fn body(&mut self) -> Result<(), Stop> {
        loop {
            let size = self.size_line()?;
            if size == 0 {
                return self.trailers();
            }
            let left = (self.b.len() - self.i) as u64;
            if left < size {
                return Err(Stop::Incomplete);
            }
            self.i += size as usize;
            self.expect(b'\r')?;
            self.expect(b'\n')?;
        }
    }
}

fn reference(b: &[u8]) -> Decoded {
    let mut r = Reference { b, i: 0 };
    match r.body() {
        Ok(()) => Decoded::Done(r.i),
        Err(Stop::Incomplete) => Decoded::Incomplete,
        Err(Stop::Invalid) => Decoded::Invalid,
    }
}

/// Our framer fed `pieces` (cut points), mapped onto the reference's outcomes.
fn ours(b: &[u8], cuts: &[usize]) -> Result<Decoded, BodyError> {
    let mut f = BodyFramer::new(BodyKind::Chunked);
    let mut at = 0;
    for &end in cuts.iter().chain(std::iter::once(&b.len())) {
        if end <= at {
            continue;
        }
        let p = f.advance(&b[at..end])?;
        at += p.consumed;
        if p.done {
            return Ok(Decoded::Done(at));
        }
        assert_eq!(at, end, "an unfinished framer consumes all it is given");
    }
    Ok(Decoded::Incomplete)
}

fn chunk() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u8>(), 1..20),
        prop_oneof![
            4 => Just(String::new()),
            1 => Just(";a".to_owned()),
            1 => Just(";a=b;c".to_owned()),
            1 => Just(";n=\"q \\\" r\"".to_owned()),
            1 => Just(" ;a".to_owned()),
            1 => Just(";a =b".to_owned()),
        ],
        any::<bool>(),
    )
        .prop_map(|(data, ext, upper)| {
            let size = if upper {
                format!("{:X}", data.len())
            } else {
                format!("{:x}", data.len())
            };
            let mut v = format!("{size}{ext}\r\n").into_bytes();
            v.extend_from_slice(&data);
            v.extend_from_slice(b"\r\n");
            v
        })
}

fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(chunk(), 0..4),
        prop_oneof![
            3 => Just(b"0\r\n\r\n".to_vec()),
            1 => Just(b"0;last\r\nX-T: 1\r\nY:\r\n\r\n".to_vec()),
            1 => Just(b"0\r\nbad line\r\n\r\n".to_vec()),
            1 => Just(b"00\r\n\r\n".to_vec()),
        ],
        prop::collection::vec(any::<u8>(), 0..4),
    )
        .prop_map(|(chunks, last, tail)| [chunks.concat(), last, tail].concat())
}

/// A valid body with a few bytes replaced, inserted or removed.
fn mutated_body() -> impl Strategy<Value = Vec<u8>> {
    let alphabet = prop::sample::select(b"0123456789aAfFxX;=\"\\\r\n :\t-+\0".to_vec());
    (
        chunked_body(),
        prop::collection::vec((any::<prop::sample::Index>(), alphabet, 0u8..3), 1..4),
    )
        .prop_map(|(mut body, edits)| {
            for (at, byte, op) in edits {
                if body.is_empty() {
                    body.push(byte);
                    continue;
                }
                let i = at.index(body.len());
                match op {
                    0 => body[i] = byte,
                    1 => body.insert(i, byte),
                    _ => {
                        body.remove(i);
                    }
                }
            }
            body
        })
}

fn check_chunked(b: &[u8]) -> Result<(), TestCaseError> {
    let expect = reference(b);
    let whole = ours(b, &[]);
    let mapped = match whole {
        Ok(d) => d,
        Err(_) => Decoded::Invalid,
    };
    prop_assert_eq!(mapped, expect, "{:?}", String::from_utf8_lossy(b));
    for cut in 0..=b.len() {
        prop_assert_eq!(ours(b, &[cut]), whole, "split at {}", cut);
    }
    let bytewise: Vec<usize> = (1..b.len()).collect();
    prop_assert_eq!(ours(b, &bytewise), whole, "byte by byte");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn chunked_framer_matches_the_reference(b in chunked_body()) {
        check_chunked(&b)?;
    }

    #[test]
    fn mutated_chunked_bodies_match_the_reference(b in mutated_body()) {
        check_chunked(&b)?;
    }

    #[test]
    fn random_bytes_as_chunked_bodies(
        b in prop::collection::vec(prop::sample::select(b"0123456789abcdefABX;=\"\\\r\n :\t".to_vec()), 0..48)
    ) {
        check_chunked(&b)?;
    }

    #[test]
    fn length_bodies_split_anywhere(n in 0u64..64, b in prop::collection::vec(any::<u8>(), 0..80), cut in any::<prop::sample::Index>()) {
        let whole = {
            let mut f = BodyFramer::new(BodyKind::Length(n));
            f.advance(&b).unwrap()
        };
        prop_assert_eq!(whole.consumed as u64, n.min(b.len() as u64));
        prop_assert_eq!(whole.done, b.len() as u64 >= n);
        let c = cut.index(b.len() + 1);
        let mut f = BodyFramer::new(BodyKind::Length(n));
        let p1 = f.advance(&b[..c]).unwrap();
        let p2 = f.advance(&b[p1.consumed..]).unwrap();
        prop_assert_eq!(p1.consumed + p2.consumed, whole.consumed);
    }
}

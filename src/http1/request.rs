//! The request role: what a request head says about its body and its connection.

use std::mem::MaybeUninit;

use super::headers::{FieldName, FramingError, FramingFields};
use super::{Answer, BodyKind, Method, Version};

/// Heads with up to this many fields are parsed with a header array on the stack.
const STACK_HEADERS: usize = 128;

/// A parsed request head. Positions refer to the head's bytes, which stay in the read
/// buffer; nothing is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    /// Length of the head, empty line included.
    pub len: usize,
    pub method: Method,
    pub version: Version,
    /// `start..end` of the request target within the head.
    pub target: (usize, usize),
    pub body: BodyKind,
    /// The client expects the connection to stay open after the response.
    pub keep_alive: bool,
    /// The client asks to switch protocols (Connection: upgrade + Upgrade).
    pub upgrade: bool,
    pub expect_continue: bool,
    /// Header fields in the head, for the tap's head-shape statistics.
    pub fields: usize,
    /// The head carries [`PROBE_HEADER`]: `phasescope probe` sent it.
    pub probe: bool,
}

/// The field `phasescope probe` marks its requests with, so that a tap in front of the
/// probed server records them under the route `probe`, apart from the real traffic.
pub const PROBE_HEADER: &str = "X-Phasescope-Probe";

/// [`PROBE_HEADER`], lower-cased (a test holds the two together).
const PROBE: FieldName = FieldName::new(b"x-phasescope-probe");

impl RequestHead {
    pub fn target<'a>(&self, head: &'a [u8]) -> &'a [u8] {
        &head[self.target.0..self.target.1]
    }
}

/// Why a request head was refused. Each maps to the answer the proxy gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("malformed request head: {0}")]
    Malformed(httparse::Error),
    #[error("more header fields than allowed")]
    TooManyHeaders,
    #[error("{0}")]
    Framing(FramingError),
    #[error("both Transfer-Encoding and Content-Length (request smuggling risk)")]
    LengthAndEncoding,
    #[error("Transfer-Encoding whose final coding is not chunked")]
    NotChunked,
    #[error("Transfer-Encoding that applies chunked more than once")]
    ChunkedRepeated,
    #[error("a transfer coding other than chunked")]
    UnsupportedCoding,
    #[error("Transfer-Encoding on an HTTP/1.0 request")]
    EncodingOnHttp10,
    #[error("a line of the head ends in a bare LF")]
    BareLf,
    #[error("Content-Length or Transfer-Encoding padded with a tab")]
    TabInFraming,
    #[error("a field named like Content-Length or Transfer-Encoding with '_' for '-'")]
    FramingLookalike,
    #[error("the request target's form does not fit the method")]
    BadTarget,
    #[error("a CONNECT request with Content-Length or Transfer-Encoding")]
    ConnectWithBody,
    #[error("Connection nominates a framing field (Content-Length, Transfer-Encoding, Host)")]
    FramingHopByHop,
}

impl RequestError {
    /// The answer RFC 9112 asks for: 431 for a head over the limits, 501 for a transfer
    /// coding we do not forward (§6.1), 400 otherwise (§6.3, §3, §5).
    pub fn answer(&self) -> Answer {
        match self {
            RequestError::TooManyHeaders => Answer::HeaderTooLarge,
            RequestError::UnsupportedCoding => Answer::NotImplemented,
            _ => Answer::BadRequest,
        }
    }
}

/// Parses a complete head (`head` ends with its empty line) and decides its framing.
///
/// The header array is left uninitialized: httparse writes only the slots it fills, and
/// zeroing 128 slots (4 KiB) on every request cost more than the parse itself.
pub fn parse(head: &[u8], max_headers: usize) -> Result<RequestHead, RequestError> {
    if max_headers <= STACK_HEADERS {
        let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
        parse_with(head, &mut headers[..max_headers])
    } else {
        let mut headers = Vec::with_capacity(max_headers);
        headers.resize_with(max_headers, MaybeUninit::uninit);
        parse_with(head, &mut headers)
    }
}

fn parse_with<'h>(
    head: &'h [u8],
    headers: &mut [MaybeUninit<httparse::Header<'h>>],
) -> Result<RequestHead, RequestError> {
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(head, headers) {
        Ok(httparse::Status::Complete(n)) => n,
        // The scanner saw an empty line, so a partial parse means the head is malformed
        // in a way httparse only notices as "needs more" (e.g. a lone CR before it).
        Ok(httparse::Status::Partial) => {
            return Err(RequestError::Malformed(httparse::Error::Token))
        }
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooManyHeaders),
        Err(e) => return Err(RequestError::Malformed(e)),
    };
    // The scanner and httparse must agree on where the head ends; if they did not, the
    // bytes between would be forwarded as part of a head nobody checked.
    if len != head.len() {
        return Err(RequestError::Malformed(httparse::Error::NewLine));
    }
    reject_bare_lf(head)?;
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Err(RequestError::Malformed(httparse::Error::Token));
    };
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let method = Method::from_bytes(method.as_bytes());
    check_target_form(method, path.as_bytes())?;
    let start = path.as_ptr() as usize - head.as_ptr() as usize;
    check_framing_syntax(head, req.headers)?;
    let fields = FramingFields::read(req.headers).map_err(RequestError::Framing)?;
    // RFC 9110 §9.3.6: a CONNECT request has no content, so an upstream that follows it
    // answers the CONNECT and reads what we framed as its body as the next request.
    if method == Method::Connect && (fields.content_length.is_some() || fields.transfer_encoding) {
        return Err(RequestError::ConnectWithBody);
    }
    // RFC 9110 §7.6.1: a proxy removes the fields Connection names. One behind us that
    // removes Content-Length, Transfer-Encoding or Host frames (or routes) the request
    // differently from us and from the upstream.
    if fields.nominates_framing {
        return Err(RequestError::FramingHopByHop);
    }

    // RFC 9112 §6.3: Transfer-Encoding wins over Content-Length, but a request carrying
    // both is how smuggling starts, and an intermediary must remove the Content-Length
    // before forwarding (§6.1), which we cannot do without rewriting the head: refused.
    // So is a request whose body length cannot be determined (final coding not chunked,
    // §6.3 item 4: 400 and close), and an HTTP/1.0 request with Transfer-Encoding
    // (§6.1: "MUST treat the message as if the framing is faulty").
    //
    // Only a bare `chunked` is forwarded. `gzip, chunked` is valid HTTP, but no client we
    // front sends it and an upstream that does not know gzip answers it unpredictably;
    // §6.1 says a server that does not understand a coding responds 501, so we do.
    let body = if fields.transfer_encoding {
        if fields.content_length.is_some() {
            return Err(RequestError::LengthAndEncoding);
        }
        if version == Version::Http10 {
            return Err(RequestError::EncodingOnHttp10);
        }
        if fields.chunked_repeated {
            return Err(RequestError::ChunkedRepeated);
        }
        if !fields.chunked {
            return Err(RequestError::NotChunked);
        }
        if fields.codings != 1 {
            return Err(RequestError::UnsupportedCoding);
        }
        BodyKind::Chunked
    } else {
        match fields.content_length {
            Some(0) | None => BodyKind::None,
            Some(n) => BodyKind::Length(n),
        }
    };
    let keep_alive = match version {
        Version::Http11 => !fields.close,
        Version::Http10 => fields.keep_alive && !fields.close,
    };
    Ok(RequestHead {
        len,
        method,
        version,
        target: (start, start + path.len()),
        body,
        keep_alive,
        // RFC 9110 §7.8: a server MUST ignore Upgrade in an HTTP/1.0 request.
        upgrade: fields.upgrade && version == Version::Http11,
        expect_continue: fields.expect_continue,
        fields: req.headers.len(),
        probe: req.headers.iter().any(|h| PROBE.matches(h.name.as_bytes())),
    })
}

/// RFC 9112 §2.2 lets a recipient accept a bare LF as a line end, and httparse does. But
/// we forward the head unchanged, and an upstream that does not split lines on a bare LF
/// sees `A: b\nContent-Length: 5` as one field where we saw two: that difference is a
/// smuggling channel. Every LF of a request head must follow a CR.
fn reject_bare_lf(head: &[u8]) -> Result<(), RequestError> {
    use super::block;
    let bare = if head.len() <= block::LEN {
        head.first() == Some(&b'\n') || head.windows(2).any(|w| w[1] == b'\n' && w[0] != b'\r')
    } else {
        // A block at a time (heads are too short for a library search to pay for its
        // setup, see `scan`): the line feeds of the block at `i` against the carriage
        // returns of the block one byte earlier. The last block ends with the head,
        // overlapping the one before.
        let mut bare = head[0] == b'\n';
        let mut i = 1;
        while i < head.len() && !bare {
            let start = i.min(head.len() - block::LEN);
            let lfs = block::equal(head, start, b'\n').unwrap_or(0);
            let crs = block::equal(head, start - 1, b'\r').unwrap_or(0);
            bare = lfs & !crs != 0;
            i = start + block::LEN;
        }
        bare
    };
    if bare {
        return Err(RequestError::BareLf);
    }
    Ok(())
}

/// RFC 9112 §3.2: origin-form (`/path`) for ordinary requests, absolute-form for any
/// (servers must accept it, §3.2.2), authority-form only with CONNECT (§3.2.3), and
/// asterisk-form only with OPTIONS (§3.2.4). A target in none of these forms has no
/// agreed meaning, so an upstream could route it anywhere.
fn check_target_form(method: Method, target: &[u8]) -> Result<(), RequestError> {
    let ok = match (method, target) {
        // authority-form is `host:port`, with no userinfo (§3.2.3).
        (Method::Connect, t) => !t.is_empty() && t[0] != b'/' && t != b"*" && !t.contains(&b'@'),
        (Method::Options, b"*") => true,
        (_, [b'/', ..]) => true,
        (_, t) => is_absolute_form(t),
    };
    if ok {
        Ok(())
    } else {
        Err(RequestError::BadTarget)
    }
}

/// An `http://` or `https://` URI (any case). RFC 3986 would allow any scheme, but then
/// `example.com:80` parses as the scheme `example.com`; HTTP servers serve only the http
/// and https schemes (RFC 9110 §4.2), so nothing else is forwarded. The authority must
/// be present and carry no userinfo.
fn is_absolute_form(t: &[u8]) -> bool {
    let scheme_end = if t.len() >= 7 && t[..7].eq_ignore_ascii_case(b"http://") {
        4
    } else if t.len() >= 8 && t[..8].eq_ignore_ascii_case(b"https://") {
        5
    } else {
        return false;
    };
    let rest = &t[scheme_end + 3..];
    // RFC 9110 §4.2.4: userinfo in an http(s) URI is deprecated and a recipient SHOULD
    // treat it as an error; `http://a@evil/` names `evil` to one reader and `a` to another.
    let authority = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .map_or(rest, |end| &rest[..end]);
    !authority.is_empty() && !authority.contains(&b'@')
}

/// Checks on the framing fields' raw bytes, which httparse's trimmed view hides:
///
/// - a tab around a Content-Length or Transfer-Encoding value (`Transfer-Encoding:\tchunked`)
///   is valid OWS (RFC 9110 §5.6.3), but it is the textbook obfuscation, and an upstream
///   that trims only spaces ignores the field and frames the body differently;
/// - `Transfer_Encoding` or `Content_Length` is a different field to us, but servers that
///   map header names to CGI-style variables (`HTTP_TRANSFER_ENCODING`) treat it as the
///   real one.
fn check_framing_syntax(head: &[u8], headers: &[httparse::Header<'_>]) -> Result<(), RequestError> {
    for h in headers {
        let name = h.name.as_bytes();
        let framing = match name.len() {
            14 => b"content-length".as_slice(),
            17 => b"transfer-encoding".as_slice(),
            _ => continue,
        };
        let same = name
            .iter()
            .zip(framing)
            .all(|(&a, &b)| a.eq_ignore_ascii_case(&b) || (a == b'_' && b == b'-'));
        if !same {
            continue;
        }
        if name.contains(&b'_') {
            return Err(RequestError::FramingLookalike);
        }
        // The raw value runs from after the colon to the CR that ends the line (httparse
        // refuses a CR anywhere else in a value).
        let Some(colon) = (name.as_ptr() as usize + name.len()).checked_sub(head.as_ptr() as usize)
        else {
            continue;
        };
        let raw = head.get(colon + 1..).unwrap_or_default();
        let raw = match memchr::memchr(b'\r', raw) {
            Some(cr) => &raw[..cr],
            None => raw,
        };
        if raw.contains(&b'\t') {
            return Err(RequestError::TabInFraming);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<RequestHead, RequestError> {
        parse(s.as_bytes(), 100)
    }

    /// Every string of up to 9 bytes of `a`, CR and LF, shifted across word boundaries:
    /// the word-at-a-time check finds a bare LF exactly when one is there.
    #[test]
    fn bare_lfs_are_found_wherever_they_are() {
        for head in crate::http1::cr_lf_strings(9, &[0, 1, 6, 7, 8, 9, 15, 16, 17, 23]) {
            let bare =
                (0..head.len()).any(|i| head[i] == b'\n' && (i == 0 || head[i - 1] != b'\r'));
            assert_eq!(reject_bare_lf(&head).is_err(), bare, "{head:?}");
        }
    }

    #[test]
    fn the_probe_field_is_found_in_any_case() {
        assert!(PROBE.matches(PROBE_HEADER.as_bytes()));
        let raw = "GET / HTTP/1.1\r\nHost: a\r\nx-PHASESCOPE-probe: 1\r\n\r\n";
        assert!(p(raw).unwrap().probe);
        assert!(
            !p("GET / HTTP/1.1\r\nHost: a\r\nX-Phasescope-Prob: 1\r\n\r\n")
                .unwrap()
                .probe
        );
    }

    #[test]
    fn simple_get() {
        let raw = "GET /GET/k HTTP/1.1\r\nHost: a\r\n\r\n";
        let h = p(raw).unwrap();
        assert_eq!(h.len, raw.len());
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.target(raw.as_bytes()), b"/GET/k");
        assert_eq!(h.body, BodyKind::None);
        assert!(h.keep_alive);
    }

    #[test]
    fn http10_keep_alive_only_when_asked() {
        assert!(!p("GET / HTTP/1.0\r\n\r\n").unwrap().keep_alive);
        assert!(
            p("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .unwrap()
                .keep_alive
        );
        assert!(
            !p("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap()
                .keep_alive
        );
    }

    #[test]
    fn bodies() {
        assert_eq!(
            p("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")
                .unwrap()
                .body,
            BodyKind::Length(5)
        );
        assert_eq!(
            p("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap()
                .body,
            BodyKind::Chunked
        );
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        assert_eq!(
            p("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(RequestError::LengthAndEncoding)
        );
        assert_eq!(
            p("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n"),
            Err(RequestError::NotChunked)
        );
        assert_eq!(
            p("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(RequestError::EncodingOnHttp10)
        );
        assert!(matches!(
            p("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"),
            Err(RequestError::Malformed(_))
        ));
    }

    #[test]
    fn differentials_with_lenient_upstreams_are_refused() {
        let cases: &[(&str, RequestError)] = &[
            ("GET / HTTP/1.1\nHost: a\n\n", RequestError::BareLf),
            ("GET / HTTP/1.1\r\nHost: a\n\r\n", RequestError::BareLf),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding:\tchunked\r\n\r\n",
                RequestError::TabInFraming,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\t\r\n\r\n",
                RequestError::TabInFraming,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer_Encoding: chunked\r\n\r\n",
                RequestError::FramingLookalike,
            ),
            (
                "POST / HTTP/1.1\r\ncontent_length: 5\r\n\r\n",
                RequestError::FramingLookalike,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                RequestError::UnsupportedCoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                RequestError::ChunkedRepeated,
            ),
            ("GET * HTTP/1.1\r\n\r\n", RequestError::BadTarget),
            (
                "GET example.com:80 HTTP/1.1\r\n\r\n",
                RequestError::BadTarget,
            ),
            ("CONNECT / HTTP/1.1\r\n\r\n", RequestError::BadTarget),
            (
                "CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 35\r\n\r\n",
                RequestError::ConnectWithBody,
            ),
            (
                "CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                RequestError::ConnectWithBody,
            ),
            (
                "CONNECT a.example:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                RequestError::ConnectWithBody,
            ),
            (
                "GET / HTTP/1.1\r\nConnection: transfer-encoding\r\n\r\n",
                RequestError::FramingHopByHop,
            ),
            (
                "POST / HTTP/1.1\r\nConnection: keep-alive, Content-Length\r\nContent-Length: 1\r\n\r\n",
                RequestError::FramingHopByHop,
            ),
            (
                "GET / HTTP/1.1\r\nConnection: HOST\r\n\r\n",
                RequestError::FramingHopByHop,
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(p(raw), Err(*want), "{raw:?}");
        }
        assert_eq!(
            RequestError::UnsupportedCoding.answer(),
            Answer::NotImplemented
        );
    }

    #[test]
    fn target_forms_that_fit_the_method_pass() {
        for raw in [
            "OPTIONS * HTTP/1.1\r\n\r\n",
            "GET http://a.example/x HTTP/1.1\r\n\r\n",
            "CONNECT a.example:443 HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n\r\n",
            "\r\nGET / HTTP/1.1\r\n\r\n",
        ] {
            assert!(p(raw).is_ok(), "{raw:?}");
        }
    }

    #[test]
    fn targets_with_userinfo_are_refused() {
        for raw in [
            "GET http://a@evil.example/ HTTP/1.1\r\n\r\n",
            "GET https://u:p@a.example HTTP/1.1\r\n\r\n",
            "GET http://a@b?x HTTP/1.1\r\n\r\n",
            "GET http:///x HTTP/1.1\r\n\r\n",
            "CONNECT u@a.example:443 HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(p(raw).unwrap_err(), RequestError::BadTarget, "{raw:?}");
        }
        // An `@` in the path or query is not userinfo.
        assert!(p("GET http://a.example/x@y?z@w HTTP/1.1\r\n\r\n").is_ok());
    }

    #[test]
    fn sizes_from_2_pow_63_are_refused() {
        assert!(p("POST / HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\n").is_ok());
        for n in ["9223372036854775808", "18446744073709551615"] {
            let raw = format!("POST / HTTP/1.1\r\nContent-Length: {n}\r\n\r\n");
            assert!(p(&raw).is_err(), "{n}");
        }
    }

    #[test]
    fn too_many_headers_is_431() {
        let e = parse(b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n", 2).unwrap_err();
        assert_eq!(e, RequestError::TooManyHeaders);
        assert_eq!(e.answer(), Answer::HeaderTooLarge);
    }
}

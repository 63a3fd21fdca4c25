//! The request role: what a request head says about its body and its connection.

use super::headers::{FramingError, FramingFields};
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
}

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
    #[error("Transfer-Encoding on an HTTP/1.0 request")]
    EncodingOnHttp10,
}

impl RequestError {
    /// The answer RFC 9112 asks for: 431 for a head over the limits, 400 otherwise.
    pub fn answer(&self) -> Answer {
        match self {
            RequestError::TooManyHeaders => Answer::HeaderTooLarge,
            _ => Answer::BadRequest,
        }
    }
}

/// Parses a complete head (`head` ends with its empty line) and decides its framing.
pub fn parse(head: &[u8], max_headers: usize) -> Result<RequestHead, RequestError> {
    if max_headers <= STACK_HEADERS {
        let mut headers = [httparse::EMPTY_HEADER; STACK_HEADERS];
        parse_with(head, &mut headers[..max_headers])
    } else {
        let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
        parse_with(head, &mut headers)
    }
}

fn parse_with<'h>(
    head: &'h [u8],
    headers: &mut [httparse::Header<'h>],
) -> Result<RequestHead, RequestError> {
    let mut req = httparse::Request::new(headers);
    let len = match req.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        // The scanner saw an empty line, so a partial parse means the head is malformed
        // in a way httparse only notices as "needs more" (e.g. a lone CR before it).
        Ok(httparse::Status::Partial) => {
            return Err(RequestError::Malformed(httparse::Error::Token))
        }
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooManyHeaders),
        Err(e) => return Err(RequestError::Malformed(e)),
    };
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Err(RequestError::Malformed(httparse::Error::Token));
    };
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let start = path.as_ptr() as usize - head.as_ptr() as usize;
    let fields = FramingFields::read(req.headers).map_err(RequestError::Framing)?;

    // RFC 9112 §6.3: Transfer-Encoding wins over Content-Length, but a request carrying
    // both is how smuggling starts, and we cannot drop the Content-Length without
    // rewriting the head, so it is refused. So is a request whose body length cannot be
    // determined, and an HTTP/1.0 request with Transfer-Encoding (§6.1).
    let body = if fields.transfer_encoding {
        if fields.content_length.is_some() {
            return Err(RequestError::LengthAndEncoding);
        }
        if version == Version::Http10 {
            return Err(RequestError::EncodingOnHttp10);
        }
        if !fields.chunked {
            return Err(RequestError::NotChunked);
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
        method: Method::from_bytes(method.as_bytes()),
        version,
        target: (start, start + path.len()),
        body,
        keep_alive,
        upgrade: fields.upgrade,
        expect_continue: fields.expect_continue,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<RequestHead, RequestError> {
        parse(s.as_bytes(), 100)
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
    fn too_many_headers_is_431() {
        let e = parse(b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n", 2).unwrap_err();
        assert_eq!(e, RequestError::TooManyHeaders);
        assert_eq!(e.answer(), Answer::HeaderTooLarge);
    }
}

//! The response role: how a response's body is delimited, which depends on the request
//! it answers (HEAD, CONNECT) as well as on its own status and fields (RFC 9112 §6.3).

use std::mem::MaybeUninit;

use super::headers::{FramingError, FramingFields};
use super::{BodyKind, Method, Version};

const STACK_HEADERS: usize = 128;

/// A parsed response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    pub version: Version,
    pub body: BodyKind,
    /// The upstream will keep the connection open after this response.
    pub keep_alive: bool,
    /// After this head the connection is a byte tunnel (101, or 2xx to CONNECT).
    pub tunnel: bool,
    /// The answer to a HEAD announces a body (a non-zero Content-Length, or chunked) that
    /// is not sent: an upstream that sends it anyway sends it late, where it would read
    /// as the answer to the next request on the connection (docs/security.md).
    pub announces_unsent_body: bool,
}

impl ResponseHead {
    /// A 1xx other than 101: relayed, then the real response follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("malformed response head: {0}")]
    Malformed(httparse::Error),
    #[error("{0}")]
    Framing(FramingError),
    #[error("both Transfer-Encoding and Content-Length")]
    LengthAndEncoding,
    #[error("Transfer-Encoding on an HTTP/1.0 response")]
    EncodingOnHttp10,
    #[error("Transfer-Encoding that applies chunked more than once")]
    ChunkedRepeated,
}

/// Parses a complete response head that answers a request with `method`.
///
/// The header array is left uninitialized, as for requests (see `request::parse`).
///
/// For the proxy's own clients (probe, demo, bench): any number of fields the head can
/// hold. The relay bounds the count with [`parse_within`].
pub fn parse(head: &[u8], method: Method) -> Result<ResponseHead, ResponseError> {
    // A field takes at least three bytes (`a:` and a line end).
    parse_within(head, method, head.len() / 3 + 1)
}

/// [`parse`] with at most `max_headers` header fields; more is `TooManyHeaders`.
pub fn parse_within(
    head: &[u8],
    method: Method,
    max_headers: usize,
) -> Result<ResponseHead, ResponseError> {
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    match parse_with(head, method, &mut headers[..STACK_HEADERS.min(max_headers)]) {
        Err(ResponseError::Malformed(httparse::Error::TooManyHeaders))
            if max_headers > STACK_HEADERS =>
        {
            let mut headers = Vec::with_capacity(max_headers);
            headers.resize_with(max_headers, MaybeUninit::uninit);
            parse_with(head, method, &mut headers)
        }
        other => other,
    }
}

fn parse_with<'h>(
    head: &'h [u8],
    method: Method,
    headers: &mut [MaybeUninit<httparse::Header<'h>>],
) -> Result<ResponseHead, ResponseError> {
    let mut res = httparse::Response::new(&mut []);
    // httparse's strict defaults, on purpose. RFC 9112 §5.1 says a proxy MUST remove
    // whitespace between a field name and the colon before forwarding a response, and
    // §5.2 that a proxy receiving obs-fold in a response MUST either replace it with SP or
    // answer 502. We forward bytes unchanged, so both can only be answered 502.
    //
    // A bare LF as a line end (§2.2: a recipient MAY accept it) stays accepted here,
    // unlike in requests: the response goes back to the one client that asked for it,
    // every client we know of accepts it too, and nothing downstream of that client is
    // framed by our reading of it.
    let strict = httparse::ParserConfig::default();
    let len = match strict.parse_response_with_uninit_headers(&mut res, head, headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Err(ResponseError::Malformed(httparse::Error::Token))
        }
        Err(e) => return Err(ResponseError::Malformed(e)),
    };
    let (Some(status), Some(version)) = (res.code, res.version) else {
        return Err(ResponseError::Malformed(httparse::Error::Status));
    };
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let fields = FramingFields::read(res.headers).map_err(ResponseError::Framing)?;

    if len != head.len() {
        return Err(ResponseError::Malformed(httparse::Error::NewLine));
    }

    let tunnel = status == 101 || (method == Method::Connect && (200..300).contains(&status));
    // §6.3 item 3: a response with both Transfer-Encoding and Content-Length "ought to be
    // handled as an error", and an intermediary that forwards it must first remove the
    // Content-Length, which we cannot. §6.1: Transfer-Encoding in HTTP/1.0 means faulty
    // framing. Refused even where the status says there is no body, because the client
    // reads the same fields and might disagree.
    if fields.transfer_encoding {
        if fields.content_length.is_some() {
            return Err(ResponseError::LengthAndEncoding);
        }
        if version == Version::Http10 {
            return Err(ResponseError::EncodingOnHttp10);
        }
        if fields.chunked_repeated {
            return Err(ResponseError::ChunkedRepeated);
        }
    }
    let body = if tunnel
        || method == Method::Head
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        BodyKind::None
    } else if fields.transfer_encoding {
        if fields.chunked {
            BodyKind::Chunked
        } else {
            BodyKind::Close
        }
    } else {
        match fields.content_length {
            Some(0) => BodyKind::None,
            Some(n) => BodyKind::Length(n),
            None => BodyKind::Close,
        }
    };
    let keep_alive = body != BodyKind::Close
        && !tunnel
        && match version {
            Version::Http11 => !fields.close,
            Version::Http10 => fields.keep_alive && !fields.close,
        };
    let announces_unsent_body = method == Method::Head
        && !tunnel
        && (fields.transfer_encoding || fields.content_length.is_some_and(|n| n > 0));
    Ok(ResponseHead {
        len,
        status,
        version,
        body,
        keep_alive,
        announces_unsent_body,
        tunnel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str, m: Method) -> ResponseHead {
        parse(s.as_bytes(), m).unwrap()
    }

    #[test]
    fn framing_by_status_method_and_fields() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(p(ok, Method::Get).body, BodyKind::Length(3));
        assert_eq!(p(ok, Method::Head).body, BodyKind::None);
        assert_eq!(
            p("HTTP/1.1 204 No Content\r\n\r\n", Method::Get).body,
            BodyKind::None
        );
        assert_eq!(
            p(
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                Method::Get
            )
            .body,
            BodyKind::None
        );
        assert_eq!(
            p(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                Method::Get
            )
            .body,
            BodyKind::Chunked
        );
        let close = p("HTTP/1.0 200 OK\r\n\r\n", Method::Get);
        assert_eq!(close.body, BodyKind::Close);
        assert!(!close.keep_alive);
    }

    #[test]
    fn a_head_answer_that_announces_a_body_says_so() {
        let announced = |head: &str, m| p(head, m).announces_unsent_body;
        let cl5 = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(announced(cl5, Method::Head));
        assert!(announced(chunked, Method::Head));
        assert!(!announced(cl5, Method::Get), "its body is framed and sent");
        assert!(!announced(
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            Method::Head
        ));
        assert!(!announced("HTTP/1.1 204 No Content\r\n\r\n", Method::Head));
    }

    #[test]
    fn interim_and_tunnels() {
        assert!(p("HTTP/1.1 100 Continue\r\n\r\n", Method::Post).is_interim());
        let up = p(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            Method::Get,
        );
        assert!(up.tunnel && !up.is_interim());
        assert!(p("HTTP/1.1 200 OK\r\n\r\n", Method::Connect).tunnel);
    }

    #[test]
    fn keep_alive_rules() {
        assert!(p("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", Method::Get).keep_alive);
        assert!(
            !p(
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                Method::Get
            )
            .keep_alive
        );
        assert!(
            p(
                "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n",
                Method::Get
            )
            .keep_alive
        );
    }

    #[test]
    fn what_a_proxy_may_not_forward_unchanged_is_refused() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        ] {
            assert!(
                parse(bad, Method::Get).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // A bare LF is accepted in responses (see parse_with).
        let lf = parse(b"HTTP/1.1 200 OK\nContent-Length: 1\n\n", Method::Get).unwrap();
        assert_eq!(lf.body, BodyKind::Length(1));
    }

    #[test]
    fn malformed_lengths_are_errors() {
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", Method::Get).is_err());
        assert!(parse(b"HTTP/1.1 2000 OK\r\n\r\n", Method::Get).is_err());
    }
}

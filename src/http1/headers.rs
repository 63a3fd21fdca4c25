//! The few header fields that decide how a message is framed and whether the connection
//! lives on. Shared by requests and responses; each role decides what a combination means.

/// What the framing-relevant fields of one head say.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FramingFields {
    /// The value of Content-Length, when present (duplicates with equal values count once).
    pub content_length: Option<u64>,
    /// Transfer-Encoding was present at all.
    pub transfer_encoding: bool,
    /// The last transfer coding is `chunked`.
    pub chunked: bool,
    /// How many transfer codings Transfer-Encoding lists (saturating).
    pub codings: u8,
    /// `chunked` is listed more than once, which RFC 9112 §7 forbids ("MUST NOT apply
    /// chunked more than once"): such a message cannot be framed.
    pub chunked_repeated: bool,
    /// A `close` token in Connection.
    pub close: bool,
    /// A `keep-alive` token in Connection.
    pub keep_alive: bool,
    /// An `upgrade` token in Connection and an Upgrade field.
    pub upgrade: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
}

/// Why the framing fields cannot be trusted (RFC 9112 §6.3 says such a request is
/// answered 400 and the connection closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("Content-Length is not a plain decimal number")]
    InvalidContentLength,
    #[error("conflicting Content-Length values")]
    ConflictingContentLength,
    #[error("Transfer-Encoding is listed in several header fields")]
    DuplicateTransferEncoding,
    #[error("empty or malformed Transfer-Encoding")]
    InvalidTransferEncoding,
}

impl FramingFields {
    pub fn read(headers: &[httparse::Header<'_>]) -> Result<Self, FramingError> {
        let mut f = FramingFields::default();
        let mut has_upgrade_field = false;
        let mut upgrade_token = false;
        for h in headers {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"content-length") {
                let n = parse_content_length(h.value)?;
                match f.content_length {
                    Some(prev) if prev != n => return Err(FramingError::ConflictingContentLength),
                    _ => f.content_length = Some(n),
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                if f.transfer_encoding {
                    return Err(FramingError::DuplicateTransferEncoding);
                }
                f.transfer_encoding = true;
                let codings = Codings::read(h.value)?;
                f.chunked = codings.last_is_chunked;
                f.codings = codings.count;
                f.chunked_repeated = codings.chunked > 1;
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in tokens(h.value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        f.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        f.keep_alive = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        upgrade_token = true;
                    }
                }
            } else if name.eq_ignore_ascii_case(b"upgrade") {
                has_upgrade_field = true;
            } else if name.eq_ignore_ascii_case(b"expect") {
                f.expect_continue = trim(h.value).eq_ignore_ascii_case(b"100-continue");
            }
        }
        f.upgrade = has_upgrade_field && upgrade_token;
        Ok(f)
    }
}

/// Only `1*DIGIT`, with optional surrounding whitespace: no signs, no lists, no hex, and
/// no value that overflows (RFC 9110 §8.6), nor one of 2^63 or more.
fn parse_content_length(value: &[u8]) -> Result<u64, FramingError> {
    let v = trim(value);
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(FramingError::InvalidContentLength);
    }
    let n = v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    // 19 digits fit a u64, but a length of 2^63 or more overflows a signed one.
    if n > super::body::MAX_SIZE {
        return Err(FramingError::InvalidContentLength);
    }
    Ok(n)
}

/// What a Transfer-Encoding value lists. Each coding must be a bare token: parameters
/// (`chunked;q=1`), quoted strings and empty list elements are refused rather than
/// guessed at, since a recipient that reads them differently frames the body differently.
struct Codings {
    count: u8,
    chunked: u8,
    last_is_chunked: bool,
}

impl Codings {
    fn read(value: &[u8]) -> Result<Codings, FramingError> {
        let mut c = Codings {
            count: 0,
            chunked: 0,
            last_is_chunked: false,
        };
        for token in value.split(|&b| b == b',') {
            let t = trim(token);
            if t.is_empty() || !t.iter().all(|&b| is_tchar(b)) {
                return Err(FramingError::InvalidTransferEncoding);
            }
            c.count = c.count.saturating_add(1);
            c.last_is_chunked = t.eq_ignore_ascii_case(b"chunked");
            if c.last_is_chunked {
                c.chunked = c.chunked.saturating_add(1);
            }
        }
        if c.count == 0 {
            return Err(FramingError::InvalidTransferEncoding);
        }
        Ok(c)
    }
}

/// Comma-separated tokens, trimmed, empty ones skipped.
pub(crate) fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim)
        .filter(|t| !t.is_empty())
}

pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |e| e + 1);
    &v[start..end]
}

/// RFC 9110 §5.6.2 token characters.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(raw: &[(&str, &str)]) -> Result<FramingFields, FramingError> {
        let headers: Vec<httparse::Header<'_>> = raw
            .iter()
            .map(|(n, v)| httparse::Header {
                name: n,
                value: v.as_bytes(),
            })
            .collect();
        FramingFields::read(&headers)
    }

    #[test]
    fn content_length_is_strict() {
        assert_eq!(
            fields(&[("Content-Length", " 12 ")])
                .unwrap()
                .content_length,
            Some(12)
        );
        for bad in [
            "+12",
            "-1",
            "0x10",
            "1,1",
            "",
            "12a",
            "99999999999999999999",
        ] {
            assert_eq!(
                fields(&[("content-length", bad)]),
                Err(FramingError::InvalidContentLength),
                "{bad:?}"
            );
        }
        assert_eq!(
            fields(&[("Content-Length", "1"), ("Content-Length", "2")]),
            Err(FramingError::ConflictingContentLength)
        );
        assert!(fields(&[("Content-Length", "2"), ("Content-Length", "2")]).is_ok());
    }

    #[test]
    fn transfer_encoding_chunked_must_be_last() {
        assert!(fields(&[("Transfer-Encoding", "chunked")]).unwrap().chunked);
        assert!(
            fields(&[("transfer-encoding", "gzip, CHUNKED")])
                .unwrap()
                .chunked
        );
        assert!(
            !fields(&[("Transfer-Encoding", "chunked, identity")])
                .unwrap()
                .chunked
        );
        let twice = fields(&[("Transfer-Encoding", "chunked, chunked")]).unwrap();
        assert!(twice.chunked && twice.chunked_repeated && twice.codings == 2);
        for bad in ["chunked, ", "\"chunked\"", "chunked;q=1", ",chunked", ""] {
            assert_eq!(
                fields(&[("Transfer-Encoding", bad)]),
                Err(FramingError::InvalidTransferEncoding),
                "{bad:?}"
            );
        }
        assert_eq!(
            fields(&[("Transfer-Encoding", "chunked, ")]),
            Err(FramingError::InvalidTransferEncoding)
        );
        assert_eq!(
            fields(&[
                ("Transfer-Encoding", "chunked"),
                ("Transfer-Encoding", "chunked")
            ]),
            Err(FramingError::DuplicateTransferEncoding)
        );
    }

    #[test]
    fn connection_tokens() {
        let f = fields(&[
            ("Connection", "Keep-Alive, Upgrade"),
            ("Upgrade", "websocket"),
        ])
        .unwrap();
        assert!(f.keep_alive && f.upgrade && !f.close);
        assert!(fields(&[("Connection", "close")]).unwrap().close);
        assert!(!fields(&[("Connection", "upgrade")]).unwrap().upgrade);
    }
}

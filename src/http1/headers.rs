//! The few header fields that decide how a message is framed and whether the connection
//! lives on. Shared by requests and responses; each role decides what a combination means.

/// Largest body or chunk size accepted: `i64::MAX`. Sizes of 2^63 and more fit our u64
/// but overflow the signed lengths many HTTP implementations keep (HAProxy and nginx
/// refuse them too). A Content-Length is held to it here, a chunk's size in `body`, which
/// reads it from here as it reads the token characters (the header grammar is below the
/// body framer, never the other way).
pub const MAX_SIZE: u64 = i64::MAX as u64;

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
    /// Connection names Content-Length, Transfer-Encoding or Host as hop-by-hop: a proxy
    /// that honours it removes a field the message is framed or routed by.
    pub nominates_framing: bool,
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

/// A field name of 8 to 24 bytes, to compare names with eight bytes at a time: a head's
/// every field is checked against the names below, and `eq_ignore_ascii_case` goes one
/// byte at a time.
pub(crate) struct FieldName {
    len: usize,
    /// Per word of the name (at offsets 0, 8, … and the last at `len - 8`, overlapping
    /// the one before): the lower-case bytes, and 0x20 in each byte that is a letter.
    words: [(u64, u64); 3],
    count: usize,
}

impl FieldName {
    /// `lower`, lower-case, 8 to 24 bytes (checked when the constant is built).
    pub(crate) const fn new(lower: &[u8]) -> Self {
        assert!(lower.len() >= 8 && lower.len() <= 24);
        let mut words = [(0, 0); 3];
        let mut count = 0;
        loop {
            let start = if count * 8 + 8 > lower.len() {
                lower.len() - 8
            } else {
                count * 8
            };
            let (mut value, mut fold) = (0u64, 0u64);
            let mut k = 0;
            while k < 8 {
                let b = lower[start + k];
                assert!(!b.is_ascii_uppercase());
                value |= (b as u64) << (8 * k);
                if b.is_ascii_lowercase() {
                    fold |= 0x20 << (8 * k);
                }
                k += 1;
            }
            words[count] = (value, fold);
            count += 1;
            if start + 8 == lower.len() {
                break;
            }
        }
        Self {
            len: lower.len(),
            words,
            count,
        }
    }

    /// `name.eq_ignore_ascii_case(lower)`. Setting 0x20 in a letter's position makes an
    /// upper-case letter its lower-case one and changes nothing that equals a lower-case
    /// letter after it but the upper-case one, and the other bytes are compared as they
    /// are: exactly the case-insensitive comparison.
    #[inline]
    pub(crate) fn matches(&self, name: &[u8]) -> bool {
        if name.len() != self.len {
            return false;
        }
        let mut i = 0;
        while i < self.count {
            let start = (i * 8).min(self.len - 8);
            let (value, fold) = self.words[i];
            match super::block::word_at(name, start) {
                Some(w) if w | fold == value => {}
                _ => return false,
            }
            i += 1;
        }
        true
    }
}

const CONTENT_LENGTH: FieldName = FieldName::new(b"content-length");
const TRANSFER_ENCODING: FieldName = FieldName::new(b"transfer-encoding");
const CONNECTION: FieldName = FieldName::new(b"connection");

impl FramingFields {
    pub fn read(headers: &[httparse::Header<'_>]) -> Result<Self, FramingError> {
        let mut f = FramingFields::default();
        let mut has_upgrade_field = false;
        let mut upgrade_token = false;
        for h in headers {
            let name = h.name.as_bytes();
            if CONTENT_LENGTH.matches(name) {
                let n = parse_content_length(h.value)?;
                match f.content_length {
                    Some(prev) if prev != n => return Err(FramingError::ConflictingContentLength),
                    _ => f.content_length = Some(n),
                }
            } else if TRANSFER_ENCODING.matches(name) {
                if f.transfer_encoding {
                    return Err(FramingError::DuplicateTransferEncoding);
                }
                f.transfer_encoding = true;
                let codings = Codings::read(h.value)?;
                f.chunked = codings.last_is_chunked;
                f.codings = codings.count;
                f.chunked_repeated = codings.chunked > 1;
            } else if CONNECTION.matches(name) {
                for token in tokens(h.value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        f.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        f.keep_alive = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        upgrade_token = true;
                    } else if token.eq_ignore_ascii_case(b"content-length")
                        || token.eq_ignore_ascii_case(b"transfer-encoding")
                        || token.eq_ignore_ascii_case(b"host")
                    {
                        f.nominates_framing = true;
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
    if n > MAX_SIZE {
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

/// RFC 9110 §5.6.2 token characters: of field names and transfer codings here, of a
/// request's method (`scan`), of chunk extensions and trailer names (`body`).
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

    /// Every name of the right length that differs from a field name in one byte, or only
    /// in case, compares as `eq_ignore_ascii_case` says.
    #[test]
    fn field_names_match_exactly_case_insensitively() {
        let names: [(&FieldName, &[u8]); 4] = [
            (&CONTENT_LENGTH, b"content-length"),
            (&TRANSFER_ENCODING, b"transfer-encoding"),
            (&CONNECTION, b"connection"),
            (
                &FieldName::new(b"x-phasescope-probe"),
                b"x-phasescope-probe",
            ),
        ];
        for (name, lower) in names {
            assert!(name.matches(lower));
            assert!(name.matches(&lower.to_ascii_uppercase()));
            assert!(!name.matches(&lower[1..]));
            let mut longer = lower.to_vec();
            longer.push(b'x');
            assert!(!name.matches(&longer));
            for at in 0..lower.len() {
                for b in 0..=255u8 {
                    let mut other = lower.to_vec();
                    other[at] = b;
                    assert_eq!(
                        name.matches(&other),
                        other.eq_ignore_ascii_case(lower),
                        "{:?}",
                        String::from_utf8_lossy(&other)
                    );
                }
            }
        }
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

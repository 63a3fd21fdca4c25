//! HTTP/1.x framing: where heads end, what they say about bodies and connections, where
//! bodies end, and the answers the proxy makes itself. Nothing here copies a message.

mod answer;
mod block;
pub mod body;
pub mod headers;
pub mod reader;
pub mod request;
pub mod response;
pub mod scan;

pub use answer::Answer;
pub use body::{BodyError, BodyFramer, Progress};
pub use reader::{Advance, ReadError, ResponseReader};
pub use request::{RequestError, RequestHead};
pub use response::{ResponseError, ResponseHead};
pub use scan::{HeadScanner, RequestScanner, ResponseScanner};

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
    /// Until the connection closes (responses only).
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// The request method, reduced to a bounded set (it becomes a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Connect,
    Trace,
    Other,
}

impl Method {
    pub fn from_bytes(m: &[u8]) -> Method {
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"PATCH" => Method::Patch,
            b"CONNECT" => Method::Connect,
            b"TRACE" => Method::Trace,
            _ => Method::Other,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Connect => "CONNECT",
            Method::Trace => "TRACE",
            Method::Other => "OTHER",
        }
    }
}

/// Test input for the word-at-a-time scans: every string of up to `max_len` bytes of `a`,
/// CR and LF, after each of `prefixes` bytes of `x` (which shift it across word and
/// block boundaries).
#[cfg(test)]
pub(crate) fn cr_lf_strings(max_len: u32, prefixes: &[usize]) -> Vec<Vec<u8>> {
    let alphabet = [b'a', b'\r', b'\n'];
    let mut out = Vec::new();
    for len in 0..=max_len {
        for code in 0..3usize.pow(len) {
            let mut body = Vec::new();
            let mut c = code;
            for _ in 0..len {
                body.push(alphabet[c % 3]);
                c /= 3;
            }
            for &prefix in prefixes {
                let mut s = vec![b'x'; prefix];
                s.extend_from_slice(&body);
                out.push(s);
            }
        }
    }
    out
}

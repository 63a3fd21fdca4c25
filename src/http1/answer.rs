//! The few answers the proxy makes itself. Each closes the connection: after a framing
//! error nobody can know where the next request would start.

use std::sync::OnceLock;

/// A proxy-made response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    BadRequest,
    RequestTimeout,
    HeaderTooLarge,
    /// A transfer coding the proxy will not vouch for (RFC 9112 §6.1).
    NotImplemented,
    BadGateway,
    GatewayTimeout,
}

impl Answer {
    pub fn status(self) -> u16 {
        match self {
            Answer::BadRequest => 400,
            Answer::RequestTimeout => 408,
            Answer::HeaderTooLarge => 431,
            Answer::NotImplemented => 501,
            Answer::BadGateway => 502,
            Answer::GatewayTimeout => 504,
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Answer::BadRequest => "Bad Request",
            Answer::RequestTimeout => "Request Timeout",
            Answer::HeaderTooLarge => "Request Header Fields Too Large",
            Answer::NotImplemented => "Not Implemented",
            Answer::BadGateway => "Bad Gateway",
            Answer::GatewayTimeout => "Gateway Timeout",
        }
    }

    fn explanation(self) -> &'static str {
        match self {
            Answer::BadRequest => "phasescope: malformed or ambiguous request\n",
            Answer::RequestTimeout => "phasescope: the request head took too long\n",
            Answer::HeaderTooLarge => "phasescope: the request head is too large\n",
            Answer::NotImplemented => "phasescope: unsupported transfer coding\n",
            Answer::BadGateway => "phasescope: the upstream failed to answer\n",
            Answer::GatewayTimeout => "phasescope: the upstream did not answer in time\n",
        }
    }

    /// The complete response, status line to body, built once per process.
    pub fn bytes(self) -> &'static [u8] {
        static ALL: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        let all = ALL.get_or_init(|| {
            Answer::ALL
                .iter()
                .map(|a| {
                    let body = a.explanation();
                    format!(
                        "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n{}",
                        a.status(),
                        a.reason(),
                        body.len(),
                        body
                    )
                    .into_bytes()
                })
                .collect()
        });
        &all[self as usize]
    }

    pub const ALL: [Answer; 6] = [
        Answer::BadRequest,
        Answer::RequestTimeout,
        Answer::HeaderTooLarge,
        Answer::NotImplemented,
        Answer::BadGateway,
        Answer::GatewayTimeout,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_well_formed_and_lengths_match() {
        for a in Answer::ALL {
            let raw = a.bytes();
            let mut headers = [httparse::EMPTY_HEADER; 8];
            let mut res = httparse::Response::new(&mut headers);
            let n = match res.parse(raw).unwrap() {
                httparse::Status::Complete(n) => n,
                httparse::Status::Partial => panic!("partial"),
            };
            assert_eq!(res.code, Some(a.status()));
            let cl = res
                .headers
                .iter()
                .find(|h| h.name == "Content-Length")
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .unwrap()
                        .parse::<usize>()
                        .unwrap()
                })
                .unwrap();
            assert_eq!(cl, raw.len() - n, "{a:?}");
            assert!(res
                .headers
                .iter()
                .any(|h| h.name == "Connection" && h.value == b"close"));
        }
    }
}

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
    /// 502: the upstream's address refused the connection (nothing listens there).
    UpstreamRefused,
    /// 502: connecting to the upstream took longer than the connect timeout.
    UpstreamConnectTimeout,
    /// 502: connecting to the upstream failed otherwise (no route, a name that does not
    /// resolve, …).
    UpstreamConnectFailed,
    /// 502: the upstream closed or reset the connection before its response began.
    UpstreamClosed,
    /// 502: what the upstream sent is not an HTTP/1.x response.
    NotHttp,
    GatewayTimeout,
}

impl Answer {
    pub fn status(self) -> u16 {
        match self {
            Answer::BadRequest => 400,
            Answer::RequestTimeout => 408,
            Answer::HeaderTooLarge => 431,
            Answer::NotImplemented => 501,
            Answer::UpstreamRefused
            | Answer::UpstreamConnectTimeout
            | Answer::UpstreamConnectFailed
            | Answer::UpstreamClosed
            | Answer::NotHttp => 502,
            Answer::GatewayTimeout => 504,
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Answer::BadRequest => "Bad Request",
            Answer::RequestTimeout => "Request Timeout",
            Answer::HeaderTooLarge => "Request Header Fields Too Large",
            Answer::NotImplemented => "Not Implemented",
            Answer::UpstreamRefused
            | Answer::UpstreamConnectTimeout
            | Answer::UpstreamConnectFailed
            | Answer::UpstreamClosed
            | Answer::NotHttp => "Bad Gateway",
            Answer::GatewayTimeout => "Gateway Timeout",
        }
    }

    fn explanation(self) -> &'static str {
        match self {
            Answer::BadRequest => "phasescope: malformed or ambiguous request\n",
            Answer::RequestTimeout => "phasescope: the request head took too long\n",
            Answer::HeaderTooLarge => "phasescope: the request head is too large\n",
            Answer::NotImplemented => "phasescope: unsupported transfer coding\n",
            Answer::UpstreamRefused => {
                "phasescope: the upstream refused the connection (nothing listens on its address)\n"
            }
            Answer::UpstreamConnectTimeout => "phasescope: connecting to the upstream timed out\n",
            Answer::UpstreamConnectFailed => "phasescope: could not connect to the upstream\n",
            Answer::UpstreamClosed => {
                "phasescope: the upstream closed the connection before it answered\n"
            }
            Answer::NotHttp => "phasescope: the upstream's answer is not HTTP/1.x\n",
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

    /// Every answer, in declaration order (`bytes` indexes it by discriminant).
    pub const ALL: [Answer; 10] = [
        Answer::BadRequest,
        Answer::RequestTimeout,
        Answer::HeaderTooLarge,
        Answer::NotImplemented,
        Answer::UpstreamRefused,
        Answer::UpstreamConnectTimeout,
        Answer::UpstreamConnectFailed,
        Answer::UpstreamClosed,
        Answer::NotHttp,
        Answer::GatewayTimeout,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_well_formed_and_lengths_match() {
        for (i, a) in Answer::ALL.into_iter().enumerate() {
            assert_eq!(a as usize, i, "ALL is in declaration order");
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

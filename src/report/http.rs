//! A minimal HTTP/1.1 client for the admin API and the Prometheus HTTP API.
//!
//! Both are plain `http://` servers on a known address that answer one small request with
//! one bounded body, so a blocking GET/POST over `TcpStream` is all the report commands
//! need; a client library would bring TLS, pools and an async runtime for nothing.
//! `Connection: close` on every request keeps the framing simple: the body ends at its
//! `Content-Length`, at the last chunk, or when the server closes.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// How long one request may take, from the connect to the last byte of the answer, when
/// `--timeout` does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The deadline of one request in milliseconds: the report commands set it from their
/// `--timeout` once, before the first request.
static TIMEOUT_MS: AtomicU64 = AtomicU64::new(DEFAULT_TIMEOUT.as_millis() as u64);

/// Sets how long each later request may take in all (`--timeout`).
pub fn set_timeout(timeout: Duration) {
    let ms = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    TIMEOUT_MS.store(ms, Ordering::Relaxed);
}

fn timeout() -> Duration {
    Duration::from_millis(TIMEOUT_MS.load(Ordering::Relaxed))
}
/// Largest response accepted: a snapshot of many routes is a few MB.
const MAX_RESPONSE: usize = 256 << 20;

/// An `http://host:port/path?query` URL, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `host:port` (the port defaults to 80).
    pub authority: String,
    /// Starts with `/`.
    pub path_and_query: String,
}

impl Url {
    pub fn parse(url: &str) -> anyhow::Result<Url> {
        let rest = match url.strip_prefix("http://") {
            Some(rest) => rest,
            None if url.starts_with("https://") => {
                bail!("{url}: only http:// is supported (the admin server speaks plain HTTP)")
            }
            None => bail!("{url}: not an http:// URL"),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        ensure!(!authority.is_empty(), "{url}: no host");
        let authority = if has_port(authority) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Url {
            authority,
            path_and_query: path.to_owned(),
        })
    }

    /// The same server with another path (and query).
    pub fn with_path(&self, path_and_query: &str) -> Url {
        Url {
            authority: self.authority.clone(),
            path_and_query: path_and_query.to_owned(),
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path_and_query)
    }
}

fn has_port(authority: &str) -> bool {
    match authority.rsplit_once(':') {
        // An IPv6 literal without a port ends in `]`.
        Some((_, port)) => !port.contains(']') && port.parse::<u16>().is_ok(),
        None => false,
    }
}

/// A response: status and the decoded body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `GET url`; fails unless the status is 2xx.
pub fn get(url: &Url) -> anyhow::Result<Vec<u8>> {
    ok(url, request("GET", url, None)?)
}

/// `POST url` with `body` as `content_type`; fails unless the status is 2xx.
pub fn post(url: &Url, content_type: &str, body: &[u8]) -> anyhow::Result<Vec<u8>> {
    ok(url, request("POST", url, Some((content_type, body)))?)
}

fn ok(url: &Url, r: Response) -> anyhow::Result<Vec<u8>> {
    if !(200..300).contains(&r.status) {
        let text = String::from_utf8_lossy(&r.body);
        let excerpt: String = text.chars().take(300).collect();
        bail!("{url} answered {}: {}", r.status, excerpt.trim());
    }
    Ok(r.body)
}

/// Sends one request and reads the whole response.
pub fn request(method: &str, url: &Url, body: Option<(&str, &[u8])>) -> anyhow::Result<Response> {
    let addr = url
        .authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", url.authority))?
        .next()
        .with_context(|| format!("{} resolves to no address", url.authority))?;
    // One deadline for the whole request: a per-read timeout alone never fires on a
    // server that trickles a byte at a time.
    let timeout = timeout();
    let deadline = Instant::now() + timeout;
    let late = || {
        anyhow::anyhow!(
            "{url}: no whole answer within {} (--timeout)",
            humantime::format_duration(timeout)
        )
    };
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {url}"))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut req = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: phasescope/{}\r\nAccept: application/json\r\nConnection: close\r\n",
        url.path_and_query,
        url.authority,
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes();
    match body {
        Some((content_type, body)) => {
            req.extend_from_slice(
                format!(
                    "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            req.extend_from_slice(body);
        }
        None if method == "POST" => req.extend_from_slice(b"Content-Length: 0\r\n\r\n"),
        None => req.extend_from_slice(b"\r\n"),
    }
    stream
        .write_all(&req)
        .with_context(|| format!("sending {method} {url}"))?;
    let mut raw = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(late)?;
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(late())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading the answer of {url}")),
        }
        if raw.len() > MAX_RESPONSE {
            break;
        }
    }
    ensure!(
        raw.len() <= MAX_RESPONSE,
        "{url}: answer larger than {MAX_RESPONSE} bytes"
    );
    parse_response(&raw).with_context(|| format!("reading the answer of {url}"))
}

/// Parses a complete, close-delimited HTTP/1.x response.
pub fn parse_response(raw: &[u8]) -> anyhow::Result<Response> {
    let head_end = find(raw, b"\r\n\r\n")
        .context("the connection closed before the end of the response head")?;
    let head = std::str::from_utf8(&raw[..head_end]).context("response head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.split(' ');
    let version = parts.next().unwrap_or_default();
    ensure!(
        version.starts_with("HTTP/1."),
        "not an HTTP/1.x response: {status_line:?}"
    );
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status code in {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .with_context(|| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-encoding")
            && !value.eq_ignore_ascii_case("identity")
        {
            bail!("the server sent a {value}-encoded body, which this client does not decode");
        }
    }
    let rest = &raw[head_end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(length) = length {
        ensure!(
            rest.len() >= length,
            "the body ends after {} of {length} bytes",
            rest.len()
        );
        rest[..length].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut raw: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = find(raw, b"\r\n").context("a chunk size line is cut short")?;
        let line = std::str::from_utf8(&raw[..line_end]).context("chunk size is not text")?;
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("bad chunk size {size_text:?}"))?;
        if size == 0 {
            return Ok(body);
        }
        let data = &raw[line_end + 2..];
        ensure!(data.len() >= size + 2, "a chunk is cut short");
        body.extend_from_slice(&data[..size]);
        raw = &data[size + 2..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_and_default_the_port() {
        let u = Url::parse("http://127.0.0.1:9464").unwrap();
        assert_eq!(u.authority, "127.0.0.1:9464");
        assert_eq!(u.path_and_query, "/");
        let u = Url::parse("http://prom/api/v1/query?x=1").unwrap();
        assert_eq!(u.authority, "prom:80");
        assert_eq!(u.path_and_query, "/api/v1/query?x=1");
        assert_eq!(u.with_path("/a").to_string(), "http://prom:80/a");
        assert!(Url::parse("https://x").is_err());
        assert!(Url::parse("x:1").is_err());
        assert!(Url::parse("http:///a").is_err());
    }

    #[test]
    fn bodies_by_length_chunks_or_close() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokjunk").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, b"abcde");
        let r = parse_response(b"HTTP/1.0 404 Not Found\r\n\r\nnope").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"nope"[..]));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2").is_err());
        assert!(parse_response(b"SSH-2.0\r\n\r\n").is_err());
    }
}

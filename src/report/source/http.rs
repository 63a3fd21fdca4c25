//! A minimal HTTP/1.1 client for the admin API and the Prometheus HTTP API.
//!
//! Both are plain `http://` servers on a known address that answer one small request with
//! one bounded body, so a blocking GET/POST over `TcpStream` is all the report commands
//! need; a client library would bring TLS, pools and an async runtime for nothing.
//! `Connection: close` on every request keeps the framing simple: the body ends at its
//! `Content-Length`, at the last chunk, or when the server closes. The answer is framed by
//! the proxy's own response reader ([`ResponseReader`]: the same head parser and body
//! framer as the relay, strict about chunked and lengths), not by a second, laxer one.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

use crate::http1::{response, Advance, BodyFramer, BodyKind, HeadScanner, Method, ResponseReader};

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

/// The variable that holds the admin server's bearer token, on the proxy's side and on
/// its clients' (`report --from`, `snapshot`, `profile`).
pub const TOKEN_VARIABLE: &str = "PHASESCOPE_ADMIN_TOKEN";

/// The `host:port`s known to be phasescope admin servers: only these get the token, so
/// that a report reading Prometheus too never hands the proxy's token to another server.
static ADMIN_SERVERS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// `url` is a phasescope admin server: its requests carry `PHASESCOPE_ADMIN_TOKEN` as a
/// bearer token when that is set (an admin server with a token refuses `/api/*` and
/// `/metrics` without it).
pub fn is_admin_server(url: &Url) {
    let mut servers = ADMIN_SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    if !servers.contains(&url.authority) {
        servers.push(url.authority.clone());
    }
}

/// The `Authorization` header line for a request to `url`, if it is an admin server and a
/// token is set.
fn authorization(url: &Url) -> Option<String> {
    let servers = ADMIN_SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    if !servers.contains(&url.authority) {
        return None;
    }
    let token = std::env::var(TOKEN_VARIABLE).ok()?;
    // The server accepts visible ASCII without spaces only; anything else could split
    // the header.
    let token = token.trim();
    (!token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| format!("Authorization: Bearer {token}\r\n"))
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

/// A 503 is asked again this many times, a second apart: the admin server answers 503
/// (with `Retry-After: 1`) when as many snapshots as `[admin] max_scrapes` are being
/// built and as many wait, and it did nothing for that request.
const BUSY_RETRIES: u32 = 5;
const BUSY_PAUSE: Duration = Duration::from_secs(1);

/// `GET url`; fails unless the status is 2xx (after the retries of a 503).
pub fn get(url: &Url) -> anyhow::Result<Vec<u8>> {
    ok(url, retrying_busy(|| request("GET", url, None))?)
}

/// `POST url` with `body` as `content_type`; fails unless the status is 2xx (after the
/// retries of a 503).
pub fn post(url: &Url, content_type: &str, body: &[u8]) -> anyhow::Result<Vec<u8>> {
    ok(
        url,
        retrying_busy(|| request("POST", url, Some((content_type, body))))?,
    )
}

/// The first answer that is not a 503, or the last 503.
fn retrying_busy(mut send: impl FnMut() -> anyhow::Result<Response>) -> anyhow::Result<Response> {
    let mut r = send()?;
    for _ in 0..BUSY_RETRIES {
        if r.status != 503 {
            break;
        }
        std::thread::sleep(BUSY_PAUSE);
        r = send()?;
    }
    Ok(r)
}

fn ok(url: &Url, r: Response) -> anyhow::Result<Vec<u8>> {
    if !(200..300).contains(&r.status) {
        let text = String::from_utf8_lossy(&r.body);
        let excerpt: String = text.chars().take(300).collect();
        let hint = if r.status == 401 && std::env::var_os(TOKEN_VARIABLE).is_none() {
            format!(" (the admin server has a token: set {TOKEN_VARIABLE} to it)")
        } else {
            String::new()
        };
        bail!("{url} answered {}: {}{hint}", r.status, excerpt.trim());
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
    if let Some(line) = authorization(url) {
        req.extend_from_slice(line.as_bytes());
    }
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
    let method = method_of(method);
    let mut reader = ResponseReader::new(method);
    let mut raw = Vec::new();
    // Bytes of `raw` the reader has consumed; the answer is whole once it says so, or at
    // the close for a body that ends with the connection.
    let mut framed = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    let end = loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(late)?;
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => {
                reader
                    .closed()
                    .with_context(|| format!("reading the answer of {url}"))?;
                break raw.len();
            }
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(late())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("reading the answer of {url}")),
        }
        ensure!(
            raw.len() <= MAX_RESPONSE,
            "{url}: answer larger than {MAX_RESPONSE} bytes"
        );
        match reader
            .advance(&raw[framed..])
            .with_context(|| format!("reading the answer of {url}"))?
        {
            Advance::Complete { consumed, .. } => break framed + consumed,
            Advance::Partial { consumed } => framed += consumed,
        }
    };
    parse_response(&raw[..end], method).with_context(|| format!("reading the answer of {url}"))
}

/// The method as the response reader knows it (HEAD's answers have no body).
fn method_of(method: &str) -> Method {
    Method::from_bytes(method.as_bytes())
}

/// Reads the status and the body of one whole response to a request with `method`:
/// `raw` ends where the response does (at its length, its last chunk, or the close).
/// Interim 1xx answers before it are skipped.
pub fn parse_response(raw: &[u8], method: Method) -> anyhow::Result<Response> {
    let mut at = 0;
    let head = loop {
        let rest = &raw[at..];
        let len = HeadScanner::new()
            .find_end(rest)
            .context("the connection closed before the end of the response head")?;
        let head = response::parse(&rest[..len], method)?;
        refuse_encoded_body(&rest[..len])?;
        at += len;
        if !head.is_interim() {
            break head;
        }
    };
    let body = body_data(head.body, &raw[at..])?;
    Ok(Response {
        status: head.status,
        body,
    })
}

/// A compressed body would reach the JSON reader as noise: say what happened instead.
/// (No request of this client asks for an encoding.)
fn refuse_encoded_body(head: &[u8]) -> anyhow::Result<()> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut fields);
    // The head parsed above; a head of more fields than this looks at is not refused.
    if parsed.parse(head).is_err() {
        return Ok(());
    }
    for field in parsed.headers.iter() {
        let value = String::from_utf8_lossy(field.value);
        let value = value.trim();
        if field.name.eq_ignore_ascii_case("content-encoding")
            && !value.eq_ignore_ascii_case("identity")
        {
            bail!("the server sent a {value}-encoded body, which this client does not decode");
        }
    }
    Ok(())
}

/// The body's data, without chunk framing, from the bytes after the head: walked by the
/// relay's body framer, which hands over the data it finds ahead and takes the framing a
/// byte at a time.
fn body_data(kind: BodyKind, mut rest: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut framer = BodyFramer::new(kind);
    let mut body = Vec::new();
    while !framer.is_done() && !rest.is_empty() {
        let ahead = framer.data_ahead();
        let offered = if ahead == 0 {
            1
        } else {
            usize::try_from(ahead).unwrap_or(usize::MAX).min(rest.len())
        };
        let progress = framer.advance(&rest[..offered])?;
        if ahead > 0 {
            body.extend_from_slice(&rest[..progress.consumed]);
        }
        rest = &rest[progress.consumed..];
    }
    ensure!(
        framer.is_done() || framer.is_close_delimited(),
        "the body is cut short"
    );
    Ok(body)
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
        let parse_response = |raw: &[u8]| parse_response(raw, Method::Get);
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

    #[test]
    fn chunks_are_framed_as_the_relay_frames_them() {
        let parse_response = |raw: &[u8]| parse_response(raw, Method::Get);
        // An interim answer first, chunk data that looks like framing, and trailers.
        let r = parse_response(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              5\r\n0\r\n\r\n\r\n1\r\nx\r\n0\r\nEtag: a\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"0\r\n\r\nx"[..]));
        // A coding named like chunked is not chunked: the body ends at the close.
        let r = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n3\r\nabc")
            .unwrap();
        assert_eq!(r.body, b"3\r\nabc");
        // Cut short in the data, in a size line, or with a size that is not hexadecimal.
        for cut in [&b"5\r\nab"[..], b"5\r\nabcde\r\n1", b"zz\r\n"] {
            let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            raw.extend_from_slice(cut);
            assert!(parse_response(&raw).is_err(), "{cut:?}");
        }
        let gzip = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx",
        );
        assert!(format!("{:#}", gzip.unwrap_err()).contains("gzip-encoded"));
        // HEAD's answer has no body whatever its length says.
        let r = super::parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
            Method::Head,
        )
        .unwrap();
        assert!(r.body.is_empty());
    }
}

//! The probe's target: a plain `http://host:port/path` URL.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;

use anyhow::Context;

/// Where the probe sends its requests, and what it puts in their request line and `Host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host` or `host:port` exactly as written, for the `Host` field.
    pub authority: String,
    pub host: String,
    pub port: u16,
    /// The request target: path and query, `/` when the URL has none.
    pub path: String,
}

impl Target {
    /// Resolves the host (the first address it resolves to).
    pub fn resolve(&self) -> anyhow::Result<SocketAddr> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {}", self.host))?
            .next()
            .with_context(|| format!("{} resolves to no address", self.host))
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(url: &str) -> Result<Target, String> {
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(format!(
                "{url}: https is not supported; probe the server's plain HTTP port"
            ));
        } else if url.contains("://") {
            return Err(format!("{url}: only http:// URLs can be probed"));
        } else {
            url
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(at) if rest[at..].starts_with('/') => (&rest[..at], rest[at..].to_owned()),
            Some(at) => (&rest[..at], format!("/{}", &rest[at..])),
            None => (rest, "/".to_owned()),
        };
        if let Some(fragment) = path.find('#') {
            return Err(format!(
                "{url}: a fragment ({}) is never sent to a server; leave it out",
                &path[fragment..]
            ));
        }
        if path.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(format!(
                "{url}: the path must be printable ASCII without spaces (percent-encode the rest)"
            ));
        }
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{url}: expected http://HOST[:PORT][/PATH]"));
        }
        let (host, port) = split_host_port(authority).map_err(|e| format!("{url}: {e}"))?;
        if host.is_empty() {
            return Err(format!("{url}: expected http://HOST[:PORT][/PATH]"));
        }
        Ok(Target {
            authority: authority.to_owned(),
            host,
            port,
            path,
        })
    }
}

fn split_host_port(authority: &str) -> Result<(String, u16), String> {
    // [v6]:port, [v6], host:port, host
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed '[' in the host".to_owned())?;
        let port = match after.strip_prefix(':') {
            Some(port) => parse_port(port)?,
            None if after.is_empty() => 80,
            None => return Err(format!("unexpected {after:?} after the address")),
        };
        return Ok((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Ok((host.to_owned(), parse_port(port)?)),
        None => Ok((authority.to_owned(), 80)),
    }
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("{text:?} is not a port")),
        Ok(port) => Ok(port),
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_port_and_path() {
        let t: Target = "http://127.0.0.1:7379/PING".parse().unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 7379, "/PING")
        );
        assert_eq!(t.authority, "127.0.0.1:7379");
        let t: Target = "localhost:8080".parse().unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("localhost", 8080, "/")
        );
        let t: Target = "http://example.test?x=1".parse().unwrap();
        assert_eq!((t.port, t.path.as_str()), (80, "/?x=1"));
        let t: Target = "http://[::1]:81/a/b".parse().unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 81, "/a/b")
        );
        assert_eq!(t.to_string(), "http://[::1]:81/a/b");
    }

    #[test]
    fn what_cannot_be_probed_is_refused_with_a_reason() {
        for (url, says) in [
            ("https://127.0.0.1/", "https"),
            ("ftp://x/", "only http"),
            ("http://:80/", "expected"),
            ("http:///x", "expected"),
            ("http://h:0/", "not a port"),
            ("http://h:99999/", "not a port"),
            ("http://h/a b", "printable"),
            ("http://h/#top", "fragment"),
            ("http://u@h/", "expected"),
        ] {
            let e = url.parse::<Target>().unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
        }
    }

    #[test]
    fn loopback_resolves() {
        let t: Target = "http://127.0.0.1:9/".parse().unwrap();
        assert_eq!(t.resolve().unwrap(), "127.0.0.1:9".parse().unwrap());
    }
}

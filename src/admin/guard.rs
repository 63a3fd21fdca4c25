//! Which requests a browser could have been made to send: the admin server answers only
//! names it is known by (against DNS rebinding), and changes state only for requests a
//! web page elsewhere cannot make (against cross-site requests).
//!
//! - **Host.** A page on `attacker.example` whose name is rebound to 127.0.0.1 reaches the
//!   admin server with `Host: attacker.example`, and reads what it answers as its own
//!   origin's. So the Host must be an IP address (a rebinding page's origin is a name, and
//!   a page at an IP address can only name itself), `localhost` or a name under it, or a
//!   name in `[admin] allowed_hosts`. A request without Host (HTTP/1.0) is no browser's.
//! - **State changes** (`POST /api/reset`). Any page can send a "simple" cross-site POST
//!   (`Content-Type: text/plain`, no custom header) without asking first. A reset needs
//!   `Content-Type: application/json` or an `X-Phasescope-*` header, which a browser
//!   sends cross-site only after a CORS preflight that the server never grants; and an
//!   `Origin` or `Sec-Fetch-Site` saying cross-site is refused outright.

use hyper::header::{HeaderMap, CONTENT_TYPE, HOST, ORIGIN};

/// The host part of a `Host` value or of an origin's authority: without the port, and an
/// IPv6 literal without its brackets.
fn host_part(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

/// Whether a browser on a page at `host` can only be on this server's own address.
fn known_host(host: &str, allowed: &[String]) -> bool {
    let host = host.trim_end_matches('.');
    host.parse::<std::net::IpAddr>().is_ok()
        || host.eq_ignore_ascii_case("localhost")
        || host
            .len()
            .checked_sub(".localhost".len())
            .is_some_and(|at| {
                host.is_char_boundary(at) && host[at..].eq_ignore_ascii_case(".localhost")
            })
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
}

/// The request's `Host` is a name this server is known by (see the module comment).
pub(super) fn host_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    match headers.get(HOST) {
        None => true,
        Some(v) => v
            .to_str()
            .is_ok_and(|h| known_host(host_part(h.trim()), allowed)),
    }
}

/// A state-changing request a page elsewhere could not have made: not cross-site by its
/// `Origin` or `Sec-Fetch-Site`, and not a CORS "simple" request.
pub(super) fn may_change_state(headers: &HeaderMap, allowed: &[String]) -> bool {
    let fetch_site = headers
        .get("sec-fetch-site")
        .map(|v| v.as_bytes().to_ascii_lowercase());
    if fetch_site
        .as_deref()
        .is_some_and(|s| s != b"same-origin" && s != b"none")
    {
        return false;
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let Some(authority) = origin.to_str().ok().and_then(|o| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
        }) else {
            // `null` (a sandboxed frame, a file) or another scheme: not this page.
            return false;
        };
        if !known_host(host_part(authority), allowed) {
            return false;
        }
    }
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    json || headers
        .keys()
        .any(|k| k.as_str().starts_with("x-phasescope-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_addresses_loopback_names_and_listed_names_are_answered() {
        let allowed = vec!["phasescope.internal".to_string()];
        for host in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "[::1]:9464",
            "10.1.2.3:9464",
            "localhost:9464",
            "LOCALHOST",
            "app.localhost:9464",
            "phasescope.internal:9464",
            "localhost.",
        ] {
            let h = headers(&[("host", host)]);
            assert!(host_allowed(&h, &allowed), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:9464",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "evil-localhost",
            "",
        ] {
            let h = headers(&[("host", host)]);
            assert!(!host_allowed(&h, &allowed), "{host}");
        }
        assert!(host_allowed(&HeaderMap::new(), &[]));
    }

    #[test]
    fn a_cross_site_or_simple_request_changes_nothing() {
        let ok = [
            &[("content-type", "application/json")][..],
            &[("x-phasescope-reset", "1")],
            &[
                ("origin", "http://127.0.0.1:9464"),
                ("sec-fetch-site", "same-origin"),
                ("content-type", "application/json; charset=utf-8"),
            ],
        ];
        for h in ok {
            assert!(may_change_state(&headers(h), &[]), "{h:?}");
        }
        let refused = [
            // The no-cors POST a page elsewhere can send.
            &[
                ("origin", "http://evil.example"),
                ("content-type", "text/plain"),
            ][..],
            &[
                ("origin", "http://evil.example"),
                ("content-type", "application/json"),
            ],
            &[
                ("sec-fetch-site", "cross-site"),
                ("content-type", "application/json"),
            ],
            &[("sec-fetch-site", "same-site"), ("x-phasescope-reset", "1")],
            &[("origin", "null"), ("content-type", "application/json")],
            &[("content-type", "text/plain")],
            &[],
        ];
        for h in refused {
            assert!(!may_change_state(&headers(h), &[]), "{h:?}");
        }
    }
}

//! The admin server's token, and secrets that must never reach a log.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use support::{http_exchange, parse_response, Proxy, Response};

fn admin(proxy: &Proxy, method: &str, path: &str, token: Option<&str>) -> Response {
    // Make sure the admin server is up before talking to it by hand.
    let _ = proxy.admin_get("/healthz");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    parse_response(&http_exchange(proxy.admin_addr(), req.as_bytes()))
}

/// An upstream that answers every request with a cookie, until the test ends.
fn cookie_upstream() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                let mut seen = Vec::new();
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let body = "ok";
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nSet-Cookie: session=SETCOOKIE-SECRET\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_token_guards_metrics_and_the_api_but_not_health_or_the_page() {
    let upstream = cookie_upstream();
    let proxy = Proxy::in_front_of(upstream, &["--admin-token", "s3cret-token"]);
    for path in ["/metrics", "/api/snapshot"] {
        let none = admin(&proxy, "GET", path, None);
        assert_eq!(none.status, 401, "{path} without a token");
        assert_eq!(none.header("www-authenticate"), Some("Bearer"));
        assert_eq!(admin(&proxy, "GET", path, Some("s3cret-tokeX")).status, 401);
        assert_eq!(admin(&proxy, "GET", path, Some("s3cret")).status, 401);
        assert_eq!(
            admin(&proxy, "GET", path, Some("s3cret-token")).status,
            200,
            "{path}"
        );
    }
    assert_eq!(admin(&proxy, "POST", "/api/reset", None).status, 401);
    assert_eq!(
        admin(&proxy, "GET", "/api/reset", Some("s3cret-token")).status,
        405
    );
    assert_eq!(
        admin(&proxy, "POST", "/api/reset", Some("s3cret-token")).status,
        200
    );
    assert_eq!(admin(&proxy, "GET", "/healthz", None).status, 200);
    assert_eq!(admin(&proxy, "GET", "/", None).status, 200);
}

#[test]
fn without_a_token_reset_is_post_only() {
    let proxy = Proxy::in_front_of(cookie_upstream(), &[]);
    assert_eq!(admin(&proxy, "GET", "/api/reset", None).status, 405);
    assert_eq!(admin(&proxy, "POST", "/api/reset", None).status, 200);
    assert_eq!(admin(&proxy, "GET", "/metrics", None).status, 200);
}

#[test]
fn credentials_and_cookies_never_reach_the_logs() {
    let upstream = cookie_upstream();
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow.log");
    let proxy = Proxy::in_front_of(
        upstream,
        &[
            "--slow-log",
            slow.to_str().unwrap(),
            "--slow-threshold",
            "1ns",
            "--log-format",
            "json",
        ],
    );
    let req = b"GET /private HTTP/1.1\r\nHost: a\r\nAuthorization: Basic AUTH-SECRET\r\nCookie: id=COOKIE-SECRET\r\nConnection: close\r\n\r\n";
    let resp = parse_response(&http_exchange(proxy.addr(), req));
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("set-cookie"), Some("session=SETCOOKIE-SECRET"));
    // A proxy-made answer logs a line too: make one.
    let bad = b"GET / HTTP/1.1\r\nHost: a\r\nCookie: id=COOKIE-SECRET\r\nContent-Length: x\r\n\r\n";
    assert_eq!(
        parse_response(&http_exchange(proxy.addr(), bad)).status,
        400
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    while read(proxy.access_log()).is_empty() || read(&slow).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no log lines");
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs = [read(proxy.access_log()), read(&slow), proxy.log_tail()];
    assert!(logs[0].contains("/private") && logs[1].contains("/private"));
    for (name, text) in ["access log", "slow log", "proxy log"].iter().zip(&logs) {
        for secret in ["AUTH-SECRET", "COOKIE-SECRET", "SETCOOKIE-SECRET"] {
            assert!(!text.contains(secret), "{secret} in the {name}:\n{text}");
        }
    }
}

//! A client that shuts down its sending side after its request (`shutdown(SHUT_WR)`, as
//! an HTTP/1.0-style client or `nc -N` does) and waits to read: it gets every answer the
//! upstream gives, byte for byte as directly, and no error is counted. Before, the proxy
//! took the FIN for a client that had left: it counted `client_reset` and dropped the
//! answer (HAProxy delivers it). A client that stops inside a body is still gone.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use support::Proxy;

/// How long the upstream takes to answer each request: the FIN is long there by then.
const SLOW: Duration = Duration::from_millis(500);

/// An upstream that answers each request `SLOW` after it came, with its target as the body.
fn slow_upstream() -> SocketAddr {
    support::slow_upstream(SLOW, |head| {
        let target = head.split(' ').nth(1).unwrap_or("");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{target}",
            target.len()
        )
        .into_bytes()
    })
}

/// Sends `request`, shuts the sending side, reads until the server closes (10 s at most).
fn send_then_shut(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

fn client_aborts(proxy: &Proxy) -> u64 {
    let metrics = proxy.admin_get("/metrics");
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    text.lines()
        .find(|l| l.starts_with("phasescope_errors_total{") && l.contains("kind=\"client_abort\""))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse::<f64>().unwrap() as u64)
}

#[test]
fn a_client_that_shuts_its_side_after_the_request_gets_every_answer() {
    let upstream = slow_upstream();
    let proxy = Proxy::in_front_of(upstream, &[]);
    let cases: [(&str, &[u8]); 4] = [
        ("GET", b"GET /r1 HTTP/1.1\r\nHost: a\r\n\r\n"),
        (
            "POST",
            b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        ),
        ("HTTP/1.0 GET", b"GET /old HTTP/1.0\r\n\r\n"),
        (
            "two pipelined GETs",
            b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
    ];
    for (name, request) in cases {
        let direct = send_then_shut(upstream, request);
        let through = send_then_shut(proxy.addr(), request);
        assert!(!direct.is_empty(), "{name}: the upstream answered nothing");
        assert_eq!(
            String::from_utf8_lossy(&through),
            String::from_utf8_lossy(&direct),
            "{name}: through the proxy against direct\n{}",
            proxy.log_tail()
        );
    }
    assert_eq!(client_aborts(&proxy), 0, "{}", proxy.log_tail());
}

/// The FIN inside a body: the request can never complete, so the client is gone.
#[test]
fn a_client_that_shuts_its_side_inside_a_body_is_gone() {
    let proxy = Proxy::in_front_of(slow_upstream(), &[]);
    let got = send_then_shut(
        proxy.addr(),
        b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhel",
    );
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(
        support::wait_for(Duration::from_secs(10), || client_aborts(&proxy) == 1),
        "client_abort {}\n{}",
        client_aborts(&proxy),
        proxy.log_tail()
    );
}

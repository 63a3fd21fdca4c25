//! phasescope in front of an Amphp-like server: the PHP fixture (tests/fixtures/amp-server.php,
//! Amp's event loop under the real `php`), which answers as amphp/http-server's HTTP/1
//! driver does: lower-case header names, head and body in separate writes, chunked bodies,
//! `Host` required, idle keep-alive connections closed without a word.

mod amp;
mod support;

use std::time::{Duration, Instant};

use amp::AmpServer;
use support::{parse_response, HttpConn, Proxy, IO_TIMEOUT};

/// Responses carry a `date`; fixed, the proxied bytes can be compared with the direct ones.
const DATE: &str = "Thu, 01 Jan 2026 00:00:00 GMT";

fn fixture() -> AmpServer {
    AmpServer::start(&[("AMP_FIXTURE_DATE", DATE)])
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: amphp-test\r\n\r\n").into_bytes()
}

/// The values of every `phasescope_errors_total` series in `/metrics`.
fn error_counters(proxy: &Proxy) -> Vec<(String, f64)> {
    let metrics = proxy.admin_get("/metrics");
    assert_eq!(metrics.status, 200);
    let counters: Vec<(String, f64)> = metrics
        .body_text()
        .lines()
        .filter(|line| line.starts_with("phasescope_errors_total{"))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect();
    assert!(
        !counters.is_empty(),
        "no phasescope_errors_total in\n{}",
        metrics.body_text()
    );
    counters
}

fn counter(proxy: &Proxy, name_and_labels: &str) -> f64 {
    let metrics = proxy.admin_get("/metrics").body_text();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name_and_labels} in\n{metrics}"))
}

#[test]
fn responses_are_byte_for_byte_those_of_the_server() {
    let amp = fixture();
    let proxy = Proxy::in_front_of(amp.addr(), &[]);
    let requests: Vec<Vec<u8>> = vec![
        get("/"),
        get("/chunked"),
        b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 11\r\n\r\nhello amphp".to_vec(),
        b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n amphp\r\n0\r\n\r\n".to_vec(),
        get("/sleep?ms=20"),
        get("/missing"),
        b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec(),
    ];
    let mut direct = HttpConn::connect(amp.addr());
    let mut proxied = HttpConn::connect(proxy.addr());
    for request in &requests {
        let expected = direct.exchange(request);
        let got = proxied.exchange(request);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected),
            "request {:?}\n{}",
            String::from_utf8_lossy(request),
            proxy.log_tail()
        );
    }
    // What Amphp's driver does, as seen through the proxy.
    let response = parse_response(&proxied.exchange(&get("/")));
    let names: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.iter().all(|n| *n == n.to_lowercase()), "{names:?}");
    assert_eq!(response.header("date"), Some(DATE));
    assert_eq!(response.header("connection"), Some("keep-alive"));
    assert_eq!(response.header("keep-alive"), Some("timeout=15"));
    assert_eq!(response.body_text(), "hello from amp\n");
}

#[test]
fn http_1_0_without_a_length_is_close_delimited_through_the_proxy_too() {
    let amp = fixture();
    let proxy = Proxy::in_front_of(amp.addr(), &[]);
    let request = b"GET /chunked HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut direct = HttpConn::connect(amp.addr());
    direct.send(request);
    let expected = direct.read_to_close(deadline);
    let mut proxied = HttpConn::connect(proxy.addr());
    proxied.send(request);
    let got = proxied.read_to_close(deadline);
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&expected)
    );
    let response = parse_response(&got);
    assert_eq!(response.header("transfer-encoding"), None);
    assert_eq!(response.header("content-length"), None);
    assert!(response.body_text().ends_with("third and last chunk\n"));
}

#[test]
fn keep_alive_uses_one_upstream_connection_and_pipelined_answers_stay_in_order() {
    let amp = fixture();
    let proxy = Proxy::in_front_of(amp.addr(), &[]);
    // The harness's readiness check already opened (and closed) a client connection; it
    // is counted by its own task, so wait until it has been before taking the baseline.
    let clients = "phasescope_connections_total{tap=\"webdis\",side=\"client\"}";
    let open = "phasescope_connections{tap=\"webdis\",side=\"client\"}";
    assert!(
        support::wait_for(Duration::from_secs(5), || counter(&proxy, clients) >= 1.0
            && counter(&proxy, open) == 0.0),
        "the readiness check's connection was never counted"
    );
    let clients_before = counter(&proxy, clients);
    let mut conn = HttpConn::connect(proxy.addr());
    for _ in 0..5 {
        let response = parse_response(&conn.exchange(&get("/")));
        assert_eq!(response.status, 200);
    }
    // Three at once, the first one slow: the answers come back in the order asked.
    let pipelined = [
        get("/sleep?ms=50"),
        b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 6\r\n\r\nsecond".to_vec(),
        get("/"),
    ]
    .concat();
    conn.send(&pipelined);
    let bodies: Vec<String> = (0..3)
        .map(|_| parse_response(&conn.read_response()).body_text())
        .collect();
    assert_eq!(bodies, ["slept 50 ms\n", "second", "hello from amp\n"]);
    assert_eq!(
        counter(
            &proxy,
            "phasescope_connections_total{tap=\"webdis\",side=\"upstream\"}"
        ),
        1.0
    );
    assert_eq!(counter(&proxy, clients) - clients_before, 1.0);
}

#[test]
fn chunked_responses_arrive_chunk_by_chunk() {
    let amp = fixture();
    let proxy = Proxy::in_front_of(amp.addr(), &[]);
    let mut conn = HttpConn::connect(proxy.addr());
    conn.send(&get("/chunked"));
    let deadline = Instant::now() + IO_TIMEOUT;
    let head = support::parse_head(&conn.read_head(deadline));
    assert_eq!(head.header("transfer-encoding"), Some("chunked"));
    let mut chunks = Vec::new();
    while let Some(chunk) = conn.read_chunk(deadline) {
        chunks.push(String::from_utf8(chunk).unwrap());
    }
    assert_eq!(
        chunks,
        ["first chunk\n", "second chunk\n", "third and last chunk\n"]
    );
    // The connection is still good for the next request.
    assert_eq!(parse_response(&conn.exchange(&get("/"))).status, 200);
}

#[test]
fn the_idle_close_reaches_the_client_and_is_not_an_error() {
    let amp = AmpServer::start(&[
        ("AMP_FIXTURE_DATE", DATE),
        ("AMP_FIXTURE_IDLE_TIMEOUT", "1"),
    ]);
    let proxy = Proxy::in_front_of(amp.addr(), &[]);
    let mut conn = HttpConn::connect(proxy.addr());
    let response = parse_response(&conn.exchange(&get("/")));
    assert_eq!(response.header("keep-alive"), Some("timeout=1"));
    let answered = Instant::now();
    assert!(
        conn.closed_by_peer(Duration::from_secs(20)),
        "the server closed its idle connection; the client must see it\n{}",
        proxy.log_tail()
    );
    // The close came from the server's idle timer, not from anything sooner: its 1 s,
    // less 100 ms, since that timer started before the client had read the answer.
    assert!(
        answered.elapsed() >= Duration::from_millis(900),
        "{:?}",
        answered.elapsed()
    );
    // A new connection works as before.
    let again = parse_response(&HttpConn::connect(proxy.addr()).exchange(&get("/")));
    assert_eq!(again.status, 200);
    for (series, value) in error_counters(&proxy) {
        assert_eq!(value, 0.0, "{series} counted an idle close as an error");
    }
    assert_eq!(
        counter(&proxy, "phasescope_requests_total{tap=\"webdis\",route=\"root\",method=\"GET\",status_class=\"2xx\"}"),
        2.0
    );
}

#[test]
fn the_servers_own_client_errors_pass_through() {
    let amp = fixture();
    let proxy = Proxy::in_front_of(amp.addr(), &[]);
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(40 * 1024)
    );
    let big_body = format!(
        "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
        200 * 1024
    );
    for (request, status, says) in [
        (
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            400,
            "missing host header",
        ),
        (
            b"GET / HTTP/1.0\r\n\r\n".to_vec(),
            400,
            "missing host header",
        ),
        (
            big_header.into_bytes(),
            431,
            "Request Header Fields Too Large",
        ),
        (big_body.into_bytes(), 413, "Payload Too Large"),
    ] {
        let deadline = Instant::now() + IO_TIMEOUT;
        let mut direct = HttpConn::connect(amp.addr());
        direct.send(&request);
        let expected = direct.read_to_close(deadline);
        let mut proxied = HttpConn::connect(proxy.addr());
        proxied.send(&request);
        let got = proxied.read_to_close(deadline);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected),
            "{status}\n{}",
            proxy.log_tail()
        );
        let response = parse_response(&got);
        assert_eq!(response.status, status);
        assert!(response.body_contains(says), "{}", response.body_text());
        assert_eq!(response.header("connection"), Some("close"));
    }
    // The proxy answered none of them itself.
    for (series, value) in error_counters(&proxy) {
        assert_eq!(value, 0.0, "{series}");
    }
}

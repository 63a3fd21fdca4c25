//! The answers the proxy makes itself: each closes the connection, is counted by kind,
//! and for malformed or ambiguous requests the upstream receives nothing at all.

mod fake;

use std::time::Duration;

use fake::{proxy, proxy_with, read_to_close, upstream};
use phasescope::recorder::ErrorKind;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

fn status_of(resp: &[u8]) -> u16 {
    let line = String::from_utf8_lossy(resp);
    line.get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a response: {line:?}"))
}

fn closes(resp: &[u8]) -> bool {
    String::from_utf8_lossy(resp).contains("\r\nConnection: close\r\n")
}

/// Sends `req`, reads to the close, returns the answer.
async fn send(addr: std::net::SocketAddr, req: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    read_to_close(&mut s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_ambiguous_requests_get_400_and_never_reach_the_upstream() {
    let (up, received) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(OK).await;
    })
    .await;
    let p = proxy(up).await;
    let cases: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        b"G@T / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ];
    for (i, req) in cases.iter().enumerate() {
        let resp = send(p.addr, req).await;
        assert_eq!(
            status_of(&resp),
            400,
            "case {i}: {:?}",
            String::from_utf8_lossy(req)
        );
        assert!(closes(&resp), "case {i}");
    }
    let errors = p.capture.wait_errors(cases.len()).await;
    assert!(
        errors.iter().all(|e| *e == ErrorKind::BadRequest),
        "{errors:?}"
    );
    assert_eq!(
        received.total_bytes(),
        0,
        "the upstream saw bytes of a refused request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_get_431() {
    let (up, received) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(OK).await;
    })
    .await;
    let p = proxy_with(up, |t| {
        t.limits.max_head_bytes = 4096;
        t.limits.max_headers = 10;
    })
    .await;
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "x".repeat(8000)
    );
    let resp = send(p.addr, big.as_bytes()).await;
    assert_eq!(status_of(&resp), 431);
    let many: String = (0..20).map(|i| format!("X-{i}: v\r\n")).collect();
    let resp = send(
        p.addr,
        format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status_of(&resp), 431);
    assert!(closes(&resp));
    let errors = p.capture.wait_errors(2).await;
    assert_eq!(errors, vec![ErrorKind::HeaderTooLarge; 2]);
    assert_eq!(received.total_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_takes_too_long_gets_408() {
    let (up, received) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(OK).await;
    })
    .await;
    let p = proxy_with(up, |t| t.timeouts.head = Duration::from_millis(300)).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    let resp = read_to_close(&mut s).await;
    assert_eq!(status_of(&resp), 408);
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::ClientTimeout]
    );
    assert_eq!(received.total_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_gets_502() {
    // A port that was free a moment ago: nothing listens there.
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let p = proxy(dead).await;
    let resp = send(p.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(status_of(&resp), 502);
    assert!(closes(&resp));
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamConnect]
    );
    let ex = p.capture.wait_exchanges(1).await;
    assert_eq!(ex[0].status, 502);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_closes_before_answering_gets_502() {
    let (up, received) = upstream(|mut c| async move {
        c.read_head().await;
        // Closes without a word.
    })
    .await;
    let p = proxy(up).await;
    let req = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let resp = send(p.addr, req).await;
    assert_eq!(status_of(&resp), 502);
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamReset]
    );
    assert_eq!(received.all(), vec![req.to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_gets_504_at_the_response_timeout() {
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    })
    .await;
    let p = proxy_with(up, |t| t.timeouts.response = Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let resp = send(p.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(status_of(&resp), 504);
    // Never before the timeout: no load brings a timer forward.
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamTimeout]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_response_head_gets_502() {
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\nok")
            .await;
    })
    .await;
    let p = proxy(up).await;
    let resp = send(p.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(status_of(&resp), 502);
    assert_eq!(p.capture.wait_errors(1).await, vec![ErrorKind::BadResponse]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_connection_does_not_disturb_another() {
    let (up, _) = upstream(|mut c| async move {
        while c.read_head().await {
            c.write(OK).await;
        }
    })
    .await;
    let p = proxy(up).await;
    let mut good = TcpStream::connect(p.addr).await.unwrap();
    good.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(fake::read_n(&mut good, OK.len()).await, OK);
    let resp = send(
        p.addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&resp), 400);
    good.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(fake::read_n(&mut good, OK.len()).await, OK);
}

/// An upstream that answers an HTTP/1.0 request with chunked framing (RFC 9112 §6.1
/// forbids it): the client would take the chunk sizes for its body, and the proxy, which
/// forwards bytes as they are, cannot de-chunk. It gets a 502, counted as `bad_response`;
/// the same response to an HTTP/1.1 request goes through unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_answer_to_an_http10_request_is_a_502() {
    const CHUNKED: &[u8] =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(CHUNKED).await;
    })
    .await;
    let p = proxy(up).await;
    let resp = send(p.addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(
        status_of(&resp),
        502,
        "{:?}",
        String::from_utf8_lossy(&resp)
    );
    assert!(closes(&resp));
    assert_eq!(p.capture.wait_errors(1).await, vec![ErrorKind::BadResponse]);
    let resp = send(
        p.addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(resp, CHUNKED);
}

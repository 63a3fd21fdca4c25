//! Desyncs a buggy or hostile upstream can cause, against scripted upstreams: a response
//! must never unlock or shift a connection. Each test checks the bytes both ends saw
//! and the counters that moved (docs/security.md, "Response-side desyncs").

mod fake;

use std::time::Duration;

use fake::{proxy, read_n, read_to_close, upstream, UpConn};
use phasescope::recorder::ErrorKind;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

fn status_of(resp: &[u8]) -> Option<u16> {
    std::str::from_utf8(resp.get(9..12)?).ok()?.parse().ok()
}

/// Answers every request head it receives with `OK`, until the proxy closes.
async fn serve_ok(mut c: UpConn) {
    while c.read_head().await {
        c.write(OK).await;
    }
}

// --- item 7: no 1xx for an HTTP/1.0 client ----------------------------------------------

const INTERIMS: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n";
const FINAL: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

/// The upstream sends two interim responses and the final one, in one write or in two.
async fn interims_then_final(split: bool) -> (std::net::SocketAddr, fake::Received) {
    upstream(move |mut c| async move {
        c.read_head().await;
        if split {
            c.write(INTERIMS).await;
            tokio::time::sleep(Duration::from_millis(30)).await;
            c.write(FINAL).await;
        } else {
            c.write(&[INTERIMS, FINAL].concat()).await;
        }
        let _ = c.read_at_least(usize::MAX).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_client_never_sees_an_interim_response() {
    for split in [false, true] {
        let (up, received) = interims_then_final(split).await;
        let p = proxy(up).await;
        let req = b"POST /p HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi";
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(req).await.unwrap();
        let got = read_to_close(&mut s).await;
        assert_eq!(
            got,
            FINAL,
            "split {split}: {:?}",
            String::from_utf8_lossy(&got)
        );
        assert_eq!(received.all(), vec![req.to_vec()]);
        let ex = p.capture.wait_exchanges(1).await;
        assert_eq!(ex[0].status, 200);
        assert_eq!(ex[0].response_bytes, FINAL.len() as u64);
        assert!(p.capture.errors().is_empty(), "{:?}", p.capture.errors());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http11_client_still_gets_its_interim_responses() {
    for split in [false, true] {
        let (up, _) = interims_then_final(split).await;
        let p = proxy(up).await;
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
            .await
            .unwrap();
        assert_eq!(read_to_close(&mut s).await, [INTERIMS, FINAL].concat());
    }
}

// --- item 1: a 101 nobody asked for -----------------------------------------------------

const SWITCH: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";

/// An upstream that answers the first request with a 101, then echoes what it gets.
async fn switching_upstream() -> (std::net::SocketAddr, fake::Received) {
    upstream(|mut c| async move {
        c.read_head().await;
        c.write(SWITCH).await;
        let _ = c.read_at_least(usize::MAX).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrequested_101_gets_502_and_never_opens_a_tunnel() {
    for req in [
        // No Upgrade at all.
        &b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        // Upgrade without the `upgrade` connection option (RFC 9110 §7.8).
        b"GET /a HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
        // HTTP/1.0 cannot upgrade (RFC 9110 §7.8: a server MUST ignore Upgrade in 1.0).
        b"GET /a HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    ] {
        let (up, received) = switching_upstream().await;
        let p = proxy(up).await;
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(req).await.unwrap();
        // What the client sends next must not reach the upstream through a tunnel.
        let hidden = b"DELETE /everything HTTP/1.1\r\nHost: a\r\n\r\n";
        let _ = s.write_all(hidden).await;
        let got = read_to_close(&mut s).await;
        let shown = String::from_utf8_lossy(req);
        assert_eq!(status_of(&got), Some(502), "{shown}: {got:?}");
        assert!(String::from_utf8_lossy(&got).contains("Connection: close"));
        assert_eq!(p.capture.wait_errors(1).await, vec![ErrorKind::BadResponse]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(received.all(), vec![req.to_vec()], "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_101_to_an_upgrade_request_still_opens_the_tunnel() {
    let (up, received) = switching_upstream().await;
    let p = proxy(up).await;
    let req = b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(req).await.unwrap();
    assert_eq!(read_n(&mut s, SWITCH.len()).await, SWITCH);
    s.write_all(b"\x81\x02hi").await.unwrap();
    for _ in 0..100 {
        if received.total_bytes() == req.len() + 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(received.all(), vec![[&req[..], b"\x81\x02hi"].concat()]);
    assert!(p.capture.errors().is_empty());
}

// --- item 2: bytes beyond the framed end of a response, or with no request in flight ---

/// No body announced: the connection stays pooled (one that announces a body is never
/// reused, `late_bytes_after_a_head_answer_never_answer_the_next_request`).
const HEAD_ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
const EVIL: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil";
const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n";
const HEAD_REQ: &[u8] = b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n";

/// The first upstream connection answers HEAD with a head and then, `gap` later (or in
/// the same write), a second response nobody asked for; it answers anything after that
/// with `OK`. Later connections serve `OK`.
async fn excess_upstream(gap: Option<Duration>) -> (std::net::SocketAddr, fake::Received) {
    let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    upstream(move |mut c| {
        let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            if !first {
                return serve_ok(c).await;
            }
            c.read_head().await;
            match gap {
                None => c.write(&[HEAD_ANSWER, EVIL].concat()).await,
                Some(gap) => {
                    c.write(HEAD_ANSWER).await;
                    tokio::time::sleep(gap).await;
                    c.write(EVIL).await;
                }
            }
            serve_ok(c).await;
        }
    })
    .await
}

async fn assert_excess_dropped(p: &fake::Proxy, received: &fake::Received, got: &[u8]) {
    assert_eq!(
        got,
        [HEAD_ANSWER, OK].concat(),
        "{:?}",
        String::from_utf8_lossy(got)
    );
    p.capture.wait_exchanges(2).await;
    assert_eq!(
        p.capture.errors(),
        vec![ErrorKind::UnsolicitedResponse],
        "counted like any response nobody asked for"
    );
    // The connection that sent the excess carried only the HEAD; the next request went
    // on a new one.
    assert_eq!(received.all(), vec![HEAD_REQ.to_vec(), NEXT.to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_in_the_same_read_closes_that_upstream_connection_only() {
    let (up, received) = excess_upstream(None).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[HEAD_REQ, NEXT].concat()).await.unwrap();
    let got = read_n(&mut s, HEAD_ANSWER.len() + OK.len()).await;
    assert_excess_dropped(&p, &received, &got).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_while_the_next_head_is_arriving_is_not_its_answer() {
    let (up, received) = excess_upstream(Some(Duration::from_millis(30))).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // The next head is on its way (all but its last CRLF) when the excess arrives.
    s.write_all(&[HEAD_REQ, &NEXT[..NEXT.len() - 2]].concat())
        .await
        .unwrap();
    let mut got = read_n(&mut s, HEAD_ANSWER.len()).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    s.write_all(b"\r\n").await.unwrap();
    got.extend(read_n(&mut s, OK.len()).await);
    assert_excess_dropped(&p, &received, &got).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_while_idle_is_dropped_before_the_next_request() {
    let (up, received) = excess_upstream(Some(Duration::from_millis(30))).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(HEAD_REQ).await.unwrap();
    let mut got = read_n(&mut s, HEAD_ANSWER.len()).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    s.write_all(NEXT).await.unwrap();
    got.extend(read_n(&mut s, OK.len()).await);
    assert_excess_dropped(&p, &received, &got).await;
}

// --- third round, item 3: late bytes after a HEAD answer --------------------------------

/// A HEAD answer that announces five bytes of body it does not send.
const HEAD_ANNOUNCING: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";

/// The first upstream connection answers HEAD with `head`, and the next request, if one
/// comes on it, with `EVIL` (late bytes, as a faulty upstream that sends a HEAD's body
/// would) then `OK`. Later connections serve `OK`.
async fn late_bytes_upstream(head: &'static [u8]) -> (std::net::SocketAddr, fake::Received) {
    let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    upstream(move |mut c| {
        let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            if !first {
                return serve_ok(c).await;
            }
            c.read_head().await;
            c.write(head).await;
            if c.read_head().await {
                c.write(&[EVIL, OK].concat()).await;
            }
            serve_ok(c).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_bytes_after_a_head_answer_never_answer_the_next_request() {
    let (up, received) = late_bytes_upstream(HEAD_ANNOUNCING).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // Pipelined: the next request is here before the HEAD is answered.
    s.write_all(&[HEAD_REQ, NEXT].concat()).await.unwrap();
    let got = read_n(&mut s, HEAD_ANNOUNCING.len() + OK.len()).await;
    assert_eq!(
        got,
        [HEAD_ANNOUNCING, OK].concat(),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    p.capture.wait_exchanges(2).await;
    // The HEAD's upstream connection carried nothing else: the next request went on a
    // new one, and the client's connection carried on.
    assert_eq!(received.all(), vec![HEAD_REQ.to_vec(), NEXT.to_vec()]);
    s.write_all(NEXT).await.unwrap();
    assert_eq!(read_n(&mut s, OK.len()).await, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_answer_that_announces_no_body_keeps_its_upstream_connection() {
    let (up, received) = late_bytes_upstream(HEAD_ANSWER).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[HEAD_REQ, NEXT].concat()).await.unwrap();
    let got = read_n(&mut s, HEAD_ANSWER.len() + EVIL.len()).await;
    // Nothing could be late: the connection is reused (and this upstream's scripted
    // `EVIL` is then the next answer, as it would be for any reused connection).
    assert_eq!(got, [HEAD_ANSWER, EVIL].concat());
    assert_eq!(received.all(), vec![[HEAD_REQ, NEXT].concat()]);
}

// --- item 3: a final response before the request body is complete ---------------------

/// A request whose body hides a second request: an upstream that answers before reading
/// the body, and then reads the rest of the connection as requests, would answer it.
const SMUGGLER_HEAD: &[u8] = b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 43\r\n\r\n";
const HIDDEN: &[u8] = b"GET /admin HTTP/1.1\r\nHost: a\r\nX-Pad: 12\r\n\r\n";
const EARLY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly";
const ADMIN: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret";

/// Answers the first head at once, without reading a body (the end of the answer only
/// `gap` later), then treats whatever follows as requests, answering `/admin` with a
/// secret: the careless upstream of item 3.
/// Later connections serve `OK`.
async fn early_answering_upstream(gap: Duration) -> (std::net::SocketAddr, fake::Received) {
    let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    upstream(move |mut c| {
        let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            if !first {
                return serve_ok(c).await;
            }
            c.read_head().await;
            c.write(&EARLY[..EARLY.len() - 5]).await;
            tokio::time::sleep(gap).await;
            c.write(&EARLY[EARLY.len() - 5..]).await;
            while c.read_head().await {
                let last = c.buf.windows(10).rposition(|w| w == b"GET /admin");
                let answer = if last.is_some() { ADMIN } else { OK };
                c.write(answer).await;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_response_closes_the_upstream_connection_and_nothing_hidden_is_answered() {
    assert_eq!(HIDDEN.len(), 43);
    let (up, received) = early_answering_upstream(Duration::from_millis(150)).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(SMUGGLER_HEAD).await.unwrap();
    // The body follows once the answer has begun; the next request right after it.
    let mut got = read_n(&mut s, EARLY.len() - 5).await;
    s.write_all(HIDDEN).await.unwrap();
    s.write_all(NEXT).await.unwrap();
    // The client gets the early answer, then `OK` for its next request from a fresh
    // upstream connection, never the secret.
    got.extend(read_n(&mut s, 5 + OK.len()).await);
    assert_eq!(
        got,
        [EARLY, OK].concat(),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    p.capture.wait_exchanges(2).await;
    let all = received.all();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(
        all[0], SMUGGLER_HEAD,
        "the rest of the body never went upstream"
    );
    assert_eq!(all[1], NEXT);
    assert!(p.capture.errors().is_empty(), "{:?}", p.capture.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_response_with_the_body_unsent_closes_the_client_too() {
    let (up, received) = early_answering_upstream(Duration::ZERO).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(SMUGGLER_HEAD).await.unwrap();
    // The client sends none of its body: once the answer is out, both sides close (the
    // client's next bytes could be body or a request; nobody can tell).
    let got = read_to_close(&mut s).await;
    assert_eq!(got, EARLY);
    p.capture.wait_exchanges(1).await;
    assert_eq!(received.all(), vec![SMUGGLER_HEAD.to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_417_to_expect_100_continue_never_reads_the_next_request_as_body() {
    const FAILED: &[u8] = b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n";
    let (up, received) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(FAILED).await;
        serve_ok(c).await;
    })
    .await;
    let p = proxy(up).await;
    let head =
        b"PUT /big HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 36\r\n\r\n";
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(head).await.unwrap();
    assert_eq!(read_n(&mut s, FAILED.len()).await, FAILED);
    // A client that gives up on the body after a 417 sends its next request; it is 36
    // bytes, exactly what the body would have been.
    let next = b"GET /x HTTP/1.1\r\nHost: abcdefghi\r\n\r\n";
    assert_eq!(next.len(), 36);
    let _ = s.write_all(next).await;
    // Either answered as a request, or the connection closed: never swallowed as body
    // while the connection stays open.
    let got = read_to_close(&mut s).await;
    assert!(
        got.is_empty() || got == OK,
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(received.all()[0], head.to_vec());
}

// --- third round, item 2: Expect: 100-continue with the body in the same write ----------

const EXPECT_FAILED: &[u8] = b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n";
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// An `Expect: 100-continue` head whose body is a whole request.
fn expect_head(body: &[u8]) -> Vec<u8> {
    format!(
        "PUT /up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes()
}

/// Answers the first head with 417 without reading a body, then, slowly (each answer
/// only once the next request is in as well), treats what follows as requests: `/admin`
/// gets the secret. Later connections serve `OK`.
async fn refusing_slow_upstream() -> (std::net::SocketAddr, fake::Received) {
    let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    upstream(move |mut c| {
        let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            if !first {
                return serve_ok(c).await;
            }
            c.read_head().await;
            c.write(EXPECT_FAILED).await;
            let mut answered = 1;
            while c.read_head().await {
                let heads = fake::occurrences(&c.buf, b"\r\n\r\n");
                // The hidden request is answered only when the next one came too: the
                // slow upstream that lets the proxy forward it first.
                if heads < 3 {
                    continue;
                }
                while answered < heads {
                    let admin = answered == 1 && c.buf.windows(10).any(|w| w == b"GET /admin");
                    c.write(if admin { ADMIN } else { OK }).await;
                    answered += 1;
                }
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expect_body_sent_with_its_head_never_reaches_an_upstream_that_refused_it() {
    let (up, received) = refusing_slow_upstream().await;
    let p = proxy(up).await;
    let head = expect_head(HIDDEN);
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[&head, HIDDEN, NEXT].concat()).await.unwrap();
    let got = read_n(&mut s, EXPECT_FAILED.len() + OK.len()).await;
    assert_eq!(
        got,
        [EXPECT_FAILED, OK].concat(),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    p.capture.wait_exchanges(2).await;
    let all = received.all();
    assert_eq!(
        all[0], head,
        "the body never went to the upstream that refused it"
    );
    assert_eq!(all.get(1).map(Vec::as_slice), Some(NEXT), "{all:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expect_body_sent_with_its_head_goes_after_the_100_continue() {
    let body = b"hello";
    let head = expect_head(body);
    let want = [head.as_slice(), body].concat();
    let (up, received) = upstream(move |mut c| {
        let len = want.len();
        async move {
            c.read_head().await;
            let early = c.buf.len();
            c.write(CONTINUE).await;
            c.read_at_least(len).await;
            // What came before the 100 is reported in the answer.
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{:02}",
                early % 100
            );
            c.write(answer.as_bytes()).await;
            serve_ok(c).await;
        }
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[&head, &body[..]].concat()).await.unwrap();
    let got = read_n(&mut s, CONTINUE.len() + OK.len()).await;
    let before_100 = head.len() % 100;
    let want_answer = format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{before_100:02}");
    assert_eq!(
        String::from_utf8_lossy(&got),
        format!("{}{want_answer}", String::from_utf8_lossy(CONTINUE)),
        "only the head before the 100, the body after it"
    );
    assert_eq!(received.all()[0], [head.as_slice(), body].concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expect_body_goes_after_the_wait_when_the_upstream_says_nothing() {
    let body = b"hello";
    let head = expect_head(body);
    let len = head.len() + body.len();
    let (up, received) = upstream(move |mut c| async move {
        c.read_at_least(len).await;
        c.write(OK).await;
        serve_ok(c).await;
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[&head, &body[..]].concat()).await.unwrap();
    assert_eq!(read_n(&mut s, OK.len()).await, OK);
    assert_eq!(received.all()[0], [head.as_slice(), body].concat());
    assert!(p.capture.errors().is_empty(), "{:?}", p.capture.errors());
}

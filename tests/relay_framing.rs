//! Framing cases against scripted in-process upstreams: what the client receives is what
//! the upstream sent, and what the upstream receives is what the client sent, byte for
//! byte, for each way a body can be delimited.

mod fake;

use std::time::Duration;

use fake::{exchange, proxy, read_n, read_to_close, upstream, UpConn};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Serves `responses` in order, one per request head received.
async fn respond_in_order(mut c: UpConn, responses: Vec<&'static [u8]>) {
    for r in responses {
        if !c.read_head().await {
            return;
        }
        c.write(r).await;
    }
    let _ = c.read_at_least(usize::MAX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_both_ways_is_byte_exact() {
    const RESP: &[u8] =
        b"HTTP/1.1 201 Created\r\nx-Odd-Case:  two  spaces\r\ncontent-length: 5\r\n\r\nhello";
    let (up, received) = upstream(|mut c| async move {
        c.read_until(b"0123456789", 1).await;
        c.write(RESP).await;
        let _ = c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy(up).await;
    let req = b"POST /x?y=1 HTTP/1.1\r\nHOST: a\r\nX-Weird:\tvalue \r\nContent-Length: 10\r\n\r\n0123456789";
    let got = exchange(p.addr, req, RESP.len()).await;
    assert_eq!(got, RESP);
    let ex = p.capture.wait_exchanges(1).await;
    assert_eq!(received.all(), vec![req.to_vec()]);
    assert_eq!(ex[0].status, 201);
    assert_eq!(ex[0].request_bytes, req.len() as u64);
    assert_eq!(ex[0].response_bytes, RESP.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_request_with_extensions_and_trailers_and_chunked_response() {
    const RESP: &[u8] =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nT: v\r\n\r\n";
    let (up, received) = upstream(|mut c| async move {
        c.read_until(b"\r\n\r\n", 2).await;
        c.write(&RESP[..20]).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.write(&RESP[20..]).await;
        let _ = c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy(up).await;
    let head = b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let body = b"4;a=\"b c\"\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n".to_vec();
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // The body in three pieces, so the proxy frames it across reads.
    s.write_all(&head).await.unwrap();
    s.write_all(&body[..7]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    s.write_all(&body[7..30]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    s.write_all(&body[30..]).await.unwrap();
    let got = read_n(&mut s, RESP.len()).await;
    assert_eq!(got, RESP);
    p.capture.wait_exchanges(1).await;
    assert_eq!(received.all(), vec![[head, body].concat()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_delimited_response_ends_with_the_connection() {
    const RESP: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end";
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(RESP).await;
        // Dropping the stream closes it: that ends the body.
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_to_close(&mut s).await, RESP);
    let ex = p.capture.wait_exchanges(1).await;
    assert_eq!(ex[0].status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodiless_responses_head_204_304_keep_the_connection_in_step() {
    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
    const NO_CONTENT: &[u8] = b"HTTP/1.1 204 No Content\r\n\r\n";
    const NOT_MODIFIED: &[u8] =
        b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 7\r\n\r\n";
    const AFTER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    // A HEAD answer that announces a length ends its upstream connection's reuse
    // (docs/security.md: late bytes after a HEAD), so the later requests come on a new
    // one: the responses are taken in order across connections.
    let queue = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from(
        vec![HEAD, NO_CONTENT, NOT_MODIFIED, AFTER],
    )));
    let (up, _) = upstream(move |mut c| {
        let queue = queue.clone();
        async move {
            while c.read_head().await {
                let Some(r) = queue.lock().unwrap().pop_front() else {
                    return;
                };
                c.write(r).await;
            }
        }
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let mut expect = Vec::new();
    for (req, resp) in [
        (&b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n"[..], HEAD),
        (b"DELETE /k HTTP/1.1\r\nHost: a\r\n\r\n", NO_CONTENT),
        (
            b"GET /e HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\"\r\n\r\n",
            NOT_MODIFIED,
        ),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", AFTER),
    ] {
        s.write_all(req).await.unwrap();
        let got = read_n(&mut s, resp.len()).await;
        assert_eq!(got, resp);
        expect.push(resp);
    }
    let ex = p.capture.wait_exchanges(4).await;
    let statuses: Vec<u16> = ex.iter().map(|e| e.status).collect();
    assert_eq!(statuses, vec![200, 204, 304, 200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_relays_the_interim_response() {
    const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
    const FINAL: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let (up, received) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(CONTINUE).await;
        c.read_until(b"BODY!", 1).await;
        c.write(FINAL).await;
        let _ = c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy(up).await;
    let head = b"PUT /k HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(head).await.unwrap();
    // The body is sent only after the 100 arrived, as a careful client does.
    assert_eq!(read_n(&mut s, CONTINUE.len()).await, CONTINUE);
    s.write_all(b"BODY!").await.unwrap();
    assert_eq!(read_n(&mut s, FINAL.len()).await, FINAL);
    let ex = p.capture.wait_exchanges(1).await;
    assert_eq!(ex[0].status, 200);
    assert_eq!(received.all()[0], [&head[..], b"BODY!"].concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_closes_unless_keep_alive_is_asked() {
    const RESP10: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
    const RESP10_KA: &[u8] =
        b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok";
    // Without Keep-Alive: the response, then the close.
    let (up, _) = upstream(|c| respond_in_order(c, vec![RESP10])).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    assert_eq!(read_to_close(&mut s).await, RESP10);

    // With Keep-Alive (what `ab -k` sends): two requests on one connection.
    let (up, received) = upstream(|c| respond_in_order(c, vec![RESP10_KA, RESP10_KA])).await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    for _ in 0..2 {
        s.write_all(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_n(&mut s, RESP10_KA.len()).await, RESP10_KA);
    }
    assert_eq!(received.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_go_upstream_one_at_a_time() {
    const RESP: [&[u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n3",
    ];
    let (up, received) = upstream(|mut c| async move {
        for (i, r) in RESP.iter().enumerate() {
            c.read_head().await;
            // Before answering request i, nothing of request i+1 may have arrived.
            tokio::time::sleep(Duration::from_millis(30)).await;
            c.read_at_least(0).await;
            let heads = fake::occurrences(&c.buf, b"\r\n\r\n");
            if heads != i + 1 {
                c.write(b"HTTP/1.1 500 Pipelined\r\nContent-Length: 0\r\n\r\n")
                    .await;
                return;
            }
            c.write(r).await;
        }
        let _ = c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy(up).await;
    let reqs = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n";
    let want: Vec<u8> = RESP.concat();
    let got = exchange(p.addr, reqs, want.len()).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    assert_eq!(received.all(), vec![reqs.to_vec()]);
    let ex = p.capture.wait_exchanges(3).await;
    // The 2nd and 3rd heads were complete while the 1st was in flight: they queued.
    for e in &ex[1..] {
        let q = e
            .phases
            .get(phasescope::phase::Phase::Queue)
            .expect("queue phase");
        assert!(q >= 20_000_000, "queued {q} ns behind a 30 ms exchange");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_ending_chunked_stream_arrives_chunk_by_chunk() {
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await;
        for i in 0..50 {
            c.write(format!("7\r\nmsg {i:03}\r\n").as_bytes()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /SUBSCRIBE/c HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let head_len = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".len();
    let first = read_n(&mut s, head_len + 12).await;
    assert!(
        first.ends_with(b"7\r\nmsg 000\r\n"),
        "{:?}",
        String::from_utf8_lossy(&first)
    );
    // The second message follows ~100 ms later, long before the stream would end.
    let second = tokio::time::timeout(Duration::from_secs(2), read_n(&mut s, 12))
        .await
        .unwrap();
    assert_eq!(second, b"7\r\nmsg 001\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_turns_into_a_byte_tunnel() {
    const SWITCH: &[u8] =
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(SWITCH).await;
        c.write(b"server-first").await;
        // Echo whatever the client sends, uppercased, framing-free.
        let start = c.buf.len();
        c.read_at_least(start + 5).await;
        let echoed = c.buf[start..start + 5].to_ascii_uppercase();
        c.write(&echoed).await;
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    )
    .await
    .unwrap();
    let got = read_n(&mut s, SWITCH.len() + 12).await;
    assert_eq!(got, [SWITCH, b"server-first"].concat());
    s.write_all(b"hello").await.unwrap();
    assert_eq!(read_n(&mut s, 5).await, b"HELLO");
    let ex = p.capture.wait_exchanges(1).await;
    assert_eq!(ex[0].status, 101);
}

//! A deadline on every wait: stalls after the response head, a client that stops reading,
//! an upstream that stops reading the request body, connections that never send a byte,
//! and an upstream that never accepts (502 at the connect timeout). Timeouts are set
//! small (300 ms) and each test asserts the close came after the timeout and well before
//! any other deadline could have ended it.

mod fake;

use std::time::{Duration, Instant};

use fake::{proxy_with, read_n, read_until_close_within, upstream};
use phasescope::recorder::ErrorKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const TRANSFER: Duration = Duration::from_millis(300);
/// Every other deadline is far away, so only the one under test can end the exchange.
const FAR: Duration = Duration::from_secs(30);

fn tune(t: &mut phasescope::config::TapConfig) {
    t.timeouts.transfer = TRANSFER;
    t.timeouts.response = FAR;
    t.timeouts.idle = FAR;
    t.timeouts.head = FAR;
}

/// Never before the timeout, which no load can bring forward; the 3 s of slack only has to
/// stay below the `FAR` deadlines (30 s), the one other way the exchange could end.
fn assert_in_window(elapsed: Duration, timeout: Duration) {
    assert!(
        elapsed >= timeout,
        "closed after {elapsed:?}, before {timeout:?}"
    );
    assert!(
        elapsed < timeout + Duration::from_secs(3),
        "closed after {elapsed:?}, long after {timeout:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_stalling_after_the_head_is_cut_at_the_transfer_timeout() {
    const PART: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst ten.";
    let (closed_tx, mut closed_rx) = mpsc::unbounded_channel();
    let (up, received) = upstream(move |mut c| {
        let closed_tx = closed_tx.clone();
        async move {
            c.read_head().await;
            c.write(PART).await;
            // Then nothing, until the proxy closes.
            c.read_at_least(usize::MAX).await;
            let _ = closed_tx.send(Instant::now());
        }
    })
    .await;
    let p = proxy_with(up, tune).await;
    let req = b"GET /stall HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let got = read_n(&mut s, PART.len()).await;
    let last_byte = Instant::now();
    assert_eq!(got, PART);
    let (rest, closed) = read_until_close_within(&mut s, TRANSFER * 10).await;
    assert!(closed, "still open {:?} after the last byte", TRANSFER * 10);
    assert!(rest.is_empty(), "no second response after a partial one");
    // 20 ms less: the proxy's clock started at its own read of the part, before the
    // client's read of it returned.
    assert_in_window(last_byte.elapsed(), TRANSFER - Duration::from_millis(20));
    // The upstream side was closed too.
    let up_closed = tokio::time::timeout(Duration::from_secs(3), closed_rx.recv()).await;
    assert!(
        matches!(up_closed, Ok(Some(_))),
        "the upstream connection stayed open"
    );
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamTimeout]
    );
    // Recorded with what was measured: the status and the bytes that went through.
    let ex = p.capture.wait_exchanges(1).await;
    assert_eq!(ex[0].status, 200);
    assert_eq!(ex[0].request_bytes, req.len() as u64);
    assert_eq!(ex[0].response_bytes, PART.len() as u64);
    assert_eq!(received.all(), vec![req.to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_at_the_transfer_timeout() {
    let (failed_tx, mut failed_rx) = mpsc::unbounded_channel();
    let (up, _) = upstream(move |mut c| {
        let failed_tx = failed_tx.clone();
        async move {
            c.read_head().await;
            // A body far larger than the socket buffers between here and the client.
            let total: usize = 1 << 30;
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n");
            c.write(head.as_bytes()).await;
            let chunk = vec![b'x'; 1 << 16];
            let mut sent = 0;
            while sent < total {
                if c.stream.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            let _ = failed_tx.send((Instant::now(), sent));
        }
    })
    .await;
    let p = proxy_with(up, tune).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    // The client reads nothing. The proxy stops moving bytes once the buffers are full,
    // and cuts both sides a transfer timeout later: the upstream's writes fail.
    let failed = tokio::time::timeout(Duration::from_secs(10), failed_rx.recv())
        .await
        .expect("the upstream was never cut off")
        .unwrap();
    assert!(failed.1 < (1 << 30), "the whole body went through");
    assert_in_window(failed.0 - start, TRANSFER);
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::ClientTimeout]
    );
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_the_body_gets_504_at_the_transfer_timeout() {
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        // Reads nothing more, and answers nothing.
        tokio::time::sleep(Duration::from_secs(20)).await;
    })
    .await;
    let p = proxy_with(up, tune).await;
    let s = TcpStream::connect(p.addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let total: usize = 1 << 30;
    let head = format!("PUT /big HTTP/1.1\r\nHost: a\r\nContent-Length: {total}\r\n\r\n");
    wr.write_all(head.as_bytes()).await.unwrap();
    let writer = tokio::spawn(async move {
        let chunk = vec![b'y'; 1 << 16];
        let mut sent = 0;
        while sent < total && wr.write_all(&chunk).await.is_ok() {
            sent += chunk.len();
        }
        sent
    });
    let start = Instant::now();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), rd.read_to_end(&mut got)).await;
    let elapsed = start.elapsed();
    assert!(
        got.starts_with(b"HTTP/1.1 504 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert_in_window(elapsed, TRANSFER);
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamTimeout]
    );
    assert!(writer.await.unwrap() < total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalling_in_its_body_gets_408_at_the_transfer_timeout() {
    let (up, received) = upstream(|mut c| async move {
        c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy_with(up, tune).await;
    let sent = b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhalf";
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(sent).await.unwrap();
    let start = Instant::now();
    let (got, closed) = read_until_close_within(&mut s, TRANSFER * 10).await;
    assert!(closed);
    assert!(
        got.starts_with(b"HTTP/1.1 408 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // 20 ms less: the proxy's clock started at its read of the half body, which may come
    // before the client's `start`.
    assert_in_window(start.elapsed(), TRANSFER - Duration::from_millis(20));
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::ClientTimeout]
    );
    for _ in 0..100 {
        if received.total_bytes() == sent.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(received.all(), vec![sent.to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_sends_a_byte_is_closed_at_the_head_timeout() {
    const HEAD: Duration = Duration::from_millis(300);
    let (up, received) = upstream(|mut c| async move {
        c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy_with(up, |t| {
        t.timeouts.head = HEAD;
        t.timeouts.idle = FAR;
        t.timeouts.transfer = FAR;
    })
    .await;
    let start = Instant::now();
    let mut silent: Vec<TcpStream> = Vec::new();
    for _ in 0..20 {
        silent.push(TcpStream::connect(p.addr).await.unwrap());
    }
    for s in &mut silent {
        let (got, closed) = read_until_close_within(s, HEAD * 10).await;
        assert!(closed, "a silent connection stayed past the head timeout");
        assert!(got.is_empty(), "no answer to a request that never began");
    }
    assert_in_window(start.elapsed(), HEAD);
    assert_eq!(
        p.capture.wait_errors(20).await,
        vec![ErrorKind::ClientTimeout; 20]
    );
    assert_eq!(received.connections(), 0);

    // A keep-alive connection between requests is idle, not held to the head timeout.
    let (up, _) = upstream(|mut c| async move {
        while c.read_head().await {
            c.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
        }
    })
    .await;
    let p = proxy_with(up, |t| {
        t.timeouts.head = HEAD;
        t.timeouts.idle = FAR;
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_n(&mut s, 40).await.len(), 40);
    let (_, closed) = read_until_close_within(&mut s, HEAD * 3).await;
    assert!(
        !closed,
        "an idle keep-alive connection was closed at the head timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_accepts_gets_502_at_the_connect_timeout() {
    let (hole, _listener, _fill) = fake::black_hole();
    let p = proxy_with(hole, |t| {
        tune(t);
        t.timeouts.transfer = FAR;
        t.timeouts.connect = TRANSFER;
    })
    .await;
    let mut c = TcpStream::connect(p.addr).await.unwrap();
    let started = Instant::now();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let (got, closed) = read_until_close_within(&mut c, FAR).await;
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(closed, "{text}");
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    assert_in_window(elapsed, TRANSFER);
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamConnect]
    );
}

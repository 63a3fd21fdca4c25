//! RESP taps honour `[tap.timeouts]`: a silent client is closed at `idle`, a half-sent
//! command at `head`, a command whose reply never comes gets an error at `response`.
//! Against a scripted upstream, with small timeouts; each test asserts the close came
//! after its timeout and long before any other.

mod fake;

use std::time::{Duration, Instant};

use fake::{proxy_with, upstream};
use phasescope::config::{Protocol, TapConfig};
use phasescope::recorder::ErrorKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SHORT: Duration = Duration::from_millis(300);
const FAR: Duration = Duration::from_secs(30);

fn resp(t: &mut TapConfig) {
    t.protocol = Protocol::Resp;
    t.timeouts.idle = FAR;
    t.timeouts.head = FAR;
    t.timeouts.response = FAR;
    t.timeouts.transfer = FAR;
}

async fn read_until_close_within(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&chunk[..n]),
            Err(_) => return (out, false),
        }
    }
}

fn assert_in_window(elapsed: Duration) {
    assert!(
        elapsed >= SHORT - Duration::from_millis(20),
        "after {elapsed:?}"
    );
    assert!(
        elapsed < SHORT + Duration::from_secs(3),
        "after {elapsed:?}"
    );
}

/// An upstream that reads commands and answers none of them.
async fn mute_upstream() -> (std::net::SocketAddr, fake::Received) {
    upstream(|mut c| async move {
        c.read_at_least(usize::MAX).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_resp_client_is_closed_at_the_idle_timeout() {
    let (up, received) = mute_upstream().await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.idle = SHORT;
    })
    .await;
    let start = Instant::now();
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let (got, closed) = read_until_close_within(&mut s, SHORT * 10).await;
    assert!(
        closed,
        "a silent RESP client was kept past the idle timeout"
    );
    assert!(got.is_empty());
    assert_in_window(start.elapsed());
    assert!(
        p.capture.errors().is_empty(),
        "an idle close is nobody's fault"
    );
    assert_eq!(received.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_command_is_closed_at_the_head_timeout() {
    let (up, received) = mute_upstream().await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.head = SHORT;
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1").await.unwrap();
    let start = Instant::now();
    let (got, closed) = read_until_close_within(&mut s, SHORT * 10).await;
    assert!(closed, "a half-sent command was held past the head timeout");
    assert!(got.is_empty());
    assert_in_window(start.elapsed());
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::ClientTimeout]
    );
    // An incomplete command is never forwarded.
    assert_eq!(received.total_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_never_comes_gets_an_error_at_the_response_timeout() {
    let (up, received) = mute_upstream().await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.response = SHORT;
    })
    .await;
    let cmd = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(cmd).await.unwrap();
    let start = Instant::now();
    let (got, closed) = read_until_close_within(&mut s, SHORT * 10).await;
    assert!(
        closed,
        "a command without a reply was held past the response timeout"
    );
    assert_eq!(got, b"-ERR phasescope: upstream timed out\r\n");
    assert_in_window(start.elapsed());
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamTimeout]
    );
    assert_eq!(received.all(), vec![cmd.to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_commands_are_not_cut() {
    // Replies come: the connection lives on past every short timeout between commands,
    // as long as it is not idle for `idle`.
    let (up, _) = upstream(|mut c| async move {
        let mut n = 0;
        while c.read_until(b"PING", n + 1).await {
            n += 1;
            c.write(b"+PONG\r\n").await;
        }
    })
    .await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.response = SHORT;
        t.timeouts.head = SHORT;
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    for _ in 0..3 {
        s.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"+PONG\r\n");
        tokio::time::sleep(SHORT * 2).await;
    }
    let (_, closed) = read_until_close_within(&mut s, SHORT).await;
    assert!(!closed);
    assert!(p.capture.errors().is_empty(), "{:?}", p.capture.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_waits_for_messages_past_the_idle_timeout() {
    const CONFIRM: &[u8] = b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n";
    let (up, _) = upstream(|mut c| async move {
        c.read_until(b"SUBSCRIBE", 1).await;
        c.write(CONFIRM).await;
        c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.idle = SHORT;
        t.timeouts.response = SHORT;
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; CONFIRM.len()];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf, CONFIRM);
    // Redis's own `timeout` spares subscribers too: messages may be hours apart.
    let (_, closed) = read_until_close_within(&mut s, SHORT * 4).await;
    assert!(!closed, "a subscriber was closed at the idle timeout");
    assert!(p.capture.errors().is_empty(), "{:?}", p.capture.errors());
}

//! RESP taps honour `[tap.timeouts]`: a silent client is closed at `idle`, a half-sent
//! command at `head`, a command whose reply never comes gets an error at `response` (a
//! reply that stalls midway is cut then), a client or an upstream that stops reading is
//! closed at `transfer`; an upstream that cannot be connected (refused, or never accepting
//! until `connect`) gets the client an error.
//! Against a scripted upstream, with small timeouts; each test asserts the close came
//! after its timeout and long before any other.

mod fake;

use std::time::{Duration, Instant};

use fake::{black_hole, proxy_with, read_until_close_within, upstream};
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

/// Never before the timeout (20 ms less: the proxy's clock may start at its read, before
/// the client's `start` after its write), which no load can bring forward; the 3 s of
/// slack only has to stay below the `FAR` deadlines (30 s).
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_stalls_midway_is_cut_at_the_response_timeout() {
    // Part of the reply is out: no error line can follow it cleanly, so only the close.
    const PART: &[u8] = b"$10\r\nhello";
    let (up, _) = upstream(|mut c| async move {
        c.read_until(b"GET", 1).await;
        c.write(PART).await;
        c.read_at_least(usize::MAX).await;
    })
    .await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.response = SHORT;
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let (got, closed) = read_until_close_within(&mut s, SHORT * 10).await;
    assert!(closed, "a stalled reply was held past the response timeout");
    assert_eq!(got, PART);
    assert_in_window(start.elapsed());
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamTimeout]
    );
    assert!(p.capture.exchanges().is_empty(), "an unfinished reply");
}

/// Bytes that fill every socket buffer on the way (client, proxy, upstream) many times.
const HUGE: usize = 32 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_at_the_transfer_timeout() {
    let (up, _) = upstream(|mut c| async move {
        c.read_until(b"GET", 1).await;
        let mut reply = format!("${HUGE}\r\n").into_bytes();
        reply.resize(reply.len() + HUGE, b'x');
        reply.extend_from_slice(b"\r\n");
        // Blocks once the proxy stops reading; fails once it closes.
        let _ = c.stream.write_all(&reply).await;
    })
    .await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.transfer = SHORT;
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let start = Instant::now();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .await
        .unwrap();
    // The client reads nothing until the proxy has given up on it.
    let errors = tokio::time::timeout(SHORT * 10, p.capture.wait_errors(1))
        .await
        .expect("the stalled client was kept past the transfer timeout");
    assert_in_window(start.elapsed());
    assert_eq!(errors, vec![ErrorKind::ClientTimeout]);
    let (got, closed) = read_until_close_within(&mut s, SHORT * 10).await;
    assert!(closed);
    assert!(
        got.len() < HUGE,
        "the whole reply went through: {}",
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_is_dropped_at_the_transfer_timeout() {
    // The upstream accepts and never reads: a command larger than every buffer stalls
    // on its way up.
    let (up, _) = upstream(|c| async move {
        tokio::time::sleep(FAR).await;
        drop(c);
    })
    .await;
    let p = proxy_with(up, |t| {
        resp(t);
        t.timeouts.transfer = SHORT;
    })
    .await;
    let s = TcpStream::connect(p.addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let mut cmd = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${HUGE}\r\n").into_bytes();
    cmd.resize(cmd.len() + HUGE, b'x');
    cmd.extend_from_slice(b"\r\n");
    let start = Instant::now();
    // Blocks once every buffer is full; fails once the proxy closes.
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&cmd).await;
    });
    let errors = tokio::time::timeout(SHORT * 10, p.capture.wait_errors(1))
        .await
        .expect("the stalled upstream was waited for past the transfer timeout");
    assert_in_window(start.elapsed());
    assert_eq!(errors, vec![ErrorKind::UpstreamTimeout]);
    let mut sink = Vec::new();
    let read = tokio::time::timeout(SHORT * 10, rd.read_to_end(&mut sink)).await;
    assert!(read.is_ok(), "the client's connection stayed open");
    assert!(sink.is_empty(), "no reply was made up: {sink:?}");
    writer.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_gets_an_error_line_and_the_close() {
    // A port nothing listens on any more: the connect is refused.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let p = proxy_with(gone, resp).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .await
        .unwrap();
    let (got, closed) = read_until_close_within(&mut s, SHORT * 10).await;
    assert!(closed);
    assert_eq!(
        got,
        b"-ERR phasescope: upstream unreachable: connection refused (nothing listens on its address)\r\n"
    );
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamConnect]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_accepts_times_out_at_connect() {
    let (hole, _listener, _fill) = black_hole();
    let p = proxy_with(hole, |t| {
        resp(t);
        t.timeouts.connect = SHORT;
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let started = Instant::now();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .await
        .unwrap();
    let (got, closed) = read_until_close_within(&mut s, SHORT * 10).await;
    let took = started.elapsed();
    assert!(closed, "still open after {took:?}");
    assert_eq!(
        got,
        b"-ERR phasescope: upstream unreachable: the connect timed out\r\n"
    );
    assert!(
        took >= SHORT,
        "gave up after {took:?}, before the connect timeout"
    );
    assert_eq!(
        p.capture.wait_errors(1).await,
        vec![ErrorKind::UpstreamConnect]
    );
}

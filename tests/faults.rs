//! Faults: peers that refuse, vanish, stall, or crawl; limits reached; the process out of
//! file descriptors. Each test states the behaviour the proxy promises and checks that no
//! connection is left behind (every `Event::ConnectionOpened` has its
//! `Event::ConnectionClosed`).

mod fake;
#[path = "fake/faults.rs"]
mod fake_faults;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake::{read_n, upstream, UpConn};
use fake_faults::counting_proxy;
use phasescope::recorder::{ErrorKind, Side};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

fn status_of(resp: &[u8]) -> Option<u16> {
    std::str::from_utf8(resp.get(9..12)?).ok()?.parse().ok()
}

/// Reads until the peer closes or resets; panics after ten seconds (a hang).
async fn read_until_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 16384];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&chunk[..n]),
            Err(_) => panic!(
                "the connection was not closed; got {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
}

/// Serves every request head with OK, for as long as the connection lives.
async fn serve_ok(mut c: UpConn) {
    while c.read_head().await {
        c.write(OK).await;
    }
}

async fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_refuses_gets_502() {
    let p = counting_proxy(free_port().await, |_| {}).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    let resp = read_until_close(&mut s).await;
    assert_eq!(status_of(&resp), Some(502));
    assert_eq!(p.rec.wait_errors(1).await, vec![ErrorKind::UpstreamConnect]);
    assert_eq!(p.rec.wait_all_closed().await, (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_accepts_then_closes_gets_502() {
    let (up, received) = upstream(|mut c| async move {
        c.read_head().await;
    })
    .await;
    let p = counting_proxy(up, |_| {}).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    let resp = read_until_close(&mut s).await;
    assert_eq!(status_of(&resp), Some(502));
    assert_eq!(p.rec.wait_errors(1).await, vec![ErrorKind::UpstreamReset]);
    assert_eq!(received.all(), vec![GET.to_vec()]);
    assert_eq!(p.rec.wait_all_closed().await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_reset_mid_body_closes_the_client_without_a_second_answer() {
    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n0123456789";
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        c.write(HEAD).await;
        // Wait until the proxy forwarded it (the client asks for more by reading), then
        // reset: SO_LINGER 0 makes the close an RST.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = socket2::SockRef::from(&c.stream).set_linger(Some(Duration::ZERO));
    })
    .await;
    let p = counting_proxy(up, |_| {}).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    let got = read_until_close(&mut s).await;
    assert_eq!(got, HEAD, "the client gets what was sent, then the close");
    assert_eq!(p.rec.wait_errors(1).await, vec![ErrorKind::UpstreamReset]);
    assert_eq!(p.rec.wait_all_closed().await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upstream_gets_504_at_the_response_timeout() {
    let (up, _) = upstream(|mut c| async move {
        c.read_head().await;
        // Holds the connection open and says nothing until the proxy gives up.
        c.read_at_least(usize::MAX).await;
    })
    .await;
    let timeout = Duration::from_millis(400);
    let p = counting_proxy(up, |t| t.timeouts.response = timeout).await;
    let started = Instant::now();
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    let resp = read_until_close(&mut s).await;
    assert_eq!(status_of(&resp), Some(504));
    // Never before the timeout: no load brings a timer forward.
    assert!(started.elapsed() >= timeout, "504 before the timeout");
    assert_eq!(p.rec.wait_errors(1).await, vec![ErrorKind::UpstreamTimeout]);
    assert_eq!(p.rec.wait_all_closed().await, (1, 1));
}

/// An upstream that reports, on `eof`, how many bytes it had read when its connection
/// closed under it.
async fn upstream_watching_for_eof() -> (SocketAddr, mpsc::UnboundedReceiver<usize>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (up, _) = upstream(move |mut c| {
        let tx = tx.clone();
        async move {
            let n = c.read_at_least(usize::MAX).await;
            let _ = tx.send(n);
        }
    })
    .await;
    (up, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_request_body_closes_the_upstream_side() {
    let (up, mut eof) = upstream_watching_for_eof().await;
    let p = counting_proxy(up, |_| {}).await;
    let head = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n";
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(head).await.unwrap();
    s.write_all(&[b'x'; 1000]).await.unwrap();
    // Let the proxy forward what it has, then vanish.
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(s);
    let seen = tokio::time::timeout(Duration::from_secs(5), eof.recv())
        .await
        .expect("the upstream side was not closed")
        .unwrap();
    assert_eq!(seen, head.len() + 1000, "the upstream got what was sent");
    assert_eq!(p.rec.wait_errors(1).await, vec![ErrorKind::ClientAbort]);
    assert_eq!(p.rec.wait_all_closed().await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_response_closes_the_upstream_side() {
    // An endless chunked response (as Webdis SUBSCRIBE sends); the upstream reports when
    // its writes fail, which happens only once the proxy closed its side.
    let (tx, mut closed) = mpsc::unbounded_channel::<()>();
    let (up, _) = upstream(move |mut c| {
        let tx = tx.clone();
        async move {
            c.read_head().await;
            c.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await;
            loop {
                if c.stream.write_all(b"5\r\nhello\r\n").await.is_err() {
                    let _ = tx.send(());
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    })
    .await;
    let p = counting_proxy(up, |_| {}).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    let first = read_n(&mut s, 100).await;
    assert!(first.starts_with(b"HTTP/1.1 200 OK"));
    drop(s);
    tokio::time::timeout(Duration::from_secs(5), closed.recv())
        .await
        .expect("the upstream side was not closed");
    assert_eq!(p.rec.wait_errors(1).await, vec![ErrorKind::ClientAbort]);
    assert_eq!(p.rec.wait_all_closed().await, (1, 1));
}

/// A client that closes after its whole request while the upstream is still working on
/// it: the proxy waits for the answer and closes the upstream connection only then. A
/// server that writes a late answer to a descriptor it has reused meanwhile (Webdis 0.1.9)
/// would otherwise hand it to the next connection. The FIN after a whole request reads as
/// a client done sending (docs/phases.md), so the answer is written to it and the exchange
/// recorded, with no error: a closed socket and one shut for writing look alike then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_while_the_upstream_works_is_let_finish_before_the_upstream_closes() {
    // The upstream answers 100 ms after the head, and says whether the proxy had already
    // closed its side by then, and whether it closes after the answer.
    let (tx, mut seen) = mpsc::unbounded_channel::<(bool, bool)>();
    let (up, _) = upstream(move |mut c| {
        let tx = tx.clone();
        async move {
            c.read_head().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut probe = [0u8; 1];
            let closed_before = matches!(c.stream.try_read(&mut probe), Ok(0));
            let _ = c.stream.write_all(OK).await;
            let closed_after = matches!(
                tokio::time::timeout(Duration::from_secs(5), c.stream.read(&mut probe)).await,
                Ok(Ok(0) | Err(_))
            );
            let _ = tx.send((closed_before, closed_after));
        }
    })
    .await;
    let p = counting_proxy(up, |_| {}).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(s);
    let (closed_before, closed_after) = tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .expect("the upstream never answered")
        .unwrap();
    assert!(
        !closed_before,
        "the proxy closed the upstream before it answered"
    );
    assert!(
        closed_after,
        "the proxy kept the upstream open after the answer"
    );
    assert_eq!(p.rec.wait_all_closed().await, (1, 1));
    assert_eq!(*p.rec.statuses.lock().unwrap(), vec![200]);
    assert_eq!(p.rec.errors(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_gets_408_while_a_normal_client_is_served() {
    const CRAWLERS: usize = 200;
    let head_timeout = Duration::from_secs(1);
    let (up, received) = upstream(serve_ok).await;
    let p = counting_proxy(up, |t| t.timeouts.head = head_timeout).await;

    // Each crawler sends one byte every 100 ms of a head that never ends, and records
    // when its answer came and what it was.
    let first_answer: Arc<Mutex<Option<Instant>>> = Arc::default();
    let mut crawlers = Vec::new();
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    for _ in 0..CRAWLERS {
        // The head timeout of a connection's first request runs from the accept.
        let began = Instant::now();
        let s = TcpStream::connect(p.addr).await.unwrap();
        let first_answer = first_answer.clone();
        let started_tx = started_tx.clone();
        crawlers.push(tokio::spawn(async move {
            let (mut r, mut w) = s.into_split();
            let writer = tokio::spawn(async move {
                let head = b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ";
                for (i, b) in head.iter().chain(std::iter::repeat(&b'a')).enumerate() {
                    if w.write_all(&[*b]).await.is_err() {
                        return;
                    }
                    if i == 0 {
                        let _ = started_tx.send(());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            let mut resp = Vec::new();
            let _ = r.read_to_end(&mut resp).await;
            let at = Instant::now();
            first_answer.lock().unwrap().get_or_insert(at);
            writer.abort();
            (status_of(&resp), at - began)
        }));
    }
    drop(started_tx);
    for _ in 0..CRAWLERS {
        started.recv().await.unwrap();
    }

    // Meanwhile a normal client: requests on a kept-alive connection and on new ones.
    let mut kept = TcpStream::connect(p.addr).await.unwrap();
    for _ in 0..5 {
        kept.write_all(GET).await.unwrap();
        assert_eq!(read_n(&mut kept, OK.len()).await, OK);
        let mut fresh = TcpStream::connect(p.addr).await.unwrap();
        fresh.write_all(GET).await.unwrap();
        assert_eq!(read_n(&mut fresh, OK.len()).await, OK);
    }
    let normal_done = Instant::now();
    drop(kept);

    for c in crawlers {
        let (status, after) = c.await.unwrap();
        assert_eq!(status, Some(408));
        // From before the connect, so never under the head timeout, loaded or not.
        assert!(after >= head_timeout, "408 after {after:?}");
    }
    let first = first_answer.lock().unwrap().unwrap();
    // An order of events, not a duration: the first 408 comes no sooner than the 1 s head
    // timeout, and the normal client's ten exchanges take milliseconds of it.
    assert!(
        normal_done < first,
        "the normal client finished only after the crawlers were cut off"
    );
    let errors = p.rec.wait_errors(CRAWLERS).await;
    assert_eq!(errors, vec![ErrorKind::ClientTimeout; CRAWLERS]);
    // The upstream saw the normal client's requests only.
    assert_eq!(received.connections(), 6);
    assert_eq!(p.rec.wait_all_closed().await, (CRAWLERS + 6, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_a_new_client_waits_and_established_ones_carry_on() {
    let (up, received) = upstream(serve_ok).await;
    let p = counting_proxy(up, |t| t.limits.max_connections = 5).await;
    let mut five = Vec::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(GET).await.unwrap();
        assert_eq!(read_n(&mut s, OK.len()).await, OK);
        five.push(s);
    }
    // The sixth connects (the kernel's backlog completes the handshake) but is not
    // served while the five stay open.
    let mut sixth = TcpStream::connect(p.addr).await.unwrap();
    sixth.write_all(GET).await.unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), sixth.read(&mut buf)).await;
    assert!(early.is_err(), "the sixth client was served: {early:?}");
    assert_eq!(p.rec.open(Side::Client), 5);
    // The five are unaffected.
    for s in &mut five {
        s.write_all(GET).await.unwrap();
        assert_eq!(read_n(s, OK.len()).await, OK);
    }
    assert_eq!(received.connections(), 5);
    // One leaves: the sixth is served.
    drop(five.remove(0));
    assert_eq!(read_n(&mut sixth, OK.len()).await, OK);
    assert_eq!(received.connections(), 6);
    drop(five);
    drop(sixth);
    assert_eq!(p.rec.wait_all_closed().await, (6, 6));
}

/// CPU time (user + system, in clock ticks) the process has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// The real binary, run with 48 file descriptors: past that, accept fails with EMFILE.
/// The accept loop must back off instead of spinning, keep the established connections,
/// and recover once descriptors are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_accept_loop_backs_off_and_recovers() {
    let (up, _) = upstream(serve_ok).await;
    let listen = free_port().await;
    let admin = free_port().await;
    let dir = std::env::temp_dir();
    let mut child = tokio::process::Command::new("prlimit")
        .arg("--nofile=48:48")
        .arg(env!("CARGO_BIN_EXE_phasescope"))
        .args(["run", "--listen", &listen.to_string()])
        .args(["--upstream", &up.to_string(), "--admin", &admin.to_string()])
        .current_dir(&dir)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("prlimit (util-linux) runs the binary");
    let pid = child.id().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = stderr.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    });

    // Wait until it listens, then check it serves.
    let mut ready = None;
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(listen).await {
            ready = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut first = ready.expect("the binary did not start listening");
    first.write_all(GET).await.unwrap();
    assert_eq!(read_n(&mut first, OK.len()).await, OK);

    // Idle clients until the process is out of descriptors (more than it can have).
    let mut idle = Vec::new();
    for _ in 0..80 {
        idle.push(TcpStream::connect(listen).await.unwrap());
    }
    // Let the accept loop hit EMFILE, then measure its CPU use for a second.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = cpu_ticks(pid);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = cpu_ticks(pid) - before;
    let wall = t0.elapsed().as_secs_f64();
    let cpu_share = used as f64 / clock_ticks_per_second() as f64 / wall;
    // CPU the process used, over the wall second: other work can only lower it, so the
    // bound fails for an accept loop that spins, never for a busy machine.
    assert!(
        cpu_share < 0.5,
        "the accept loop spins: {cpu_share:.2} of a core while out of descriptors"
    );

    // The established connection still works.
    first.write_all(GET).await.unwrap();
    assert_eq!(read_n(&mut first, OK.len()).await, OK);

    // Descriptors come back: a new client is served.
    drop(idle);
    let mut served = false;
    for _ in 0..50 {
        let mut s = TcpStream::connect(listen).await.unwrap();
        if s.write_all(GET).await.is_ok() {
            let mut buf = vec![0u8; OK.len()];
            if let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut buf)).await
            {
                if buf == OK {
                    served = true;
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "no client was served after descriptors were freed");

    child.start_kill().unwrap();
    let _ = child.wait().await;
    let log = log.await.unwrap();
    assert!(
        log.contains("accept failed for lack of resources"),
        "EMFILE was never hit; the log was:\n{log}"
    );
    // More than a second out of descriptors, a failure every 100 ms: one warning line
    // (at most one per 10 s), not one per failure.
    let warnings = log
        .lines()
        .filter(|l| l.contains("accept failed for lack of resources"))
        .count();
    assert!(
        warnings <= 2,
        "{warnings} warnings in about a second out of descriptors:\n{log}"
    );
}

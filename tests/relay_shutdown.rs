//! Graceful shutdown: stop accepting, let in-flight exchanges finish, close idle ones.

mod fake;

use std::time::Duration;

use fake::{proxy_draining, read_n, read_to_close, upstream};
use phasescope::config::Protocol;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_exchanges_finish_and_idle_connections_close() {
    let (up, _) = upstream(|mut c| async move {
        while c.read_head().await {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.write(OK).await;
        }
    })
    .await;
    let (p, running) =
        proxy_draining(up, Duration::from_secs(5), |t| t.protocol = Protocol::Http).await;
    let (addr, capture) = (p.addr, p.capture.clone());

    // One idle keep-alive connection (one exchange done), one with a request in flight.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_n(&mut idle, OK.len()).await, OK);
    let mut busy = TcpStream::connect(addr).await.unwrap();
    busy.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    p.stop.send(true).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // While the busy exchange drains, new clients are refused.
    assert!(TcpStream::connect(addr).await.is_err());
    // The in-flight exchange completes, then its connection closes.
    assert_eq!(read_to_close(&mut busy).await, OK);
    // The idle one is closed without an answer.
    assert_eq!(read_to_close(&mut idle).await, b"");
    tokio::time::timeout(Duration::from_secs(3), running)
        .await
        .expect("the tap stops once its connections are done")
        .unwrap();
    assert_eq!(capture.exchanges().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_commands_in_flight_finish_and_idle_resp_connections_close() {
    let (up, _) = upstream(|mut c| async move {
        let mut n = 0;
        while c.read_until(b"PING", n + 1).await {
            n += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.write(b"+PONG\r\n").await;
        }
    })
    .await;
    let (p, running) =
        proxy_draining(up, Duration::from_secs(5), |t| t.protocol = Protocol::Resp).await;
    let (addr, capture) = (p.addr, p.capture.clone());

    const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
    // One idle connection (one command answered), one with a command in flight.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(PING).await.unwrap();
    assert_eq!(read_n(&mut idle, 7).await, b"+PONG\r\n");
    let mut busy = TcpStream::connect(addr).await.unwrap();
    busy.write_all(PING).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    p.stop.send(true).unwrap();
    // The idle one is closed at once, without a byte: long before the busy reply, which
    // the upstream holds 300 ms (250 ms from here); 200 ms is relative to that hold.
    let closed = tokio::time::timeout(Duration::from_millis(200), read_to_close(&mut idle))
        .await
        .expect("an idle RESP connection outlived the shutdown");
    assert_eq!(closed, b"");
    // The command in flight gets its reply, then its connection closes.
    assert_eq!(read_to_close(&mut busy).await, b"+PONG\r\n");
    tokio::time::timeout(Duration::from_secs(3), running)
        .await
        .expect("the tap stops once its connections are done")
        .unwrap();
    assert_eq!(capture.exchanges().len(), 2);
    assert!(capture.errors().is_empty(), "{:?}", capture.errors());
}

//! Timing ground truth: upstreams and clients that wait known times, and the phase
//! invariants of docs/phases.md. Margins are generous where the scheduler adds noise;
//! the invariants that are exact by construction are checked tightly.

mod fake;

use std::time::Duration;

use fake::{proxy, read_n, upstream};
use phasescope::phase::Phase;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
const MS: u64 = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_wait_measures_a_known_backend_delay() {
    // The upstream waits 20 ms before answering and notes how long it really held the
    // request (a loaded machine oversleeps): that is the ground truth to match.
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let held_up = held.clone();
    let (up, _) = upstream(move |mut c| {
        let held = held_up.clone();
        async move {
            while c.read_head().await {
                let got = std::time::Instant::now();
                tokio::time::sleep(Duration::from_millis(20)).await;
                held.lock().unwrap().push(got.elapsed().as_nanos() as u64);
                c.write(OK).await;
            }
        }
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // The client's own round trip of each request, measured at the same time: the
    // proxy's wait lies inside it.
    let mut round_trips = Vec::new();
    for _ in 0..5 {
        let sent = std::time::Instant::now();
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_n(&mut s, OK.len()).await, OK);
        round_trips.push(sent.elapsed().as_nanos() as u64);
    }
    let ex = p.capture.wait_exchanges(5).await;
    let held = held.lock().unwrap().clone();
    for ((e, truth), round_trip) in ex.iter().zip(&held).zip(&round_trips) {
        let wait = e.phases.get(Phase::UpstreamWait).unwrap();
        let send = e.phases.get(Phase::UpstreamSend).unwrap();
        assert!(*truth >= 20 * MS);
        // The proxy's wait also covers the loopback hops on either side of the upstream's
        // own time, and it lies within the client's round trip (the proxy sends after the
        // client did, and reads before the client can). On a busy machine the hops take
        // what the scheduler gives them: no fixed margin. `t_sent` is read when the write
        // call returns, and a proxy thread descheduled between the two lets the upstream
        // begin before it: what holds the upstream's whole time under any load is the span
        // from before the first byte was written (`upstream_send + upstream_wait`).
        assert!(
            send + wait >= *truth && wait <= *round_trip,
            "upstream_send {send} ns + upstream_wait {wait} ns for an upstream that held the request {truth} ns, the client's round trip {round_trip} ns"
        );
        assert!(wait < e.phases.get(Phase::Total).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_sent_in_two_parts_counts_as_client_time_not_parse_time() {
    let (up, _) = upstream(|mut c| async move {
        while c.read_head().await {
            c.write(OK).await;
        }
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // client_recv starts when the proxy's read of the first part returns; on a loaded
    // machine that read can come late, shortening what the proxy could see of the gap.
    // So the gap is repeated, and the longest measurement must cover it.
    for _ in 0..3 {
        s.write_all(b"GET /split HTTP/1.1\r\nHo").await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        s.write_all(b"st: a\r\n\r\n").await.unwrap();
        assert_eq!(read_n(&mut s, OK.len()).await, OK);
    }
    let ex = p.capture.wait_exchanges(3).await;
    let longest = ex
        .iter()
        .map(|e| e.phases.get(Phase::ClientRecv).unwrap())
        .max()
        .unwrap();
    assert!(
        longest >= 30 * MS,
        "client_recv at most {longest} ns for a 30 ms gap"
    );
    for e in &ex {
        let recv = e.phases.get(Phase::ClientRecv).unwrap();
        let parse = e.phases.get(Phase::Parse).unwrap();
        // Relative to the 30 ms gap it must leave out: parsing a head is microseconds of
        // CPU, so 1 ms is reached only if the gap leaked in (or the parse was preempted).
        assert!(
            parse < MS,
            "parse {parse} ns: parsing must not include the wait"
        );
        assert!(parse > 0 && parse <= recv);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_phases_add_up_to_total_for_small_responses() {
    let (up, _) = upstream(|mut c| async move {
        while c.read_head().await {
            tokio::time::sleep(Duration::from_millis(1)).await;
            c.write(OK).await;
        }
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    for _ in 0..30 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_n(&mut s, OK.len()).await, OK);
    }
    let ex = p.capture.wait_exchanges(30).await;
    for (i, e) in ex.iter().enumerate() {
        let ph = &e.phases;
        let waited = ph
            .get(Phase::UpstreamConnect)
            .or(ph.get(Phase::Queue))
            .unwrap_or(0);
        assert_eq!(
            ph.get(Phase::UpstreamConnect).is_some(),
            i == 0,
            "connect only on the first"
        );
        let sum = ph.get(Phase::ClientRecv).unwrap()
            + waited
            + ph.get(Phase::UpstreamSend).unwrap()
            + ph.get(Phase::UpstreamWait).unwrap()
            + ph.get(Phase::ProxyOverhead).unwrap()
            + ph.get(Phase::Write).unwrap();
        let total = ph.get(Phase::Total).unwrap();
        // Exact by construction (docs/phases.md): 5 µs is clock conversion rounding, which
        // no load moves.
        assert!(
            sum.abs_diff(total) <= 5_000,
            "exchange {i}: phases sum to {sum} ns, total {total} ns"
        );
        for (phase, ns) in ph.iter() {
            assert!(
                ns <= total || phase == Phase::Total,
                "{phase} {ns} > total {total}"
            );
        }
        // The upstream's own 1 ms sleep, which a timer never cuts short, lies between the
        // first byte written and the first byte back (`t_sent` is read after the write
        // returns, so a descheduled proxy moves part of the sleep into `upstream_send`).
        let (send, wait) = (
            ph.get(Phase::UpstreamSend).unwrap(),
            ph.get(Phase::UpstreamWait).unwrap(),
        );
        assert!(
            send + wait >= MS,
            "exchange {i}: upstream_send {send} ns + upstream_wait {wait} ns for a 1 ms sleep"
        );
    }
}

/// A response written in two pieces 30 ms apart (as a server without `TCP_NODELAY` ends
/// up sending one) has `upstream_recv_gap`, the pause between its reads, inside
/// `upstream_recv`; a response written in one piece has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pause_between_two_pieces_of_a_response_is_its_recv_gap() {
    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let held_up = held.clone();
    let (up, _) = upstream(move |mut c| {
        let held = held_up.clone();
        async move {
            let mut n = 0;
            while c.read_head().await {
                n += 1;
                if n % 2 == 0 {
                    c.write(OK).await;
                    continue;
                }
                c.write(HEAD).await;
                let start = std::time::Instant::now();
                tokio::time::sleep(Duration::from_millis(30)).await;
                held.lock().unwrap().push(start.elapsed().as_nanos() as u64);
                c.write(b"ok").await;
            }
        }
    })
    .await;
    let p = proxy(up).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    for _ in 0..6 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_n(&mut s, OK.len()).await, OK);
    }
    let ex = p.capture.wait_exchanges(6).await;
    let held = held.lock().unwrap().clone();
    for (i, e) in ex.iter().enumerate() {
        let gap = e.phases.get(Phase::UpstreamRecvGap);
        if i % 2 == 1 {
            assert_eq!(gap, None, "exchange {i}: a response read in one piece");
            continue;
        }
        let (gap, recv) = (gap.unwrap(), e.phases.get(Phase::UpstreamRecv).unwrap());
        let truth = held[i / 2];
        // Exact by construction: the pause lies between two reads of the response. Its
        // length is the upstream's own pause, give or take how late each read returned:
        // the bound is half the pause the upstream measured, so the first read may return
        // up to 15 ms later than the second.
        assert!(
            gap <= recv,
            "exchange {i}: gap {gap} ns > upstream_recv {recv} ns"
        );
        assert!(
            gap >= truth / 2,
            "exchange {i}: gap {gap} ns for an upstream that paused {truth} ns"
        );
    }
}

//! The RESP tap in front of a real Redis: transparent bytes, commands paired with their
//! replies (pipelined too), pub/sub passing through, and measured waits.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{require_tool, resp_command, resp_encode, Proxy, RedisServer};

fn resp_tap(redis: &RedisServer) -> Proxy {
    Proxy::in_front_of(redis.addr(), &["--protocol", "resp"])
}

/// The access log's lines, waiting until at least `n` are there.
fn access_lines(proxy: &Proxy, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(proxy.access_log()).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `bytes` on one connection and reads until `want` bytes came back.
fn converse(addr: std::net::SocketAddr, bytes: &[u8], want: usize) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = vec![0; want];
    s.read_exact(&mut out).unwrap();
    out
}

#[test]
fn pipelined_commands_come_back_byte_for_byte_and_pair_in_order() {
    let redis = RedisServer::start();
    let proxy = resp_tap(&redis);
    let script: Vec<u8> = [
        resp_encode(&["DEL", "k", "n"]),
        resp_encode(&["SET", "k", "v"]),
        resp_encode(&["GET", "k"]),
        resp_encode(&["INCR", "n"]),
        b"PING\r\n".to_vec(),
        resp_encode(&["LRANGE", "nolist", "0", "-1"]),
        resp_encode(&["NOSUCHCOMMAND"]),
    ]
    .concat();
    let direct = {
        let expect = b":0\r\n+OK\r\n$1\r\nv\r\n:1\r\n+PONG\r\n*0\r\n";
        let mut all = converse(redis.addr(), &script, expect.len());
        // The error line's text is Redis's own; read it whole.
        let mut s = TcpStream::connect(redis.addr()).unwrap();
        s.write_all(&resp_encode(&["NOSUCHCOMMAND"])).unwrap();
        let mut line = Vec::new();
        BufReader::new(s).read_until(b'\n', &mut line).unwrap();
        all.extend_from_slice(&line);
        all
    };
    // Reset state so that the proxied run sees what the direct run saw.
    redis.command(&["DEL", "k", "n"]);
    let through = converse(proxy.addr(), &script, direct.len());
    assert_eq!(
        String::from_utf8_lossy(&through),
        String::from_utf8_lossy(&direct)
    );

    let lines = access_lines(&proxy, 7);
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["DEL", "SET", "GET", "INCR", "PING", "LRANGE", "other"]
    );
    for l in &lines {
        let p = &l["phases_us"];
        assert!(p["total"].as_f64().unwrap() >= p["upstream_wait"].as_f64().unwrap());
    }
}

#[test]
fn redis_benchmark_counts_every_command() {
    let redis = RedisServer::start();
    let proxy = resp_tap(&redis);
    let bench = require_tool("redis-benchmark");
    let out = Command::new(bench)
        .args(["-h", "127.0.0.1", "-p", &proxy.listen_port().to_string()])
        .args(["-n", "20000", "-P", "16", "-q", "-t", "set,get,incr"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redis-benchmark failed: {text}");
    for cmd in ["SET", "GET", "INCR"] {
        assert!(
            text.contains(&format!("{cmd}: ")),
            "no {cmd} result in {text}"
        );
    }
    let lines = access_lines(&proxy, 60_000);
    for cmd in ["SET", "GET", "INCR"] {
        let n = lines.iter().filter(|l| l["method"] == cmd).count();
        assert_eq!(n, 20_000, "{cmd} exchanges recorded");
    }
}

/// One command on `conn` and its whole reply.
fn exchange_on(conn: &mut TcpStream, args: &[&str]) -> Vec<u8> {
    conn.write_all(&resp_encode(args)).unwrap();
    let mut reply = Vec::new();
    let mut chunk = [0u8; 512];
    while support::resp_frame_len(&reply).is_none() {
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&chunk[..n]);
    }
    reply
}

#[test]
fn a_known_server_delay_shows_as_upstream_wait() {
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let proxy = resp_tap(&redis);
    let mut seen_by_client = Vec::new();
    for _ in 0..3 {
        // Redis sleeps 20 ms before answering (blocking timeouts are too coarse for this:
        // they fire on Redis's 100 ms cron). The client's clock stops at the PING's reply
        // on the same connection, not at DEBUG's: the relay stamps a reply written right
        // after its write, before it reads the next command, so however late a loaded
        // machine runs it, DEBUG's exchange ends before the PONG leaves. (Stopped at
        // DEBUG's reply, the client once read 22.5 ms of an exchange the relay, descheduled
        // after its write, stamped at 25.5 ms.)
        let started = Instant::now();
        let mut conn = TcpStream::connect(proxy.addr()).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let reply = exchange_on(&mut conn, &["DEBUG", "SLEEP", "0.02"]);
        assert_eq!(reply, b"+OK\r\n");
        assert_eq!(exchange_on(&mut conn, &["PING"]), b"+PONG\r\n");
        seen_by_client.push(started.elapsed().as_secs_f64() * 1e6);
    }
    // Three DEBUGs and three PINGs.
    let lines = access_lines(&proxy, 6);
    let debug: Vec<&Value> = lines.iter().filter(|l| l["method"] == "DEBUG").collect();
    assert_eq!(debug.len(), 3);
    // Sequential commands: the access log's order is theirs. The exchange took at least
    // the sleep and no more than the client saw from connecting to the reply, and the
    // sleep shows as upstream_wait, by far the largest phase. (Not upstream_wait >= 20 ms
    // itself: a relay descheduled between its write and its clock read starts the wait
    // late on a busy machine.)
    for (line, client) in debug.iter().zip(&seen_by_client) {
        let phases = line["phases_us"].as_object().unwrap();
        let phase = |p: &str| phases.get(p).and_then(Value::as_f64).unwrap_or(0.0);
        let (total, wait) = (phase("total"), phase("upstream_wait"));
        assert!(
            total >= 20_000.0 && total <= *client,
            "DEBUG SLEEP 0.02 took {total} µs; the client saw {client} µs"
        );
        for (name, v) in phases {
            if name != "total" && name != "upstream_wait" {
                assert!(
                    v.as_f64().unwrap_or(0.0) < wait,
                    "{name} {v} µs is not below upstream_wait {wait} µs: {phases:?}"
                );
            }
        }
    }
}

#[test]
fn subscribe_through_the_tap_receives_a_publish_and_nothing_is_mispaired() {
    let redis = RedisServer::start();
    let proxy = resp_tap(&redis);
    let cli = require_tool("redis-cli");
    let mut sub = Command::new(cli)
        .args(["-p", &proxy.listen_port().to_string(), "SUBSCRIBE", "news"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(sub.stdout.take().unwrap());
    let mut seen = String::new();
    // The confirmation arrives first ("subscribe", "news", 1).
    while !seen.contains("news") {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "redis-cli ended: {seen}"
        );
        seen.push_str(&line);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            if line.contains("hello-subscriber") {
                let _ = tx.send(());
                return;
            }
            line.clear();
        }
    });
    loop {
        let receivers = resp_command(proxy.addr(), &["PUBLISH", "news", "hello-subscriber"]);
        assert_eq!(receivers, b":1\r\n");
        if rx.recv_timeout(Duration::from_millis(200)).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the message never reached the subscriber"
        );
    }
    let _ = sub.kill();
    let _ = sub.wait();
    // Every PUBLISH on the other connection was paired with its own reply.
    // The PUBLISH lines are written a moment after their replies: wait for one.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !access_lines(&proxy, 1)
        .iter()
        .any(|l| l["method"] == "PUBLISH")
    {
        assert!(
            Instant::now() < deadline,
            "no PUBLISH exchange was recorded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn malformed_commands_get_a_resp_error_and_the_connection_closes() {
    let redis = RedisServer::start();
    let proxy = resp_tap(&redis);
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$x\r\n").unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("-ERR Protocol error"), "{reply:?}");
}

/// `phasescope_bytes_total` of the RESP tap, (request, response), from `/metrics`.
fn bytes_total(proxy: &Proxy) -> (u64, u64) {
    let text = proxy.admin_get("/metrics").body_text();
    let mut out = (0, 0);
    for line in text
        .lines()
        .filter(|l| l.starts_with("phasescope_bytes_total{"))
    {
        let n: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("not a sample: {line}")) as u64;
        if line.contains("direction=\"request\"") {
            out.0 += n;
        } else if line.contains("direction=\"response\"") {
            out.1 += n;
        }
    }
    out
}

/// The client connections the tap has open, from `/metrics`.
fn clients_open(proxy: &Proxy) -> Option<u64> {
    let text = proxy.admin_get("/metrics").body_text();
    text.lines()
        .find(|l| l.starts_with("phasescope_connections{") && l.contains("side=\"client\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|n| n as u64)
}

#[test]
fn bytes_total_counts_what_the_client_sent_and_received_both_ways() {
    let redis = RedisServer::start();
    let proxy = resp_tap(&redis);
    let script: Vec<u8> = [
        resp_encode(&["SET", "k", "v"]),
        resp_encode(&["GET", "k"]),
        b"PING\r\n".to_vec(),
    ]
    .concat();
    let reply = b"+OK\r\n$1\r\nv\r\n+PONG\r\n";
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&script).unwrap();
    let mut got = vec![0; reply.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, reply);
    // Counted while the connection stays open, as a pooled client's (Webdis's) does.
    let want = (script.len() as u64, reply.len() as u64);
    let counted = support::wait_for(Duration::from_secs(10), || bytes_total(&proxy) == want);
    assert!(
        counted,
        "client sent {} and received {} bytes; /metrics counts {:?}",
        want.0,
        want.1,
        bytes_total(&proxy)
    );
    // Closing adds nothing more: no byte is counted twice.
    drop(s);
    let closed = support::wait_for(Duration::from_secs(10), || clients_open(&proxy) == Some(0));
    assert!(closed, "{}", proxy.log_tail());
    assert_eq!(bytes_total(&proxy), want);
}

/// A script's reply nested 41 and 101 levels deep (the scanner keeps 32 levels inline):
/// the client gets it byte for byte as directly, and the commands after it on the same
/// connection are still recorded. Before, such a reply counted `bad_response` and nothing
/// more was recorded on that connection.
#[test]
fn a_reply_nested_deeper_than_the_inline_stack_is_framed_and_recording_goes_on() {
    let redis = RedisServer::start();
    let proxy = resp_tap(&redis);
    for levels in [40, 100] {
        let script = format!("local t = {{1}} for i = 1, {levels} do t = {{t}} end return t");
        let mut bytes = resp_encode(&["EVAL", &script, "0"]);
        bytes.extend_from_slice(&resp_encode(&["PING"]));
        let direct = redis.command(&["EVAL", &script, "0"]);
        assert!(direct.starts_with(&b"*1\r\n".repeat(levels)), "{levels}");
        let want = direct.len() + b"+PONG\r\n".len();
        let got = converse(proxy.addr(), &bytes, want);
        assert_eq!(&got[..direct.len()], &direct[..], "{levels} levels");
        assert_eq!(&got[direct.len()..], b"+PONG\r\n");
    }
    let lines = access_lines(&proxy, 4);
    // Sorted: the second connection's EVAL may be recorded before the first one's PING
    // (the client has the PONG as soon as the proxy's write returns, and the two
    // connections may be on two workers).
    let mut methods: Vec<&str> = lines.iter().filter_map(|l| l["method"].as_str()).collect();
    methods.sort_unstable();
    assert_eq!(methods, ["EVAL", "EVAL", "PING", "PING"], "{lines:?}");
    let metrics = proxy.admin_get("/metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines()
            .any(|l| l.contains("kind=\"bad_response\"") && l.ends_with(" 0")),
        "{text}"
    );
}

/// An unauthenticated client that announces a bulk or a multibulk Redis refuses before
/// reading it (`requirepass`): the announcement reaches Redis at once and the client gets
/// Redis's own error, as directly. Before, the tap held the command until it was whole,
/// and the client saw only a reset at the command timeout.
#[test]
fn an_announcement_redis_refuses_at_once_reaches_it_and_its_error_the_client() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let proxy = resp_tap(&redis);
    for announced in [
        &b"*2\r\n$3\r\nGET\r\n$400000000\r\n"[..],
        b"*2147483647\r\n",
    ] {
        let answer = |addr| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(announced).unwrap();
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            got
        };
        let direct = answer(redis.addr());
        assert!(direct.starts_with(b"-ERR Protocol error: unauthenticated"));
        assert_eq!(
            String::from_utf8_lossy(&answer(proxy.addr())),
            String::from_utf8_lossy(&direct)
        );
    }
}

/// What a client that announces a huge bulk and sends its bytes on reads back: the
/// writer streams up to 32 MiB while the reader reads until the close (or a reset).
fn streamed_bulk_answer(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        if w.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$400000000\r\n")
            .is_err()
        {
            return;
        }
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..512 {
            if w.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    drop(s);
    let _ = writer.join();
    got
}

/// The same announcement with the bulk's bytes streaming behind it: Redis answers its
/// error and closes while the bytes still come, so the tap's next write upstream fails.
/// Before, that failure ended the connection at once and the client saw only the close;
/// now what Redis sent before closing is relayed first.
#[test]
fn an_unauthenticated_huge_bulk_still_streaming_gets_redis_error_line() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let proxy = resp_tap(&redis);
    let direct = streamed_bulk_answer(redis.addr());
    let want = b"-ERR Protocol error: unauthenticated bulk length\r\n";
    assert!(
        direct.starts_with(want),
        "{:?}",
        String::from_utf8_lossy(&direct)
    );
    for _ in 0..3 {
        let through = streamed_bulk_answer(proxy.addr());
        assert_eq!(
            String::from_utf8_lossy(&through),
            String::from_utf8_lossy(&direct)
        );
    }
    // The tap is still serving.
    assert!(resp_command(proxy.addr(), &["PING"]).starts_with(b"-NOAUTH"));
}

//! RESP3 pushes and blocking commands through the RESP tap, against a real Redis
//! (docs/security.md, "third round"): a RESP3 subscriber is kept as Redis keeps it, every
//! command of a pipeline with pushes in it is paired with its own reply, and a blocking
//! command waits for its own timeout (or, at 0, for as long as the client stays) rather
//! than the tap's response timeout. Mode tracking follows what Redis did, not what was
//! asked: a shard subscription keeps a client in pub/sub after its plain channels are gone,
//! and a MULTI-queued SUBSCRIBE, CLIENT REPLY OFF or MONITOR, or a MONITOR an ACL refuses,
//! switches nothing.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{find, resp_command, resp_encode, Proxy, RedisServer};

/// The tap's response and idle timeouts: each test waits past them.
const SHORT: &str = "1s";
const PAST_SHORT: Duration = Duration::from_millis(2500);

/// A RESP tap in front of `redis` whose response and idle timeouts are [`SHORT`].
fn short_tap(redis: &RedisServer, dir: &std::path::Path) -> Proxy {
    let config = dir.join("resp.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[tap]]
name = "redis"
protocol = "resp"
listen = "127.0.0.1:0"
upstream = "{}"

[tap.timeouts]
response = "{SHORT}"
idle = "{SHORT}"
"#,
            redis.addr()
        ),
    )
    .unwrap();
    Proxy::start(&["--config", config.to_str().unwrap()])
}

/// Reads from `s` until `done` says the bytes are complete, or `limit` passes; returns
/// the bytes and whether the peer closed.
fn read_until(s: &mut TcpStream, limit: Duration, done: impl Fn(&[u8]) -> bool) -> (Vec<u8>, bool) {
    let end = Instant::now() + limit;
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    while !done(&out) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (out, false);
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (out, false)
            }
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

fn methods(proxy: &Proxy, method: &str, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(proxy.access_log()).unwrap_or_default();
        let n = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["method"] == method)
            .count();
        if n >= want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const CONFIRM3: &[u8] = b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n";

#[test]
fn a_resp3_subscriber_from_one_write_is_kept_past_the_response_and_idle_timeouts() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = short_tap(&redis, dir.path());
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    let hello_and_subscribe = [
        resp_encode(&["HELLO", "3"]),
        resp_encode(&["SUBSCRIBE", "c"]),
    ]
    .concat();
    s.write_all(&hello_and_subscribe).unwrap();
    let (got, closed) = read_until(&mut s, Duration::from_secs(5), |b| {
        find(b, CONFIRM3).is_some()
    });
    assert!(
        !closed && find(&got, CONFIRM3).is_some(),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // Past both timeouts the subscriber is still there, as Redis keeps it.
    let (late, closed) = read_until(&mut s, PAST_SHORT, |b| !b.is_empty());
    assert!(
        !closed && late.is_empty(),
        "the subscriber got {:?} (closed: {closed})",
        String::from_utf8_lossy(&late)
    );
    assert_eq!(
        resp_command(proxy.addr(), &["PUBLISH", "c", "hi"]),
        b":1\r\n"
    );
    let message = b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n";
    let (got, _) = read_until(&mut s, Duration::from_secs(5), |b| {
        find(b, message).is_some()
    });
    assert_eq!(got, message, "{:?}", String::from_utf8_lossy(&got));
    assert_eq!(
        methods(&proxy, "SUBSCRIBE", 1),
        1,
        "the SUBSCRIBE is paired with its confirmation"
    );
}

#[test]
fn a_pipeline_with_pushes_pairs_every_command_with_its_own_reply() {
    const PINGS: usize = 1000;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = short_tap(&redis, dir.path());
    let mut script = [
        resp_encode(&["HELLO", "3"]),
        resp_encode(&["SUBSCRIBE", "c"]),
    ]
    .concat();
    for _ in 0..PINGS {
        script.extend_from_slice(&resp_encode(&["PING"]));
    }
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.write_all(&script).unwrap();
    let (got, closed) = read_until(&mut s, Duration::from_secs(10), |b| {
        count(b, b"+PONG\r\n") == PINGS
    });
    assert!(
        !closed,
        "closed after {:?}",
        String::from_utf8_lossy(&got[got.len().saturating_sub(200)..])
    );
    assert_eq!(count(&got, b"+PONG\r\n"), PINGS);
    assert_eq!(
        methods(&proxy, "PING", PINGS),
        PINGS,
        "every PING is recorded once"
    );
    assert_eq!(methods(&proxy, "SUBSCRIBE", 1), 1);
    // A message after the pipeline is a push, paired with nothing, and the connection stays.
    assert_eq!(
        resp_command(proxy.addr(), &["PUBLISH", "c", "after"]),
        b":1\r\n"
    );
    let (late, closed) = read_until(&mut s, PAST_SHORT, |b| find(b, b"after").is_some());
    assert!(
        !closed && find(&late, b"after").is_some(),
        "{:?}",
        String::from_utf8_lossy(&late)
    );
    assert_eq!(methods(&proxy, "PING", PINGS), PINGS);
}

#[test]
fn a_blocking_command_waits_for_its_own_timeout_not_the_response_timeout() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = short_tap(&redis, dir.path());
    let direct = {
        let mut s = TcpStream::connect(redis.addr()).unwrap();
        s.write_all(&resp_encode(&["BLPOP", "q", "2"])).unwrap();
        read_until(&mut s, Duration::from_secs(10), |b| b.ends_with(b"\r\n")).0
    };
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.write_all(&resp_encode(&["BLPOP", "q", "2"])).unwrap();
    let (got, _) = read_until(&mut s, Duration::from_secs(10), |b| b.ends_with(b"\r\n"));
    assert_eq!(got, direct, "{:?}", String::from_utf8_lossy(&got));
    assert_eq!(got, b"*-1\r\n");
}

#[test]
fn a_blocking_command_with_timeout_0_waits_as_long_as_the_client_and_gets_its_element() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = short_tap(&redis, dir.path());
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.write_all(&resp_encode(&["BLPOP", "q", "0"])).unwrap();
    let (early, closed) = read_until(&mut s, PAST_SHORT, |b| !b.is_empty());
    assert!(
        !closed && early.is_empty(),
        "cut before an element came: {:?}",
        String::from_utf8_lossy(&early)
    );
    assert_eq!(redis.command(&["LPUSH", "q", "x"]), b":1\r\n");
    let popped = b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n";
    let (got, _) = read_until(&mut s, Duration::from_secs(5), |b| b.len() >= popped.len());
    assert_eq!(got, popped, "{:?}", String::from_utf8_lossy(&got));
    assert_eq!(
        redis.command(&["LLEN", "q"]),
        b":0\r\n",
        "the element went to the client"
    );
    assert_eq!(methods(&proxy, "BLPOP", 1), 1);
}

/// `SUBSCRIBE c`, `SSUBSCRIBE s`, `UNSUBSCRIBE c` in one write: Redis answers
/// `unsubscribe c :0` (its count leaves shard channels out) and the client is still
/// subscribed to `s`. It stays past the idle timeout and gets the later `SPUBLISH`.
#[test]
fn a_shard_subscriber_is_kept_when_its_plain_channels_are_gone() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = short_tap(&redis, dir.path());
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    let script = [
        resp_encode(&["SUBSCRIBE", "c"]),
        resp_encode(&["SSUBSCRIBE", "s"]),
        resp_encode(&["UNSUBSCRIBE", "c"]),
    ]
    .concat();
    s.write_all(&script).unwrap();
    let unsubscribed = b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n";
    let (got, closed) = read_until(&mut s, Duration::from_secs(5), |b| {
        find(b, unsubscribed).is_some()
    });
    assert!(!closed, "{:?}", String::from_utf8_lossy(&got));
    let (late, closed) = read_until(&mut s, PAST_SHORT, |b| !b.is_empty());
    assert!(
        !closed && late.is_empty(),
        "the shard subscriber got {:?} (closed: {closed})",
        String::from_utf8_lossy(&late)
    );
    assert_eq!(
        resp_command(proxy.addr(), &["SPUBLISH", "s", "hi"]),
        b":1\r\n"
    );
    let message = b"*3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$2\r\nhi\r\n";
    let (got, _) = read_until(&mut s, Duration::from_secs(5), |b| {
        find(b, message).is_some()
    });
    assert_eq!(got, message, "{:?}", String::from_utf8_lossy(&got));
}

/// Sends `prefix` and 20 GETs in one write, reads the 20 answers, and says how many GETs
/// the tap recorded in all so far (`before` + 20 when every one was paired).
fn gets_after(proxy: &Proxy, prefix: &[&[&str]], before: usize) -> usize {
    const GETS: usize = 20;
    let mut script: Vec<u8> = prefix.iter().flat_map(|c| resp_encode(c)).collect();
    for _ in 0..GETS {
        script.extend_from_slice(&resp_encode(&["GET", "nothing-here"]));
    }
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.write_all(&script).unwrap();
    let (got, closed) = read_until(&mut s, Duration::from_secs(10), |b| {
        count(b, b"$-1\r\n") == GETS
    });
    assert_eq!(
        count(&got, b"$-1\r\n"),
        GETS,
        "{prefix:?}: {:?} (closed: {closed})",
        String::from_utf8_lossy(&got)
    );
    methods(proxy, "GET", before + GETS)
}

#[test]
fn mode_switches_redis_never_carried_out_switch_nothing() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = short_tap(&redis, dir.path());
    let mut recorded = 0;
    for switch in [
        &["SUBSCRIBE", "ch"][..],
        &["CLIENT", "REPLY", "OFF"],
        &["MONITOR"],
    ] {
        let n = gets_after(&proxy, &[&["MULTI"], switch, &["DISCARD"]], recorded);
        assert_eq!(n, recorded + 20, "MULTI; {switch:?}; DISCARD");
        recorded = n;
    }
    // MONITOR refused by an ACL: Redis answers -NOPERM and goes on answering normally.
    assert_eq!(
        redis.command(&["ACL", "SETUSER", "default", "-monitor"]),
        b"+OK\r\n"
    );
    let n = gets_after(&proxy, &[&["MONITOR"]], recorded);
    assert_eq!(n, recorded + 20, "MONITOR refused by an ACL");
}

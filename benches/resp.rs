//! Cost of framing the messages a RESP tap sees most: a SET command, a GET reply, and a
//! pipelined batch of commands as redis-benchmark `-P 16` sends them.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use phasescope::recorder::Direction;
use phasescope::resp::{command, Scanner};

fn multibulk(words: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
        out.extend_from_slice(w);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Frames every message in `buf`, as the tap does with one read's worth of bytes.
fn frame_all(sc: &mut Scanner, buf: &[u8]) -> usize {
    let mut start = 0;
    let mut count = 0;
    while let Ok(Some(n)) = sc.scan(&buf[start..]) {
        start += n;
        count += 1;
    }
    count
}

fn bench(c: &mut Criterion) {
    // redis-benchmark's default: 3-byte values under keys like `key:000000000042`.
    let set = multibulk(&[b"SET", b"key:000000000042", b"xxx"]);
    let get_reply = b"$3\r\nxxx\r\n".to_vec();
    let pipeline: Vec<u8> = (0..16)
        .flat_map(|i| {
            let key = format!("key:{i:012}");
            if i % 2 == 0 {
                multibulk(&[b"SET", key.as_bytes(), b"xxx"])
            } else {
                multibulk(&[b"GET", key.as_bytes()])
            }
        })
        .collect();

    // A benchmark of a scanner that finds nothing would measure nothing.
    assert_eq!(
        frame_all(&mut Scanner::new(Direction::Request), &pipeline),
        16
    );
    assert_eq!(frame_all(&mut Scanner::new(Direction::Request), &set), 1);
    assert_eq!(
        frame_all(&mut Scanner::new(Direction::Response), &get_reply),
        1
    );

    let mut group = c.benchmark_group("resp");

    group.throughput(Throughput::Bytes(set.len() as u64));
    group.bench_function("scan SET command", |b| {
        let mut sc = Scanner::new(Direction::Request);
        b.iter(|| sc.scan(black_box(&set)))
    });
    group.bench_function("scan SET command + name lookup", |b| {
        let mut sc = Scanner::new(Direction::Request);
        b.iter(|| {
            let n = sc.scan(black_box(&set)).ok().flatten().unwrap_or(0);
            command(&set[..n]).ok().and_then(|c| c.known_name())
        })
    });

    group.throughput(Throughput::Bytes(get_reply.len() as u64));
    group.bench_function("scan GET reply", |b| {
        let mut sc = Scanner::new(Direction::Response);
        b.iter(|| sc.scan(black_box(&get_reply)))
    });

    group.throughput(Throughput::Bytes(pipeline.len() as u64));
    group.bench_function("scan pipeline of 16 commands", |b| {
        let mut sc = Scanner::new(Direction::Request);
        b.iter(|| frame_all(&mut sc, black_box(&pipeline)))
    });

    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

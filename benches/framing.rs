//! Cost of the HTTP framing the relay does on every exchange: finding the end of a request
//! head and parsing it, the same for a response head, and walking a chunked body.
//!
//! The heads are what the taps see in practice: wrk's bare GET, a browser-like GET with a
//! dozen fields, Webdis's JSON answer, and a chunked response in 1 KiB chunks.
//!
//! Run briefly: `cargo bench --bench framing -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use phasescope::http1::{
    request, response, BodyFramer, BodyKind, Method, RequestScanner, ResponseScanner,
};

const WRK_GET: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";
const BROWSER_GET: &[u8] = b"GET /GET/session:4f1c2a HTTP/1.1\r\n\
Host: webdis.example:7379\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Connection: keep-alive\r\n\
Cookie: theme=dark; session=4f1c2a9b8e7d6c5b4a39281706f5e4d3\r\n\
Upgrade-Insecure-Requests: 1\r\n\
Sec-Fetch-Dest: document\r\n\
Sec-Fetch-Mode: navigate\r\n\
Sec-Fetch-Site: none\r\n\
Priority: u=0, i\r\n\r\n";
const WEBDIS_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Server: Webdis\r\n\
Allow: GET,POST,PUT,OPTIONS\r\n\
Access-Control-Allow-Methods: GET,POST,PUT,OPTIONS\r\n\
Access-Control-Allow-Origin: *\r\n\
Access-Control-Allow-Headers: X-Requested-With, Content-Type, Authorization\r\n\
Content-Type: application/json\r\n\
ETag: \"8d777f385d3dfec8815d20f7496026dc\"\r\n\
Connection: Keep-Alive\r\n\
Content-Length: 18\r\n\r\n";

/// What the relay does with a request head that arrived whole: scan for its end, parse it.
fn request_head(head: &[u8]) -> usize {
    let mut scanner = RequestScanner::new();
    let len = match scanner.find_end(head) {
        Ok(Some(len)) => len,
        _ => return 0,
    };
    request::parse(&head[..len], 100).map_or(0, |h| h.len)
}

fn response_head(head: &[u8]) -> usize {
    let mut scanner = ResponseScanner::new();
    let len = match scanner.find_end(head) {
        Ok(Some(len)) => len,
        _ => return 0,
    };
    response::parse(&head[..len], Method::Get).map_or(0, |h| h.len)
}

/// A chunked body of `chunks` chunks of `size` bytes, with its last chunk.
fn chunked_body(chunks: usize, size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..chunks {
        out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
        out.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, size));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Frames `body` as it would arrive in reads of `read` bytes; returns the bytes framed.
fn frame_chunked(body: &[u8], read: usize) -> usize {
    let mut framer = BodyFramer::new(BodyKind::Chunked);
    let mut framed = 0;
    for piece in body.chunks(read) {
        match framer.advance(piece) {
            Ok(p) => {
                framed += p.consumed;
                if p.done {
                    break;
                }
            }
            Err(_) => return 0,
        }
    }
    framed
}

fn bench(c: &mut Criterion) {
    let chunked = chunked_body(64, 1024);
    // A benchmark of a framer that finds nothing would measure nothing.
    assert_eq!(request_head(WRK_GET), WRK_GET.len());
    assert_eq!(request_head(BROWSER_GET), BROWSER_GET.len());
    assert_eq!(response_head(WEBDIS_RESPONSE), WEBDIS_RESPONSE.len());
    assert_eq!(frame_chunked(&chunked, 16 * 1024), chunked.len());

    let mut group = c.benchmark_group("framing");
    for (name, head) in [("wrk GET", WRK_GET), ("browser GET", BROWSER_GET)] {
        group.throughput(Throughput::Bytes(head.len() as u64));
        group.bench_function(format!("request head: {name}"), |b| {
            b.iter(|| request_head(black_box(head)))
        });
    }
    group.throughput(Throughput::Bytes(WEBDIS_RESPONSE.len() as u64));
    group.bench_function("response head: Webdis", |b| {
        b.iter(|| response_head(black_box(WEBDIS_RESPONSE)))
    });
    // A slowloris-style head arriving one byte at a time: the scan resumes, so the cost
    // stays linear in the head's length.
    group.throughput(Throughput::Bytes(BROWSER_GET.len() as u64));
    group.bench_function("request head: browser GET, byte by byte", |b| {
        b.iter(|| {
            let mut scanner = RequestScanner::new();
            let head = black_box(BROWSER_GET);
            (1..=head.len()).find_map(|end| scanner.find_end(&head[..end]).ok().flatten())
        })
    });
    group.throughput(Throughput::Bytes(chunked.len() as u64));
    group.bench_function("chunked body: 64 x 1 KiB, 16 KiB reads", |b| {
        b.iter(|| frame_chunked(black_box(&chunked), 16 * 1024))
    });
    group.bench_function("chunked body: 64 x 1 KiB, 1 KiB reads", |b| {
        b.iter(|| frame_chunked(black_box(&chunked), 1024))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

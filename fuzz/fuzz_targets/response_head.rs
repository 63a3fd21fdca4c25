//! The response head scanner and parser: no panic, the same decision whole or in pieces
//! (a bare CR refused early in pieces is refused by the parser when whole),
//! never more lenient than httparse, no bare CR and no length of 2^63 or more let through.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phasescope::http1::{response, BodyKind, Method, ResponseScanner};

const METHODS: [Method; 4] = [Method::Get, Method::Head, Method::Connect, Method::Post];

fn decide(data: &[u8], step: usize) -> Result<Option<usize>, ()> {
    let mut s = ResponseScanner::new();
    let mut end = step.min(data.len());
    loop {
        match s.find_end(&data[..end]) {
            Ok(None) if end < data.len() => end = (end + step).min(data.len()),
            Ok(other) => return Ok(other),
            Err(_) => return Err(()),
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&ctl, data)) = input.split_first() else {
        return;
    };
    let method = METHODS[usize::from(ctl & 3)];
    let step = usize::from(ctl >> 2).max(1);
    let whole = ResponseScanner::new().find_end(data).map_err(|_| ());
    let split = decide(data, step);
    if split != whole {
        // A bare CR is refused as soon as it is seen while the head is incomplete, and
        // left to the parser once the head is whole: the head is refused either way.
        let refused_whole = matches!(whole, Ok(Some(n)) if response::parse(&data[..n], method).is_err());
        assert!(split.is_err() && refused_whole, "the decision depends on the split");
    }
    let Ok(Some(n)) = whole else {
        return;
    };
    let head = &data[..n];
    let Ok(parsed) = response::parse(head, method) else {
        return;
    };
    // A head the scanner and the parser let through has no bare CR (RFC 9112 §2.2).
    for (i, &b) in head.iter().enumerate() {
        if b == b'\r' {
            assert_eq!(head.get(i + 1), Some(&b'\n'), "a bare CR passed");
        }
    }
    let mut headers = vec![httparse::EMPTY_HEADER; 4096];
    let mut res = httparse::Response::new(&mut headers);
    assert_eq!(res.parse(head), Ok(httparse::Status::Complete(n)));
    assert_eq!(Some(parsed.status), res.code);
    assert_eq!(parsed.len, n);
    if parsed.tunnel || method == Method::Head || parsed.status == 204 || parsed.status == 304 {
        assert_eq!(parsed.body, BodyKind::None);
    }
    if parsed.body == BodyKind::Close {
        assert!(!parsed.keep_alive);
    }
    // No length a signed 64-bit reader would overflow on.
    if let BodyKind::Length(len) = parsed.body {
        assert!(len <= i64::MAX as u64, "a Content-Length of 2^63 or more passed");
    }
});

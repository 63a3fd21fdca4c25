//! The request head scanner and parser: no panic, the same decision whether the head
//! arrives whole or in pieces, never more lenient than httparse, and an early refusal
//! only for heads the full parse refuses too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phasescope::http1::{request, BodyKind, RequestScanner, Version};

const MAX_HEADERS: usize = 32;

/// What the proxy decides for `head` fed as `pieces` (prefix lengths, growing).
fn decide(data: &[u8], step: usize) -> Result<Option<usize>, request::RequestError> {
    let mut s = RequestScanner::new();
    let mut end = step.min(data.len());
    loop {
        match s.find_end(&data[..end]) {
            Ok(None) if end < data.len() => end = (end + step).min(data.len()),
            other => return other,
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&split, data)) = input.split_first() else {
        return;
    };
    let step = usize::from(split).max(1);
    let whole = RequestScanner::new().find_end(data);
    let pieces = decide(data, step);
    match (&whole, &pieces) {
        (Ok(Some(a)), Ok(Some(b))) => assert_eq!(a, b, "the end depends on the split"),
        (Ok(Some(n)), Err(_)) => {
            // Refused early in pieces: the full parse must refuse it too.
            assert!(request::parse(&data[..*n], MAX_HEADERS).is_err());
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) | (Ok(None), Err(_)) | (Err(_), Ok(None)) => {}
        _ => panic!("whole {whole:?} vs pieces {pieces:?}"),
    }
    let Ok(Some(n)) = whole else {
        return;
    };
    assert!(n <= data.len());
    let head = &data[..n];
    let Ok(parsed) = request::parse(head, MAX_HEADERS) else {
        return;
    };
    // Accepted by us: httparse agrees that this is one complete head of this length.
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    assert_eq!(req.parse(head), Ok(httparse::Status::Complete(n)));
    assert_eq!(parsed.len, n);
    assert!(parsed.target.0 < parsed.target.1 && parsed.target.1 <= n);
    assert_eq!(Some(parsed.target(head)), req.path.map(str::as_bytes));
    if parsed.body == BodyKind::Chunked {
        assert_eq!(parsed.version, Version::Http11);
    }
    assert_ne!(
        parsed.body,
        BodyKind::Close,
        "a request is never close-delimited"
    );
    // No bare LF survives.
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && head[i - 1] == b'\r');
        }
    }
});

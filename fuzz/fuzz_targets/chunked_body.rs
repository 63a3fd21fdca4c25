//! The chunked body framer: no panic, the same outcome however the body is split across
//! reads, never a claim to have consumed bytes it was not given, and no chunk size of
//! 2^63 or more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phasescope::http1::{BodyError, BodyFramer, BodyKind};

/// Frames `data` fed in pieces of `step` bytes: (bytes of the body, complete) or the error.
fn frame(data: &[u8], step: usize) -> Result<(usize, bool), BodyError> {
    let mut f = BodyFramer::new(BodyKind::Chunked);
    let mut at = 0;
    while at < data.len() {
        let end = (at + step).min(data.len());
        let p = f.advance(&data[at..end])?;
        assert!(p.consumed <= end - at);
        at += p.consumed;
        if p.done {
            assert!(f.is_done());
            return Ok((at, true));
        }
        assert_eq!(
            at, end,
            "a framer that is not done consumes all it is given"
        );
    }
    Ok((at, false))
}

fuzz_target!(|input: &[u8]| {
    let Some((&split, data)) = input.split_first() else {
        return;
    };
    let whole = frame(data, data.len().max(1));
    let pieces = frame(data, usize::from(split).max(1));
    let bytewise = frame(data, 1);
    assert_eq!(whole, pieces);
    assert_eq!(whole, bytewise);
    // Every chunk size fits a signed 64-bit reader: a size line of 2^63 or more is
    // refused, any smaller one accepted (the input's first 8 bytes as the size).
    if let Some(raw) = data.get(..8) {
        let mut v = [0u8; 8];
        v.copy_from_slice(raw);
        let size = u64::from_le_bytes(v);
        let line = format!("{size:x}\r\n");
        let framed = BodyFramer::new(BodyKind::Chunked).advance(line.as_bytes());
        assert_eq!(framed.is_err(), size > i64::MAX as u64, "{line:?}: {framed:?}");
    }
});

//! The RESP scanner, both directions: no panic, the same message boundaries however the
//! stream is split (whole, in pieces, byte by byte, through `scan` or `feed`), and a
//! command view that never reads past its message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phasescope::recorder::Direction;
use phasescope::resp::{self, Scanner};

/// Message lengths found feeding `data` in pieces of `step`, then the first error if any.
fn boundaries(dir: Direction, data: &[u8], step: usize) -> (Vec<usize>, bool) {
    let mut s = Scanner::new(dir);
    let mut found = Vec::new();
    let mut start = 0; // where the current message began
    let mut fed = 0; // bytes of the stream fed so far
    while fed < data.len() {
        let end = (fed + step).min(data.len());
        match s.feed(&data[fed..end]) {
            Ok(Some(n)) => {
                let msg_end = fed + n;
                found.push(msg_end - start);
                start = msg_end;
                fed = msg_end;
            }
            Ok(None) => fed = end,
            Err(_) => return (found, true),
        }
    }
    (found, false)
}

fuzz_target!(|input: &[u8]| {
    let Some((&split, data)) = input.split_first() else {
        return;
    };
    for dir in [Direction::Request, Direction::Response] {
        let whole = boundaries(dir, data, data.len().max(1));
        assert_eq!(whole, boundaries(dir, data, usize::from(split).max(1)));
        assert_eq!(whole, boundaries(dir, data, 1));
        if dir == Direction::Request {
            let mut at = 0;
            for len in &whole.0 {
                if let Ok(cmd) = resp::command(&data[at..at + len]) {
                    for arg in cmd.args() {
                        assert!(arg.len() <= *len);
                    }
                }
                at += len;
            }
        }
    }
});

//! Comparing many bytes of a buffer with one byte at once: sixteen with SSE2, which every
//! x86-64 has, elsewhere a 64-bit word ([`bytes_equal`]); and reading eight bytes as one
//! word ([`word_at`]). The head scanner finds line feeds with it, the request parse bare
//! ones, and header names are compared eight bytes at a time: a file of its own, below
//! all three, so that each imports it and none imports another for it.

/// Eight bytes at a time, read as a little-endian word so that byte `k` is bits `8k..8k+8`.
const WORD: usize = 8;

/// The word of `buf` starting at `at`, if eight bytes are there.
#[inline]
pub(crate) fn word_at(buf: &[u8], at: usize) -> Option<u64> {
    buf.get(at..)
        .and_then(|rest| rest.first_chunk::<WORD>())
        .map(|w| u64::from_le_bytes(*w))
}

/// The top bit of each byte of `word` that equals `byte`, and no other bit. Exact (no
/// false positives from borrows, unlike the shorter `(x - 0x01..) & !x & 0x80..`).
/// The 16-byte blocks of x86-64 need it only in tests, which hold it to a plain comparison.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
#[inline]
pub(crate) fn bytes_equal(word: u64, byte: u8) -> u64 {
    const LOW7: u64 = u64::from_ne_bytes([0x7f; WORD]);
    let x = word ^ u64::from_ne_bytes([byte; WORD]);
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

/// Bytes compared at once.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) const LEN: usize = 16;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) const LEN: usize = 8;
/// Bits of a mask per byte: byte `k` is bit `k * BITS` and up.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) const BITS: u32 = 1;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) const BITS: u32 = 8;

/// A mask of the bytes among the `LEN` at `at` that equal `byte`, if `LEN` are there.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(crate) fn equal(buf: &[u8], at: usize, byte: u8) -> Option<u64> {
    let b = buf.get(at..)?.first_chunk::<LEN>()?;
    let lo = i64::from_le_bytes(*b.first_chunk::<8>()?);
    let hi = i64::from_le_bytes(*b.last_chunk::<8>()?);
    // SAFETY: `sse2_equal` needs SSE2, which this build enables (the cfg above), as
    // every x86-64 target does; it reads nothing but its arguments.
    Some(unsafe { sse2_equal(lo, hi, byte) })
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn sse2_equal(lo: i64, hi: i64, byte: u8) -> u64 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x};
    let eq = _mm_cmpeq_epi8(_mm_set_epi64x(hi, lo), _mm_set1_epi8(byte as i8));
    // One bit per byte, in the low 16 bits.
    u64::from(_mm_movemask_epi8(eq) as u16)
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(crate) fn equal(buf: &[u8], at: usize, byte: u8) -> Option<u64> {
    word_at(buf, at).map(|w| bytes_equal(w, byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time comparison (the block elsewhere than on x86-64) marks exactly
    /// the equal bytes, whatever the others hold.
    #[test]
    fn bytes_equal_marks_exactly_the_equal_bytes() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let byte = (round % 256) as u8;
            // Plant the byte in some positions, its neighbours in others.
            let mut bytes = x.to_le_bytes();
            for (k, b) in bytes.iter_mut().enumerate() {
                match (x >> (k * 3)) & 7 {
                    0 | 1 => *b = byte,
                    2 => *b = byte.wrapping_add(1),
                    3 => *b = byte ^ 0x80,
                    _ => {}
                }
            }
            let want = bytes.iter().enumerate().fold(0u64, |m, (k, &b)| {
                if b == byte {
                    m | 0x80 << (8 * k)
                } else {
                    m
                }
            });
            assert_eq!(
                bytes_equal(u64::from_le_bytes(bytes), byte),
                want,
                "{bytes:?} {byte}"
            );
            // A block holding the word twice, off by three: its mask marks the same bytes.
            let mut blocks = [0u8; 24];
            blocks[3..11].copy_from_slice(&bytes);
            blocks[11..19].copy_from_slice(&bytes);
            let mask = equal(&blocks, 3, byte).unwrap();
            let per_byte = (1u64 << BITS) - 1;
            for k in 0..LEN {
                let set = (mask >> (k as u32 * BITS)) & per_byte != 0;
                assert_eq!(set, blocks[3 + k] == byte, "{blocks:?} {byte} at {k}");
            }
            assert_eq!(mask >> (LEN as u32 * BITS - 1) >> 1, 0);
        }
    }
}

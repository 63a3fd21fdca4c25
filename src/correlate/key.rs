//! A command's identity for matching: a hash of its name (case-insensitive) and its
//! arguments, computed on the fly from bytes in place, so neither side allocates.

/// FNV-1a, 64 bit: byte at a time, which suits arguments decoded on the fly from a URL.
/// Collisions only matter within the matching window, where the timing constrains the
/// candidates further.
#[derive(Debug, Clone, Copy)]
pub struct CommandKey {
    hash: u64,
}

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

impl Default for CommandKey {
    fn default() -> Self {
        Self::new()
    }
}

impl CommandKey {
    pub const fn new() -> Self {
        Self { hash: OFFSET }
    }

    #[inline]
    fn byte(&mut self, b: u8) {
        self.hash ^= u64::from(b);
        self.hash = self.hash.wrapping_mul(PRIME);
    }

    /// Separates arguments so that `["ab", "c"]` and `["a", "bc"]` differ.
    #[inline]
    fn end_arg(&mut self, len: u64) {
        for b in len.to_le_bytes() {
            self.byte(b);
        }
        self.byte(0xff);
    }

    /// The command name, compared without regard to case (Redis ignores it).
    pub fn name(mut self, name: &[u8]) -> Self {
        for &b in name {
            self.byte(b.to_ascii_uppercase());
        }
        self.end_arg(name.len() as u64);
        self
    }

    /// One argument, from its bytes.
    pub fn arg(self, arg: &[u8]) -> Self {
        self.arg_bytes(arg.iter().copied())
    }

    /// One argument, from its bytes as they are decoded.
    pub fn arg_bytes(mut self, bytes: impl Iterator<Item = u8>) -> Self {
        let mut len = 0u64;
        for b in bytes {
            self.byte(b);
            len += 1;
        }
        self.end_arg(len);
        self
    }

    pub fn finish(self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ignore_case_and_arguments_are_delimited() {
        let a = CommandKey::new().name(b"get").arg(b"k").finish();
        let b = CommandKey::new().name(b"GET").arg(b"k").finish();
        assert_eq!(a, b);
        let c = CommandKey::new().name(b"SET").arg(b"ab").arg(b"c").finish();
        let d = CommandKey::new().name(b"SET").arg(b"a").arg(b"bc").finish();
        assert_ne!(c, d);
        let e = CommandKey::new().name(b"GET").arg(b"K").finish();
        assert_ne!(a, e, "arguments keep their case");
    }
}

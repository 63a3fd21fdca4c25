//! How much user stack each sample copies: as much as the walks need, not the configured
//! `stack_bytes` whatever the process.
//!
//! The kernel copies the copy's whole size into every sample, on the sampled thread, in
//! the sampling interrupt, and the drainer reads it all back: 16 KiB a sample where
//! Webdis's walks read at most about 5 KiB. So the events start with the configured
//! size (the most a sample may copy) and, once enough walks have shown how deep they
//! read, are reopened with what the deepest of them used and half as much again. A walk
//! that asks for a word past the end of a full copy was cut short by the copy: when more
//! than one walk in [`CUT_SHARE`] is, the copy doubles (up to the configured size) and
//! stays for [`HOLD_AFTER_GROWTH`] collects. Those samples are counted as truncated like
//! any other ([`super::TRUNCATED`] in the snapshot), so truncation stays visible.

/// The smallest copy: a few frames of any server.
pub const MIN_STACK_BYTES: u32 = 1024;

/// Walks seen since the last change before the copy may shrink.
const MIN_WALKS: u64 = 200;

/// Collects since the last change before the copy may shrink.
const SETTLE: u32 = 3;

/// Collects without a shrink after the copy grew.
const HOLD_AFTER_GROWTH: u32 = 30;

/// The copy grows when more than 1 walk in this many was cut short by it.
const CUT_SHARE: u64 = 256;

/// The copy's size for the events of one process, from the walks of its samples.
#[derive(Debug)]
pub struct StackSize {
    /// The configured size: the most a sample copies.
    max: u32,
    current: u32,
    /// Since the last change: walks, walks cut short by the copy, the deepest read of a
    /// walk that was not.
    walks: u64,
    cut: u64,
    deepest: usize,
    /// Collects to go before a shrink is allowed.
    hold: u32,
}

impl StackSize {
    pub fn new(max: u32) -> StackSize {
        StackSize {
            max,
            current: max,
            walks: 0,
            cut: 0,
            deepest: 0,
            hold: SETTLE,
        }
    }

    /// One walk: how deep it read, whether it asked for a word past the copy's end, and
    /// whether the copy was full (a copy the kernel ended early ended at the stack's top:
    /// no larger copy would have helped).
    pub fn walked(&mut self, bytes: usize, past_copy: bool, full_copy: bool) {
        self.walks += 1;
        if past_copy && full_copy {
            self.cut += 1;
        } else {
            self.deepest = self.deepest.max(bytes);
        }
    }

    /// At each collect: the new size when the events should be reopened with another.
    pub fn next(&mut self) -> Option<u32> {
        self.hold = self.hold.saturating_sub(1);
        let cut_often = self.cut > 0 && self.cut * CUT_SHARE > self.walks;
        let wanted = if cut_often && self.current < self.max {
            self.hold = HOLD_AFTER_GROWTH;
            self.current.saturating_mul(2).min(self.max)
        } else if self.hold == 0 && self.walks >= MIN_WALKS && !cut_often {
            // Half as much again as the deepest walk read, in whole KiB.
            let need = self.deepest.saturating_add(self.deepest / 2);
            let need = u32::try_from(need.div_ceil(1024) * 1024).unwrap_or(u32::MAX);
            let target = need.clamp(MIN_STACK_BYTES.min(self.max), self.max);
            // Only a change worth reopening every event for.
            if target.saturating_mul(4) <= self.current.saturating_mul(3) {
                target
            } else {
                self.current
            }
        } else {
            self.current
        };
        if wanted == self.current {
            return None;
        }
        self.current = wanted;
        self.walks = 0;
        self.cut = 0;
        self.deepest = 0;
        self.hold = self.hold.max(SETTLE);
        Some(wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collects(size: &mut StackSize, n: u32) -> Option<u32> {
        let mut last = None;
        for _ in 0..n {
            if let Some(s) = size.next() {
                last = Some(s);
            }
        }
        last
    }

    #[test]
    fn shrinks_to_the_deepest_walk_and_half_again_once_settled() {
        let mut size = StackSize::new(16384);
        for i in 0..1000 {
            size.walked(800 + (i % 1200), false, true);
        }
        // Not before the walks have settled.
        assert_eq!(collects(&mut size, SETTLE - 1), None);
        // 1999 bytes, half again: 2999, in whole KiB: 3072.
        assert_eq!(size.next(), Some(3072));
        assert_eq!(size.current, 3072);
        // Nothing more to gain: it stays.
        for _ in 0..1000 {
            size.walked(1999, false, true);
        }
        assert_eq!(collects(&mut size, 20), None);
    }

    #[test]
    fn too_few_walks_change_nothing() {
        let mut size = StackSize::new(16384);
        for _ in 0..MIN_WALKS - 1 {
            size.walked(512, false, true);
        }
        assert_eq!(collects(&mut size, 20), None);
    }

    #[test]
    fn never_below_the_floor_nor_above_the_configured_size() {
        let mut size = StackSize::new(16384);
        for _ in 0..1000 {
            size.walked(64, false, true);
        }
        assert_eq!(collects(&mut size, SETTLE), Some(MIN_STACK_BYTES));
        let mut small = StackSize::new(512);
        for _ in 0..1000 {
            small.walked(64, false, true);
        }
        assert_eq!(collects(&mut small, 20), None, "already below the floor");
    }

    #[test]
    fn walks_cut_short_by_the_copy_grow_it_and_hold_it() {
        let mut size = StackSize::new(16384);
        for _ in 0..1000 {
            size.walked(1000, false, true);
        }
        assert_eq!(collects(&mut size, SETTLE), Some(2048));
        // A deeper path: 1 walk in 100 cut short by the copy.
        for i in 0..1000 {
            size.walked(2048, i % 100 == 0, true);
        }
        assert_eq!(size.next(), Some(4096));
        // Held for a while, even if the deep path does not come back.
        for _ in 0..1000 {
            size.walked(1000, false, true);
        }
        assert_eq!(collects(&mut size, HOLD_AFTER_GROWTH - 1), None);
        assert_eq!(collects(&mut size, 1), Some(2048));
    }

    #[test]
    fn a_rare_cut_or_a_copy_ended_by_the_stack_is_no_reason_to_grow() {
        let mut size = StackSize::new(16384);
        for _ in 0..1000 {
            size.walked(1000, false, true);
        }
        assert_eq!(collects(&mut size, SETTLE), Some(2048));
        for i in 0..1000 {
            // One cut in 1000, and walks past copies the kernel ended at the stack's top.
            size.walked(1500, i == 0, true);
            size.walked(1500, true, false);
        }
        assert_eq!(collects(&mut size, 40), None);
    }
}

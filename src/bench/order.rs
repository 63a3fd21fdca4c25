//! The order of the runs: A B B A A B B A … so that a drift over the experiment (a
//! warming page cache, a neighbour starting a job, CPU frequency settling) falls on both
//! sides alike instead of on whichever ran last.

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    A,
    B,
}

impl Side {
    /// The tap that carries this side's traffic.
    pub fn tap(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }
}

/// `runs` runs of each side, interleaved A B B A.
pub fn interleaved(runs: usize) -> Vec<Side> {
    (0..2 * runs).map(nth).collect()
}

/// The side of the `i`-th run (from 0) of A B B A A B B A …: each pair holds both sides,
/// and the pairs alternate which goes first.
pub fn nth(i: usize) -> Side {
    match ((i / 2) % 2, i % 2) {
        (0, 0) | (1, 1) => Side::A,
        _ => Side::B,
    }
}

/// The side of an interleave's slice `k` (from 0), in windows of four slices that
/// alternate A B B A, B A A B, …: every window is cut where the side changes, while
/// neither side has the turn (a cut between two slices of one side stalled only that
/// side's exchanges, window after window), and over each two windows both sides have
/// the same places in them.
pub fn slice(k: usize) -> Side {
    match (nth(k % 4), (k / 4) % 2) {
        (side, 0) => side,
        (Side::A, _) => Side::B,
        (Side::B, _) => Side::A,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abba() {
        use Side::{A, B};
        assert_eq!(interleaved(3), [A, B, B, A, A, B]);
        assert_eq!(interleaved(0), []);
        assert_eq!(
            (0..8).map(nth).collect::<Vec<_>>(),
            [A, B, B, A, A, B, B, A]
        );
    }

    #[test]
    fn slices_alternate_abba_and_baab() {
        use Side::{A, B};
        assert_eq!(
            (0..12).map(slice).collect::<Vec<_>>(),
            [A, B, B, A, B, A, A, B, A, B, B, A]
        );
        // Every window boundary (4, 8, …) is a change of side.
        assert!((1..40).all(|w| slice(4 * w - 1) != slice(4 * w)));
    }
}

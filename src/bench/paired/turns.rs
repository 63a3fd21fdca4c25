//! An interleave's turns: which side may send, passed at each slice's end, and the drain
//! that lets the side that had the turn finish its exchanges before the other begins.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::super::load;
use super::super::order::{self, Side};

/// The turn value of `side` in a [`load::Turn`].
pub(super) fn turn_of(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

/// An interleave's turns: whose it is, and each side's counters (what it has in flight).
pub(super) struct Turns {
    pub whose: watch::Sender<usize>,
    pub sides: [Arc<load::Counters>; 2],
    /// The longest a turn waits for the other side's exchanges in flight.
    pub drain: Duration,
}

/// The turn value no side's: each side's connections wait (a turn being drained).
const NOBODY: usize = usize::MAX;

/// An interleave's turn passes to the side of slice `k` (from 0, [`order::slice`]), and
/// `between` runs before it does (at once in a duet, which has no turns). Where the side
/// changes, the side that had the turn first finishes the exchanges it has in flight (for
/// at most `drain`), then `between` runs while neither side has the turn, and only then
/// does the other begin: each side has the machine to itself on its slices. Begun at
/// once, the new side's first exchanges ran beside the old side's last ones, both slower,
/// by as much as the old side had in flight then.
pub(super) fn pass(turns: Option<&Turns>, k: usize, between: impl FnOnce()) {
    let Some(turns) = turns else {
        between();
        return;
    };
    let next = turn_of(order::slice(k));
    let before = *turns.whose.borrow();
    if before != next && before != NOBODY {
        turns.whose.send_replace(NOBODY);
        let until = Instant::now() + turns.drain;
        let flying = || turns.sides.get(before).map_or(0, |side| side.in_flight());
        while flying() > 0 && Instant::now() < until {
            std::thread::sleep(DRAIN_POLL);
        }
    }
    between();
    turns.whose.send_replace(next);
}

/// How often a drained turn looks at what is still in flight: a small share of an
/// exchange (a CPU-bound server's take milliseconds) and of a slice.
const DRAIN_POLL: Duration = Duration::from_micros(200);

#[cfg(test)]
mod tests {
    use super::*;

    fn turns(drain: Duration) -> (Turns, watch::Receiver<usize>) {
        let (whose, seen) = watch::channel(turn_of(Side::A));
        let sides = [(); 2].map(|()| Arc::new(load::Counters::default()));
        (
            Turns {
                whose,
                sides,
                drain,
            },
            seen,
        )
    }

    /// A to B (slice 1): B begins only once A's last exchange is answered, and nobody
    /// sends meanwhile.
    #[test]
    fn a_switch_waits_for_the_old_sides_exchanges_in_flight() {
        let (turns, seen) = turns(Duration::from_secs(30));
        let a = Arc::clone(&turns.sides[0]);
        let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, during) = (Arc::clone(&drained), seen.clone());
        std::thread::scope(|s| {
            s.spawn(move || {
                let flying = load::InFlight::count(&a);
                // The turn leaves A: nobody's while this exchange is in flight, or B's
                // at once (no drain).
                while *during.borrow() == turn_of(Side::A) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                flag.store(
                    *during.borrow() == NOBODY,
                    std::sync::atomic::Ordering::SeqCst,
                );
                drop(flying);
            });
            while turns.sides[0].in_flight() == 0 {
                std::thread::yield_now();
            }
            pass(Some(&turns), 1, || ());
        });
        assert!(drained.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(*seen.borrow(), turn_of(Side::B));
    }

    /// An exchange that never ends holds the turn only for `drain`.
    #[test]
    fn a_drain_ends_at_its_deadline() {
        let (turns, seen) = turns(Duration::from_millis(20));
        let _stuck = load::InFlight::count(&turns.sides[0]);
        pass(Some(&turns), 1, || ());
        assert_eq!(*seen.borrow(), turn_of(Side::B));
    }

    /// A window's end (slice 3, A, to slice 4, B): the cut runs after A's turn ends and
    /// before B's begins, when no side sends; in a duet, which has no turns, at once.
    #[test]
    fn a_window_is_cut_while_neither_side_has_the_turn() {
        let (turns, seen) = turns(Duration::from_millis(20));
        let mut during = None;
        pass(Some(&turns), 4, || during = Some(*seen.borrow()));
        assert_eq!(during, Some(NOBODY));
        assert_eq!(*seen.borrow(), turn_of(Side::B));
        let mut cut = false;
        pass(None, 4, || cut = true);
        assert!(cut);
    }

    /// The same side going on (slice 1 to 2, B then B) does not wait for its own
    /// exchanges: with a drain of a minute, waiting would miss the ten seconds allowed.
    #[test]
    fn the_same_side_going_on_does_not_drain() {
        let (turns, seen) = turns(Duration::from_secs(60));
        turns.whose.send_replace(turn_of(Side::B));
        let _flying = load::InFlight::count(&turns.sides[1]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                pass(Some(&turns), 2, || ());
                let _ = tx.send(());
            });
            assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok());
        });
        assert_eq!(*seen.borrow(), turn_of(Side::B));
    }
}

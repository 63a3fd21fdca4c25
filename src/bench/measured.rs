//! What a design hands the comparison: each side's snapshots (a runs design's runs, a
//! paired design's windows, the same window on both sides) and their names, the names
//! the kept files have and the comparison's notes cite.

use super::order::Side;
use crate::snapshot::Snapshot;

/// Each side's snapshots and their names, in the order they were taken.
#[derive(Default)]
pub struct Measured {
    pub a: Vec<Snapshot>,
    pub b: Vec<Snapshot>,
    pub a_names: Vec<String>,
    pub b_names: Vec<String>,
}

impl Measured {
    pub fn push(&mut self, side: Side, snap: Snapshot, name: String) {
        match side {
            Side::A => {
                self.a.push(snap);
                self.a_names.push(name);
            }
            Side::B => {
                self.b.push(snap);
                self.b_names.push(name);
            }
        }
    }
}

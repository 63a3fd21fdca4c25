//! The designs measured in paired windows.
//!
//! The duet (Bulej et al., "Duet benchmarking", ICPE 2020): A and B are loaded at the
//! same time, each through its own tap with its own half of the connections, and the
//! proxy's figures are cut into short windows (250 ms by default). A window's snapshot
//! holds both taps, measured over the same interval, so whatever else the machine did in
//! that window fell on both; the comparison is made on the per-window ratios B/A (a
//! paired t interval, `compare --paired`), where that common noise cancels.
//!
//! The interleave (after Abedi and Brecht's multiple interleaved trials, ICPE 2017): one
//! side at a time with all the connections, in slices (250 ms by default) A B B A B A A B
//! …; each four slices are one window, compared as a duet's (four, not two: see
//! [`super::Design::ticks_per_window`]; alternating A B B A and B A A B: see
//! [`super::order::slice`]). Interference slower than a window cancels as in
//! the duet; each side has the whole
//! machine while it is measured, so a difference in CPU shows in latency undiluted (in a
//! duet the two servers share the cores, and the slower one takes a larger share).
//!
//! Either is three steps, each in a file of its own: [`plan`] (what will run, from the
//! checked flags), [`drive`] (the load, and the windows' clock that passes the turns and
//! cuts the windows; with the interleave's [`turns`] and `--until-mde`'s [`until`]), and
//! [`assemble`] (each side's record, the comparison's input, the kept files).

mod assemble;
mod drive;
mod plan;
mod turns;
mod until;

use super::measured::Measured;
use super::record::{RunRecord, UntilMde};
use super::Bench;
use plan::Plan;

impl Bench<'_> {
    /// The duet (both sides at once) or the interleave (one side a slice at a time): the
    /// windows, each as both sides' snapshot, and what `--until-mde` came to.
    pub(super) async fn paired(
        &self,
    ) -> anyhow::Result<(Vec<RunRecord>, Measured, Option<UntilMde>)> {
        let plan = Plan::of(self.args)?;
        plan.announce(self.args);
        let driven = self.drive(&plan).await?;
        self.assemble(&plan, driven)
    }
}

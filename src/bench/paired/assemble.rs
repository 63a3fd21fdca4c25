//! Assembling a paired design's result: each side's record over all the windows (the
//! line that stays on standard error, the report's `requests/s`), the windows as the
//! comparison's input, both sides in each, and the kept files.

use super::super::measured::Measured;
use super::super::order::Side;
use super::super::record::{RunRecord, UntilMde};
use super::super::{progress, Bench};
use super::drive::Driven;
use super::plan::Plan;
use crate::snapshot::Snapshot;

impl Bench<'_> {
    /// One record a side over the merged windows, and each window for both sides (and in
    /// `--keep`'s directory as `window-0001.json` …).
    pub(super) fn assemble(
        &self,
        plan: &Plan,
        driven: Driven,
    ) -> anyhow::Result<(Vec<RunRecord>, Measured, Option<UntilMde>)> {
        let Driven {
            windows,
            until,
            outcomes: [a, b],
        } = driven;
        let whole = Snapshot::merged(&windows)
            .ok_or_else(|| anyhow::anyhow!("the bench measured no window"))?;
        let mut runs = Vec::new();
        let mut measured = Measured::default();
        for (i, (side, outcome)) in [(Side::A, a), (Side::B, b)].into_iter().enumerate() {
            let mut record = RunRecord::new(i + 1, side, &whole, Some(outcome));
            if plan.interleave {
                // Each side was loaded on half the slices: its rate is over those.
                record.seconds /= 2.0;
                record.requests_per_s *= 2.0;
            }
            progress::side_done(
                side,
                record.requests,
                record.seconds,
                record.failed(),
                plan.interleave,
            );
            runs.push(record);
        }
        for (i, snap) in windows.into_iter().enumerate() {
            let name = format!("window-{:04}.json", i + 1);
            self.keep(&name, &snap)?;
            measured.push(Side::A, snap.clone(), name.clone());
            measured.push(Side::B, snap, name);
        }
        Ok((runs, measured, until))
    }
}

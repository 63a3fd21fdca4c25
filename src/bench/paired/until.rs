//! `--until-mde`'s check: the largest mde of the primary rows of the windows so far, as
//! the verdict will compare them, and how often it is asked.

use std::time::Duration;

use crate::report::{compare, CompareOptions, Comparison};
use crate::snapshot::Snapshot;

/// With `--until-mde`, how often the windows so far are compared: often enough that the
/// duet stops soon after the target is reached, rarely enough that the comparison (a
/// bootstrap per row) costs little of the windows' time.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The largest mde of the primary rows of these windows, as the verdict compares them;
/// `None` while a primary row has none (too few windows with its series).
pub(super) fn primary_mde(windows: &[Snapshot], options: &CompareOptions) -> Option<f64> {
    let names: Vec<String> = (1..=windows.len()).map(|i| format!("window-{i}")).collect();
    let c = compare(windows, windows, names.clone(), names, options).ok()?;
    largest_primary_mde(&c)
}

/// The largest mde among `c`'s primary rows; `None` if there is none or a row has none.
fn largest_primary_mde(c: &Comparison) -> Option<f64> {
    let mut rows = c.rows.iter().filter(|r| r.primary).peekable();
    rows.peek()?;
    rows.try_fold(0.0_f64, |most, r| Some(most.max(r.mde?)))
}

//! What a paired design will run, from the checked flags: how many windows, of how many
//! ticks, each how long; how long the load lasts, with how many connections a side; and
//! the line that says so on standard error before the load begins.

use std::time::Duration;

use super::super::progress;
use super::super::{BenchArgs, Design};

/// A paired design's windows and load.
pub(super) struct Plan {
    /// One side at a time (the interleave), not both at once (the duet).
    pub interleave: bool,
    /// The interval at which the windows are cut (a duet) or the turn passes (an
    /// interleave): `--window` or `--slice`.
    pub tick: Duration,
    /// A window: one tick (a duet), four (an interleave).
    pub window: Duration,
    /// The windows to measure, a whole number of cycles; `--until-mde` may stop sooner.
    pub count: usize,
    /// How long the windows take in all.
    pub length: Duration,
    /// Each side's connections.
    pub connections: usize,
    /// The load's own deadline, a bound only (see [`Plan::of`]).
    pub deadline: Duration,
}

impl Plan {
    /// The plan of a paired design's flags, checked by [`BenchArgs::check`].
    ///
    /// The load ends when the windows do (the drive stops it); its own deadline is only
    /// a bound, one tick beyond the opening tick and the windows, which the last drain and
    /// cut never reach. At the windows' length exactly, the connections closed during the
    /// last drain, the servers' threads exited before the last cut, and their thread-time
    /// in that window was never read (B's `cpu` per request −28 % in one kept bench's last
    /// window; 20 of 20 A/A benches negative, −0.77 % on average).
    pub fn of(args: &BenchArgs) -> anyhow::Result<Plan> {
        let (Some((tick, _)), Some(window), Some(count)) =
            (args.tick(), args.paired_window(), args.window_count())
        else {
            anyhow::bail!("the runs design has no windows");
        };
        let interleave = args.design == Design::Interleave;
        let length = args.paired_length();
        // The duet halves the connections between the sides; the interleave gives each
        // side all of them on its turns. B has the unmeasured opening tick, while the
        // connections open; A the first measured slice.
        let connections = if interleave {
            args.connections
        } else {
            (args.connections / 2).max(1)
        };
        Ok(Plan {
            interleave,
            tick,
            window,
            count,
            length,
            connections,
            deadline: length + 2 * tick,
        })
    }

    /// Says what will run and why that long, before the load (a bench of the defaults
    /// loads for 100 s, and looked stuck without it).
    pub fn announce(&self, args: &BenchArgs) {
        let why = match args.until_mde {
            Some(pct) => format!("until the mde reaches {pct} %, at most --max-duration"),
            None => format!(
                "2 × --runs {} × --duration {}",
                args.runs,
                humantime::format_duration(args.duration)
            ),
        };
        let name = if self.interleave {
            "interleave"
        } else {
            "duet"
        };
        progress::paired_start(name, self.length, self.count, self.window, &why);
    }
}

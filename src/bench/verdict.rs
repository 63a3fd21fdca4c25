//! The verdict: tap `a`'s windows or runs compared with tap `b`'s, unless a side failed
//! too often, with the stack exports written and the bench's report put together.

use super::measured::Measured;
use super::record::{RunRecord, UntilMde};
use super::{order, validity, Bench, BenchReport, Design};
use crate::report::{compare, CompareOptions};

impl Bench<'_> {
    /// How the bench compares A and B: tap `a` against tap `b`, paired for a duet.
    pub(super) fn compare_options(&self) -> CompareOptions {
        let args = self.args;
        CompareOptions {
            alpha: args.alpha,
            threshold: args.threshold / 100.0,
            detect: args.detect / 100.0,
            taps: vec!["a".to_owned()],
            vs_tap: Some("b".to_owned()),
            paired: args.design.paired(),
            asked_functions: args.function.clone(),
            ..CompareOptions::default()
        }
    }

    /// The options of `--until-mde`'s checks of the windows so far: the bench's own,
    /// without the functions' rows, which no primary row needs.
    pub(super) fn until_options(&self) -> CompareOptions {
        CompareOptions {
            functions: false,
            ..self.compare_options()
        }
    }

    /// The verdict on what was measured, unless a side failed too often.
    pub(super) fn verdict(
        &self,
        runs: Vec<RunRecord>,
        m: Measured,
        until_mde: Option<UntilMde>,
    ) -> anyhow::Result<BenchReport> {
        let args = self.args;
        let opts = self.compare_options();
        let validity = validity::sides(&runs);
        let refused = validity::refusal(&validity);
        let comparison = match refused {
            Some(_) => None,
            None => {
                let mut c = compare(&m.a, &m.b, m.a_names, m.b_names, &opts)?;
                c.notes.extend(validity::note(&validity));
                if args.design.paired() {
                    rates_as_measured(&mut c, &runs);
                }
                crate::report::export::diff_stacks::Exports {
                    diff_flamegraph: args.diff_flamegraph.as_deref(),
                    folded: args.folded.as_deref(),
                    pprof: args.pprof.as_deref(),
                }
                .write(
                    &m.a,
                    &m.b,
                    &[("a".to_owned(), "b".to_owned())],
                    &c.functions,
                )?;
                Some(c)
            }
        };
        // The functions asked for, so that the rerun keeps their rows too.
        let asked: String = args
            .function
            .iter()
            .map(|f| format!(" --function {f}"))
            .collect();
        let rerun = args.keep.as_ref().map(|dir| match args.design {
            Design::Runs => format!(
                "phasescope compare {d}/run-*-a.json --vs {d}/run-*-b.json --tap a --vs-tap b{asked}",
                d = dir.display()
            ),
            Design::Duet | Design::Interleave => format!(
                "phasescope compare {d}/window-*.json --vs {d}/window-*.json --tap a --vs-tap b \
                 --paired{asked}",
                d = dir.display()
            ),
        });
        Ok(BenchReport {
            a: args.a.clone(),
            b: args.b.clone(),
            paths: self.paths.to_vec(),
            design: args.design,
            window: args.paired_window().map(|w| w.as_secs_f64()),
            connections: args.connections,
            duration: match (&until_mde, args.design) {
                (Some(until), _) => until.seconds,
                (None, Design::Runs) => args.duration.as_secs_f64(),
                (None, Design::Duet | Design::Interleave) => args.paired_length().as_secs_f64(),
            },
            until_mde,
            rate: args.rate,
            cpus: args.cpus.clone(),
            load: args.load.clone().unwrap_or_else(|| {
                if args.rate.is_some() {
                    "open loop".to_owned()
                } else {
                    "closed loop".to_owned()
                }
            }),
            runs,
            rerun,
            validity,
            refused,
            comparison,
        })
    }
}

/// A paired design's rate rows give each side's exchanges over the time it was loaded
/// (an interleave's side, its own slices: half of each window), as the `requests/s` line
/// and the progress lines do; the change is the ratio of the windows' totals either way.
/// Until this, the row held the geometric mean of the windows' rates over whole windows,
/// and the table said `3818/s` where the line above it said `7682/s` for the same side.
fn rates_as_measured(c: &mut crate::report::Comparison, runs: &[RunRecord]) {
    let seconds = |side: order::Side| {
        runs.iter()
            .find(|r| r.side == side)
            .map(|r| r.seconds)
            .filter(|s| *s > 0.0)
    };
    let (Some(sa), Some(sb)) = (seconds(order::Side::A), seconds(order::Side::B)) else {
        return;
    };
    for r in c
        .rows
        .iter_mut()
        .filter(|r| r.statistic == crate::stats::Statistic::Rate)
    {
        r.a = Some(r.count_a as f64 / sa);
        r.b = Some(r.count_b as f64 / sb);
    }
}

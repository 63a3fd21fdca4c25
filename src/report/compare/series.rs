//! The drafts of the phases' rows: per series (tap, phase, route) of either side, one
//! draft per compared statistic, measured by the method its runs allow (paired windows,
//! Welch's t over runs, or with one run on a side the bootstrap from the histograms), or
//! with the reason it could not be.

use std::collections::{BTreeMap, BTreeSet};

use hdrhistogram::Histogram;

use super::options::Options;
use super::row::{Draft, Key};
use super::selection::front_taps;
use super::{cpu, route_cpu};
use crate::report::source::dataset::phase_order;
use crate::rng::{self, Rng};
use crate::snapshot::{SeriesSnapshot, Snapshot};
use crate::stats::bootstrap::{self, ln_seconds, Sampler};
use crate::stats::measure::{between_runs, within_run, Side};
use crate::stats::paired::{self, Cell};
use crate::stats::{Measured, Method, Statistic};

/// The series of each run, on one side.
type Runs<'a> = Vec<(&'a SeriesSnapshot, &'a Snapshot)>;

/// Per (tap, phase, route), the series of each run that has it.
fn index<'a>(runs: &'a [Snapshot], routes: &[String]) -> BTreeMap<Key, Runs<'a>> {
    let mut out: BTreeMap<Key, Runs<'a>> = BTreeMap::new();
    for snap in runs {
        for (tap, t) in &snap.taps {
            for (phase, by_route) in &t.phases {
                for (route, s) in by_route {
                    if s.count > 0 && (routes.is_empty() || routes.contains(route)) {
                        out.entry((tap.clone(), phase.clone(), route.clone()))
                            .or_default()
                            .push((s, snap));
                    }
                }
            }
        }
    }
    out
}

/// The runs' histograms merged, with their count, sum, min and max.
fn merged(series: &Runs<'_>) -> anyhow::Result<(Histogram<u64>, u64, f64, f64, f64)> {
    let layout = series
        .first()
        .map(|(_, snap)| snap.hdr)
        .unwrap_or(crate::snapshot::HdrLayout::CURRENT);
    let mut h = layout.empty_histogram()?;
    let (mut count, mut sum, mut min, mut max) = (0, 0.0, f64::INFINITY, 0.0f64);
    for (s, _) in series {
        s.add_to(&mut h)?;
        count += s.count;
        sum += s.sum;
        min = min.min(s.min);
        max = max.max(s.max);
    }
    Ok((h, count, sum, min, max))
}

/// The request rate of one run: exchanges over the snapshot's window.
fn rate(s: &SeriesSnapshot, snap: &Snapshot) -> Option<f64> {
    let window = snap.taken_at_unix - snap.since_unix;
    (window > 0.0).then(|| s.count as f64 / window)
}

/// One run's value of `stat`.
fn per_run(stat: Statistic, s: &SeriesSnapshot, snap: &Snapshot) -> Option<f64> {
    match stat {
        Statistic::Mean => Some(s.mean),
        Statistic::P50 => Some(s.p50),
        Statistic::P99 => Some(s.p99),
        Statistic::Rate => rate(s, snap),
        // Not a series' statistic: the upstream's, in `cpu`.
        Statistic::PerRequest => None,
    }
}

/// The paired measurement of `stat` of (tap, phase, route) (windows measured at the same
/// time, [`paired`]), over the windows where both sides have the series, and their
/// number; `None` with fewer than [`paired::MIN_PAIRS`].
fn paired_windows(
    stat: Statistic,
    (tap, phase, route): (&str, &str, &str),
    a: &[Snapshot],
    b: &[Snapshot],
    resamples: usize,
    rng: &mut Rng,
) -> Option<(Measured, usize)> {
    let cell = |snap: &Snapshot| {
        let s: &SeriesSnapshot = snap.taps.get(tap)?.phases.get(phase)?.get(route)?;
        (s.count > 0).then_some(())?;
        Some(Cell {
            count: s.count as f64,
            sum: s.sum,
            log: per_run(stat, s, snap).map(ln_seconds)?,
        })
    };
    let pairs: Vec<(Cell, Cell)> = a
        .iter()
        .zip(b)
        .filter_map(|(sa, sb)| Some((cell(sa)?, cell(sb)?)))
        .collect();
    Some((paired::of_cells(stat, &pairs, resamples, rng)?, pairs.len()))
}

/// One side of a row of `stat`: its runs' logs and the value of the runs merged; `None`
/// when a run has no value of it (a snapshot without a time window).
fn side(stat: Statistic, runs: &Runs<'_>) -> anyhow::Result<Option<Side>> {
    let logs: Option<Vec<f64>> = runs
        .iter()
        .map(|(s, snap)| per_run(stat, s, snap).map(ln_seconds))
        .collect();
    let Some(logs) = logs else {
        return Ok(None);
    };
    let (h, count, sum, min, max) = merged(runs)?;
    let (lo, hi) = ((min * 1e9).round() as u64, (max * 1e9).round() as u64);
    let q = |q: f64| h.value_at_quantile(q).clamp(lo.min(hi), hi) as f64 / 1e9;
    let value = match stat {
        Statistic::Mean | Statistic::PerRequest => sum / count.max(1) as f64,
        Statistic::P50 => q(0.5),
        Statistic::P99 => q(0.99),
        Statistic::Rate => (logs.iter().sum::<f64>() / logs.len() as f64).exp(),
    };
    Ok(Some(Side { logs, value, count }))
}

/// The taps whose primary phases are the question: those named, else the front taps.
fn primary_taps(a: &[Snapshot], b: &[Snapshot], opts: &Options) -> BTreeSet<String> {
    if opts.taps.is_empty() {
        let mut both = a.to_vec();
        both.extend(b.iter().cloned());
        front_taps(&both)
    } else {
        opts.taps.iter().cloned().collect()
    }
}

/// Every series of either side, by tap, then route, then phase in the readers' order.
fn ordered_keys<'k>(
    ia: &'k BTreeMap<Key, Runs<'_>>,
    ib: &'k BTreeMap<Key, Runs<'_>>,
) -> Vec<&'k Key> {
    let mut keys: Vec<&Key> = ia
        .keys()
        .chain(ib.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    keys.sort_by_key(|(tap, phase, route)| (tap.clone(), route.clone(), phase_order(phase)));
    keys
}

/// One draft per statistic of every series, in the order the rows are shown.
pub(super) fn draft_all(
    a: &[Snapshot],
    b: &[Snapshot],
    opts: &Options,
) -> anyhow::Result<Vec<Draft>> {
    let primary_taps = primary_taps(a, b, opts);
    let ia = index(a, &opts.routes);
    let ib = index(b, &opts.routes);
    let empty = Vec::new();
    let mut drafts = Vec::new();
    for key in ordered_keys(&ia, &ib) {
        let series = Series {
            key,
            runs: [ia.get(key).unwrap_or(&empty), ib.get(key).unwrap_or(&empty)],
            primary: opts.phases.contains(&key.1) && primary_taps.contains(&key.0),
        };
        drafts.extend(series.drafts(a, b, opts)?);
    }
    drafts.extend(cpu::drafts(a, b, opts));
    drafts.extend(route_cpu::drafts(a, b, opts));
    Ok(drafts)
}

/// The statistics compared for a phase: the mean of every phase; p50 and p99 of the
/// primary phases; the request rate from `total`.
fn statistics(phase: &str, opts: &Options) -> Vec<Statistic> {
    let mut stats = vec![Statistic::Mean];
    if opts.phases.iter().any(|p| p == phase) {
        stats.extend([Statistic::P50, Statistic::P99]);
    }
    if phase == "total" {
        stats.push(Statistic::Rate);
    }
    stats
}

/// Whether a statistic of a primary series is part of the question. In paired windows
/// both sides share one load generator and one proxy, and the split of the request rate
/// between them measures how those scheduled the two as much as the servers (A/A
/// measured +6.4 %): it explains, it is not the question (docs/compare.md).
fn primary_statistic(stat: Statistic, paired: bool) -> bool {
    match stat {
        Statistic::Mean => true,
        Statistic::Rate => !paired,
        _ => false,
    }
}

/// One series (tap, phase, route) and its runs on each side.
struct Series<'k, 'r, 's> {
    key: &'k Key,
    runs: [&'r Runs<'s>; 2],
    /// A primary phase of a primary tap.
    primary: bool,
}

impl Series<'_, '_, '_> {
    fn drafts(&self, a: &[Snapshot], b: &[Snapshot], opts: &Options) -> anyhow::Result<Vec<Draft>> {
        let [ra, rb] = self.runs;
        let counts = [ra, rb].map(|r| r.iter().map(|(s, _)| s.count).sum::<u64>());
        // The bootstrap is computed once per series, for all its statistics.
        let mut boot: Option<[f64; 3]> = None;
        let mut out = Vec::new();
        for stat in statistics(&self.key.1, opts) {
            let mut d = Draft {
                key: self.key.clone(),
                stat,
                primary: self.primary && primary_statistic(stat, opts.paired),
                runs: [ra.len(), rb.len()],
                counts,
                values: [None, None],
                method: Method::None,
                measured: None,
                note: None,
            };
            self.measure(&mut d, (a, b), &mut boot, opts)?;
            out.push(d);
        }
        Ok(out)
    }

    /// Fills in what `d` measured and how, or the note that says why it could not.
    fn measure(
        &self,
        d: &mut Draft,
        (a, b): (&[Snapshot], &[Snapshot]),
        boot: &mut Option<[f64; 3]>,
        opts: &Options,
    ) -> anyhow::Result<()> {
        let [ra, rb] = self.runs;
        let stat = d.stat;
        if ra.is_empty() || rb.is_empty() {
            // The side that has it shows its figure: `- → -` hid what A measured.
            let (at, present, name, other) = if ra.is_empty() {
                (1, rb, "B", "A")
            } else {
                (0, ra, "A", "B")
            };
            d.values[at] = side(stat, present)?.map(|s| s.value);
            d.note = Some(format!("only in {name}: no exchange of {other} had it"));
            return Ok(());
        }
        let (Some(sa), Some(sb)) = (side(stat, ra)?, side(stat, rb)?) else {
            d.note = Some("a snapshot without a time window".to_owned());
            return Ok(());
        };
        d.values = [Some(sa.value), Some(sb.value)];
        // A phase that lasted 0 in every exchange of both sides (a response that never
        // streamed has no `upstream_recv`): nothing to compare, where the drift's
        // interval read `0 ns → 0 ns +0.0 % [-24.2, +31.9]`.
        let zero = |runs: &Runs<'_>| runs.iter().all(|(s, _)| s.max == 0.0);
        if zero(ra) && zero(rb) {
            d.note = Some("0 in every exchange of both sides".to_owned());
            return Ok(());
        }
        let several = ra.len() >= 2 && rb.len() >= 2;
        if several && self.thin_in_a_run(stat, opts.min_tail) {
            d.note = Some(format!(
                "too few exchanges beyond the percentile in a run (needs {} beyond it)",
                opts.min_tail
            ));
            return Ok(());
        }
        if opts.paired {
            let (tap, phase, route) = self.key;
            let mut rng = Rng::new(opts.seed ^ rng::hash(&[tap, phase, route, stat.as_str()]));
            let paired = paired_windows(stat, (tap, phase, route), a, b, opts.resamples, &mut rng);
            if let Some((m, pairs)) = paired {
                d.method = Method::Paired;
                d.runs = [pairs; 2];
                d.measured = Some(m);
                return Ok(());
            }
        }
        if several {
            d.method = Method::Runs;
            d.measured = Some(between_runs(&sa, &sb));
            return Ok(());
        }
        if let Some(note) = too_few(stat, sa.count.min(sb.count), opts) {
            d.note = Some(note);
            return Ok(());
        }
        let boot_se = self.boot_se(stat, boot, opts)?;
        d.method = Method::Resampling;
        d.measured = Some(within_run(&sa, &sb, boot_se, opts.drift));
        Ok(())
    }

    /// A percentile decided by a handful of values is heavy-tailed noise, per run as much
    /// as per bootstrap: with several runs, it is compared only with enough values beyond
    /// it in every run.
    fn thin_in_a_run(&self, stat: Statistic, min_tail: u64) -> bool {
        let beyond = match stat {
            Statistic::P50 => Some(0.5),
            Statistic::P99 => Some(0.01),
            _ => None,
        };
        let [ra, rb] = self.runs;
        let smallest_run = ra.iter().chain(rb.iter()).map(|(s, _)| s.count).min();
        matches!((beyond, smallest_run), (Some(q), Some(n)) if (n as f64) * q < min_tail as f64)
    }

    /// The bootstrap's standard error of the log ratio of `stat` (0 for the rate, which
    /// has no histogram), computed once for the series' three statistics.
    fn boot_se(
        &self,
        stat: Statistic,
        boot: &mut Option<[f64; 3]>,
        opts: &Options,
    ) -> anyhow::Result<f64> {
        let i = match stat {
            Statistic::Rate | Statistic::PerRequest => return Ok(0.0),
            Statistic::Mean => 0,
            Statistic::P50 => 1,
            Statistic::P99 => 2,
        };
        if boot.is_none() {
            let (tap, phase, route) = self.key;
            let (ha, ..) = merged(self.runs[0])?;
            let (hb, ..) = merged(self.runs[1])?;
            let (Some(pa), Some(pb)) = (Sampler::new(&ha), Sampler::new(&hb)) else {
                anyhow::bail!("{tap}/{phase}/{route}: an empty histogram with a count");
            };
            let mut rng = Rng::new(opts.seed ^ rng::hash(&[tap, phase, route]));
            *boot = Some(bootstrap::log_ratio_se(
                &pa,
                &pb,
                opts.resamples,
                opts.max_draws,
                &mut rng,
            ));
        }
        Ok(boot.map_or(0.0, |b| b[i]))
    }
}

/// One run a side: why `stat` cannot be compared with `n` exchanges on the smaller side.
fn too_few(stat: Statistic, n: u64, opts: &Options) -> Option<String> {
    let tail = opts.min_tail as f64;
    let enough = match stat {
        Statistic::Mean | Statistic::Rate | Statistic::PerRequest => n >= opts.min_count,
        Statistic::P50 => n >= opts.min_count && n as f64 * 0.5 >= tail,
        Statistic::P99 => n >= opts.min_count && n as f64 * 0.01 >= tail,
    };
    (!enough).then(|| match stat {
        Statistic::P50 | Statistic::P99 if n >= opts.min_count => format!(
            "too few exchanges beyond the percentile (needs {} beyond it on each side)",
            opts.min_tail
        ),
        _ => format!("too few exchanges: fewer than {} on a side", opts.min_count),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_phases_get_percentiles_and_total_the_rate() {
        use Statistic::*;
        let opts = Options::default();
        assert_eq!(statistics("total", &opts), [Mean, P50, P99, Rate]);
        assert_eq!(statistics("upstream_wait", &opts), [Mean]);
        // In paired windows the rate explains; the mean stays the question.
        assert!(primary_statistic(Rate, false) && !primary_statistic(Rate, true));
        assert!(primary_statistic(Mean, true) && !primary_statistic(P99, false));
    }

    #[test]
    fn one_run_a_side_needs_enough_exchanges_and_enough_beyond_a_percentile() {
        let opts = Options::default(); // 30 exchanges, 20 beyond a percentile
        assert_eq!(too_few(Statistic::Mean, 30, &opts), None);
        assert_eq!(
            too_few(Statistic::Mean, 29, &opts).as_deref(),
            Some("too few exchanges: fewer than 30 on a side")
        );
        assert_eq!(too_few(Statistic::P50, 40, &opts), None);
        assert_eq!(too_few(Statistic::P99, 2000, &opts), None);
        assert_eq!(
            too_few(Statistic::P99, 1999, &opts).as_deref(),
            Some("too few exchanges beyond the percentile (needs 20 beyond it on each side)")
        );
    }
}

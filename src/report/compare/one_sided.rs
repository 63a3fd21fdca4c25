//! Functions and components that one side has and the other has not: a build that
//! replaced its parser (`http_parser_execute` in A, `llhttp__internal_execute` in B), a
//! server without a library the other uses (amphp's `league/uri` against raw TCP). There
//! is no ratio of B to A to measure, so no verdict; the row says which side has it and
//! what it costs there a request, with that side's interval (`only in A: 307 ns a
//! request [290 ns, 325 ns]`), and a component that holds such functions on both sides
//! says the swap in words (`HTTP parser: http_parser_execute 261 ns →
//! llhttp__internal__run 188 ns; the component itself 261 ns → 265 ns, +1.7 % [−26.5,
//! +40.7]`).

use serde::Serialize;

use super::functions::{FunctionRow, Kind, View};
use super::options::Options;
use super::row::{Draft, Key};
use crate::rng::{self, Rng};
use crate::snapshot::components::component_label;
use crate::stats::paired::{self, Cell};
use crate::stats::{Method, Statistic};
use crate::units;

/// The side that alone has a function or component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Only {
    A,
    B,
}

impl Only {
    /// The side with samples of it, from its samples on each side; `None` when both or
    /// neither have some.
    pub fn of(samples_a: u64, samples_b: u64) -> Option<Only> {
        match (samples_a, samples_b) {
            (0, b) if b > 0 => Some(Only::B),
            (a, 0) if a > 0 => Some(Only::A),
            _ => None,
        }
    }

    fn letter(self) -> &'static str {
        match self {
            Only::A => "A",
            Only::B => "B",
        }
    }
}

/// The draft of a row that `only` side has: its CPU per request there over all its
/// windows or runs, none on the other side, no interval of a change, and a note that says
/// so with the side's own interval at 1 − α. `None` when the side measured it nowhere.
pub(super) fn draft(
    key: Key,
    only: Only,
    oa: &[Option<Cell>],
    ob: &[Option<Cell>],
    opts: &Options,
) -> Option<Draft> {
    let measured = |cs: &[Option<Cell>]| -> Vec<Cell> { cs.iter().flatten().copied().collect() };
    let (ca, cb) = (measured(oa), measured(ob));
    let cells = match only {
        Only::A => &ca,
        Only::B => &cb,
    };
    let (count, sum) = cells
        .iter()
        .fold((0.0, 0.0), |(n, s), c| (n + c.count, s + c.sum));
    if count <= 0.0 {
        return None;
    }
    let value = sum / count;
    let (t, p, r) = (&key.0, &key.1, &key.2);
    let mut rng = Rng::new(opts.seed ^ rng::hash(&[t, p, r, "one_side"]));
    let confidence = 1.0 - opts.alpha;
    let interval = paired::one_side(cells, opts.resamples, &mut rng, confidence)
        .map(|(_, [lo, hi])| {
            format!(
                " [{}, {}] ({:.0} % interval)",
                units::duration(lo),
                units::duration(hi),
                confidence * 100.0
            )
        })
        .unwrap_or_else(|| " (too few windows or runs for an interval)".to_owned());
    let values = match only {
        Only::A => [Some(value), None],
        Only::B => [None, Some(value)],
    };
    Some(Draft {
        key,
        stat: Statistic::PerRequest,
        primary: false,
        runs: [ca.len(), cb.len()],
        counts: [&ca, &cb].map(|cs| cs.iter().map(|c| c.count as u64).sum()),
        values,
        method: Method::None,
        measured: None,
        note: Some(format!(
            "only in {}: {} a request{interval}",
            only.letter(),
            units::duration(value)
        )),
    })
}

/// Each component present on both sides whose functions include some that only one side
/// has: its `self` row's `swap`, the functions of each side in words with their CPU per
/// request itself, and the component's change.
pub(super) fn swaps(rows: &mut [FunctionRow]) {
    let one_sided = |only: Only, component: &str, rows: &[FunctionRow]| -> Vec<String> {
        rows.iter()
            .filter(|r| r.kind == Kind::Function && r.view == View::Own)
            .filter(|r| r.only == Some(only) && r.component == component)
            .filter_map(|r| {
                let v = match only {
                    Only::A => r.a,
                    Only::B => r.b,
                }?;
                Some(format!("{} {}", r.name, units::duration(v)))
            })
            .collect()
    };
    let mut found = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        if r.kind != Kind::Component || r.view != View::Own || r.only.is_some() {
            continue;
        }
        let (gone, came) = (
            one_sided(Only::A, &r.component, rows),
            one_sided(Only::B, &r.component, rows),
        );
        if gone.is_empty() && came.is_empty() {
            continue;
        }
        let side = |names: Vec<String>| {
            if names.is_empty() {
                "nothing in its place".to_owned()
            } else {
                names.join(" + ")
            }
        };
        // The component's own figures beside the functions': it holds more than the
        // one-sided functions that are rows (llhttp's callback wrappers, its own
        // `llhttp_execute`), and `261 ns → 188 ns, +1.7 %` read as a contradiction.
        let itself = format!(
            "; the component itself {} → {}",
            r.a.map_or("-".to_owned(), units::duration),
            r.b.map_or("-".to_owned(), units::duration)
        );
        let change = match (r.change, r.interval) {
            (Some(x), Some([lo, hi])) => format!(
                "{itself}, {} [{:+.1}, {:+.1}]",
                units::change(x),
                lo * 100.0,
                hi * 100.0
            ),
            _ => itself,
        };
        found.push((
            i,
            format!(
                "{}: {} → {}{change}",
                component_label(&r.name),
                side(gone),
                side(came)
            ),
        ));
    }
    for (i, s) in found {
        rows[i].swap = Some(s);
    }
}

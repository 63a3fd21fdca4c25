//! A comparison's outcome in words: each primary row's statement, and the rows that
//! fail `--fail-if-slower`.

use super::options::Options;
use super::row::Row;
use crate::stats::verdict::MAX_RUNS;
use crate::stats::{Method, Outcome, Statistic};

/// `--fail-if-slower`: rows slower, with confidence, by more than `limit`.
pub(super) fn failures(rows: &[Row], limit: f64, phases: &[String]) -> Vec<String> {
    let all = phases.iter().any(|p| p == "all");
    let mut out = Vec::new();
    for r in rows {
        let checked = if phases.is_empty() {
            r.primary
        } else {
            r.primary || all || phases.contains(&r.phase)
        };
        let (Some([low, high]), Some(change)) = (r.interval, r.change) else {
            continue;
        };
        // The bound nearer no change must lie past the limit; explanatory rows must also
        // have survived the false-discovery control.
        let beyond = match r.statistic {
            Statistic::Rate => high < -limit,
            _ => low > limit,
        };
        if checked && beyond && (r.primary || r.verdict == Outcome::Different) {
            out.push(format!(
                "{}/{}/{} {}: slower by {} (interval {:+.1} % to {:+.1} %), more than the {:.1} % allowed",
                r.tap,
                r.route,
                r.phase,
                r.statistic.as_str(),
                crate::units::change(change),
                low * 100.0,
                high * 100.0,
                limit * 100.0
            ));
        }
    }
    out
}

/// A fraction as a percentage without needless decimals: 0.01 → "1", 0.005 → "0.5".
fn percent(fraction: f64) -> String {
    let s = format!("{:.2}", fraction * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A primary row's outcome in words, with the power of the experiment.
pub fn statement(r: &Row, opts: &Options) -> String {
    let name = format!("{}/{} {} {}", r.tap, r.route, r.phase, r.statistic.as_str());
    let (Some(change), Some([low, high])) = (r.change, r.interval) else {
        return format!(
            "{name}: unknown: {}",
            r.note.as_deref().unwrap_or("not compared")
        );
    };
    let pct = |v: f64| format!("{:+.1} %", v * 100.0);
    let t = percent(opts.threshold);
    // Paired rows count windows, each holding both sides.
    let (unit, a_side) = if r.method == Method::Paired {
        ("window", "")
    } else {
        ("run", " a side")
    };
    let n = r.runs_a.min(r.runs_b);
    let runs = format!("{n} {unit}{}{a_side}", if n == 1 { "" } else { "s" });
    let need = match r.runs_needed {
        Some(n) => format!("about {n} {unit}s{a_side}"),
        None => format!("more than {} {unit}s{a_side}", MAX_RUNS),
    };
    let assumed = if r.cv_assumed {
        format!(
            " (at an assumed run-to-run variation of {:.1} %)",
            opts.drift * 100.0
        )
    } else {
        String::new()
    };
    match (r.verdict, r.direction) {
        (Outcome::Same, _) => format!(
            "{name}: same: no difference of {t} % or more ({} [{}, {}], ±{:.1} %)",
            pct(change),
            pct(low),
            pct(high),
            (high - low) * 50.0
        ),
        (Outcome::Different, Some(dir)) => format!(
            "{name}: different: {} by {} [{}, {}], beyond the {t} % threshold",
            dir.as_str(),
            pct(change),
            pct(low),
            pct(high)
        ),
        // It had what detecting `--detect` takes: what keeps it unknown is a change that
        // lies across the threshold, not too few runs.
        _ if r.runs_needed.is_some_and(|k| k <= n as u64) => format!(
            "{name}: unknown: {} [{}, {}]; {runs} detect {:.1} % or more, enough for {} %: \
             the change lies across the {t} % threshold{assumed}",
            pct(change),
            pct(low),
            pct(high),
            r.mde.unwrap_or(f64::NAN) * 100.0,
            percent(opts.detect)
        ),
        _ => format!(
            "{name}: unknown: {} [{}, {}]; {runs} detect {:.1} % or more; to detect {} % you \
             need {need}{assumed}",
            pct(change),
            pct(low),
            pct(high),
            r.mde.unwrap_or(f64::NAN) * 100.0,
            percent(opts.detect)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::compare::row::tests::draft;
    use crate::report::compare::row::{decide, ROUTE};

    /// A paired row of 100 windows whose mde is under the 1 % to detect, unknown because
    /// its interval straddles the threshold: the statement asks for no more windows
    /// (it once said `100 windows detect 0.6 % or more; to detect 1 % you need about 29
    /// windows`); one of 10 windows asks for more, as many as its interval needs.
    #[test]
    fn the_statement_asks_for_windows_only_when_they_are_short() {
        let opts = Options::default();
        let paired = |n: usize, estimate: f64, se: f64| {
            let mut d = draft(false, estimate, se);
            d.key.1 = "cpu".into();
            d.key.2 = ROUTE.into();
            d.stat = Statistic::PerRequest;
            d.method = Method::Paired;
            d.runs = [n, n];
            if let Some(m) = d.measured.as_mut() {
                m.change.df = crate::stats::paired::degrees_of_freedom(Statistic::PerRequest, n);
                m.pair_sd = Some(se * (n as f64).sqrt());
                m.cv_assumed = false;
            }
            decide(d, false, 0.975, &opts)
        };
        let enough = paired(100, 0.021f64.ln_1p(), 0.0017);
        assert_eq!(enough.verdict, Outcome::Unknown, "{enough:?}");
        assert!(enough.mde.unwrap_or(1.0) < 0.01, "{enough:?}");
        let said = statement(&enough, &opts);
        assert!(!said.contains("you need"), "{said}");
        assert!(said.contains("enough for 1 %"), "{said}");
        let short = paired(10, 0.021f64.ln_1p(), 0.01);
        let said = statement(&short, &opts);
        let need = short.runs_needed.unwrap_or(0);
        assert!(need > 10, "{short:?}");
        assert!(
            said.contains(&format!("you need about {need} windows")),
            "{said}"
        );
    }
}

//! How a comparison's rows share α: Bonferroni over the primary rows,
//! Benjamini–Hochberg over the rows that explain them.

use super::options::Options;
use super::row::{own_question, Draft};
use crate::stats::multiplicity::{benjamini_hochberg, bonferroni};

/// How the rows share α: Bonferroni over the primary rows, Benjamini–Hochberg over the
/// others.
pub(super) struct Family {
    /// Primary rows with an interval.
    pub(super) primary_rows: usize,
    /// Each primary row's confidence.
    pub(super) primary_confidence: f64,
    /// Per draft: an explanatory row whose change survived the false-discovery control.
    pub(super) discovered: Vec<bool>,
}

impl Family {
    pub(super) fn of(drafts: &[Draft], opts: &Options) -> Family {
        let primary_rows = drafts
            .iter()
            .filter(|d| d.primary && d.measured.is_some())
            .count();
        let primary_confidence = bonferroni(opts.alpha, primary_rows);
        // A statistic without any spread (a phase that takes 0 ns in every run) is no
        // test: it is not counted in the false-discovery family.
        let explanatory: Vec<usize> = (0..drafts.len())
            .filter(|&i| {
                !drafts[i].primary
                    && !own_question(&drafts[i].key.1, &drafts[i].key.2, drafts[i].stat)
                    && drafts[i]
                        .measured
                        .as_ref()
                        .is_some_and(|m| m.change.se > 0.0)
            })
            .collect();
        let p_expl: Vec<f64> = explanatory
            .iter()
            .filter_map(|&i| drafts[i].measured.as_ref())
            .map(|m| m.change.p_beyond(opts.threshold))
            .collect();
        let rejected = benjamini_hochberg(&p_expl, opts.alpha);
        let mut discovered = vec![false; drafts.len()];
        for (&i, r) in explanatory.iter().zip(rejected) {
            discovered[i] = r;
        }
        Family {
            primary_rows,
            primary_confidence,
            discovered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::compare::row::tests::draft;

    #[test]
    fn the_family_splits_alpha_among_primary_rows_and_controls_the_others() {
        let opts = Options::default();
        let mut unmeasured = draft(true, 0.0, 0.0);
        unmeasured.measured = None;
        let drafts = [
            draft(true, 0.0, 0.01),
            draft(true, 0.0, 0.01),
            unmeasured,
            // Far beyond the threshold, then barely past it, then without any spread.
            draft(false, 0.5, 0.01),
            draft(false, 0.021, 0.01),
            draft(false, 0.5, 0.0),
        ];
        let f = Family::of(&drafts, &opts);
        assert_eq!(
            f.primary_rows, 2,
            "a row without an interval is not counted"
        );
        assert!((f.primary_confidence - 0.975).abs() < 1e-12);
        assert_eq!(f.discovered, [false, false, false, true, false, false]);
    }
}

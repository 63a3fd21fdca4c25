//! Sharing α among a comparison's rows: Bonferroni over the primary rows, and false-discovery
//! control for the explanatory rows.
//!
//! The primary question (the front tap's `total` and request rate) is tested at α; the
//! other phases explain where a difference sits and are many (ten phases, several
//! routes, inner taps). Bonferroni over all of them made every interval 99.9 % and the
//! question nearly blind; Benjamini–Hochberg instead bounds the expected share of false
//! `different` among the explanatory rows called `different` at q, which is what a
//! reader of "where did the time go" needs.

/// The confidence of each of `tests` intervals that share an error rate of `alpha`
/// (Bonferroni); with no test, that of one.
pub fn bonferroni(alpha: f64, tests: usize) -> f64 {
    1.0 - alpha / tests.max(1) as f64
}

/// Which of `p` Benjamini–Hochberg rejects at level `q`: sort ascending, find the largest
/// rank k with p₍ₖ₎ ≤ k·q/m, reject the k smallest.
pub fn benjamini_hochberg(p: &[f64], q: f64) -> Vec<bool> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut k = 0;
    for (rank, &i) in order.iter().enumerate() {
        if p[i] <= (rank + 1) as f64 * q / m as f64 {
            k = rank + 1;
        }
    }
    let mut out = vec![false; m];
    for &i in &order[..k] {
        out[i] = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_the_step_up_set() {
        // m = 5, q = 0.05: thresholds 0.01 0.02 0.03 0.04 0.05
        let p = [0.04, 0.001, 0.5, 0.025, 0.03];
        // sorted: 0.001 ✓, 0.025 (> 0.02), 0.03 ✓ (≤ 0.03), 0.04 ✓ (≤ 0.04), 0.5 ✗
        assert_eq!(
            benjamini_hochberg(&p, 0.05),
            [true, true, false, true, true]
        );
        assert_eq!(benjamini_hochberg(&[0.2, 0.3], 0.05), [false, false]);
        assert!(benjamini_hochberg(&[], 0.05).is_empty());
    }
}

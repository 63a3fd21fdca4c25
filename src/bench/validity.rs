//! Which runs count. A run with errors — connects refused, connections reset, answers that
//! are not HTTP or are errors (the proxy's 502 for an upstream that answered garbage) —
//! measured something else than the server's service: it is marked invalid, and a side
//! with more than [`MAX_ERROR_RATE`] of its exchanges failed gets no verdict at all (a
//! bench pointed at Redis once answered `different: slower by −96 %` with 2,057 errors
//! shown only on standard error).

use super::order::Side;
use super::record::{RunRecord, SideErrors};

/// A side whose failed exchanges exceed this fraction of its attempts gets no verdict.
pub const MAX_ERROR_RATE: f64 = 0.01;

/// Each side's errors.
pub fn sides(runs: &[RunRecord]) -> Vec<SideErrors> {
    [Side::A, Side::B]
        .into_iter()
        .map(|side| {
            let mine: Vec<&RunRecord> = runs.iter().filter(|r| r.side == side).collect();
            let errors: u64 = mine.iter().map(|r| r.failed()).sum();
            let answered: u64 = mine
                .iter()
                .map(|r| {
                    r.generator
                        .as_ref()
                        .map_or(r.requests, |g| g.requests.saturating_sub(g.error_statuses))
                })
                .sum();
            let attempts = answered + errors;
            SideErrors {
                side,
                invalid_runs: mine.iter().filter(|r| !r.valid).count(),
                runs: mine.len(),
                errors,
                attempts,
                error_rate: errors as f64 / attempts.max(1) as f64,
            }
        })
        .collect()
}

/// Why there is no verdict, when a side failed too often; `None` when both may be compared.
pub fn refusal(sides: &[SideErrors]) -> Option<String> {
    let bad: Vec<String> = sides
        .iter()
        .filter(|s| s.error_rate > MAX_ERROR_RATE || (s.attempts == 0 && s.runs > 0))
        .map(|s| {
            format!(
                "side {}: {} of {} exchanges failed ({:.1} %), {} of {} runs invalid",
                s.side.tap(),
                s.errors,
                s.attempts,
                s.error_rate * 100.0,
                s.invalid_runs,
                s.runs
            )
        })
        .collect();
    if bad.is_empty() {
        return None;
    }
    Some(format!(
        "no verdict: {} (more than {} % of a side's exchanges failed; is the server an HTTP \
         server that answers these paths?)",
        bad.join("; "),
        MAX_ERROR_RATE * 100.0
    ))
}

/// The note a comparison carries when some runs had errors but no side too many.
pub fn note(sides: &[SideErrors]) -> Option<String> {
    let with: Vec<String> = sides
        .iter()
        .filter(|s| s.errors > 0)
        .map(|s| {
            format!(
                "side {}: {} failed exchanges ({:.2} %) in {} of {} runs",
                s.side.tap(),
                s.errors,
                s.error_rate * 100.0,
                s.invalid_runs,
                s.runs
            )
        })
        .collect();
    (!with.is_empty()).then(|| {
        format!(
            "runs with errors, compared since under {} % a side: {}",
            MAX_ERROR_RATE * 100.0,
            with.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(side: Side, errors: u64, attempts: u64) -> SideErrors {
        SideErrors {
            side,
            invalid_runs: usize::from(errors > 0),
            runs: 4,
            errors,
            attempts,
            error_rate: errors as f64 / attempts as f64,
        }
    }

    #[test]
    fn one_percent_a_side_is_the_limit() {
        let under = [side(Side::A, 5, 1000), side(Side::B, 0, 1000)];
        assert_eq!(refusal(&under), None);
        assert!(note(&under).is_some_and(|n| n.contains("side a: 5 failed")));
        let over = [side(Side::A, 0, 1000), side(Side::B, 11, 1000)];
        let why = refusal(&over).unwrap_or_default();
        assert!(
            why.contains("side b: 11 of 1000") && !why.contains("side a"),
            "{why}"
        );
        let clean = [side(Side::A, 0, 1000), side(Side::B, 0, 1000)];
        assert_eq!((refusal(&clean), note(&clean)), (None, None));
    }
}

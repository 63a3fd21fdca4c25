//! How to compare: the error rates, the threshold, the resampling, and which taps,
//! phases and routes.

/// How to compare.
#[derive(Debug, Clone)]
pub struct Options {
    /// Error rate of the primary question (shared by its rows), and the false-discovery
    /// rate of the explanatory rows.
    pub alpha: f64,
    /// `same` inside ±threshold, `different` beyond it (a fraction: 0.02 for 2 %).
    pub threshold: f64,
    /// The change the power statement is about (`runs_needed`), a fraction.
    pub detect: f64,
    /// Run-to-run coefficient of variation assumed for a side with one run, a fraction.
    pub drift: f64,
    /// Bootstrap replicates per series.
    pub resamples: usize,
    /// Draws per replicate, at most (a run's count when smaller).
    pub max_draws: u64,
    pub seed: u64,
    /// Fewer exchanges than this on a side (one-run mode): no interval.
    pub min_count: u64,
    /// One-run mode compares a percentile only with at least this many values beyond it
    /// on each side (p99: 100 × this many exchanges).
    pub min_tail: u64,
    /// `--fail-if-slower`: as a fraction (0.05 for 5 %).
    pub fail_if_slower: Option<f64>,
    /// Phases `--fail-if-slower` looks at besides the primary rows' (`all`: every row);
    /// empty: the primary rows only.
    pub fail_phases: Vec<String>,
    /// Taps compared (all when empty); the primary taps when given.
    pub taps: Vec<String>,
    /// B's tap compared as A's single `taps` entry (an A/B bench: tap `b` against `a`).
    pub vs_tap: Option<String>,
    /// The primary phases (`total`).
    pub phases: Vec<String>,
    /// Routes compared (all when empty).
    pub routes: Vec<String>,
    /// A's `i`-th snapshot and B's `i`-th were measured at the same time (a duet's
    /// windows): compare the paired log ratios (`stats::paired`).
    pub paired: bool,
    /// Compare the servers' functions and components too, where both sides have call
    /// stacks (a bench's check of its mde so far needs the primary rows only).
    pub functions: bool,
    /// Functions whose rows are kept whatever the cut of rows a view, and printed
    /// whatever the rows shown (`--function`): the one a question is about (Webdis's
    /// `json_reply`, matched across two builds, was below the 30th row).
    pub asked_functions: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            alpha: 0.05,
            threshold: 0.02,
            detect: 0.01,
            drift: 0.10,
            resamples: 1000,
            max_draws: 10_000,
            seed: 1,
            min_count: 30,
            min_tail: 20,
            fail_if_slower: None,
            fail_phases: Vec::new(),
            taps: Vec::new(),
            vs_tap: None,
            phases: vec!["total".to_owned()],
            routes: Vec::new(),
            paired: false,
            functions: true,
            asked_functions: Vec::new(),
        }
    }
}

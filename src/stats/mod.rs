//! The statistics of a comparison, numbers only: whether B differs from A by more than
//! the noise, for `compare` and for `bench`'s verdicts. docs/compare.md states the method.
//!
//! Everything works on the logarithm of a statistic, so that a change is a ratio:
//! [`measure`] (Welch's t over runs, the bootstrap plus an assumed drift for one run a
//! side) and [`paired`] (windows measured at the same time, a block bootstrap) turn each
//! side's values into a [`verdict::LogChange`]; [`decision`] decides its outcome and power
//! at a confidence ([`verdict`]: the outcomes, Student's t, runs and windows needed);
//! [`multiplicity`] shares α among the rows; [`bootstrap`] resamples a recorded histogram.
//! Reading snapshots into these numbers, and saying in words what they mean, is
//! `report::compare`'s.

pub mod bootstrap;
pub mod decision;
pub mod measure;
pub mod multiplicity;
pub mod paired;
pub mod statistic;
pub mod verdict;

pub use decision::{decide, Criteria, Decision};
pub use measure::{Measured, Method, Side};
pub use statistic::Statistic;
pub use verdict::{Direction, LogChange, Outcome};

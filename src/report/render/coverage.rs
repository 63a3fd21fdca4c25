//! The inside section's line on the samples themselves: how much of the server's CPU
//! they cover, at what rate, what sampling cost the proxy, and a plain warning when the
//! shares above it stand for a part of the server only ([`Coverage`]).

use crate::snapshot::coverage::{Coverage, LOW_COVERAGE};
use crate::snapshot::MAX_STACKS;
use crate::units;

impl Coverage {
    /// `samples: 4812 at 997 Hz cover 96 % of its CPU (4.83 s of 5.02 s); sampling cost
    /// the proxy 120 ms of CPU (1 % of a core)`, then a line per warning.
    pub fn lines(&self) -> Vec<String> {
        let part = match self.sampled_seconds {
            Some(s) if s <= 0.0 => {
                return vec![
                    "samples: none in this window (profile = \"on-demand\": POST /api/profile?seconds=N, or phasescope profile, samples it)".to_owned(),
                ];
            }
            Some(s) => format!(
                "sampled on demand for {} of the {} window; ",
                units::duration(s),
                units::duration(self.watched_seconds)
            ),
            None => String::new(),
        };
        let cover = match self.share {
            Some(share) => format!(
                "cover {} of its CPU ({} of {})",
                units::share(share),
                units::duration(self.sampled_cpu_seconds),
                units::duration(self.cpu_seconds)
            ),
            None => format!(
                "cover an unknown share of its CPU (it ran {} in the window, too little to compare)",
                units::duration(self.cpu_seconds)
            ),
        };
        let cost = match self.sampler_cpu_seconds {
            Some(cpu) if self.watched_seconds > 0.0 => format!(
                "sampling cost the proxy {} of CPU ({} of a core)",
                units::duration(cpu),
                units::share(cpu / self.watched_seconds)
            ),
            Some(cpu) => format!("sampling cost the proxy {} of CPU", units::duration(cpu)),
            None => "what sampling cost the proxy is unknown (not recorded)".to_owned(),
        };
        let taken = match (self.samples_taken, self.rate_hz) {
            // The rate adapted in the window: what was taken, and what it weighs.
            (Some(taken), Some(rate)) if taken != self.samples => format!(
                "{taken} taken at a rate kept to the budget ({} Hz at the end), counting as {} at {} Hz of each thread's CPU,",
                units::three_digits(rate),
                self.samples,
                self.frequency_hz
            ),
            _ => format!(
                "{} at {} Hz of each thread's CPU",
                self.samples, self.frequency_hz
            ),
        };
        let mut out = vec![format!("{part}samples: {taken} {cover}; {cost}")];
        if self.low() {
            out.push(format!(
                "warning: the samples cover only {} of its CPU (under {}): every share above is of that part, not of the whole server (threads that each ran less than a sampling period, which a thread's clock counts from zero, more threads than the sampler holds events for, or samples lost; `events = \"per-cpu\"` in [tap.process] samples every thread by the CPU's clock instead)",
                units::share(self.share.unwrap_or(0.0)),
                units::share(LOW_COVERAGE)
            ));
        }
        if self.mostly_other_stacks() {
            let other = self.other_stacks.unwrap_or(0.0);
            out.push(format!(
                "warning: {} of the samples fell in [other stacks] (past the {MAX_STACKS} distinct stacks a window keeps): the hot path, the functions and the flame graph describe the other {} only",
                units::share(other),
                units::share(1.0 - other)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coverage(share: Option<f64>, other: Option<f64>) -> Coverage {
        Coverage {
            samples: 321,
            frequency_hz: 997,
            sampled_cpu_seconds: 0.322,
            cpu_seconds: 6.8,
            share,
            other_stacks: other,
            sampler_cpu_seconds: Some(0.12),
            watched_seconds: 10.0,
            samples_taken: Some(321),
            rate_hz: Some(997.0),
            sampled_seconds: None,
        }
    }

    #[test]
    fn low_coverage_and_other_stacks_are_said_plainly() {
        let lines = coverage(Some(0.047), Some(0.84)).lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("samples: 321 at 997 Hz"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("cover 5 % of its CPU (322 ms of 6.80 s)"));
        assert!(lines[0].contains("sampling cost the proxy 120 ms of CPU (1 % of a core)"));
        assert!(lines[1].contains("cover only 5 %"), "{}", lines[1]);
        assert!(lines[2].contains("84 % of the samples fell in [other stacks]"));
        assert!(lines[2].contains("the other 16 % only"), "{}", lines[2]);
    }

    #[test]
    fn an_adapted_rate_says_what_was_taken_and_what_it_weighs() {
        let mut c = coverage(Some(0.97), None);
        c.samples_taken = Some(40);
        c.rate_hz = Some(62.3125);
        let line = &c.lines()[0];
        assert!(
            line.starts_with("samples: 40 taken at a rate kept to the budget (62.3 Hz at the end), counting as 321 at 997 Hz of each thread's CPU, cover 97 %"),
            "{line}"
        );
    }

    #[test]
    fn on_demand_says_which_part_was_sampled() {
        let mut c = coverage(Some(0.95), None);
        c.sampled_seconds = Some(3.0);
        let line = &c.lines()[0];
        assert!(
            line.starts_with("sampled on demand for 3.00 s of the 10.0 s window; samples: 321"),
            "{line}"
        );
        c.sampled_seconds = Some(0.0);
        let lines = c.lines();
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("samples: none in this window"),
            "{lines:?}"
        );
    }

    #[test]
    fn full_coverage_has_no_warning_and_unknown_says_why() {
        assert_eq!(coverage(Some(0.97), Some(0.1)).lines().len(), 1);
        let lines = coverage(None, None).lines();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("unknown share"), "{}", lines[0]);
    }
}

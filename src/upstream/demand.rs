//! Sampling on demand (`profile = "on-demand"`): no perf event is open until someone asks
//! for N seconds (`POST /api/profile?seconds=N`, `phasescope profile`), and the window
//! then says which part of it was sampled and what the process ran meanwhile, so that the
//! samples are weighed against that part, not the whole window.
//!
//! Why: sampling costs the server throughput (the rate is the lever: +2.9 µs a request on
//! Webdis at 997 Hz), and a server watched for weeks needs its profile for minutes. Go's
//! `/debug/pprof/profile?seconds=N` pays nothing outside the asked seconds; so does this.

use std::time::{Duration, Instant};

/// The longest a demand may ask for: an hour, as a bound on what one call starts.
pub const MAX_DEMAND: Duration = Duration::from_secs(3600);

/// What was asked and what the sampling covered in the window.
#[derive(Debug, Default)]
pub(crate) struct Demand {
    /// Sampling is wanted until then.
    until: Option<Instant>,
    /// The seconds asked while the samplers were not running: counted again from when
    /// they start, so that a start delayed by opening the events (most of a second on a
    /// loaded machine) does not shorten what was asked (2.34 s sampled for 3 asked).
    asked: Option<Duration>,
    /// The previous collect while sampling ran: the span since it was sampled.
    last_collect: Option<Instant>,
    /// Wall time sampled in the window.
    window_sampled_ns: u64,
    /// The sampled processes' CPU (user + system) during the sampled spans of the window.
    window_cpu_ns: u64,
}

impl Demand {
    /// Asks for sampling from now for `seconds` (a later end than one asked already wins).
    pub fn ask(&mut self, seconds: Duration) -> Instant {
        let seconds = seconds.min(MAX_DEMAND);
        // While they run (a collect was counted since they started), from now.
        if self.last_collect.is_none() {
            self.asked = Some(self.asked.map_or(seconds, |a| a.max(seconds)));
        }
        self.extend(seconds)
    }

    /// Wants sampling for `seconds` from now at least.
    fn extend(&mut self, seconds: Duration) -> Instant {
        let until = Instant::now() + seconds;
        let until = self.until.map_or(until, |u| u.max(until));
        self.until = Some(until);
        until
    }

    /// Sampling no longer wanted: the samplers stop at the watcher's next turn.
    pub fn cancel(&mut self) {
        self.until = None;
        self.asked = None;
    }

    /// Whether sampling is wanted now.
    pub fn wanted(&self) -> bool {
        self.until.is_some_and(|u| Instant::now() < u)
    }

    /// A collect while sampling ran: the span since the previous one is sampled, and
    /// `cpu_ns` is what the sampled processes ran in it.
    pub fn collected(&mut self, cpu_ns: u64) {
        let now = Instant::now();
        if let Some(prev) = self.last_collect {
            let span = now.saturating_duration_since(prev).as_nanos();
            self.window_sampled_ns += u64::try_from(span).unwrap_or(u64::MAX);
            self.window_cpu_ns += cpu_ns;
        }
        self.last_collect = Some(now);
    }

    /// The samplers started: the span from now to the first collect is sampled.
    pub fn started(&mut self) {
        self.last_collect = Some(Instant::now());
        if let Some(asked) = self.asked.take() {
            self.extend(asked);
        }
    }

    /// Whether the samplers run now (started, not yet stopped).
    pub fn running(&self) -> bool {
        self.last_collect.is_some()
    }

    /// The samplers stopped: the time until they start again is not sampled.
    pub fn stopped(&mut self) {
        self.last_collect = None;
    }

    pub fn restart_window(&mut self) {
        self.window_sampled_ns = 0;
        self.window_cpu_ns = 0;
    }

    /// (seconds sampled, the sampled processes' CPU seconds meanwhile) in the window.
    pub fn window(&self) -> (f64, f64) {
        (
            self.window_sampled_ns as f64 / 1e9,
            self.window_cpu_ns as f64 / 1e9,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_seconds_end_and_only_sampled_spans_count() {
        let mut d = Demand::default();
        assert!(!d.wanted());
        d.ask(Duration::from_secs(60));
        assert!(d.wanted());
        // A shorter ask does not cut a longer one short.
        d.ask(Duration::ZERO);
        assert!(d.wanted());
        d.collected(5);
        std::thread::sleep(Duration::from_millis(20));
        d.collected(7);
        let (seconds, cpu) = d.window();
        assert!((0.02..1.0).contains(&seconds), "{seconds}");
        assert_eq!(cpu, 7e-9, "the first collect opens the span");
        d.stopped();
        d.collected(100);
        assert_eq!(d.window().1, 7e-9, "a span after a stop is not sampled");
        d.restart_window();
        assert_eq!(d.window(), (0.0, 0.0));
        let mut e = Demand::default();
        e.ask(Duration::ZERO);
        assert!(!e.wanted());
    }
}

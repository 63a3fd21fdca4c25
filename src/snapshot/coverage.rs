//! How much of the upstream's CPU its samples cover, and what the sampling cost the proxy.
//!
//! A sample stands for one period of a thread's CPU time (1/`frequency_hz`), so the
//! samples of a window stand for `samples ÷ frequency_hz` seconds of CPU. The process's
//! own user + system time (from /proc/PID/stat, which keeps what exited threads ran)
//! says how much there was to cover. A server that starts a thread per connection can run
//! most of its CPU in threads that live for one request: a sampler that opens its events
//! on the threads it finds covers little of it (5 % in one case: 321 samples of about
//! 6,780), and every share the report gives is then of that small part. The report says
//! so rather than let the shares read as the whole server's.

use serde::Serialize;

use super::stacks::OTHER_STACKS;
use super::upstream::{UpstreamSnapshot, DEFAULT_FREQUENCY_HZ};

/// Below this share of the process's CPU in the samples, the report warns that its shares
/// are of a part of the server. Sampling is statistical and user + system time comes in
/// clock ticks: a fully sampled server reads 90 to 105 % over a few seconds.
pub const LOW_COVERAGE: f64 = 0.8;

/// Above this share of the samples in [`OTHER_STACKS`] (stacks past the table's cap), the
/// report warns that the hot path and flame graph describe the rest only.
pub const MOSTLY_OTHER_STACKS: f64 = 0.5;

/// Below this much CPU in the window, the coverage is not computed: a few clock ticks
/// (10 ms each) would make it anything.
const MIN_CPU_SECONDS: f64 = 0.1;

/// The samples of a window against the process's CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coverage {
    pub samples: u64,
    /// Samples per second of a thread's CPU.
    pub frequency_hz: u32,
    /// `samples ÷ frequency_hz`: the CPU the samples stand for.
    pub sampled_cpu_seconds: f64,
    /// The process's user + system time in the window (exited threads included).
    pub cpu_seconds: f64,
    /// `sampled_cpu_seconds ÷ cpu_seconds`; `None` when the process ran too little for
    /// it to mean anything ([`MIN_CPU_SECONDS`]).
    pub share: Option<f64>,
    /// With call stacks: the fraction of samples in [`OTHER_STACKS`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_stacks: Option<f64>,
    /// The proxy's own CPU time spent sampling in the window; `None` from a build that
    /// did not count it.
    pub sampler_cpu_seconds: Option<f64>,
    /// The window's wall time, for the sampler's CPU as a share of one core.
    pub watched_seconds: f64,
    /// Samples taken, each once; `samples` counts each by its period's multiple of
    /// 1/`frequency_hz` when the rate adapts. `None` in older snapshots.
    pub samples_taken: Option<u64>,
    /// The rate at the end of the window; `None` in older snapshots.
    pub rate_hz: Option<f64>,
    /// With `profile = "on-demand"`: the wall time sampled in the window (`cpu_seconds`
    /// is then the process's CPU during it); `None` when sampled all along.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled_seconds: Option<f64>,
}

impl Coverage {
    /// The window's coverage; `None` when the process was not sampled.
    pub fn of(u: &UpstreamSnapshot) -> Option<Coverage> {
        let profile = u.profile.as_ref()?;
        let samples: u64 = profile.samples.values().sum();
        let frequency_hz = profile.frequency_hz.unwrap_or(DEFAULT_FREQUENCY_HZ).max(1);
        let sampled_cpu_seconds = samples as f64 / f64::from(frequency_hz);
        // On demand, the samples stand for the sampled part of the window only.
        let on_demand = profile.on_demand == Some(true);
        let cpu_seconds = match (on_demand, profile.sampled_cpu_seconds) {
            (true, Some(cpu)) => cpu,
            _ => u.cpu_user_seconds + u.cpu_system_seconds,
        };
        let share = (cpu_seconds >= MIN_CPU_SECONDS).then(|| sampled_cpu_seconds / cpu_seconds);
        let other_stacks = profile
            .stacks
            .as_ref()
            .filter(|_| samples > 0)
            .map(|stacks| {
                let other: u64 = stacks
                    .stacks
                    .iter()
                    .filter(|s| {
                        s.frames.len() == 1
                            && stacks
                                .frames
                                .get(s.frames[0] as usize)
                                .is_some_and(|f| f.name == OTHER_STACKS)
                    })
                    .map(|s| s.samples)
                    .sum();
                other as f64 / samples as f64
            });
        Some(Coverage {
            samples,
            frequency_hz,
            sampled_cpu_seconds,
            cpu_seconds,
            share,
            other_stacks,
            sampler_cpu_seconds: profile.sampler_cpu_seconds,
            watched_seconds: u.watched_seconds,
            samples_taken: profile.samples_taken,
            rate_hz: profile.rate_hz,
            sampled_seconds: profile.sampled_seconds.filter(|_| on_demand),
        })
    }

    /// Whether the samples cover too little of the process's CPU to stand for it.
    pub fn low(&self) -> bool {
        self.share.is_some_and(|s| s < LOW_COVERAGE)
    }

    /// Whether most samples fell past the stack table's cap.
    pub fn mostly_other_stacks(&self) -> bool {
        self.other_stacks.is_some_and(|s| s > MOSTLY_OTHER_STACKS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Frame, ProfileSnapshot, Stack, Stacks};

    fn upstream(samples: u64, hz: u32, cpu: f64, other: u64) -> UpstreamSnapshot {
        let frame = |name: &str| Frame {
            name: name.to_owned(),
            object: String::new(),
            component: String::new(),
            line: None,
            at_line: None,
        };
        let mut u: UpstreamSnapshot = serde_json::from_str(
            r#"{"pid":1,"threads":1,"interval_seconds":1,"watched_seconds":10,
            "cpu_user_seconds":0,"cpu_system_seconds":0,"runqueue_seconds":0,
            "context_switches_voluntary":0,"context_switches_involuntary":0,"restarts":0}"#,
        )
        .unwrap();
        u.cpu_user_seconds = cpu / 2.0;
        u.cpu_system_seconds = cpu / 2.0;
        u.profile = Some(ProfileSnapshot {
            samples: [("srv".to_owned(), samples)].into(),
            frequency_hz: Some(hz),
            sampler_cpu_seconds: Some(0.05),
            stacks: Some(Stacks {
                frames: vec![frame("main"), frame(OTHER_STACKS)],
                stacks: vec![
                    Stack {
                        frames: vec![0],
                        samples: samples - other,
                    },
                    Stack {
                        frames: vec![1],
                        samples: other,
                    },
                ],
                ..Stacks::default()
            }),
            ..ProfileSnapshot::default()
        });
        u
    }

    #[test]
    fn samples_over_the_process_cpu() {
        // 321 samples at 997 Hz against 6.8 s of CPU: the thread-per-connection case.
        let c = Coverage::of(&upstream(321, 997, 6.8, 0)).unwrap();
        assert!((c.sampled_cpu_seconds - 321.0 / 997.0).abs() < 1e-9);
        assert!((c.share.unwrap() - 321.0 / 997.0 / 6.8).abs() < 1e-9);
        assert!(c.low() && !c.mostly_other_stacks());
        // The same CPU sampled at 50 Hz: covered whole.
        let c = Coverage::of(&upstream(340, 50, 6.8, 0)).unwrap();
        assert!(!c.low(), "{c:?}");
        assert_eq!(c.sampler_cpu_seconds, Some(0.05));
    }

    #[test]
    fn other_stacks_and_too_little_cpu() {
        let c = Coverage::of(&upstream(1000, 100, 10.0, 840)).unwrap();
        assert!((c.other_stacks.unwrap() - 0.84).abs() < 1e-9);
        assert!(c.mostly_other_stacks() && !c.low());
        // A process idle over the window: nothing to cover, no share.
        let c = Coverage::of(&upstream(2, 100, 0.01, 0)).unwrap();
        assert_eq!(c.share, None);
        assert!(!c.low());
        let mut u = upstream(2, 100, 1.0, 0);
        u.profile = None;
        assert_eq!(Coverage::of(&u), None);
    }
}

//! The simulated backend's latency: a distribution to draw each request's wait from.
//!
//! Real backends are not constant: most requests are quick and a few are slow, which is
//! what a latency histogram is for. The default, lognormal with a 2 ms median, has that
//! long right tail.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::rng::Rng;

/// No simulated wait is longer than this, whatever the distribution's tail says.
const CAP: Duration = Duration::from_secs(5);
/// The default spread of `lognormal:MEDIAN`: p99 ≈ 3.2 × median.
const DEFAULT_SIGMA: f64 = 0.5;

/// A latency distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    /// Always the same.
    Fixed(Duration),
    /// Evenly between two bounds.
    Uniform(Duration, Duration),
    /// exp(N(ln median, sigma²)).
    LogNormal { median: Duration, sigma: f64 },
    /// Exponential with this mean (memoryless, like independent arrivals).
    Exponential(Duration),
}

impl Default for Latency {
    fn default() -> Self {
        Latency::LogNormal {
            median: Duration::from_millis(2),
            sigma: DEFAULT_SIGMA,
        }
    }
}

impl Latency {
    /// One draw, at most [`CAP`].
    pub fn sample(&self, rng: &mut Rng) -> Duration {
        let secs = match *self {
            Latency::Fixed(d) => d.as_secs_f64(),
            Latency::Uniform(lo, hi) => {
                lo.as_secs_f64() + (hi.as_secs_f64() - lo.as_secs_f64()) * rng.unit()
            }
            Latency::LogNormal { median, sigma } => {
                median.as_secs_f64() * (sigma * rng.normal()).exp()
            }
            Latency::Exponential(mean) => -mean.as_secs_f64() * (1.0 - rng.unit()).ln(),
        };
        Duration::try_from_secs_f64(secs.max(0.0))
            .unwrap_or(CAP)
            .min(CAP)
    }

    /// The distribution as [`FromStr`] reads it back (how the demo hands it to its
    /// upstream process).
    pub fn spec(&self) -> String {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        match *self {
            Latency::Fixed(x) => format!("fixed:{}", d(x)),
            Latency::Uniform(lo, hi) => format!("uniform:{}..{}", d(lo), d(hi)),
            Latency::LogNormal { median, sigma } => format!("lognormal:{},{sigma}", d(median)),
            Latency::Exponential(mean) => format!("exp:{}", d(mean)),
        }
    }

    /// The distribution's median, for the demo's description of itself.
    pub fn median(&self) -> Duration {
        match *self {
            Latency::Fixed(d) => d,
            Latency::Uniform(lo, hi) => (lo + hi) / 2,
            Latency::LogNormal { median, .. } => median,
            Latency::Exponential(mean) => mean.mul_f64(std::f64::consts::LN_2),
        }
    }
}

impl FromStr for Latency {
    type Err = String;

    /// `lognormal:2ms[,SIGMA]`, `fixed:2ms` (or just `2ms`), `uniform:1ms..5ms`,
    /// `exp:2ms` (the mean).
    fn from_str(spec: &str) -> Result<Latency, String> {
        let spec = spec.trim();
        let (kind, args) = spec.split_once(':').unwrap_or(("fixed", spec));
        let latency = match kind.trim() {
            "fixed" => Latency::Fixed(duration(args)?),
            "uniform" => {
                let (lo, hi) = args
                    .split_once("..")
                    .ok_or_else(|| format!("{spec:?}: expected uniform:LOW..HIGH"))?;
                let (lo, hi) = (duration(lo)?, duration(hi)?);
                if hi < lo {
                    return Err(format!("{spec:?}: the high bound is below the low one"));
                }
                Latency::Uniform(lo, hi)
            }
            "lognormal" => {
                let (median, sigma) = match args.split_once(',') {
                    Some((m, s)) => (
                        m,
                        s.trim()
                            .parse::<f64>()
                            .ok()
                            .filter(|s| s.is_finite() && (0.0..=4.0).contains(s))
                            .ok_or_else(|| {
                                format!("{spec:?}: sigma must be a number from 0 to 4")
                            })?,
                    ),
                    None => (args, DEFAULT_SIGMA),
                };
                Latency::LogNormal {
                    median: duration(median)?,
                    sigma,
                }
            }
            "exp" | "exponential" => Latency::Exponential(duration(args)?),
            other => {
                return Err(format!(
                    "{other:?} is not a distribution; use lognormal:MEDIAN[,SIGMA], fixed:D, uniform:LOW..HIGH or exp:MEAN"
                ))
            }
        };
        Ok(latency)
    }
}

fn duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{:?} is not a duration (e.g. 2ms, 500us): {e}", text.trim()))?;
    if d > CAP {
        return Err(format!(
            "{} is longer than the demo's cap of {}",
            text.trim(),
            humantime::format_duration(CAP)
        ));
    }
    Ok(d)
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        match *self {
            Latency::Fixed(x) => write!(f, "fixed {}", d(x)),
            Latency::Uniform(lo, hi) => write!(f, "uniform {}..{}", d(lo), d(hi)),
            Latency::LogNormal { median, sigma } => {
                write!(f, "lognormal, median {}, sigma {sigma}", d(median))
            }
            Latency::Exponential(mean) => write!(f, "exponential, mean {}", d(mean)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn specs_parse() {
        assert_eq!("2ms".parse::<Latency>().unwrap(), Latency::Fixed(ms(2)));
        assert_eq!(
            "fixed:500us".parse::<Latency>().unwrap(),
            Latency::Fixed(Duration::from_micros(500))
        );
        assert_eq!(
            "uniform:1ms..5ms".parse::<Latency>().unwrap(),
            Latency::Uniform(ms(1), ms(5))
        );
        assert_eq!(
            "lognormal:3ms,0.8".parse::<Latency>().unwrap(),
            Latency::LogNormal {
                median: ms(3),
                sigma: 0.8
            }
        );
        assert_eq!(
            "exp:2ms".parse::<Latency>().unwrap(),
            Latency::Exponential(ms(2))
        );
        for (bad, says) in [
            ("gauss:2ms", "not a distribution"),
            ("uniform:5ms..1ms", "below"),
            ("uniform:1ms", "LOW..HIGH"),
            ("lognormal:2ms,x", "sigma"),
            ("fixed:soon", "not a duration"),
            ("fixed:1h", "cap"),
        ] {
            let e = bad.parse::<Latency>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_spec_reads_back_as_the_same_distribution() {
        for spec in [
            "fixed:1ms",
            "uniform:250us..3ms",
            "lognormal:2ms 500us,0.7",
            "exp:1500us",
            "0",
        ] {
            let latency: Latency = spec.parse().unwrap();
            assert_eq!(latency.spec().parse::<Latency>(), Ok(latency), "{spec}");
        }
    }

    #[test]
    fn draws_follow_the_distribution() {
        let mut rng = Rng::new(11);
        let mut draws: Vec<Duration> = (0..4001)
            .map(|_| Latency::default().sample(&mut rng))
            .collect();
        draws.sort();
        let median = draws[2000].as_secs_f64();
        assert!((median - 0.002).abs() < 0.0002, "median {median}");
        // The tail is long: p99 well above twice the median.
        assert!(draws[3960].as_secs_f64() > 2.0 * median);
        let mut rng = Rng::new(12);
        for _ in 0..1000 {
            let d = Latency::Uniform(ms(1), ms(3)).sample(&mut rng);
            assert!(d >= ms(1) && d <= ms(3), "{d:?}");
        }
        assert_eq!(Latency::Fixed(ms(4)).sample(&mut rng), ms(4));
        let mean = (0..4000)
            .map(|_| Latency::Exponential(ms(2)).sample(&mut rng).as_secs_f64())
            .sum::<f64>()
            / 4000.0;
        assert!((mean - 0.002).abs() < 0.0002, "mean {mean}");
    }
}

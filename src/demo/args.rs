//! The command line of `phasescope demo`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::latency::Latency;
use super::{DemoOptions, UpstreamOptions};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Seconds of load before the report
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub duration: u64,

    /// Exit after the report instead of serving the live page until Ctrl-C
    #[arg(long)]
    pub no_wait: bool,

    /// The simulated backend's latency: lognormal:MEDIAN[,SIGMA], fixed:D, uniform:LOW..HIGH
    /// or exp:MEAN
    #[arg(long, value_name = "DIST", default_value = "lognormal:2ms,0.5")]
    pub latency: Latency,

    /// Client connections driving the load
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub connections: usize,

    /// Address of the admin server (live page, /metrics); if 127.0.0.1:9464 is taken, a
    /// free port is used instead [default: 127.0.0.1:9464]
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,

    /// Seed of the simulated latencies and the request mix [default: from the clock]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Where to write the flame graph of the upstream's call stacks
    /// [default: phasescope-demo-flamegraph.svg in the temporary directory]
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,
}

impl DemoArgs {
    pub fn options(&self) -> DemoOptions {
        DemoOptions {
            duration: std::time::Duration::from_secs(self.duration),
            wait: !self.no_wait,
            latency: self.latency,
            connections: self.connections.clamp(1, 256),
            admin: self.admin,
            seed: self.seed.unwrap_or_else(crate::rng::Rng::seed_from_time),
            flamegraph: self
                .flamegraph
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("phasescope-demo-flamegraph.svg")),
        }
    }
}

/// The command line of `phasescope demo-upstream`, the demo's upstream process: not for
/// users (hidden from `--help`); `phasescope demo` starts it with these.
#[derive(Debug, Args)]
pub struct UpstreamArgs {
    /// The simulated backend's latency, as `demo --latency` takes it
    #[arg(long, value_name = "DIST")]
    pub latency: Latency,

    /// Seed of the simulated latencies
    #[arg(long, value_name = "S")]
    pub seed: u64,

    /// The parser's CPU per request
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub parser_cpu: Duration,

    /// The application's CPU per backend call
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub backend_cpu: Duration,
}

impl UpstreamArgs {
    pub fn options(&self) -> UpstreamOptions {
        UpstreamOptions {
            latency: self.latency,
            seed: self.seed,
            parser_cpu: self.parser_cpu,
            backend_cpu: self.backend_cpu,
        }
    }
}

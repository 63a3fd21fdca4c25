//! The command line of `phasescope demo`.

use std::net::SocketAddr;

use clap::Args;

use super::latency::Latency;
use super::DemoOptions;

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
        }
    }
}

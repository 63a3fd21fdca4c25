//! The command line of `phasescope probe`.

use clap::Args;

use super::grid::{Grid, Shape};
use super::target::Target;
use super::ProbeOptions;
use crate::rng::Rng;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The server to probe, directly or through a phasescope tap:
    /// http://HOST:PORT/PATH (a path it answers cheaply, e.g. /PING for Webdis)
    #[arg(long, value_name = "URL")]
    pub target: Target,

    /// Timed requests per grid cell
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub samples: usize,

    /// Head sizes and field counts to vary, e.g. "bytes=512,2k,8k;headers=2,10,40"
    /// [default: bytes=512,1024,2048,4096,8192,16384;headers=2,6,12,24]
    #[arg(long, value_name = "SPEC")]
    pub grid: Option<Grid>,

    /// Output format
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub format: String,

    /// Seed of the random order and the bootstrap, to repeat a run exactly [default: from the clock]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Head size of a typical request, to which the result is applied
    #[arg(long, value_name = "BYTES", default_value_t = 380)]
    pub typical_bytes: usize,

    /// Header fields of a typical request
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub typical_headers: usize,

    /// Bootstrap replicates for the intervals
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub bootstrap: usize,

    /// Unmeasured requests sent first
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub warmup: usize,
}

impl ProbeArgs {
    pub fn options(&self) -> ProbeOptions {
        let mut o = ProbeOptions::new(self.target.clone());
        o.samples = self.samples;
        if let Some(grid) = &self.grid {
            o.grid = grid.clone();
        }
        o.seed = self.seed.unwrap_or_else(Rng::seed_from_time);
        o.bootstrap = self.bootstrap;
        o.warmup = self.warmup;
        o.typical = Shape {
            bytes: self.typical_bytes,
            headers: self.typical_headers,
        };
        o.progress = self.format == "text";
        o
    }
}

//! The command line of `phasescope probe`.

use clap::Args;

use super::grid::Grid;
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
    /// [default: the tap's mean with --from, else 380]
    #[arg(long, value_name = "BYTES")]
    pub typical_bytes: Option<usize>,

    /// Header fields of a typical request [default: the tap's mean with --from, else 8]
    #[arg(long, value_name = "N")]
    pub typical_headers: Option<usize>,

    /// The admin server of a phasescope in front of the target (http://host:port): the
    /// typical request is then the mean head of what its tap read in the current window
    #[arg(long, value_name = "ADMIN_URL")]
    pub from: Option<String>,

    /// With --from: the tap to read [default: the HTTP tap that read the most heads]
    #[arg(long, value_name = "NAME", requires = "from")]
    pub tap: Option<String>,

    /// Run the whole grid N times, one pass after another, and report the spread of the
    /// fits between passes beside the pooled fit
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: usize,

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
        if let Some(bytes) = self.typical_bytes {
            o.typical.bytes = bytes;
        }
        if let Some(headers) = self.typical_headers {
            o.typical.headers = headers;
        }
        if self.typical_bytes.is_some() || self.typical_headers.is_some() {
            o.typical_source = "--typical-bytes/--typical-headers (defaults 380 and 8)".into();
        }
        o.repeat = self.repeat;
        o.progress = self.format == "text";
        o
    }

    /// The options, with the typical request taken from the tap that `--from` names
    /// unless both `--typical-*` flags say it.
    pub fn options_with_tap(&self) -> anyhow::Result<ProbeOptions> {
        let mut o = self.options();
        let Some(from) = &self.from else {
            return Ok(o);
        };
        if self.typical_bytes.is_some() && self.typical_headers.is_some() {
            return Ok(o);
        }
        let seen = super::typical::from_admin(from, self.tap.as_deref())?;
        if self.typical_bytes.is_none() {
            o.typical.bytes = seen.shape.bytes;
        }
        if self.typical_headers.is_none() {
            o.typical.headers = seen.shape.headers;
        }
        o.typical_source = match (self.typical_bytes, self.typical_headers) {
            (Some(_), _) => format!("--typical-bytes; fields: {}", seen.source),
            (_, Some(_)) => format!("--typical-headers; bytes: {}", seen.source),
            _ => seen.source,
        };
        Ok(o)
    }
}
